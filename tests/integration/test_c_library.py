"""Root test: the C library as a C programmer uses it. The examples
(examples/c/) are built with ``cc ... $(pkg-config --cflags --libs mrc)``
and run between two fabric hosts: against each other, and against
``mrc perf`` (the same connection setup as mrc.cm, pre-shared key
included). A hostile client costs the C server one refusal, never its
life."""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import stop_process, wait_for_line

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
MRC = [sys.executable, "-m", "mrc"]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """write_bw and pingpong, built through pkg-config as the README says."""
    libdir = subprocess.run(["pkg-config", "--variable=libdir", "mrc"], capture_output=True, text=True)
    assert libdir.returncode == 0, "pkg-config does not know mrc: run `bash tools/setup.sh` (it installs mrc.pc)"
    assert Path(libdir.stdout.strip()) == ROOT / "mrc", (
        f"pkg-config's mrc is the one of {libdir.stdout.strip()}, not this checkout: run `bash tools/setup.sh` here")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mrc"], capture_output=True, text=True,
                           check=True).stdout.split()
    out = tmp_path_factory.mktemp("cex")
    for name in ("write_bw", "pingpong"):
        cc = subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out / name),
                             str(ROOT / "examples" / "c" / f"{name}.c"), *flags], capture_output=True, text=True)
        assert cc.returncode == 0, cc.stderr
    return out


def on(t, host, *cmd):
    """``cmd`` inside a fabric host (its topology and host name set)."""
    return MRC + ["fabric", "exec", host, "--name", t.name, "--", *map(str, cmd)]


