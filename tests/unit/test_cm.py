"""Connection setup (mrc.cm) and the perf server's bounds, against hostile
and merely broken clients on loopback: every bad hello is refused with an
errno and a line the client can read, the listener goes on, a silent client
costs one bounded wait, and a pre-shared key lets only its holders in (and
shows the client that the answer comes from a holder too)."""
import errno
import json
import os
import socket
import threading
import time

import pytest

from mrc import cm
from mrc.errors import ErrnoError, UsageError
from mrc.tools import perf
from mrc.verbs import RemoteInfo

KEY = b"k" * 32
GOOD = RemoteInfo(qpn=0x1234, ports={0: "fd00::1", 1: "fd01::1"}, psn=7, host="a", topology="t")


@pytest.fixture
def listener(request):
    psk = getattr(request, "param", None)
    lst = cm.listen("::1", 0, psk)
    yield lst, lst.sock.getsockname()[1]
    lst.close()


def raw_client(port: int, payload: bytes | None, close: bool = True) -> socket.socket:
    """A client that reads the greeting, sends ``payload`` as it is, and maybe hangs up."""
    s = socket.create_connection(("::1", port), timeout=5)
    if payload is not None:
        s.sendall(payload)
    if close:
        s.shutdown(socket.SHUT_WR)
    return s


