"""Flows between fabric hosts, one process per host: the congestion bench's
worker (``python -m mrc.tools.workload``, run inside a host's namespace by
``mrc fabric exec HOST -- ...``; bench/congestion_bench.py drives it).

The worker speaks JSON lines: a request on standard input, its answer on
standard output, in this order:

1. ``{"setup": {"host", "transport", "msg", "slots", "flows": [{"id", "src",
   "dst", "addr"?, "port"?}], "qp": {"timeout"?, "cc"?}, "port_rate_bps"?,
   "spin_us"?}}``: make what this host's flows need (``spin_us``: how long
   the idle MRC engine polls before it sleeps, default 200; ``port_rate_bps``:
   its ports' pacing rate). MRC: per flow it sends, a QP, a CQ and a random source
   of ``msg * slots`` bytes; per flow it receives, a QP and a region as big.
   TCP (``tcp_cubic``, ``tcp_bbr``) and ``mptcp``: a listening socket per
   flow it receives (on ``port``). Answers ``{"infos": {id: ...}}``: what the
   other end needs (QP, region and paths; or nothing).
2. ``{"connect": {id: info}}``: connect every QP (or socket) to its peer's.
   Answers ``{"connected": true}``.
3. ``{"start": {"at_ns", "seconds"}}``: from CLOCK_MONOTONIC ``at_ns`` on
   (every worker on this machine shares the clock), every flow this host
   sends writes one ``msg``-byte message at a time (the next slot of the
   remote region), waits for its completion (TCP: for the receiver's one-byte
   answer once the whole message is in), and goes on for ``seconds``.
   Answers ``{"result": {id: {"messages": [[post_s, done_s], ...],
   "timeline": [[t_s, bytes], ...], "cwnd": [[t_s, bytes], ...], "stats",
   "sha256", "written", "bytes"}}, "cpu_share"}``, times from ``at_ns``;
   ``sha256`` is that of the first ``written`` bytes of the source (the
   slots the flow filled: what its receiver's region must hold); ``cpu_share``:
   this process's CPU time (engine thread included) over the run's wall time.
4. ``{"hash": {id: nbytes}}``: the SHA-256 of the first ``nbytes`` of each
   region this host received into. Answers ``{"hashes": {id: hex}}``.
5. ``{"bye": true}``: free everything and exit.

Any error is answered ``{"error": "..."}`` and the worker exits 1.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import sys
import threading
import time

TRANSPORTS = ("mrc", "mrc_auth", "mrc_encrypt", "tcp_cubic", "tcp_bbr", "mptcp")
#: the pre-shared key of a bench's secured flows: it salts each flow's own X25519 exchange, whose public
#: keys travel in the infos the driver relays (a driver that relays them learns no flow's keys)
BENCH_PSK = b"mrc workload: one bench's flows"
MAX_MSG, MAX_SLOTS, MAX_FLOWS, MAX_SECONDS = 256 << 20, 64, 4096, 3600
IPPROTO_MPTCP = 262
SAMPLE_S = 0.05


def _send(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _recv() -> dict:
    line = sys.stdin.readline()
    if not line:
        raise EOFError("the bench went away")
    return json.loads(line)


class _Flow:
    """One flow's end on this host."""

    def __init__(self, spec: dict, me: str) -> None:
        self.id, self.src, self.dst = spec["id"], spec["src"], spec["dst"]
        self.sends = self.src == me
        self.spec = spec
        self.messages: list[list[float]] = []
        self.done_bytes = 0
        self.timeline: list[list[float]] = []
        self.cwnd: list[list[float]] = []
        self.error: str | None = None


def _int(d: dict, key: str, lo: int, hi: int, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{key} must be an integer from {lo} to {hi}, not {str(v)[:40]!r}")
    return v


def _flows(setup: dict, me: str) -> list[_Flow]:
    """This host's flows, every field checked."""
    flows = setup.get("flows")
    if not isinstance(flows, list) or len(flows) > MAX_FLOWS:
        raise ValueError(f"flows must be a list of at most {MAX_FLOWS}")
    out = []
    for f in flows:
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("src", "dst")):
            raise ValueError("a flow needs src and dst host names")
        _int(f, "id", 0, MAX_FLOWS)
        if f.get("port") is not None:
            _int(f, "port", 1, 65535)
        if me in (f["src"], f["dst"]):
            out.append(_Flow(f, me))
    return out


