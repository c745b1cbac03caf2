"""The control endpoint: a context's controller API from another process.

``ControlServer(ctx)`` serves a UNIX stream socket (by default
``/run/mrc/ctl/<pid>.sock``, or ``<pid>-<tag>.sock`` for each of several
contexts in one process; ``MRC_CTL_DIR`` moves the directory). Each
request is one JSON object on a line, ``{"op": ..., ...}``; each answer is
one line, ``{"ok": true, ...}`` or ``{"ok": false, "errno": N, "error":
"..."}``, each at most ``MAX_LINE`` bytes. The socket is created mode 0600
(its owner alone may connect), or 0660 for a group (``group=`` or
``$MRC_CTL_GROUP``) whose members may query; only root or a process with
CAP_NET_ADMIN may modify, as only the node's controller may in the OCP API
(checked on the connecting process through SO_PEERCRED and a pidfd, so a
process that exits cannot lend its PID to another). At most ``MAX_CLIENTS``
connections are served at once (the next gets EBUSY) and a silent one is
closed after ``IDLE_TIMEOUT`` s. ``mrc ctl`` is the client. A starting
server removes the sockets that killed processes left behind
(``sweep_stale``).

Operations: ``info``; ``qps`` (each QP's window, RTTs and counters);
``ev_list`` [qpn]; ``ev_set`` qpn, state (DENIED or
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
import threading

from mrc.core import EV_STATE_CODES
from mrc.ctl.profiles import DENIED, GOOD, CCProfile
from mrc.ctl.sockets import _TAG, bind_socket, ctl_dir, peer_privileged, sweep_stale
from mrc.errors import ErrnoError
from mrc.wire import ev_make

MODIFY = {"ev_set", "port", "cc_set"}
MAX_LINE = 64 << 10      # bytes in one request
MAX_ANSWER = 16 << 20    # bytes in one answer a client reads (an ev_list of 4,096 EVs is ~0.5 MB)
MAX_CLIENTS = 16         # connections served at once
IDLE_TIMEOUT = 300.0     # seconds a connection may stay silent


def _lines(conn: socket.socket):
    """Requests, one per line; ErrnoError EMSGSIZE for a line over MAX_LINE
    (the connection cannot be resynchronised after it)."""
    buf = b""
    while True:
        while b"\n" not in buf:
            if len(buf) > MAX_LINE:
                raise ErrnoError(errno.EMSGSIZE, f"a request over {MAX_LINE} bytes")
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        if len(line) > MAX_LINE:
            raise ErrnoError(errno.EMSGSIZE, f"a request over {MAX_LINE} bytes")
        yield line


def no_constant(name: str):
    """json.loads' parse_constant for input from others: NaN and Infinity are refused."""
    raise ValueError(f"{name} is not a number a request may carry")