def answer_of(s: socket.socket) -> list[dict]:
    """Every line the listener sent (the greeting, then its refusal)."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return [json.loads(x) for x in data.splitlines() if x]


def good_connect(port: int, psk: bytes | None = None, out: dict | None = None, **extra) -> threading.Thread:
    """cm.connect in a thread (it waits for the answer the test gives)."""
    out = out if out is not None else {}

    def run():
        try:
            out["conn"] = cm.connect("::1", port, GOOD, timeout=5, psk=psk, **extra)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def serve_one(lst, port, psk=None, **extra) -> dict:
    """A well-behaved client from hello to answer: the listener still works."""
    out: dict = {}
    th = good_connect(port, psk, out, **extra)
    conn = lst.accept(timeout=5)
    assert conn.peer == GOOD and conn.hello.get("params") == extra.get("params")
    conn.reply(RemoteInfo(qpn=0x99, ports={0: "fd00::2"}, psn=3, rkey=5, addr=4096, length=64))
    th.join(5)
    assert "error" not in out, out.get("error")
    assert out["conn"].peer.qpn == 0x99 and out["conn"].peer.rkey == 5
    out["conn"].close()
    conn.close()
    return out


BAD_HELLOS = [
    ("empty connection", b"", errno.ECONNRESET),
    ("not JSON", b"hello there\n", errno.EPROTO),
    ("a JSON list", b"[1, 2]\n", errno.EPROTO),
    ("no info", b'{"params": {}}\n', errno.EPROTO),
    ("info not an object", b'{"info": 5}\n', errno.EPROTO),
    ("no ports", b'{"info": {"qpn": 5}}\n', errno.EPROTO),
    ("unknown plane", b'{"info": {"qpn": 5, "ports": {"99": "fd00::1"}}}\n', errno.EPROTO),
    ("plane not a number", b'{"info": {"qpn": 5, "ports": {"x": "fd00::1"}}}\n', errno.EPROTO),
    ("bad address", b'{"info": {"qpn": 5, "ports": {"0": "not-an-address"}}}\n', errno.EPROTO),
    ("IPv4 address", b'{"info": {"qpn": 5, "ports": {"0": "10.0.0.1"}}}\n', errno.EPROTO),
    ("qpn 0", b'{"info": {"qpn": 0, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("qpn -1", b'{"info": {"qpn": -1, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("qpn 2**62", b'{"info": {"qpn": 4611686018427387904, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("qpn a string", b'{"info": {"qpn": "5", "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("psn over 24 bits", b'{"info": {"qpn": 5, "psn": 16777216, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("rkey negative", b'{"info": {"qpn": 5, "rkey": -3, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("1e999", b'{"info": {"qpn": 1e999, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    ("NaN", b'{"info": {"qpn": NaN, "ports": {"0": "fd00::1"}}}\n', errno.EPROTO),
    # a refusal whose errno is a digit Python's isdigit() takes and int() does not
    ("an errno of '\u00b2'", '{"error": "x", "errno": "\u00b2"}\n'.encode(), errno.EPROTO),
    ("an errno of true", b'{"error": "x", "errno": true}\n', errno.EPROTO),
    ("deep nesting", b"[" * 30_000 + b"]" * 30_000 + b"\n", errno.EPROTO),
    ("17 paths", b'{"info": {"qpn": 5, "ports": {"0": "fd00::1"}, "paths": {"0": ' +
     json.dumps(["fd00::1"] * 17).encode() + b"}}}\n", errno.EPROTO),
    ("a long host name", b'{"info": {"qpn": 5, "ports": {"0": "fd00::1"}, "host": "' + b"h" * 65 + b'"}}\n',
     errno.EPROTO),
    ("a line over 64 KiB", b"{" + b" " * (100 << 10), errno.EMSGSIZE),
]


@pytest.mark.parametrize("what,payload,code", BAD_HELLOS, ids=[b[0] for b in BAD_HELLOS])
def test_a_bad_hello_is_refused_with_an_errno_and_the_listener_goes_on(listener, what, payload, code):
    lst, port = listener
    s = raw_client(port, payload)
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    assert e.value.errno == code, (what, e.value)
    assert "[::1]" in str(e.value)  # the log line names the client
    lines = answer_of(s)
    assert lines[0]["mrc"] == cm.PROTOCOL and len(bytes.fromhex(lines[0]["challenge"])) == 32
    if code != errno.ECONNRESET:  # a client still there is told why
        assert lines[-1]["errno"] == code and lines[-1]["error"]
    serve_one(lst, port)


def test_a_silent_client_costs_one_bounded_wait(listener):
    lst, port = listener
    lst.setup_timeout = 0.3
    s = raw_client(port, None, close=False)
    t0 = time.monotonic()
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    assert e.value.errno == errno.ETIMEDOUT and time.monotonic() - t0 < 3
    s.close()
    serve_one(lst, port)


def test_a_client_that_trickles_bytes_is_cut_at_the_deadline(listener):
    """The setup timeout bounds the whole message, not each read."""
    lst, port = listener
    lst.setup_timeout = 0.5
    s = raw_client(port, None, close=False)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                s.send(b" ")
            except OSError:
                return
            time.sleep(0.05)

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    t0 = time.monotonic()
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    stop.set()
    th.join()
    assert e.value.errno == errno.ETIMEDOUT and time.monotonic() - t0 < 3
    s.close()


@pytest.mark.parametrize("listener", [KEY], indirect=True)
def test_with_a_key_only_its_holders_get_through(listener):
    lst, port = listener
    # no key: the client learns at once that it needs one; the listener sees it leave
    out: dict = {}
    th = good_connect(port, None, out)
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    th.join(5)
    assert out["error"].errno == errno.EACCES and "--psk-file" in str(out["error"])
    assert e.value.errno == errno.ECONNRESET
    # the wrong key: refused by the listener, and the client is told
    out = {}
    th = good_connect(port, b"w" * 32, out)
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    th.join(5)
    assert e.value.errno == errno.EACCES
    assert out["error"].errno == errno.EACCES and "refused" in str(out["error"])
    # a hello with a proof for another challenge (a replay) is refused too
    def replay():
        with socket.create_connection(("::1", port), timeout=5) as s, s.makefile("rwb") as f:
            json.loads(f.readline())
            hello = {"info": cm.info_to_json(GOOD)}
            hello["auth"] = cm._proof(KEY, b"\0" * 32, hello)
            f.write(json.dumps(hello).encode() + b"\n")
            f.flush()
            out["replay"] = json.loads(f.readline())

    th = threading.Thread(target=replay, daemon=True)
    th.start()
    with pytest.raises(ErrnoError) as e:
        lst.accept(timeout=5)
    th.join(5)
    assert e.value.errno == errno.EACCES and out["replay"]["errno"] == errno.EACCES
    # the right key: through, both ways
    serve_one(lst, port, KEY, params={"max_size": 4096})


def test_a_client_with_a_key_refuses_a_server_that_cannot_prove_it(tmp_path):
    """Mutual: a server that asks for a key but answers without proof of it
    (an impostor that took the address) is not believed."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.bind(("::1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def impostor():
        c, _ = srv.accept()
        f = c.makefile("rwb")
        f.write(json.dumps({"mrc": cm.PROTOCOL, "challenge": "00" * 32, "auth": True}).encode() + b"\n")
        f.flush()
        f.readline()
        f.write(json.dumps({"info": cm.info_to_json(GOOD), "auth": "00" * 32}).encode() + b"\n")
        f.flush()
        c.close()

    th = threading.Thread(target=impostor, daemon=True)
    th.start()
    with pytest.raises(ErrnoError) as e:
        cm.connect("::1", port, GOOD, timeout=5, psk=KEY)
    th.join(5)
    srv.close()
    assert e.value.errno == errno.EACCES and "server" in str(e.value)