def start(t, host, *cmd, ready="waiting on"):
    proc = subprocess.Popen(on(t, host, *cmd), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    wait_for_line(proc, ready)
    return proc


def stop(proc):
    """End a server we started (mrc perf removes its control socket when asked)."""
    stop_process(proc)
    proc.stderr.close()


def run(t, host, *cmd, timeout=120):
    return subprocess.run(on(t, host, *cmd), capture_output=True, text=True, timeout=timeout)


def test_pingpong_c_client_and_c_server_round_trips_are_verified(fabric, examples):
    server = start(fabric, "h1", examples / "pingpong", "--server", "--once")
    try:
        out = run(fabric, "h0", examples / "pingpong", "h1", "--size", "4096", "--iters", "500", "--json")
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["verified"] is True and res["iters"] == 500 and res["size"] == 4096
        assert 0 < res["min_us"] <= res["p50_us"] <= res["p99_us"]
        assert server.wait(20) == 0
    finally:
        stop(server)


def test_write_bw_against_mrc_perf_server_with_a_key(fabric, examples, tmp_path):
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_text("k" * 32 + "\n")
    wrong.write_text("w" * 32 + "\n")
    server = start(fabric, "h1", *MRC, "perf", "server", "--forever", "--psk-file", key)
    try:
        for args, why in (([], "wants a pre-shared key"), (["--psk-file", wrong], "did not prove")):
            out = run(fabric, "h0", examples / "write_bw", "h1", "--size", "4096", "--iters", "5", *args)
            assert out.returncode == 1 and why in out.stderr, out.stderr
        out = run(fabric, "h0", examples / "write_bw", "h1", "--psk-file", key, "--size", "1048576", "--iters",
                  "50", "--depth", "8", "--json")
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        # the server hashed its region and found the bytes the C program wrote
        assert res["verified"] is True and res["failed"] == 0 and res["gbps"] > 0
    finally:
        stop(server)


def test_mrc_perf_latency_client_against_the_c_server_with_a_key(fabric, examples, tmp_path):
    key = tmp_path / "key"
    key.write_text("s" * 40)
    server = start(fabric, "h1", examples / "pingpong", "--server", "--once", "--psk-file", key)
    try:
        out = run(fabric, "h0", *MRC, "perf", "client", "h1", "--latency", "--sizes", "64,8K", "--iters", "200",
                  "--psk-file", key, "--json")
        assert out.returncode == 0, out.stderr
        assert [r["verified"] for r in json.loads(out.stdout)] == [True, True]
        assert server.wait(20) == 0
    finally:
        stop(server)


def _hostile(addr: str, payload: bytes) -> bytes:
    """Connect to the setup port, read the greeting, send ``payload``, return what comes back."""
    with socket.create_connection((addr, 18515), timeout=15) as s:
        s.settimeout(15)
        greeting = s.recv(4096)
        assert json.loads(greeting)["mrc"] == 2  # the protocol of mrc.cm (cm.PROTOCOL)
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


def test_the_c_server_refuses_hostile_clients_and_goes_on(fabric, examples):
    server = start(fabric, "h1", examples / "pingpong", "--server")
    try:
        mgmt = json.loads(Path(f"/run/mrc/fabrics/{fabric.name}.topology").read_text())["hosts"]["h1"]["mgmt"]
        hello = {"info": {"qpn": 5, "ports": {"0": "fc00::1"}}, "params": {"max_size": 64,
                                                                           "echo": {"addr": 1, "rkey": 2}}}
        cases = [b"not json\n", b"[1, 2]\n", b"{\"info\": 7}\n", (b"{\"a\": \"" + b"x" * 70000 + b"\"}\n"),
                 b"{" * 100 + b"\n", json.dumps({**hello, "info": {**hello["info"], "qpn": 1 << 30}}).encode() + b"\n",
                 json.dumps({**hello, "info": {**hello["info"], "ports": {"99": "fc00::1"}}}).encode() + b"\n",
                 b"{\"info\": {\"qpn\": 1.5, \"ports\": {}}}\n", b"\xff\xfe\n", b"{\"\xe0\x81\x8f\": 1}\n"]
        prog = ["ip", "netns", "exec", f"mrc-{fabric.name}-h0", sys.executable, "-c",
                "import sys, json; sys.path.insert(0, sys.argv[1]); from tests.integration.test_c_library import "
                "_hostile; print(json.dumps([_hostile(sys.argv[2], bytes.fromhex(h)).decode(errors='replace') "
                "for h in json.load(sys.stdin)]))", str(ROOT), mgmt]
        out = subprocess.run(prog, input=json.dumps([c.hex() for c in cases]), capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        answers = json.loads(out.stdout)
        assert len(answers) == len(cases)
        for case, ans in zip(cases, answers, strict=True):
            assert "\"error\"" in ans, (case[:60], ans)  # told why, one line
        time.sleep(0.2)
        assert server.poll() is None, "the server died"
        ok = run(fabric, "h0", examples / "pingpong", "h1", "--iters", "50", "--json")
        assert ok.returncode == 0 and json.loads(ok.stdout)["verified"] is True, ok.stderr
    finally:
        stop(server)


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_the_c_examples_run_secured_against_mrc_perf_and_each_other(fabric, examples, tmp_path, mode):
    """Authenticated MRC from C: the same X25519 exchange and keys as mrc.cm
    (mrc_cm_qp_connect), against `mrc perf server --security` and between
    the two C programs."""
    key = tmp_path / "key"
    key.write_text("c" * 32)
    server = start(fabric, "h1", *MRC, "perf", "server", "--psk-file", key, "--security", mode)
    try:
        out = run(fabric, "h0", examples / "write_bw", "h1", "--psk-file", key, "--security", mode, "--size",
                  "262144", "--iters", "40", "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["verified"] is True, out.stderr
    finally:
        stop(server)
    server = start(fabric, "h1", examples / "pingpong", "--server", "--psk-file", key, "--security", mode)
    try:
        out = run(fabric, "h0", examples / "pingpong", "h1", "--psk-file", key, "--security", mode, "--iters", "300",
                  "--size", "1024", "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["verified"] is True, out.stderr
        # a client asking for another mode is refused at setup, and told why
        bad = run(fabric, "h0", examples / "pingpong", "h1", "--psk-file", key, "--iters", "5")
        assert bad.returncode == 1 and "security" in bad.stderr, bad.stderr
    finally:
        stop(server)


def _hostile_server(port: int, replies: list[bytes]) -> None:
    """A setup server in this namespace that answers each connection with the
    next reply (bytes as they are: a greeting, then maybe an answer after
    the hello has come)."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", port))
    srv.listen(4)
    print("listening", flush=True)
    for reply in replies:
        c, _ = srv.accept()
        with c:
            c.settimeout(5)
            greeting, _, answer = reply.partition(b"\n")
            c.sendall(greeting + b"\n")
            if answer:
                try:
                    c.recv(1 << 20)  # the hello
                except OSError:
                    pass
                c.sendall(answer)
    srv.close()


HOSTILE_SERVERS = [
    ("not JSON", b"hello there\n"),
    ("an older protocol", b'{"mrc": 1, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n'),
    ("a challenge that is not hex", b'{"mrc": 2, "challenge": "zz", "auth": true}\n'),  # the client has a key
    ("an answer that does not prove the key", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": true}\n'
                                              b'{"sealed": "00", "auth": "' + b"00" * 32 + b'"}\n'),
    ("an answer that is not JSON", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n{nope\n'),
    ("a refusal with a strange errno", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n'
                                       + '{"error": "x", "errno": "²"}\n'.encode()),
    ("an answer without info", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n{"qpn": 5}\n'),
    ("a line over 64 KiB", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n{"a": "'
                           + b"x" * 70000 + b'"}\n'),
    ("a hang-up", b'{"mrc": 2, "challenge": "' + b"ab" * 32 + b'", "auth": false}\n'),
]


def test_the_c_client_refuses_a_hostile_server_in_one_line(fabric, examples, tmp_path):
    """The connector side of the C library against a server that lies: each
    reply is refused with a sentence, and the client exits 1, never crashes."""
    port = 18777
    key = tmp_path / "key"
    key.write_text("h" * 32)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.integration.test_c_library import "
            "_hostile_server, HOSTILE_SERVERS; _hostile_server(int(sys.argv[2]), [r for _, r in HOSTILE_SERVERS])")
    srv = subprocess.Popen(["ip", "netns", "exec", f"mrc-{fabric.name}-h1", sys.executable, "-c", code, str(ROOT),
                            str(port)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert srv.stdout.readline().strip() == "listening"
        for what, reply in HOSTILE_SERVERS:
            keyed = ["--psk-file", key] if b'"auth": true' in reply else []
            out = run(fabric, "h0", examples / "write_bw", "h1", "--port", port, "--size", "4096", "--iters", "1",
                      *keyed, timeout=60)
            assert out.returncode == 1, (what, out.returncode, out.stderr)
            assert "write_bw: set up the connection: " in out.stderr and len(out.stderr.splitlines()) == 1, (what,
                                                                                                       out.stderr)
        assert srv.wait(10) == 0
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()
        srv.stdout.close()


def test_the_examples_refuse_bad_options(examples):
    for args, says in ((["pingpong", "--security", "strong", "h1"], "--security wants off, auth or encrypt"),
                       (["pingpong", "--size", "0", "h1"], "--size wants a number from 1"),
                       (["write_bw", "--depth", "0", "h1"], "--depth wants a number from 1 to 4096"),
                       (["write_bw"], "give one SERVER"), (["pingpong", "--server", "extra"], "takes no SERVER")):
        out = subprocess.run([str(examples / args[0]), *args[1:]], capture_output=True, text=True, timeout=10)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and says in lines[0], (args, out.returncode, out.stderr)


def _ctl_list() -> list[dict]:
    ls = subprocess.run(MRC + ["ctl", "list", "--json"], capture_output=True, text=True, timeout=30)
    assert ls.returncode == 0, ls.stderr
    return json.loads(ls.stdout)


def test_a_c_program_serves_a_control_endpoint_and_can_opt_out(fabric, examples):
    """A context opened by name serves <pid>.sock: `mrc ctl list` shows the C server by its name and
    QPs, a scrape has its QP's counters under its role, a steering op is refused in one line (a C
    program steers its own QPs), and the socket goes with the program. MRC_CTL=off: no endpoint."""
    from mrc.ctl import metrics

    server = start(fabric, "h1", examples / "pingpong", "--server")
    client = subprocess.Popen(on(fabric, "h0", examples / "pingpong", "h1", "--size", "4096", "--iters", "2000000"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, mine = time.monotonic() + 30, []
        while time.monotonic() < deadline and len(mine) < 2:
            time.sleep(0.3)
            mine = [r for r in _ctl_list() if r.get("role") == "pingpong (libmrc)" and r.get("qps")]
        assert len(mine) == 2 and {r["host"] for r in mine} == {"h0", "h1"}, _ctl_list()
        assert all(r["endpoint"].endswith(f"/{r['pid']}.sock") and len(r["ports"]) == fabric.planes for r in mine)
        text = metrics.exposition(metrics.ContextCollector()).decode()
        sent = [ln for ln in text.splitlines()
                if ln.startswith("mrc_qp_sent_packets_total{") and 'role="pingpong (libmrc)"' in ln]
        assert len(sent) == 2 and all(float(ln.rsplit(" ", 1)[1]) > 0 for ln in sent), text[:3000]
        assert 'mrc_qp_evs{' in text and 'state="GOOD"' in text
        deny = subprocess.run(MRC + ["ctl", "--endpoint", mine[0]["endpoint"], "ev", "deny", "0/1"],
                              capture_output=True, text=True, timeout=30)
        lines = deny.stderr.strip().splitlines()
        assert deny.returncode != 0 and len(lines) == 1 and "ENOTSUP" in lines[0], deny.stderr   # EOPNOTSUPP
    finally:
        stop(client)   # SIGTERM: the examples stop their loops and destroy the context, its socket with it
        stop(server)
    assert client.returncode == 130 and server.returncode == 0, (client.returncode, server.returncode)
    assert not [r for r in _ctl_list() if r.get("role") == "pingpong (libmrc)"]
    # opted out: the same server, no endpoint
    off = subprocess.Popen(["env", "MRC_CTL=off", *on(fabric, "h1", examples / "pingpong", "--server")],
                           stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        wait_for_line(off, "waiting on")
        assert not [r for r in _ctl_list() if r.get("role") == "pingpong (libmrc)"]
    finally:
        stop(off)


def test_a_c_programs_control_endpoint_survives_hostile_clients(fabric, examples):
    """Not JSON, JSON that is not a request, a line over 4 KiB, a client that says nothing: each gets
    EINVAL or is hung up on; the endpoint and the program go on answering."""
    server = start(fabric, "h1", examples / "pingpong", "--server")
    try:
        deadline, mine = time.monotonic() + 20, []
        while time.monotonic() < deadline and not mine:
            time.sleep(0.2)
            mine = [r for r in _ctl_list() if r.get("role") == "pingpong (libmrc)"]
        assert mine, _ctl_list()
        path = mine[0]["endpoint"]

        def ask(data: bytes, timeout: float = 5.0) -> bytes:
            got = b""
            with socket.socket(socket.AF_UNIX) as c:
                c.settimeout(timeout)
                c.connect(path)
                try:
                    c.sendall(data)
                    while not got.endswith(b"\n"):
                        more = c.recv(65536)
                        if not more:
                            break
                        got += more
                except (TimeoutError, BrokenPipeError, ConnectionResetError):
                    pass
            return got

        for bad in (b"not json\n", b"[1, 2]\n", b'{"op": 7}\n', b'{"op": "ev_set", "qpn": 1}\n'):
            ans = json.loads(ask(bad))
            assert ans["ok"] is False and ans["errno"] in (22, 95), (bad, ans)
        assert ask(b"x" * 5000) == b""            # a line that long is no request: hung up on
        t0 = time.monotonic()
        assert ask(b"", timeout=10) == b"" and time.monotonic() - t0 < 5   # silence: dropped after 2 s
        assert json.loads(ask(b'{"op": "info"}\n'))["role"] == "pingpong (libmrc)"
        assert server.poll() is None
    finally:
        stop(server)
