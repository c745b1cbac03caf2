"""Collectives over MRC on a 4-host fabric (root): mrc coll verified element by
element, the same with a link and a plane cut mid-run, a rank killed
mid-collective, mrc train under faults, and the MPI baseline."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mrc.fabric import apply
from mrc.fabric.topology import Topology

from .conftest import _built, stop_group, unique_name

pytestmark = pytest.mark.root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MRC = [sys.executable, "-m", "mrc"]


@pytest.fixture(scope="module")
def four():
    """4 planes x 2 spines x 2 leaves, 4 hosts, shared by this module."""
    yield from _built(Topology(planes=4, spines=2, leaves=2, hosts=4, name=unique_name("c")))


def coll(t: Topology, *args: str, timeout: float = 240) -> dict:
    p = subprocess.run([*MRC, "coll", *args, "--check", "--json", "--fabric", t.name], capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all", "all_gather", "reduce_scatter", "broadcast"])
def test_collectives_verified_on_four_hosts(four, collective):
    r = coll(four, collective, "-b", "4", "-e", "4M", "-f", "32", "-n", "2", "-w", "1")
    assert r["ranks"] == 4 and r["qp_errors"] == 0
    assert [row["wrong"] for row in r["rows"]] == [0, 0, 0, 0, 0]
    assert r["rows"][-1]["size"] >= 4 << 20 - 16 and r["rows"][-1]["busbw_gbps"] > 0
    assert r["qp_counters"]["qps_not_rts"] == 0


def test_a_coll_ranks_qps_show_in_ctl_list_and_in_a_metrics_scrape(four):
    """Every rank's context has a control endpoint, named by its role: `mrc ctl list` shows the QPs of
    rank 2 of 4, a Prometheus scrape has their counters under role="rank ... of 4, job ..."."""
    from mrc.ctl import metrics

    p = subprocess.Popen([*MRC, "coll", "all_reduce", "-b", "256K", "-e", "256K", "-n", "100000", "-w", "1",
                          "--fabric", four.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline, ranks = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(ranks) < 4:
            time.sleep(0.5)
            ls = subprocess.run([*MRC, "ctl", "list", "--json"], capture_output=True, text=True, timeout=30)
            assert ls.returncode == 0, ls.stderr
            ranks = [r for r in json.loads(ls.stdout) if " of 4, job " in (r.get("role") or "") and r.get("qps")]
        assert {r["role"].split(" of ")[0] for r in ranks} == {"rank 0", "rank 1", "rank 2", "rank 3"}, ranks
        assert all(r["endpoint"].endswith(f"-rank{r['role'].split()[1]}.sock") for r in ranks)
        deadline, total, text = time.monotonic() + 30, 0.0, ""
        while time.monotonic() < deadline and not total:   # the QPs are up before the first data goes
            text = metrics.exposition(metrics.ContextCollector()).decode()
            sent = [ln for ln in text.splitlines() if ln.startswith("mrc_qp_sent_packets_total{")
                    and 'role="rank 2 of 4, job ' in ln]
            total = sum(float(ln.rsplit(" ", 1)[1]) for ln in sent)
            time.sleep(0.5)
        assert sent and total > 0, text[:2000]
    finally:
        stop_group(p)


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_secured_collectives_verified_and_a_rank_with_another_mode_refused(four, tmp_path, mode):
    """--security: every QP sealed, every pair keyed by its two ranks (the all-to-all connects the pairs
    rank 0 only relays), the bootstrap sealed under the key; a job without the key is refused at once."""
    key = tmp_path / "key"
    key.write_text("k" * 32)
    r = coll(four, "all_to_all", "-b", "64K", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "--security", mode,
             "--psk-file", str(key))
    assert r["qp_errors"] == 0 and [row["wrong"] for row in r["rows"]] == [0, 0]
    p = subprocess.run([*MRC, "coll", "all_reduce", "--fabric", four.name, "--security", mode], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--psk-file" in p.stderr


def test_a_link_and_a_plane_cut_mid_run_change_nothing(four):
    p = subprocess.Popen([*MRC, "coll", "all_reduce", "-b", "8M", "-e", "8M", "-n", "30", "-w", "1", "--check",
                          "--json", "--fabric", four.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4)
        apply.fail(four.name, f"{four.leaf(0, 0)}-{four.spine(0, 1)}")    # a T0-T1 link
        time.sleep(1)
        for s in range(four.spines):                                       # then all of plane 1
            apply.fail(four.name, four.spine(1, s))
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        apply.heal(four.name, None)
    assert p.returncode == 0, err[-2000:]
    r = json.loads(out)
    assert r["rows"][0]["wrong"] == 0 and r["qp_errors"] == 0
    assert r["qp_counters"]["losses"] + r["qp_counters"]["timeouts"] + r["qp_counters"]["rtx_packets"] > 0


def test_a_rank_killed_mid_collective_aborts_the_others_in_time(four):
    job, port = f"kill{os.getpid()}", 21000 + os.getpid() % 2000
    procs = []
    for k in range(4):
        argv = [*MRC, "fabric", "exec", "--name", four.name, f"h{k}", "--", sys.executable, "-m", "mrc", "coll",
                "all_reduce", "-b", "16M", "-e", "16M", "-n", "200", "-w", "0", "--rank", str(k), "--nranks", "4",
                "--root-addr", four.mgmt_address(0), "--port", str(port), "--job", job]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        time.sleep(6)  # joined and running
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
        killed = time.monotonic()
        procs[2].send_signal(signal.SIGKILL)
        for k in (0, 1, 3):
            procs[k].wait(timeout=10)
        took = time.monotonic() - killed
        errs = {k: procs[k].stderr.read() for k in (0, 1, 3)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert took < 5, took   # docs/coll.md: a dead process is reported within a second or two
    for k, e in errs.items():
        assert procs[k].returncode == 1, errs
        assert "rank 2 died" in e, errs


def test_train_under_faults_reports_both_phases_and_plots(four, tmp_path):
    png = tmp_path / "steps.png"
    p = subprocess.run([*MRC, "train", "--fabric", four.name, "--model", "2M", "--bucket", "512K", "--compute-ms",
                        "20", "--seconds", "3", "--pairs", "2", "--faults", "flap/1s,t1-reboot/2s+0.5s", "--plot",
                        str(png), "--json"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["qp_errors"] == 0 and r["no_fault"]["steps"] > 2 and r["with_faults"]["steps"] > 2
    assert {e["op"] for e in r["fault_events"]} == {"fail", "heal"}
    # each step began on time (a fault process at SCHED_IDLE began them seconds late beside the busy ranks)
    assert max(e["late_ms"] for e in r["fault_events"]) < 300, r["fault_events"]
    # the schedule ran in the fault phases (the second and fourth), each one's faults healed by its end
    assert all(3 <= e["t_s"] <= 6.5 or 9 <= e["t_s"] <= 12.5 for e in r["fault_events"]), r["fault_events"]
    assert any(e["t_s"] >= 9 for e in r["fault_events"])
    assert png.exists() and png.stat().st_size > 10_000


def test_mpi_baseline_runs_beside_mrc(tmp_path):
    if not shutil.which("mpirun"):
        pytest.skip("OpenMPI is not installed (bash tools/setup.sh installs it)")
    gloo = importlib.util.find_spec("torch") is not None   # tools/setup.sh installs it
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "coll_bench.py"), "--rounds", "1", "--size",
                        "1M", "--rate", "100mbit", "--skip", "train,sim,tune" + ("" if gloo else ",gloo"), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["routing"] == "bgp"  # the baselines' fabric routes kernel traffic with BGP
    mptcp = ["mpi_mptcp"] if shutil.which("mptcpize") else []
    for tr in ("mrc", "mpi_tcp", "mpi_tcp_striped", *mptcp):
        for c in ("all_reduce", "all_to_all"):
            assert r[tr][c]["wrong"] == 0 and r[tr][c]["qp_errors"] == 0, (tr, c)
            assert {"busbw_gbps", "algbw_gbps", "bound_gbps"} <= set(r[tr][c])
    assert r["mrc"]["all_reduce"]["busbw_gbps"] > r["mpi_tcp"]["all_reduce"]["busbw_gbps"]
    # each configuration does what it says: one plane, every plane (ob1 set to split over all 8),
    # and MPTCP's subflows beyond plane 0
    s = r["mpi_settings"]
    assert s["mpi_tcp_striped"]["ob1"]["pml_ob1_max_rdma_per_request"] == 8
    assert "coll_tuned_allreduce_algorithm" in s["mpi_tcp"]["mca"]
    for c in ("all_reduce", "all_to_all"):
        assert r["mpi_tcp"][c]["planes_used"] == [0]
        assert r["mpi_tcp_striped"][c]["planes_used"] == list(range(8)), r["mpi_tcp_striped"][c]
        if mptcp:
            assert len(r["mpi_mptcp"][c]["planes_used"]) > 1, r["mpi_mptcp"][c]
        if gloo:   # Gloo given one interface per plane spreads a call over several (docs/coll.md)
            assert r["gloo"][c]["wrong"] == 0 and len(r["gloo"][c]["planes_used"]) > 1, r["gloo"][c]


def test_without_openmpi_the_baseline_is_skipped_with_a_line():
    env = {**os.environ, "PATH": "/nonexistent"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "coll_bench.py"), "--skip", "coll,train",
                        "--sim-nics", "8", "--sim-size", "64K", "--sim-a2a-size", "64K", "--json"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "OpenMPI or mpi4py is missing: the MPI baselines are skipped" in p.stderr
    r = json.loads(p.stdout)
    assert r["sim"]["nics"] == 8 and r["sim"]["all_reduce_8"]["qp_errors"] == 0