class ControlServer:
    """Serve ``ctx``'s controller API on a UNIX socket (a context manager).
    ``group``: a group name or id whose members may query (default
    ``$MRC_CTL_GROUP``, else the owner alone)."""

    def __init__(self, ctx, path: str | None = None, event_depth: int = 4096, group=None,
                 role: str | None = None) -> None:
        self.ctx = ctx
        #: what the process is, for `mrc ctl list`, the metrics and the dash ("rank 2 of job j1")
        self.role = role
        self.path = path or os.path.join(ctl_dir(), f"{os.getpid()}.sock")
        # CC profile 0: what QPs created without a cc_profile_id get (``cc set`` changes it)
        self.cc = ctx.profiles.cc.get(0) or ctx.profiles.add(CCProfile(0, "uet-1.0-nscc", {}))
        self._events: collections.deque = collections.deque(maxlen=event_depth)
        self._seq = 0
        self._lock = threading.Lock()
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        self._sock = bind_socket(self.path, group if group is not None else os.environ.get("MRC_CTL_GROUP"),
                                 MAX_CLIENTS)
        self.swept = sweep_stale(os.path.dirname(self.path) or ".")
        self._stop = False
        self._live: dict[threading.Thread, socket.socket] = {}  # client threads and their connections
        self._thread = threading.Thread(target=self._serve, name="mrc-ctl", daemon=True)
        self._thread.start()
        ctx.close_hooks.append(self.close)  # the context waits for our threads before it is freed

    # ------------------------------------------------------------ serving
    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if not self._clients.acquire(blocking=False):
                self._answer(conn, {"ok": False, "errno": errno.EBUSY,
                                    "error": f"EBUSY: {MAX_CLIENTS} clients are connected already; try again"})
                conn.close()
                continue
            th = threading.Thread(target=self._client, args=(conn,), name="mrc-ctl-client", daemon=True)
            with self._lock:
                if self._stop:
                    self._clients.release()
                    conn.close()
                    return
                self._live[th] = conn
            th.start()

    @staticmethod
    def _answer(conn: socket.socket, ans: dict) -> bool:
        try:
            conn.settimeout(1.0)  # a client that does not read cannot hold the thread
            conn.sendall(json.dumps(ans).encode() + b"\n")
            return True
        except OSError:
            return False

    def _client(self, conn: socket.socket) -> None:
        try:
            with conn:
                privileged = peer_privileged(conn)
                conn.settimeout(IDLE_TIMEOUT)
                try:
                    for line in _lines(conn):
                        if not self._answer(conn, self._request(line, privileged)):
                            return
                        conn.settimeout(IDLE_TIMEOUT)
                except ErrnoError as e:  # a line too long: say so and hang up
                    self._answer(conn, {"ok": False, "errno": e.errno, "error": str(e)})
                except OSError:  # silent too long, or gone
                    return
        finally:
            with self._lock:
                self._live.pop(threading.current_thread(), None)
            self._clients.release()

    def _request(self, line: bytes, privileged: bool) -> dict:
        """One request's answer: every failure is an errno."""
        try:
            req = json.loads(line, parse_constant=no_constant)
            if not isinstance(req, dict):
                raise ErrnoError(errno.EINVAL, "a request is a JSON object")
            return {"ok": True, **self.handle(req, privileged)}
        except ErrnoError as e:
            return {"ok": False, "errno": e.errno, "error": str(e)}
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError, AttributeError) as e:
            return {"ok": False, "errno": errno.EINVAL, "error": f"EINVAL: bad request: {str(e)[:200]}"}
        except Exception as e:  # a bug of ours: the caller still gets an errno, the server goes on
            return {"ok": False, "errno": errno.EIO, "error": f"EIO: internal error: {type(e).__name__}: {e}"}

    def handle(self, req: dict, privileged: bool = True) -> dict:
        """Answer one request; a modification needs ``privileged``."""
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
        """The process, its ports and their state, its QPs."""
        st = self.ctx.port_stats()
        ports = [{"ifname": p.ifname, "plane": p.plane, "address": p.address,
                  "admin": "ENABLED" if s["admin_up"] else "DISABLED", "link": "UP" if s["carrier"] else "DOWN",
                  "carrier_downs": s["carrier_downs"]} for p, s in zip(self.ctx.ports, st, strict=True)]
        return {"pid": os.getpid(), "role": self.role, "ports": ports,
                "qps": sorted(self.ctx.live_qps()), "host": self.ctx.resolver.host,
                "topology": getattr(self.ctx.resolver, "name", None),
                "peers": len(self.ctx.peers()), "regions": self.ctx.live_regions()}

    def op_qps(self, req: dict) -> dict:
        """Every live QP's transport state: NSCC window and in flight, RTTs
        (smoothed, lowest, the base NSCC works with), losses and signals."""
        keys = ("state_name", "cwnd", "inflight", "srtt_ns", "min_rtt_ns", "base_rtt_ns", "tx_bytes", "rtx_bytes",
                "losses", "timeouts", "ecn_marks", "trims", "good_evs", "bad_evs")
        out = []
        for qpn, qp in sorted(self.ctx.live_qps().items()):
            st = qp.stats()
            out.append({"qpn": qpn, **{k: st[k] for k in keys}})
        return {"qps": out}

    def op_metrics(self, req: dict) -> dict:
        """Everything mrc.ctl.metrics exports: each QP's counters, window, RTTs,
        state and EVs by plane and state; drops by reason; the ports; CQ overflows."""
        qps = []
        for qpn, qp in sorted(self.ctx.live_qps().items()):
            st = qp.stats()
            evs: dict[str, dict[str, int]] = {}
            for e in qp.evs():
                by = evs.setdefault(str(e["plane"]), {})
                by[e["state"]] = by.get(e["state"], 0) + 1
            qps.append({"qpn": qpn, "state": st["state_name"], "evs": evs,
                        **{k: v for k, v in st.items() if isinstance(v, int) and k != "state"}})
        ports = [{"ifname": p.ifname, "plane": p.plane, **s} for p, s in zip(self.ctx.ports, self.ctx.port_stats(),
                                                                              strict=True)]
        return {"pid": os.getpid(), "role": self.role, "host": self.ctx.resolver.host, "qps": qps,
                "drops": self.ctx.drops(),
                "ports": ports, "cq_overflow": self.ctx.stats()["cq_overflow"]}

    def op_ev_list(self, req: dict) -> dict:
        """Every EV of a QP with its state and slot."""
        qp = self._qp(req)
        out = []
        for e in qp.evs():
            e["address"] = self.ctx.ev_address(qp, e["ev"])
            out.append(e)
        return {"qpn": qp.qpn, "evs": out}

    def op_ev_set(self, req: dict) -> dict:
        """Deny or allow an EV (or every EV of a plane or path)."""
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
        """EV and port events after a sequence number."""
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
        """Probe a peer's EVs; each answer's port and RTT."""
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
        """Set a port's admin state."""
        plane, up = int(req["plane"]), bool(req["up"])
        if plane not in {p.plane for p in self.ctx.ports}:
            raise ErrnoError(errno.ENOENT, f"no port on plane {plane}")
        self.ctx.set_port(plane, up)
        return {"plane": plane, "admin": "ENABLED" if up else "DISABLED"}

    def op_cc_show(self, req: dict) -> dict:
        """The CC profile and what each QP runs."""
        return {"profile": self.cc.query(), "effective": self.ctx.cc_config()}

    def op_cc_set(self, req: dict) -> dict:
        """Change the CC profile's configuration (taken offline and back)."""
        cfg = dict(req.get("config") or {})
        if self.cc.state == "ONLINE":
            self.cc.offline()
        self.cc.modify(req.get("algorithm", "uet-1.0-nscc"), {**self.cc.config, **cfg})
        self.cc.online()
        self.ctx.cc_overrides = dict(self.cc.config)
        return {"profile": self.cc.query(), "effective": self.ctx.cc_config()}

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        """Stop serving, remove the socket, and wait for the client threads
        (each finishes the request it is in): none touches the context after."""
        with self._lock:
            if self._stop:
                return
            self._stop = True
            live = dict(self._live)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:  # gone already: another server's sweep found it refusing once closed
            pass
        self._thread.join(2)
        for conn in live.values():
            try:
                conn.shutdown(socket.SHUT_RDWR)  # a thread waiting for the next request wakes and leaves
            except OSError:
                pass
        for th in live:
            if th is not threading.current_thread():
                th.join()
        if self.close in self.ctx.close_hooks:
            self.ctx.close_hooks.remove(self.close)

    def __enter__(self) -> ControlServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve(ctx, out=None, tag: str | None = None, role: str | None = None) -> ControlServer | None:
    """A ControlServer for ``ctx``, or None (with a note on ``out``) when the
    socket directory cannot be written (not root): the tools run on without.
    ``tag`` names one of several contexts of this process (``<pid>-<tag>.sock``);
    ``role`` says what the process is ("mrc perf server", "rank 2 of job j1")."""
    if tag is not None and not _TAG.fullmatch(tag):
        raise ValueError(f"a control socket tag is 1-32 letters, digits, '_' or '.', not {tag!r}")
    try:
        return ControlServer(ctx, os.path.join(ctl_dir(), f"{os.getpid()}-{tag}.sock") if tag else None,
                             role=role)
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
        """One request's answer; ErrnoError for the endpoint's refusal, EIO for
        an answer that is not one (another program on the socket), EMSGSIZE
        for one over MAX_ANSWER bytes."""
        self.f.write(json.dumps({"op": op, **args}).encode() + b"\n")
        self.f.flush()
        line = self.f.readline(MAX_ANSWER + 1)
        if not line:
            raise ErrnoError(errno.EIO, f"the control endpoint at {self.path} closed the connection")
        if not line.endswith(b"\n"):
            raise ErrnoError(errno.EMSGSIZE, f"{self.path} answered over {MAX_ANSWER} bytes")
        try:
            ans = json.loads(line, parse_constant=no_constant)
        except (ValueError, RecursionError):
            ans = None
        if not isinstance(ans, dict) or not isinstance(ans.get("ok"), bool):
            raise ErrnoError(errno.EIO, f"{self.path} does not answer as a control endpoint does")
        if not ans.pop("ok"):
            code, text = ans.get("errno"), ans.get("error")
            if not isinstance(code, int) or not isinstance(text, str):
                raise ErrnoError(errno.EIO, f"{self.path} refused with a malformed error")
            raise ErrnoError(code, text.split(": ", 1)[-1])
        return ans

    def close(self) -> None:
        """Close the connection."""
        self.f.close()
        self.sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
