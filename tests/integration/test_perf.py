"""Root test: `mrc perf` between two fabric hosts, as a user runs it
(`mrc fabric exec ... -- mrc perf server|client`), with the JSON the issue
asks for."""
import errno
import json
import socket
import subprocess
import sys
import time

import pytest

from mrc import cm
from mrc.ctl.endpoint import ControlClient
from mrc.fabric import ns
from mrc.verbs import RemoteInfo
from tests.integration.conftest import wait_for_line

pytestmark = pytest.mark.root
MRC = [sys.executable, "-m", "mrc"]


def perf(t, *client_args):
    server = subprocess.Popen(MRC + ["fabric", "exec", "h1", "--name", t.name, "--"] + MRC + ["perf", "server"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        wait_for_line(server, "waiting on")
        out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                             + ["perf", "client", "h1", "--json", *client_args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert server.wait(20) == 0  # it serves one client, then exits
        return json.loads(out.stdout)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_perf_latency_mode_round_trips_are_echoed_and_verified(fabric):
    res = perf(fabric, "--latency", "--sizes", "64,4K", "--iters", "200")
    assert [r["size"] for r in res] == [64, 4096]
    for r in res:
        assert r["verified"] is True and r["op"] == "WRITE_IMM round trip" and r["iters"] == 200
        assert 0 < r["min_us"] <= r["p50_us"] <= r["p99_us"]


@pytest.mark.parametrize("args,qps,op", [(["--sizes", "1,4K,64K,1M", "--iters", "20"], 1, "WRITE"),
                                         (["--sizes", "4K,1M", "--iters", "30", "--qps", "3", "--imm"], 3,
                                          "WRITE_IMM")])
def test_perf_json_is_verified_for_every_size(fabric, args, qps, op):
    res = perf(fabric, "--verify", *args)
    sizes = [int(x) if x.isdigit() else int(x[:-1]) << (10 if x[-1] == "K" else 20)
             for x in args[args.index("--sizes") + 1].split(",")]
    assert [r["size"] for r in res] == sizes
    for r in res:
        assert r["verified"] is True and r["qps"] == qps and r["op"] == op
        assert {"gbps", "msg_rate", "p50_us", "p99_us", "p999_us", "retransmits", "plane_share"} <= set(r)
        assert r["gbps"] >= 0 and r["msg_rate"] > 0 and r["p99_us"] >= r["p50_us"] > 0
        assert len(r["plane_share"]) == fabric.planes and abs(sum(r["plane_share"]) - 1) < 0.01
    big = res[-1]  # 1 MiB messages: packets spread evenly over the planes
    # retransmissions (a busy machine's receive rings overflow) go on any plane
    # and skew the shares a little; a plane left out would still fail
    tol = (0.1 if big["retransmits"] == 0 else 0.3) / fabric.planes
    assert all(abs(s - 1 / fabric.planes) < tol for s in big["plane_share"]), (big["plane_share"],
                                                                               big["retransmits"])


def test_perf_client_errors_are_one_line(fabric):
    out = subprocess.run(MRC + ["perf", "client", "h1", "--sizes", "4Q"], capture_output=True, text=True)
    assert out.returncode == 2 and "cannot read size" in out.stderr and "Traceback" not in out.stderr


def _start_server(t, *args):
    server = subprocess.Popen(MRC + ["fabric", "exec", "h1", "--name", t.name, "--"] + MRC
                              + ["perf", "server", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              text=True)
    lines = wait_for_line(server, "waiting on")
    return server, lines[-1]


def _hostile(t, port, payload: bytes | None, quiet: bool = False) -> bytes:
    """From h0: connect to h1's setup port, send payload (None: nothing), then
    hang up our side (``quiet``: stay connected and silent) and return all
    the server said until it closed."""
    addr = t.mgmt_address(1)

    def run():
        s = socket.create_connection((addr, port), timeout=10)
        try:
            if payload is not None:
                s.sendall(payload)
            if not quiet:
                s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data
        except OSError:
            return b""
        finally:
            s.close()

    return ns.run_in(t.ns("h0"), run)


def test_the_perf_server_survives_bad_clients_and_frees_what_each_client_had(fabric):
    """Finding 9: listening on the management address by default, a server
    under --forever outlives empty, garbage, oversized, greedy and silent
    clients (each told why, each logged), and after many real clients holds
    no QP, region or peer of theirs."""
    t = fabric
    port = "18611"
    server, line = _start_server(t, "--forever", "--port", port, "--max-size", "8M", "--max-qps", "4",
                                 "--idle-timeout", "2")
    try:
        assert f"[{t.mgmt_address(1)}]:{port}" in line, line  # not every address of the host
        ctl_path = line.rsplit("control endpoint ", 1)[1].strip()
        info = cm.info_to_json(RemoteInfo(qpn=5, ports={0: "fd00::1"}))
        for payload, code in ((b"", None), (b"garbage\n", errno.EPROTO), (b"{" * 70_000, errno.EMSGSIZE),
                              (json.dumps({"info": info, "params": {"max_size": -1}}).encode() + b"\n",
                               errno.EINVAL),
                              (json.dumps({"info": info, "params": {"max_size": 2**62}}).encode() + b"\n",
                               errno.EMSGSIZE),
                              (json.dumps({"info": info, "qps": [info] * 5000}).encode() + b"\n", errno.EMSGSIZE),
                              (json.dumps({"info": info, "qps": [info] * 10}).encode() + b"\n", errno.E2BIG),
                              (json.dumps({"info": {**info, "ports": {"99": "::1"}}}).encode() + b"\n",
                               errno.EPROTO)):
            said = _hostile(t, int(port), payload)
            if code is not None:
                assert json.loads(said.splitlines()[-1])["errno"] == code, said[-200:]
            assert server.poll() is None
        # a client that stops talking after setup is dropped after --idle-timeout, not kept for ever
        t0 = time.monotonic()
        said = _hostile(t, int(port), json.dumps({"info": info}).encode() + b"\n", quiet=True).splitlines()
        assert "info" in json.loads(said[1]) and json.loads(said[2])["errno"] == errno.ETIMEDOUT, said
        assert 1.5 < time.monotonic() - t0 < 15
        for _ in range(4):  # real clients, one after another: every one served and verified
            out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                                 + ["perf", "client", "h1", "--port", port, "--sizes", "4K,64K", "--iters", "10",
                                    "--qps", "2", "--verify", "--json"], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert all(r["verified"] for r in json.loads(out.stdout))
        greedy = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                                + ["perf", "client", "h1", "--port", port, "--sizes", "16M", "--iters", "1"],
                                capture_output=True, text=True, timeout=60)
        assert greedy.returncode != 0 and "--max-size" in greedy.stderr and "Traceback" not in greedy.stderr
        with ControlClient(ctl_path) as c:
            left = c.call("info")
        assert left["qps"] == [] and left["regions"] == 0 and left["peers"] == 0, left
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(10)
    log = server.stderr.read()
    assert log.count("refused client") >= 9 and log.count("dropped client") == 1 and "Traceback" not in log, log


def test_with_a_key_only_a_holder_gets_a_qp(fabric, tmp_path):
    t = fabric
    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("fedcba9876543210fedcba9876543210\n")
    server, _ = _start_server(t, "--port", "18612", "--psk-file", str(key))
    try:
        for args in ((), ("--psk-file", str(wrong))):
            out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                                 + ["perf", "client", "h1", "--port", "18612", "--sizes", "4K", "--iters", "5",
                                    *args], capture_output=True, text=True, timeout=60)
            assert out.returncode == 2 and "EACCES" in out.stderr and "Traceback" not in out.stderr, out.stderr
            assert server.poll() is None  # once-mode waits for a client that gets through
        out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                             + ["perf", "client", "h1", "--port", "18612", "--sizes", "4K", "--iters", "5",
                                "--verify", "--json", "--psk-file", str(key)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and json.loads(out.stdout)[0]["verified"], out.stderr
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_latency_client_that_names_a_bad_echo_key_costs_the_server_nothing(fabric):
    """A client whose echo region's key is wrong: the server's echo is
    refused by the client's engine (REMOTE_ACCESS), the server's QP for
    that client fails, and the server goes on to serve the next client."""
    from mrc.fabric.pair import host_context
    from mrc.verbs import QPAttr

    t = fabric
    port = "18631"
    server, _ = _start_server(t, "--forever", "--port", port, "--idle-timeout", "5")
    ctx = host_context(t, 0)
    try:
        back = bytearray(64)
        mr, mback = ctx.reg_mr(bytearray(64)), ctx.reg_mr(back, remote_write=True)
        cq = ctx.create_cq()
        qp = ctx.create_qp(cq=cq, attr=QPAttr(rq_depth=16))
        conn = ns.run_in(t.ns("h0"), lambda: cm.connect(
            t.mgmt_address(1), int(port), ctx.local_info(qp),
            params={"max_size": 64, "imm": True, "echo": {"addr": mback.addr, "rkey": mback.rkey ^ 0x5A5A}}))
        qp.connect(conn.peer)
        qp.post_recv([1])
        qp.post_write(mr, 0, 64, conn.peer.addr, conn.peer.rkey, wr_id=7, imm=7)
        assert [w.ok for w in cq.wait(1, timeout=10)] == [True]  # our write landed
        time.sleep(0.5)  # the echo came and was refused
        assert bytes(back) == bytes(64) and not [w for w in cq.poll() if w.opcode == 1 and w.ok]
        # a check, which only the bandwidth mode sends, is answered, not fatal
        conn.send({"check": 64, "iters": 1, "sha256": "00"})
        assert conn.recv()["verified"] is False
        conn.send({"bye": True})
        conn.close()
        out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                             + ["perf", "client", "h1", "--port", port, "--latency", "--sizes", "64", "--iters",
                                "50", "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)[0]["verified"] is True
        assert server.poll() is None
    finally:
        ctx.close()
        server.kill()
        server.wait()


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_perf_with_security_verifies_every_byte_and_drops_nothing(fabric, tmp_path, mode):
    """Authenticated MRC on the fabric: keys from the setup's X25519
    exchange under the pre-shared key, every byte arrives (the server hashes
    its region), and a client asking for another mode is refused."""
    key = tmp_path / "key"
    key.write_text("s" * 32)
    server, _ = _start_server(fabric, "--forever", "--psk-file", str(key), "--security", mode)
    try:
        out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", fabric.name, "--"] + MRC
                             + ["perf", "client", "h1", "--json", "--verify", "--sizes", "4K,1M", "--iters", "30",
                                "--psk-file", str(key), "--security", mode], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert [r["verified"] for r in json.loads(out.stdout)] == [True, True]
        # the client asking for another mode is refused, in one line
        bad = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", fabric.name, "--"] + MRC
                             + ["perf", "client", "h1", "--sizes", "4K", "--iters", "1", "--psk-file", str(key),
                                "--security", "off"], capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "security" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        server.terminate()
        server.wait(10)


def test_perf_client_on_ports_named_by_hand(fabric):
    """--ports instead of the topology's ports (it crashed: the names reached Context unresolved)."""
    res = perf(fabric, "--ports", ",".join(f"p{p}" for p in range(fabric.planes)), "--sizes", "64K",
               "--iters", "10", "--verify")
    assert res[0]["verified"] is True