@pytest.mark.parametrize("listener", [KEY], indirect=True)
def test_a_recorded_answer_does_not_pass_for_the_server(listener):
    """The answer's proof covers the client's fresh nonce: an impostor that
    replays a greeting and an answer it recorded is not believed."""
    lst, port = listener
    record: dict = {}
    real_send = cm.Connection.send

    def recording(self, obj):  # what the real server sends: greeting, then answer
        record.setdefault("sent", []).append(obj)
        real_send(self, obj)

    cm.Connection.send = recording
    try:
        serve_one(lst, port, KEY)
    finally:
        cm.Connection.send = real_send
    greeting = next(m for m in record["sent"] if "challenge" in m)
    answer = next(m for m in record["sent"] if "auth" in m and "nonce" not in m)  # the server's, sealed
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.bind(("::1", 0))
    srv.listen(1)

    def impostor():
        c, _ = srv.accept()
        with c, c.makefile("rwb") as f:
            f.write(json.dumps(greeting).encode() + b"\n")
            f.flush()
            f.readline()
            f.write(json.dumps(answer).encode() + b"\n")
            f.flush()

    th = threading.Thread(target=impostor, daemon=True)
    th.start()
    with pytest.raises(ErrnoError) as e:
        cm.connect("::1", srv.getsockname()[1], GOOD, timeout=5, psk=KEY)
    th.join(5)
    srv.close()
    assert e.value.errno == errno.EACCES and "server" in str(e.value)


def test_a_silent_client_does_not_hold_up_the_next(listener):
    """Handshakes run side by side: a client that says nothing costs only itself."""
    lst, port = listener
    silent = [raw_client(port, None, close=False) for _ in range(3)]
    t0 = time.monotonic()
    serve_one(lst, port)
    assert time.monotonic() - t0 < 2  # not the 10 s the silent ones may take
    for s in silent:
        s.close()


def test_one_address_gets_a_bounded_number_of_handshakes(listener):
    lst, port = listener
    held = [raw_client(port, None, close=False) for _ in range(cm.MAX_PER_ADDRESS)]
    for s in held:
        assert json.loads(s.makefile("rb").readline())["mrc"] == cm.PROTOCOL
    extra = raw_client(port, None)
    lines = answer_of(extra)
    assert lines[-1]["errno"] == errno.EBUSY and "at most" in lines[-1]["error"]
    for s in held:
        s.close()
    for _ in held:  # each leaves as a refused client; then the address may come again
        with pytest.raises(ErrnoError):
            lst.accept(timeout=5)
    serve_one(lst, port)


def test_listening_without_a_key_beyond_loopback_warns():
    for addr, psk, warns in (("::", None, True), ("::", KEY, False), ("::1", None, False)):
        lst = cm.listen(addr, 0, psk)
        try:
            assert (lst.warning is not None) == warns and (not warns or "--psk-file" in lst.warning)
        finally:
            lst.close()


def test_a_client_with_a_key_refuses_a_server_that_does_not_ask(listener):
    lst, port = listener
    out: dict = {}
    th = good_connect(port, KEY, out)
    with pytest.raises(ErrnoError):
        lst.accept(timeout=5)
    th.join(5)
    assert out["error"].errno == errno.EACCES and "does not ask" in str(out["error"])


