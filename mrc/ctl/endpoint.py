"""The control endpoint: a context's controller API from another process.

``ControlServer(ctx)`` serves a UNIX stream socket (by default
``/run/mrc/ctl/<pid>.sock``; ``MRC_CTL_DIR`` moves the directory). Each
request is one JSON object on a line, ``{"op": ..., ...}``; each answer is
one line, ``{"ok": true, ...}`` or ``{"ok": false, "errno": N, "error":
"..."}``. Anyone who can reach the socket may query; only root or a
process with CAP_NET_ADMIN (checked with SO_PEERCRED) may modify, as only
the node's controller may in the OCP API. ``mrc ctl`` is the client.

Operations: ``info``; ``ev_list`` [qpn]; ``ev_set`` qpn, state (DENIED or
GOOD) and either ev or path (every EV that takes that destination
address); ``events`` [after] (EV events since a sequence number, with drop
counts); ``port`` plane, up; ``cc_show``; ``cc_set`` config (the NSCC
parameters new QPs get); ``probe`` [dst] [all_paths] [timeout_ms] (EV probes
to a peer: one per plane, or one per path, each with its RTT or a timeout).

While a server runs it is the consumer of the context's EV events (the
engine queue is read once): read them through ``events``.
"""
from __future__ import annotations

import collections
import errno
import json
import os
import socket
import struct
import threading

from mrc.core import EV_STATE_CODES
from mrc.ctl.profiles import DENIED, GOOD, CCProfile
from mrc.errors import ErrnoError
from mrc.wire import ev_make

CTL_DIR = "/run/mrc/ctl"
CAP_NET_ADMIN = 12
MODIFY = {"ev_set", "port", "cc_set"}


def ctl_dir() -> str:
    return os.environ.get("MRC_CTL_DIR", CTL_DIR)


