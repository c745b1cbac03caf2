"""The setup channel after the handshake (mrc.cm, protocol.md section 8):
under a pre-shared key every message travels sealed and numbered, so a
relay that holds no key learns nothing, and each way it can meddle with a
message (flip a byte, send it again, drop it, swap it with the next, send
one in the clear) ends the channel with one clear line, never a changed
message taken as good. Without a key the same relay reads and rewrites
(the control)."""
from __future__ import annotations

import errno
import json
import socket
import threading

import pytest

from mrc import cm
from mrc.errors import ErrnoError
from mrc.verbs import RemoteInfo

KEY = b"k" * 32
CLIENT = RemoteInfo(qpn=0x123456, ports={0: "fd00::1"}, psn=0x654321, rkey=0xDEADBEEF, addr=0x7F0000001000,
                    length=1 << 20, host="h0", topology="t")
SERVER = RemoteInfo(qpn=0xABCDEF, ports={0: "fd00::2"}, psn=0x111111, rkey=0xFEEDFACE, addr=0x7F0000002000,
                    length=1 << 20)
SECRETS = ("1193046", "11259375", "3735928559", "4277009102", "fd00::1", "fd00::2", "rank", "peers", "go")


class Relay:
    """Forwards whole lines between a client and the listener; the
    ``n``-th line after the answer that flows ``way`` ("c2s" or "s2c")
    gets ``attack``. Every line it saw is kept in ``seen``."""

    def __init__(self, target_port: int, attack: str | None, way: str = "c2s", n: int = 1) -> None:
        self.attack, self.way, self.n = attack, way, n
        self.seen: list[bytes] = []
        self.srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.srv.bind(("::1", 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.target = target_port
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        c, _ = self.srv.accept()
        s = socket.create_connection(("::1", self.target))
        threading.Thread(target=self._pipe, args=(c, s, "c2s"), daemon=True).start()
        self._pipe(s, c, "s2c")

    def _pipe(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        buf, lines, held, last = b"", 0, None, None
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.seen.append(line)
                    lines += 1
                    # the greeting and the hello go c2s/s2c as they are: message k is line k + 1 (c2s: hello
                    # first) or k + 2 (s2c: greeting, answer)
                    k = lines - (1 if way == "c2s" else 2)
                    out = [line]
                    if way == self.way and k == self.n:
                        out = self._meddle(line, last)
                    elif way == self.way and k == self.n + 1 and held is not None:
                        out = [line, held]
                    if self.attack == "swap" and way == self.way and k == self.n:
                        held, out = line, []
                    last = line
                    for o in out:
                        dst.sendall(o + b"\n")
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _meddle(self, line: bytes, last: bytes | None) -> list[bytes]:
        if self.attack == "flip":
            b = bytearray(line)
            i = len(b) // 2
            b[i] = ord("0") if b[i] != ord("0") else ord("1")
            return [bytes(b)]
        if self.attack == "replay":
            return [last or line]
        if self.attack == "drop":
            return []
        if self.attack == "clear":
            return [json.dumps({"go": True, "peers": {"0": "fd00::bad"}}).encode()]
        return [line]

    def close(self) -> None:
        self.srv.close()


def converse(psk: bytes | None, relay_attack: str | None, way: str = "c2s", n: int = 1):
    """Set up through a relay, then three messages each way; (what each side got, the error, the relay)."""
    lst = cm.listen("::1", 0, psk)
    relay = Relay(lst.sock.getsockname()[1], relay_attack, way, n)
    got: dict = {"server": [], "client": []}
    errs: dict[str, Exception] = {}

    def server():
        try:
            conn = lst.accept(timeout=5)
            conn.reply(SERVER)
            for i in range(3):
                conn.send({"peers": {"m": i, "rkey": SERVER.rkey}})
            for i in range(3):
                got["server"].append(conn.recv(3))
            conn.close()
        except (ErrnoError, OSError) as e:
            errs["server"] = e

    th = threading.Thread(target=server, daemon=True)
    th.start()
    try:
        c = cm.connect("::1", relay.port, CLIENT, timeout=5, psk=psk)
        for i in range(3):
            c.send({"rank": i, "go": True, "qpn": CLIENT.qpn})
        for i in range(3):
            got["client"].append(c.recv(3))
        c.close()
    except (ErrnoError, OSError) as e:
        errs["client"] = e
    th.join(10)
    lst.close()
    relay.close()
    return got, errs, relay


def test_under_a_key_the_relay_learns_nothing_and_the_talk_goes_through():
    got, errs, relay = converse(KEY, None)
    assert errs == {} and [m["rank"] for m in got["server"]] == [0, 1, 2]
    assert [m["peers"]["m"] for m in got["client"]] == [0, 1, 2]
    text = b"\n".join(relay.seen).decode()
    assert len(relay.seen) == 9  # greeting, hello, answer, then 3 and 3
    for secret in SECRETS:
        assert secret not in text, secret
    for line in relay.seen[3:]:
        assert set(json.loads(line)) == {"sealed"}


@pytest.mark.parametrize("way", ["c2s", "s2c"])
@pytest.mark.parametrize("attack", ["flip", "replay", "drop", "swap", "clear"])
def test_a_relay_without_the_key_that_meddles_ends_the_channel_with_one_clear_line(attack, way):
    got, errs, _ = converse(KEY, attack, way, n=1)
    receiver = "server" if way == "c2s" else "client"
    assert receiver in errs, f"the meddling went unnoticed: {errs}"
    e = errs[receiver]
    assert isinstance(e, ErrnoError) and e.errno == errno.EACCES, e
    assert "\n" not in str(e) and ("did not verify" in str(e) or "unsealed" in str(e))
    # nothing changed was taken: whatever each side got is what the other sent
    assert all(m.get("qpn") == CLIENT.qpn for m in got["server"])
    assert all(m["peers"].get("rkey") == SERVER.rkey for m in got["client"])
    assert len(got[receiver]) <= 1


def test_without_a_key_the_same_relay_reads_and_rewrites():
    """The control: no key, nothing sealed, and a message it rewrites is taken as it is."""
    got, errs, relay = converse(None, "clear", "c2s", n=1)
    assert errs == {} and got["server"][0] == {"go": True, "peers": {"0": "fd00::bad"}}
    assert str(CLIENT.qpn) in b"\n".join(relay.seen).decode()


def test_closing_a_connection_wipes_its_keys():
    got, errs, _ = converse(KEY, None)
    lst = cm.listen("::1", 0, KEY, security="auth")
    out: dict = {}

    def run():
        out["c"] = cm.connect("::1", lst.sock.getsockname()[1], CLIENT, timeout=5, psk=KEY, security="auth")

    th = threading.Thread(target=run, daemon=True)
    th.start()
    conn = lst.accept(timeout=5)
    conn.reply(SERVER)
    th.join(5)
    c = out["c"]
    priv, tx = c._kx["priv"], c._tx
    assert c.keys(1, 2) is not None and any(priv) and any(tx.key)
    c.close()
    conn.close()
    lst.close()
    assert not any(priv) and not any(tx.key) and not any(tx.iv)
    with pytest.raises(ErrnoError) as e:
        c.keys(1, 2)
    assert e.value.errno == errno.EBADF
