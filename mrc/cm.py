"""Out-of-band connection setup over TCP (the management network).

One JSON object per line. The connecting side sends its ``RemoteInfo``; the
listening side creates and connects its QP, then answers with its own, so by
the time the connector connects, the listener is already at RTS and no first
packet is lost.

    # server (host b)                       # client (host a)
    lst = cm.listen(port=18515)             addr = cm.setup_address("b", resolver)
    conn = lst.accept()                     conn = cm.connect(addr, 18515, my_info)
    conn.peer -> RemoteInfo of a            conn.peer -> RemoteInfo of b
    conn.reply(my_info)

What is exchanged names the sender's host and topology; the receiving
context's path resolver turns that into paths (``Context.resolve``, mrc.paths).
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import socket
from dataclasses import asdict

from mrc.errors import ErrnoError, UsageError, errno_error
from mrc.paths import PathResolver
from mrc.verbs import RemoteInfo

DEFAULT_PORT = 18515


def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall((json.dumps(obj) + "\n").encode())


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self.peer: RemoteInfo | None = None

    def send(self, obj: dict) -> None:
        _send(self.sock, obj)

    def recv(self, timeout: float | None = 60.0) -> dict:
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ErrnoError(errno.ECONNRESET, "the peer closed the connection-setup channel")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def reply(self, info: RemoteInfo, **extra) -> None:
        self.send({"info": info_to_json(info), **extra})

    def close(self) -> None:
        self.sock.close()


def info_to_json(info: RemoteInfo) -> dict:
    d = asdict(info)
    d["ports"] = {str(k): v for k, v in info.ports.items()}
    d["paths"] = {str(k): v for k, v in info.paths.items()}
    return d


_INFO_FIELDS = {f.name for f in dataclasses.fields(RemoteInfo)}


def info_from_json(d: dict) -> RemoteInfo:
    d = {k: v for k, v in dict(d).items() if k in _INFO_FIELDS}
    d["ports"] = {int(k): v for k, v in d["ports"].items()}
    d["paths"] = {int(k): v for k, v in (d.get("paths") or {}).items()}
    return RemoteInfo(**d)


def setup_address(server: str, resolver: PathResolver) -> str:
    """Where to set up a connection with ``server``: an IPv6 address as it is,
    or a host name that the resolver knows the management address of."""
    try:
        return str(ipaddress.IPv6Address(server))
    except ValueError:
        pass
    addr = resolver.mgmt_address(server)
    if addr is None:
        where = f"topology {resolver.name}" if resolver.name else "no topology (give --topology FILE)"
        raise UsageError(f"unknown server {server!r}: not an IPv6 address, and {where} gives it no management "
                         f"address")
    return addr


class Listener:
    def __init__(self, addr: str = "::", port: int = DEFAULT_PORT) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((addr, port))
        except OSError as e:
            self.sock.close()
            raise errno_error(e.errno or errno.EINVAL, f"listen on [{addr}]:{port}",
                              "another server running? pick another --port") from None
        self.sock.listen(8)

    def accept(self, timeout: float | None = None) -> Connection:
        self.sock.settimeout(timeout)
        s, _ = self.sock.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Connection(s)
        hello = c.recv()
        c.peer = info_from_json(hello["info"])
        c.hello = hello
        return c

    def close(self) -> None:
        self.sock.close()


def listen(addr: str = "::", port: int = DEFAULT_PORT) -> Listener:
    return Listener(addr, port)


def connect(addr: str, port: int, info: RemoteInfo, timeout: float = 10.0, **extra) -> Connection:
    """Send our info, wait for the peer's (it is at RTS when it answers)."""
    try:
        s = socket.create_connection((addr, port), timeout=timeout)
    except OSError as e:
        raise errno_error(e.errno or errno.ETIMEDOUT, f"reach the connection-setup server at [{addr}]:{port}",
                          "is `mrc perf server` (or the listener) running there, and the management network up?"
                          ) from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = Connection(s)
    c.send({"info": info_to_json(info), **extra})
    ans = c.recv()
    c.peer = info_from_json(ans["info"])
    c.answer = ans
    return c