def peer_privileged(conn: socket.socket) -> bool:
    """Root, or CAP_NET_ADMIN in the peer's effective set."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid == 0:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return False


class ControlServer:
    """Serve ``ctx``'s controller API on a UNIX socket (a context manager)."""

    def __init__(self, ctx, path: str | None = None, event_depth: int = 4096) -> None:
        self.ctx = ctx
        self.path = path or os.path.join(ctl_dir(), f"{os.getpid()}.sock")
        # CC profile 0: what QPs created without a cc_profile_id get (``cc set`` changes it)
        self.cc = ctx.profiles.cc.get(0) or ctx.profiles.add(CCProfile(0, "uet-1.0-nscc", {}))
        self._events: collections.deque = collections.deque(maxlen=event_depth)
        self._seq = 0
        self._lock = threading.Lock()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if os.path.exists(self.path):
            os.unlink(self.path)  # a stale socket of a process that died
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        os.chmod(self.path, 0o666)  # anyone may query; modify is checked per request
        self._sock.listen(8)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="mrc-ctl", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ serving
    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            privileged = peer_privileged(conn)
            for line in f:
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ErrnoError(errno.EINVAL, "a request is a JSON object")
                    ans = {"ok": True, **self.handle(req, privileged)}
                except ErrnoError as e:
                    ans = {"ok": False, "errno": e.errno, "error": str(e)}
                except (ValueError, TypeError, KeyError) as e:
                    ans = {"ok": False, "errno": errno.EINVAL, "error": f"EINVAL: bad request: {e}"}
                try:
                    f.write(json.dumps(ans).encode() + b"\n")
                    f.flush()
                except OSError:
                    return

    def handle(self, req: dict, privileged: bool = True) -> dict:
        op = req.get("op")
        if op in MODIFY and not privileged:
            raise ErrnoError(errno.EPERM, f"{op} changes the device: only root or CAP_NET_ADMIN may do it")
        fn = getattr(self, "op_" + str(op), None)
        if fn is None:
            raise ErrnoError(errno.EINVAL, f"unknown operation {op!r}")
        return fn(req)

    # --------------------------------------------------------- operations
    def _qp(self, req: dict):
        qps = self.ctx.live_qps()
        qpn = req.get("qpn")
        if qpn is None:
            if len(qps) != 1:
                raise ErrnoError(errno.EINVAL, f"this context has {len(qps)} QPs: name one with qpn "
                                             f"({', '.join(map(str, sorted(qps))) or 'none'})")
            qpn = next(iter(qps))
        if int(qpn) not in qps:
            raise ErrnoError(errno.ENOENT, f"no QP {qpn} in this context")
        return qps[int(qpn)]

    def op_info(self, req: dict) -> dict:
        st = self.ctx.port_stats()
        return {"pid": os.getpid(), "ports": [{"ifname": p.ifname, "plane": p.plane, "address": p.address,
                                              "admin": "ENABLED" if s["admin_up"] else "DISABLED",
                                              "link": "UP" if s["carrier"] else "DOWN",
                                              "carrier_downs": s["carrier_downs"]}
                                             for p, s in zip(self.ctx.ports, st, strict=True)],
                "qps": sorted(self.ctx.live_qps()), "host": self.ctx.resolver.host}

    def op_ev_list(self, req: dict) -> dict:
        qp = self._qp(req)
        out = []
        for e in qp.evs():
            e["address"] = self.ctx.ev_address(qp, e["ev"])
            out.append(e)
        return {"qpn": qp.qpn, "evs": out}

    def op_ev_set(self, req: dict) -> dict:
        qp = self._qp(req)
        state = req.get("state")
        if state not in (GOOD, DENIED):
            raise ErrnoError(errno.EINVAL, f"an EV can be set GOOD (allow) or DENIED (deny), not {state!r}")
        if "ev" in req:
            targets = [int(req["ev"])]
        elif "path" in req:
            targets = [e["ev"] for e in qp.evs() if self.ctx.ev_address(qp, e["ev"]) == req["path"]]
            if not targets:
                raise ErrnoError(errno.ENOENT, f"no EV of QP {qp.qpn} takes path {req['path']}")
        else:
            raise ErrnoError(errno.EINVAL, "name an ev or a path")
        for ev in targets:
            try:
                qp.set_ev_state(ev, EV_STATE_CODES[state])
            except ErrnoError as e:
                raise ErrnoError(e.errno, f"EV {ev:#x} of QP {qp.qpn}: {e.strerror or e}") from e
        return {"qpn": qp.qpn, "evs": targets, "state": state}

    def _drain(self) -> None:
        with self._lock:
            for ev in self.ctx.ev_events():
                self._seq += 1
                self._events.append({"seq": self._seq, **ev, "address": self._address_of(ev)})

    def _address_of(self, ev: dict) -> str | None:
        ref = self.ctx.live_qps().get(ev["qpn"])
        return self.ctx.ev_address(ref, ev["ev"]) if ref is not None else None

    def op_events(self, req: dict) -> dict:
        self._drain()
        after = int(req.get("after", 0))
        with self._lock:
            evs = [e for e in self._events if e["seq"] > after]
            # what a reader that asked from `after` missed because the queue overflowed
            first = evs[0]["seq"] if evs else self._seq + 1
            missed = max(0, first - after - 1)
            return {"events": evs, "dropped": missed, "last": self._seq}

    def _peer(self, dst) -> tuple[int, dict]:
        peers = self.ctx.peers()
        if dst is None:
            if len(peers) != 1:
                raise ErrnoError(errno.EINVAL, f"this context knows {len(peers)} peers: name one "
                                             f"({', '.join(str(p['host'] or i) for i, p in peers.items()) or 'none'})")
            return next(iter(peers.items()))
        dst = str(dst)
        for i, p in peers.items():
            addrs = set(p["ports"].values()) | {a for paths in p["paths"].values() for a in paths}
            if dst in (p["host"], f"#{i}") or dst in addrs:
                return i, p
        raise ErrnoError(errno.ENOENT, f"no peer {dst!r}: this context only probes peers it is connected to "
                                     f"({', '.join(str(p['host'] or f'#{i}') for i, p in peers.items()) or 'none'})")

    def op_probe(self, req: dict) -> dict:
        idx, peer = self._peer(req.get("dst"))
        timeout_ms = float(req.get("timeout_ms", 100))
        if not 0 < timeout_ms <= 10_000:
            raise ErrnoError(errno.EINVAL, f"timeout_ms must be in (0, 10000], not {timeout_ms}")
        local = {p.plane for p in self.ctx.ports}
        targets = []
        for plane, paths in sorted(peer["paths"].items()):
            if plane in local:
                for e in range(len(paths) if req.get("all_paths") else 1):
                    targets.append((idx, ev_make(plane, e)))
        res = self.ctx.probe(targets, timeout=timeout_ms / 1000)
        for r in res:
            r["address"] = self.ctx.peer_address(idx, r["ev"])
        return {"peer": idx, "host": peer["host"], "timeout_ms": timeout_ms, "probes": res}

    def op_port(self, req: dict) -> dict:
        plane, up = int(req["plane"]), bool(req["up"])
        if plane not in {p.plane for p in self.ctx.ports}:
            raise ErrnoError(errno.ENOENT, f"no port on plane {plane}")
        self.ctx.set_port(plane, up)
        return {"plane": plane, "admin": "ENABLED" if up else "DISABLED"}

    def op_cc_show(self, req: dict) -> dict:
        return {"profile": self.cc.query(), "effective": self.ctx.cc_config()}

    def op_cc_set(self, req: dict) -> dict:
        cfg = dict(req.get("config") or {})
        if self.cc.state == "ONLINE":
            self.cc.offline()
        self.cc.modify(req.get("algorithm", "uet-1.0-nscc"), {**self.cc.config, **cfg})
        self.cc.online()
        self.ctx.cc_overrides = dict(self.cc.config)
        return {"profile": self.cc.query(), "effective": self.ctx.cc_config()}

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        self._stop = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._thread.join(2)

    def __enter__(self) -> ControlServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve(ctx, out=None) -> ControlServer | None:
    """A ControlServer for ``ctx``, or None (with a note on ``out``) when the
    socket directory cannot be written (not root): the tools run on without."""
    try:
        return ControlServer(ctx)
    except OSError as e:
        if out is not None:
            print(f"note: no control endpoint ({e}); `mrc ctl` cannot reach this process", file=out)
        return None


class ControlClient:
    """Talk to a control endpoint: ``ControlClient(path).call("ev_list")``."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            self.sock.close()
            raise ErrnoError(errno.ENOENT, f"no control endpoint at {path} (is the MRC process running? "
                                         f"`mrc ctl list` shows the endpoints)") from e
        except PermissionError as e:
            self.sock.close()
            raise ErrnoError(errno.EPERM, f"cannot reach {path}: permission denied") from e
        self.f = self.sock.makefile("rwb")

    def call(self, op: str, **args) -> dict:
        self.f.write(json.dumps({"op": op, **args}).encode() + b"\n")
        self.f.flush()
        line = self.f.readline()
        if not line:
            raise ErrnoError(errno.EIO, f"the control endpoint at {self.path} closed the connection")
        ans = json.loads(line)
        if not ans.pop("ok"):
            raise ErrnoError(ans["errno"], ans["error"].split(": ", 1)[-1])
        return ans

    def close(self) -> None:
        self.f.close()
        self.sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def endpoints() -> list[str]:
    """Control sockets whose process is still alive."""
    d = ctl_dir()
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.endswith(".sock") and n[:-5].isdigit() and os.path.exists(f"/proc/{n[:-5]}"):
            out.append(os.path.join(d, n))
    return out

