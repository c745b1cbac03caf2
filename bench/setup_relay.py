"""A relay on the management network that holds no key: it forwards a
connection-setup channel (mrc.cm) line by line between a client and the
listener, keeps every line it saw, and meddles with one message (flip a
byte, send the one before again, drop it, swap it with the next, or send a
message of its own in the clear). tests/unit/test_cm_channel.py and
bench/hostile_peer.py's ``relay`` attack use it, on loopback only."""
from __future__ import annotations

import json
import socket
import threading

from mrc import cm
from mrc.errors import ErrnoError
from mrc.verbs import RemoteInfo

ATTACKS = ("flip", "replay", "drop", "swap", "clear")
CLIENT = RemoteInfo(qpn=0x123456, ports={0: "fd00::1"}, psn=0x654321, rkey=0xDEADBEEF, addr=0x7F0000001000,
                    length=1 << 20, host="h0", topology="t")
SERVER = RemoteInfo(qpn=0xABCDEF, ports={0: "fd00::2"}, psn=0x111111, rkey=0xFEEDFACE, addr=0x7F0000002000,
                    length=1 << 20)
#: what a relay must not read: both QP numbers and rkeys (decimal, as JSON writes them), the addresses, the words
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
            for _ in range(3):
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
        for _ in range(3):
            got["client"].append(c.recv(3))
        c.close()
    except (ErrnoError, OSError) as e:
        errs["client"] = e
    th.join(10)
    lst.close()
    relay.close()
    return got, errs, relay


def attack(psk: bytes | None) -> tuple[dict, dict]:
    """Every meddling, each way, on a channel under ``psk`` (None: no key).
    Effects: the secrets the relay read on a clean pass, and the meddled
    messages the receiver took as good; counted: the channels that ended
    with EACCES (the receiver noticed)."""
    _, _, clean = converse(psk, None)
    text = b"\n".join(clean.seen).decode(errors="replace")
    effects = {"secrets_read": sum(s in text for s in SECRETS), "changes_taken": 0}
    noticed = 0
    for way in ("c2s", "s2c"):
        receiver = "server" if way == "c2s" else "client"
        for kind in ATTACKS:
            got, errs, _ = converse(psk, kind, way)
            e = errs.get(receiver)
            noticed += isinstance(e, ErrnoError) and e.errno == 13
            want = [{"rank": i, "go": True, "qpn": CLIENT.qpn} for i in range(3)] if way == "c2s" else \
                [{"peers": {"m": i, "rkey": SERVER.rkey}} for i in range(3)]
            effects["changes_taken"] += any(m not in want for m in got[receiver]) or \
                (e is None and got[receiver] != want)
    return effects, ({"auth": noticed} if noticed else {})
