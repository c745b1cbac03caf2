"""Root: unmodified RDMA programs over MRC (libmrc-verbs.so, docs/verbs.md)
on a fabric. ibv_devices and ibv_devinfo list mrc0; Debian's perftest runs
every size over every plane and its latency test; what MRC does not have
fails at once (perftest's send and read tests, and a verbs program that
tries each refused call); the check program, written against verbs.h only,
finds no wrong byte with a plane cut in the run. perftest missing: skipped
with one line (tools/setup.sh installs it)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from mrc.fabric import apply

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import verbs_bench  # noqa: E402
from verbs_bench import in_host  # noqa: E402

pytestmark = pytest.mark.root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "mrc", "libmrc-verbs.so")


def need(tool: str) -> None:
    if not os.path.exists(LIB):
        pytest.skip("libmrc-verbs.so is not built (libibverbs-dev missing: bash tools/setup.sh installs it)")
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed (bash tools/setup.sh installs perftest and ibverbs-utils)")


def pair(t, prog: list[str], during=None, timeout: float = 120, stats: str | None = None):
    """prog as server in h1 and as client in h0 (toward h1's IPv4 management address)."""
    return verbs_bench.pair(t, in_host(t, t.host(1), prog), in_host(t, t.host(0), [*prog, t.mgmt_ipv4(1)], stats=stats),
                            t.host(1), t.host(0), timeout, (lambda _proc: during()) if during else None)


def test_ibv_devices_and_devinfo_list_mrc0_and_its_port(fabric):
    need("ibv_devinfo")
    out = subprocess.run(in_host(fabric, fabric.host(0), ["ibv_devices"]), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "mrc0" in out.stdout
    out = subprocess.run(in_host(fabric, fabric.host(0), ["ibv_devinfo", "-v", "-d", "mrc0"]), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for want in ("hca_id:\tmrc0", "PORT_ACTIVE", "link_layer:\t\tEthernet", f"gid_tbl_len:\t\t{fabric.planes}",
                 "phys_port_cnt:\t\t\t1"):
        assert want in out.stdout, (want, out.stdout[-1500:])


def test_ib_write_bw_reports_every_size_over_every_plane(fabric, tmp_path):
    need("ib_write_bw")
    stats = str(tmp_path / "stats.jsonl")
    rc, out, src, _ = pair(fabric, ["ib_write_bw", "-d", "mrc0", "-x", "0", "-F", "--report_gbits", "-a", "-n", "200"],
                           stats=stats, timeout=300)
    assert rc == 0 and src == 0, out[-2000:]
    sizes = [int(x.split()[0]) for x in out.splitlines() if x.strip() and x.split()[0].isdigit()
             and len(x.split()) >= 4]
    assert sorted(set(sizes)) == [2 ** k for k in range(1, 24)], sizes
    (row,) = [json.loads(x) for x in open(stats)]
    assert all(p["tx_packets"] > 0 for p in row["planes"]) and len(row["planes"]) == fabric.planes, row


def test_ib_write_lat_runs(fabric):
    need("ib_write_lat")
    rc, out, src, _ = pair(fabric, ["ib_write_lat", "-d", "mrc0", "-x", "0", "-F", "-s", "64", "-n", "300"])
    assert rc == 0 and src == 0, out[-2000:]
    assert any(x.split()[:2] == ["64", "300"] for x in out.splitlines() if x.strip()), out[-1000:]


@pytest.mark.parametrize("prog", ["ib_send_bw", "ib_read_bw"])
def test_what_mrc_does_not_have_fails_at_once_in_perftest(fabric, prog):
    """SEND (its receives carry buffers) and READ (its post): perftest stops with its own error at both
    ends, quickly; nothing hangs."""
    need(prog)
    t0 = time.monotonic()
    rc, out, src, sout = pair(fabric, [prog, "-d", "mrc0", "-x", "0", "-F", "-n", "100"], timeout=60)
    assert rc != 0 and src != 0 and time.monotonic() - t0 < 30, (out[-1500:], sout[-1500:])


def test_a_verbs_program_gets_an_errno_for_each_refused_call_and_its_channel_works(fabric, tmp_path):
    need("ibv_devinfo")
    exe = str(tmp_path / "verbs_errors")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(os.path.dirname(__file__), "verbs_errors.c"), "-libverbs"],
                   check=True)
    out = subprocess.run(in_host(fabric, fabric.host(0), [exe]), capture_output=True, text=True, timeout=60)
    got = dict(x.split() for x in out.stdout.splitlines() if len(x.split()) == 2)
    got = {k: int(v) for k, v in got.items()}
    assert got.get("end") == 0 and out.returncode == 0, (out.stdout, out.stderr[-1500:])
    import errno
    want = {"ud_qp": errno.EOPNOTSUPP, "uc_qp": errno.EOPNOTSUPP, "srq": errno.EOPNOTSUPP, "ah": errno.EOPNOTSUPP,
            "rc_qp": 0, "post_in_reset": errno.EINVAL, "init": 0, "rtr_unknown_gid": errno.EINVAL,
            "rtr_missing_attrs": errno.EINVAL, "rtr": 0, "rts": 0, "send_opcode": errno.EOPNOTSUPP,
            "send_bad_wr": 0, "read_opcode": errno.EOPNOTSUPP, "atomic_opcode": errno.EOPNOTSUPP,
            "lkey_of_another_pd": errno.EFAULT, "sge_past_region": errno.EFAULT, "five_sges": errno.EINVAL,
            "inline_too_long": errno.EINVAL, "query_qp": 0, "query_qp_state_rts": 0,
            "recv_with_buffer": errno.EINVAL, "recv_for_write_imm": 0,
            # the completion channel: a WRITE_WITH_IMM of the QP to itself, waited for with ibv_get_cq_event
            "req_notify": 0, "write_imm_to_self": 0, "get_cq_event": 0, "event_names_the_cq": 0, "send_completed": 0,
            "imm_received": 0, "data_placed": 0,
            "dealloc_pd_in_use": errno.EBUSY}
    assert {k: got.get(k) for k in want} == want


def test_the_check_program_finds_no_wrong_byte_with_a_plane_cut(fabric, tmp_path):
    need("ib_write_bw")
    exe = str(tmp_path / "verbs_check")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(ROOT, "examples", "verbs", "verbs_check.c"), "-libverbs"],
                   check=True)

    def cut():
        time.sleep(2)
        for s in range(fabric.spines):
            apply.fail(fabric.name, fabric.spine(1, s))

    try:
        rc, out, src, sout = pair(fabric, [exe, "-s", "1M", "-n", "100"], during=cut, timeout=180)
    finally:
        apply.heal(fabric.name)
    server = json.loads(next(x for x in sout.splitlines() if x.startswith("{")))
    assert rc == 0 and src == 0 and server["wrong_bytes"] == 0 and server["checked_bytes"] == 100 << 20, (out, sout)