class Worker:
    def __init__(self, setup: dict) -> None:
        if not isinstance(setup, dict) or not isinstance(setup.get("host"), str):
            raise ValueError("setup needs this worker's host name")
        self.host = setup["host"]
        self.transport = setup.get("transport")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {str(self.transport)[:40]!r}: use one of {', '.join(TRANSPORTS)}")
        self.mrc = self.transport.startswith("mrc")
        self.security = self.transport[4:] or "off"  # mrc_auth, mrc_encrypt: authenticated MRC
        # memory: a source or a region of msg x slots per flow
        self.msg, self.slots = _int(setup, "msg", 1, MAX_MSG), _int(setup, "slots", 1, MAX_SLOTS, 4)
        self.flows = _flows(setup, self.host)
        self.ctx = None
        self.socks: list[socket.socket] = []
        self.qp_attr = setup.get("qp", {})
        self.port_rate = _int(setup, "port_rate_bps", 0, 10**13, 0)
        if 0 < self.port_rate < 8000:
            raise ValueError("port_rate_bps must be 0 (no limit) or at least 8000")
        self.spin_us = _int(setup, "spin_us", 0, 1_000_000, 200)  # how long an idle engine polls before it sleeps

    # ------------------------------------------------------------ setup
    def setup(self) -> dict:
        """Make this host's endpoints for its flows; returns what peers need to connect."""
        infos = {}
        if self.mrc:
            from mrc import secure
            from mrc.cm import info_to_json
            from mrc.paths import from_environment
            from mrc.verbs import Context, QPAttr

            self.ctx = ctx = Context(resolver=from_environment(), port_rate_bps=self.port_rate, spin_us=self.spin_us)
            for f in self.flows:
                size = self.msg * self.slots
                attr = QPAttr(**{k: v for k, v in self.qp_attr.items() if k != "cc"},
                              cc=dict(self.qp_attr.get("cc", {})))
                if f.sends:
                    f.buf = bytearray(random.Random(f.id).randbytes(size))
                    f.mr = ctx.reg_mr(f.buf)
                    f.cq = ctx.create_cq()
                    f.qp = ctx.create_qp(cq=f.cq, attr=attr)
                else:
                    f.buf = bytearray(size)
                    f.mr = ctx.reg_mr(f.buf, remote_write=True)
                    f.qp = ctx.create_qp(attr=attr)
                infos[f.id] = info_to_json(ctx.local_info(f.qp, f.mr))
                if self.security != "off":
                    f.kx = secure.keypair()
                    infos[f.id]["kx"] = f.kx[1].hex()
        else:
            proto = IPPROTO_MPTCP if self.transport == "mptcp" else 0
            for f in self.flows:
                if not f.sends:
                    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("::", f.spec["port"]))
                    s.listen(1)
                    f.listener = s
                    self.socks.append(s)
                infos[f.id] = {}
        return {"infos": infos}

    def connect(self, peers: dict) -> dict:
        """Connect the flows to their peers."""
        if self.mrc:
            from mrc.cm import info_from_json

            for f in self.flows:
                info = info_from_json(peers[str(f.id)])
                f.qp.connect(info, self._keys(f, info, peers[str(f.id)]))
                f.remote = self.ctx.resolve(info)
            return {"connected": True}
        proto = IPPROTO_MPTCP if self.transport == "mptcp" else 0
        cc = {"tcp_cubic": b"cubic", "tcp_bbr": b"bbr"}.get(self.transport)
        for f in self.flows:
            if f.sends:
                s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto)
                if cc:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.connect((f.spec["addr"], f.spec["port"]))
                f.sock = s
                self.socks.append(s)
        for f in self.flows:
            if not f.sends:
                f.listener.settimeout(30)
                f.sock, _ = f.listener.accept()
                f.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.socks.append(f.sock)
        return {"connected": True}

    def _keys(self, f, info, peer: dict):
        """A secured flow's keys: its two ends' X25519 exchange, the sender the initiator."""
        if self.security == "off":
            return None
        from mrc import secure
        from mrc.cm import _hex

        theirs = _hex(peer.get("kx"), 32, 32, f"flow {f.id}'s kx")
        priv, mine = f.kx
        pubs, qpns = ((mine, theirs), (f.qp.qpn, info.qpn)) if f.sends else ((theirs, mine), (info.qpn, f.qp.qpn))
        seen = b"mrc workload flow " + f.id.to_bytes(4, "big") + b"".join(pubs) + \
            b"".join(q.to_bytes(4, "big") for q in qpns)
        return secure.derive(priv, theirs, BENCH_PSK, seen, f.sends, self.security)

    # ------------------------------------------------------------ run
    def _mrc_send(self, f: _Flow, t0: float, end: float) -> None:
        i = 0
        while time.monotonic() < end:
            off = (i % self.slots) * self.msg
            posted = time.monotonic()
            f.qp.post_write(f.mr, off, self.msg, f.remote.addr + off, f.remote.rkey, wr_id=i)
            wc = f.cq.wait(1, timeout=60)[0]
            if not wc.ok:
                f.error = f"message {i} failed: {wc.status_words}"
                return
            done = time.monotonic()
            f.messages.append([round(posted - t0, 6), round(done - t0, 6)])
            f.done_bytes += self.msg
            i += 1

    def _tcp_send(self, f: _Flow, t0: float, end: float) -> None:
        ack = bytearray(1)
        i = 0
        while time.monotonic() < end:
            off = (i % self.slots) * self.msg
            posted = time.monotonic()
            f.sock.sendall(memoryview(self._src(f))[off:off + self.msg])
            if f.sock.recv_into(ack, 1) != 1:
                f.error = "the receiver closed the connection"
                return
            done = time.monotonic()
            f.messages.append([round(posted - t0, 6), round(done - t0, 6)])
            f.done_bytes += self.msg
            i += 1
        f.sock.shutdown(socket.SHUT_WR)

    def _src(self, f: _Flow) -> bytearray:
        if not hasattr(f, "buf"):
            f.buf = bytearray(random.Random(f.id).randbytes(self.msg * self.slots))
        return f.buf

    def _tcp_recv(self, f: _Flow) -> None:
        f.buf = bytearray(self.msg * self.slots)
        view = memoryview(f.buf)
        i = 0
        while True:
            off, got = (i % self.slots) * self.msg, 0
            while got < self.msg:
                n = f.sock.recv_into(view[off + got:off + self.msg])
                if not n:
                    return
                got += n
            f.sock.sendall(b"\1")
            i += 1

    def start(self, at_ns: int, seconds: float) -> dict:
        """Run the flows from ``at_ns`` for ``seconds``; returns their figures."""
        t0 = at_ns / 1e9
        end = t0 + seconds
        threads, sending = [], []
        for f in self.flows:
            if f.sends:
                fn = self._mrc_send if self.mrc else self._tcp_send
                threads.append(threading.Thread(target=self._guard, args=(fn, f, t0, end), daemon=True))
                sending.append(threads[-1])
            elif not self.mrc:
                threads.append(threading.Thread(target=self._guard, args=(self._tcp_recv, f), daemon=True))
        from mrc.units import gc_paused

        with gc_paused():  # a full collection would stall every flow's thread
            while time.monotonic() < t0:
                time.sleep(min(0.01, max(0.0, t0 - time.monotonic())))
            cpu0 = time.process_time()  # this process: the engine thread and the flows' threads
            for th in threads:
                th.start()
            senders = [f for f in self.flows if f.sends]
            while (time.monotonic() < end or any(th.is_alive() for th in threads)) and time.monotonic() < end + 60:
                now = time.monotonic()
                for f in senders:
                    f.timeline.append([round(now - t0, 4), f.done_bytes])
                    if self.mrc:
                        f.cwnd.append([round(now - t0, 4), f.qp.stats()["cwnd"]])
                if now > end and not any(th.is_alive() for th in sending) and self.mrc:
                    break
                time.sleep(SAMPLE_S)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        out = {}
        for f in senders:
            r = {"messages": f.messages, "timeline": f.timeline, "cwnd": f.cwnd, "bytes": f.done_bytes,
                 "error": f.error,
                 "written": self._written(f),
                 "sha256": hashlib.sha256(memoryview(self._src(f))[:self._written(f)]).hexdigest()}
            if self.mrc:
                st = f.qp.stats()
                r["stats"] = {k: st[k] for k in ("tx_packets", "rtx_packets", "rtx_bytes", "losses", "timeouts",
                                                 "ecn_marks", "trims", "probes_tx", "cwnd", "srtt_ns")}
                r["qp_error"] = f.qp.state != "RTS"
            out[f.id] = r
        return {"result": out, "cpu_share": round(cpu / wall, 4) if wall > 0 else 0.0}

    def _written(self, f: _Flow) -> int:
        return min(len(f.messages), self.slots) * self.msg

    def _guard(self, fn, f: _Flow, *args) -> None:
        try:
            fn(f, *args)
        except Exception as e:  # reported with the flow's result
            f.error = f"{type(e).__name__}: {e}"

    def hashes(self, want: dict) -> dict:
        """SHA-256 of what each flow's region received."""
        if not isinstance(want, dict):
            raise ValueError("hash takes {flow id: bytes}")
        out = {}
        for f in self.flows:
            if not f.sends and str(f.id) in want:
                n = _int(want, str(f.id), 0, len(f.buf))
                out[f.id] = hashlib.sha256(memoryview(f.buf)[:n]).hexdigest()
        return {"hashes": out}

    def close(self) -> None:
        """Close every socket, QP and context."""
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        if self.ctx is not None:
            self.ctx.close()


def main() -> int:
    """Serve requests, one JSON object per line on stdin, until EOF."""
    w = None
    try:
        while True:
            req = _recv()
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
            if "setup" in req:
                if w is not None:
                    raise ValueError("setup comes once")
                w = Worker(req["setup"])
                _send(w.setup())
            elif "bye" in req:
                return 0
            elif w is None:
                raise ValueError(f"{sorted(req)[:3]} before setup")
            elif "connect" in req:
                _send(w.connect(req["connect"]))
            elif "start" in req:
                st = req["start"]
                seconds = st.get("seconds") if isinstance(st, dict) else None
                if not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_SECONDS:
                    raise ValueError(f"start needs seconds, more than 0 and at most {MAX_SECONDS}")
                _send(w.start(_int(st, "at_ns", 0, 1 << 63), float(seconds)))
            elif "hash" in req:
                _send(w.hashes(req["hash"]))
            else:
                raise ValueError(f"unknown request {sorted(req)}")
    except Exception as e:
        _send({"error": f"{type(e).__name__}: {e}"})
        return 1
    finally:
        if w is not None:
            w.close()


if __name__ == "__main__":
    sys.exit(main())