def test_a_key_file_must_hold_a_real_key(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(b"secret\n")
    with pytest.raises(UsageError, match="at least 16"):
        cm.read_psk(str(short))
    with pytest.raises(UsageError, match="cannot read"):
        cm.read_psk(str(tmp_path / "missing"))
    good = tmp_path / "good"
    good.write_bytes(b"  " + KEY + b"\n")
    assert cm.read_psk(str(good)) == KEY


PARAMS = [({"params": {"max_size": -1}}, errno.EINVAL), ({"params": {"max_size": 2**62}}, errno.EMSGSIZE),
          ({"params": {"max_size": "1G"}}, errno.EINVAL), ({"params": {"max_size": True}}, errno.EINVAL),
          ({"params": {"max_size": (1 << 30) + 1}}, errno.EMSGSIZE), ({"params": []}, errno.EPROTO),
          ({"qps": [cm.info_to_json(GOOD)] * 5000}, errno.E2BIG), ({"qps": {"a": 1}}, errno.EPROTO),
          ({"qps": [{"qpn": 5}]}, errno.EPROTO)]


@pytest.mark.parametrize("hello,code", PARAMS)
def test_the_perf_server_bounds_what_a_client_may_ask_for(hello, code):
    with pytest.raises(ErrnoError) as e:
        perf._client_params(hello, perf.SERVER_MAX_SIZE, perf.SERVER_MAX_QPS)
    assert e.value.errno == code


def test_the_perf_server_grants_what_is_within_bounds():
    size, imm, extra = perf._client_params({"params": {"max_size": 1 << 20, "imm": True},
                                            "qps": [cm.info_to_json(GOOD)] * 63}, 1 << 30, 64)
    assert size == 1 << 20 and imm is True and len(extra) == 63 and extra[0] == GOOD


@pytest.mark.parametrize("echo", [5, [1, 2], {"addr": 1}, {"addr": -1, "rkey": 1}, {"addr": 1, "rkey": 1 << 32},
                                  {"addr": 1 << 64, "rkey": 1}, {"addr": True, "rkey": 1}, {"addr": "1", "rkey": 1}])
def test_a_latency_client_must_name_its_echo_region_properly(echo):
    with pytest.raises(ErrnoError) as e:
        perf._echo_params({"params": {"echo": echo}})
    assert e.value.errno == errno.EINVAL


def test_a_latency_client_gets_its_echo_region_back():
    assert perf._echo_params({"params": {"echo": {"addr": 1 << 40, "rkey": 0xDEADBEEF}}}) == (1 << 40, 0xDEADBEEF)
    assert perf._echo_params({"params": {}}) is None


def test_the_engine_spin_is_bounded():
    assert perf._spin(None) == {} and perf._spin(0) == {"spin_us": 0}
    for bad in (-1, 1e7):
        with pytest.raises(UsageError):
            perf._spin(bad)


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_a_secured_setup_gives_both_sides_the_same_qp_keys(mode):
    lst = cm.listen("::1", 0, KEY, security=mode)
    port = lst.sock.getsockname()[1]
    out: dict = {}
    th = threading.Thread(target=lambda: out.update(conn=cm.connect("::1", port, GOOD, timeout=5, psk=KEY,
                                                                    security=mode)), daemon=True)
    th.start()
    try:
        srv = lst.accept(timeout=5)
        assert srv.security == mode and isinstance(srv.hello["kx"], str)
        srv.reply(RemoteInfo(qpn=0x99, ports={0: "fd00::2"}))
        th.join(5)
        cli = out["conn"]
        ka, kb = cli.keys(GOOD.qpn, 0x99), srv.keys(0x99, GOOD.qpn)
        assert bytes(ka.tx_key) == bytes(kb.rx_key) and bytes(ka.rx_key) == bytes(kb.tx_key)
        assert bytes(ka.tx_iv) == bytes(kb.rx_iv) and bytes(ka.tx_key) != bytes(ka.rx_key)
        assert bytes(cli.keys(GOOD.qpn, 0x98).tx_key) != bytes(ka.tx_key)  # each QP pair its own
        cli.close()
        srv.close()
    finally:
        lst.close()


def test_security_needs_a_key_and_the_same_mode_on_both_sides():
    with pytest.raises(UsageError, match="pre-shared key"):
        cm.listen("::1", 0, None, security="auth")
    with pytest.raises(UsageError, match="pre-shared key"):
        cm.connect("::1", 1, GOOD, psk=None, security="encrypt")
    lst = cm.listen("::1", 0, KEY, security="encrypt")
    port = lst.sock.getsockname()[1]
    try:
        for asked in ("auth", "off"):
            out: dict = {}
            th = threading.Thread(target=lambda a=asked, o=out: o.update(r=_try(port, a)), daemon=True)
            th.start()
            with pytest.raises(ErrnoError) as e:
                lst.accept(timeout=5)
            th.join(5)
            assert e.value.errno == errno.EPROTO and "security" in str(e.value)
            assert isinstance(out["r"], ErrnoError) and "give the same --security" in str(out["r"])
    finally:
        lst.close()


def _try(port: int, security: str):
    try:
        return cm.connect("::1", port, GOOD, timeout=5, psk=KEY, security=security)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e


@pytest.mark.parametrize("listener", [KEY], indirect=True)
def test_with_a_key_what_the_setup_carries_is_sealed(listener, monkeypatch):
    """Under a key, a listener on the management network sees no QP number,
    address, rkey or X25519 key: the hello and the answer travel sealed."""
    lst, port = listener
    sent: list[str] = []
    real_send = cm.Connection.send
    monkeypatch.setattr(cm.Connection, "send", lambda self, obj: (sent.append(json.dumps(obj)), real_send(self, obj)))
    serve_one(lst, port, KEY, params={"max_size": 4096})
    assert len(sent) == 3  # greeting, hello, answer
    for text in sent[1:]:
        assert set(json.loads(text)) <= {"nonce", "sealed", "auth"}, text
        for secret in ("qpn", "fd00::1", "fd00::2", "max_size", '"rkey"'):
            assert secret not in text, (secret, text)


def _secured_hello(port: int, inner, sealed_hex: str | None = None, key: bytes = KEY) -> list[dict]:
    """A client under the key that proves its hello but seals ``inner`` (any JSON value)
    or sends ``sealed_hex`` as it is; returns what the listener answered."""
    from mrc import secure

    with socket.create_connection(("::1", port), timeout=5) as s, s.makefile("rwb") as f:
        challenge = bytes.fromhex(json.loads(f.readline())["challenge"])
        nonce = os.urandom(32)
        if sealed_hex is None:
            keys = secure.setup_keys(key, challenge, nonce)
            sealed_hex = secure.seal(keys["c2s"], b"mrc hello", json.dumps(inner).encode()).hex()
        hello = {"nonce": nonce.hex(), "sealed": sealed_hex}
        hello["auth"] = cm._proof(key, challenge, hello)
        f.write(json.dumps(hello).encode() + b"\n")
        f.flush()
        return [json.loads(x) for x in f.read().splitlines() if x]


HOSTILE_SECURED = [
    ("sealed not hex", None, "zz" * 40, errno.EPROTO),
    ("sealed too short", None, "00" * 8, errno.EPROTO),
    ("sealed under another key", None, "00" * 64, errno.EACCES),
    ("a list inside", [1, 2], None, errno.EPROTO),
    ("not JSON inside", None, None, errno.EPROTO),
    ("an unknown mode", {"info": cm.info_to_json(GOOD), "security": "strong", "kx": "00" * 32}, None, errno.EPROTO),
    ("a short kx", {"info": cm.info_to_json(GOOD), "security": "auth", "kx": "00" * 8}, None, errno.EPROTO),
    ("kx not hex", {"info": cm.info_to_json(GOOD), "security": "auth", "kx": "x" * 64}, None, errno.EPROTO),
    ("a bool for a number", {"info": {**cm.info_to_json(GOOD), "qpn": True}, "security": "auth", "kx": "00" * 32},
     None, errno.EPROTO),
]


@pytest.mark.parametrize("what,inner,sealed,code", HOSTILE_SECURED, ids=[h[0] for h in HOSTILE_SECURED])
def test_a_hostile_sealed_hello_is_refused_and_the_listener_goes_on(what, inner, sealed, code):
    """A client that holds the key but sends a sealed part that is not hex, does
    not verify, or carries what a hello may not: refused with an errno, told
    why, and the next client is served."""
    from mrc import secure

    lst = cm.listen("::1", 0, KEY, security="auth")
    port = lst.sock.getsockname()[1]
    try:
        if what == "not JSON inside":
            out: dict = {}

            def garbage():
                with socket.create_connection(("::1", port), timeout=5) as s, s.makefile("rwb") as f:
                    challenge = bytes.fromhex(json.loads(f.readline())["challenge"])
                    nonce = os.urandom(32)
                    keys = secure.setup_keys(KEY, challenge, nonce)
                    hello = {"nonce": nonce.hex(), "sealed": secure.seal(keys["c2s"], b"mrc hello", b"{nope").hex()}
                    hello["auth"] = cm._proof(KEY, challenge, hello)
                    f.write(json.dumps(hello).encode() + b"\n")
                    f.flush()
                    out["lines"] = [json.loads(x) for x in f.read().splitlines() if x]
            th = threading.Thread(target=garbage, daemon=True)
        else:
            out = {}
            th = threading.Thread(target=lambda: out.update(lines=_secured_hello(port, inner, sealed)), daemon=True)
        th.start()
        with pytest.raises(ErrnoError) as e:
            lst.accept(timeout=5)
        th.join(5)
        assert e.value.errno == code, (what, e.value)
        assert out["lines"][-1]["errno"] == code and out["lines"][-1]["error"]
    finally:
        lst.close()


def test_secure_refuses_what_does_not_verify():
    from mrc import secure

    k = (b"k" * 32, b"i" * 12)
    sealed = secure.seal(k, b"aad", b"payload")
    assert secure.unseal(k, b"aad", sealed) == b"payload"
    for bad_data, aad in [(sealed[:-1] + bytes([sealed[-1] ^ 1]), b"aad"), (sealed, b"other"), (sealed[:10], b"aad"),
                          (b"", b"aad")]:
        with pytest.raises(ErrnoError) as e:
            secure.unseal(k, aad, bad_data)
        assert e.value.errno == errno.EACCES
    with pytest.raises(ErrnoError):
        secure.derive(b"short", b"x" * 32, b"k" * 32, b"", True, "auth")
