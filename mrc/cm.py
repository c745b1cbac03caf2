"""Out-of-band connection setup over TCP (the management network).

One JSON object per line. The connecting side sends its ``RemoteInfo``; the
listening side creates and connects its QP, then answers with its own, so by
the time the connector connects, the listener is already at RTS and no first
packet is lost.

    # server (host h2)                      # client (host h0)
    lst = cm.listen(port=18515)             conn = cm.connect("fd6e::3", 18515, my_info)
    conn = lst.accept()                     peer = conn.peer  # RemoteInfo of h2
    conn.peer -> RemoteInfo of h0
    conn.reply(my_info)

Inside a fabric (``MRC_FABRIC``/``MRC_HOST`` set by ``mrc fabric exec``),
``resolve_paths`` fills in the uSID path addresses toward the peer from the
fabric's address plan; elsewhere a peer is reached at its port addresses.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict

from mrc.errors import MrcError
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
                raise MrcError("the peer closed the connection-setup channel")
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


def info_from_json(d: dict) -> RemoteInfo:
    d = dict(d)
    d["ports"] = {int(k): v for k, v in d["ports"].items()}
    d["paths"] = {int(k): v for k, v in d.get("paths", {}).items()}
    return RemoteInfo(**d)


def resolve_paths(peer: RemoteInfo) -> RemoteInfo:
    """Fill in the path addresses toward ``peer`` (uSID containers in a fabric)."""
    fabric, me = os.environ.get("MRC_FABRIC"), os.environ.get("MRC_HOST")
    if fabric and me and peer.fabric == fabric and peer.host:
        from mrc.fabric.apply import load_topology

        t = load_topology(fabric)
        peer.paths = {p: [t.path_address(me, peer.host, p, s) for s in range(t.spines)]
                      for p in peer.ports}
    return peer


class Listener:
    def __init__(self, addr: str = "::", port: int = DEFAULT_PORT) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((addr, port))
        except OSError as e:
            raise MrcError(f"cannot listen on [{addr}]:{port}: {e.strerror} (another server running?)") from None
        self.sock.listen(8)

    def accept(self, timeout: float | None = None) -> Connection:
        self.sock.settimeout(timeout)
        s, _ = self.sock.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Connection(s)
        hello = c.recv()
        c.peer = resolve_paths(info_from_json(hello["info"]))
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
        raise MrcError(f"cannot reach the connection-setup server at [{addr}]:{port}: {e.strerror or e}") from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = Connection(s)
    c.send({"info": info_to_json(info), **extra})
    ans = c.recv()
    c.peer = resolve_paths(info_from_json(ans["info"]))
    c.answer = ans
    return c


def mgmt_address(host: str | None = None) -> str:
    """The management address of a fabric host (``fd6e::<h+1>``)."""
    from mrc.fabric.topology import MGMT_PREFIX

    h = int((host or os.environ.get("MRC_HOST", "h0")).lstrip("h"))
    return f"{MGMT_PREFIX}{h + 1:x}"
