"""``mrc perf``: RDMA WRITE / WRITE_IMM bandwidth and latency over MRC.

    mrc fabric exec h2 -- mrc perf server
    mrc fabric exec h0 -- mrc perf client h2 --sizes 4K,64K,1M --iters 200 --verify --json
    mrc perf server --topology lab.json --host b         # any hosts a topology file describes
    mrc perf client b --topology lab.json --host a --verify

The client writes ``iters`` messages of each size into the server's
registered buffer (``--depth`` in flight), then, with ``--verify``, asks the
server to hash what landed and compares it with its own source.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import threading
import time

from mrc import cm
from mrc._dp import ffi, lib
from mrc.ctl import endpoint
from mrc.errors import ErrnoError, MrcError, UsageError
from mrc.paths import PathResolver, from_environment
from mrc.ports import Port, discover_ports
from mrc.units import gc_paused, parse_rate, parse_size, percentile  # noqa: F401 (mrc.tools.perf's names too)
from mrc.verbs import Context, QPAttr


class _Receiver(threading.Thread):
    """Keeps receives posted and counts WRITE_IMM completions (server side)."""

    def __init__(self, ctx: Context, cq, qps: list, depth: int) -> None:
        super().__init__(daemon=True)
        self.ctx, self.cq, self.depth = ctx, cq, depth
        self.qps = {q.qpn: q for q in qps}
        self.count = 0
        self.errors = 0
        self.stop = threading.Event()
        self.cv = threading.Condition()

    def run(self) -> None:
        cq = self.cq
        for qp in self.qps.values():
            qp.post_recv(list(range(self.depth)))
        while not self.stop.is_set():
            wcs = cq.poll()
            if not wcs:
                cq.get_event(0.01)
                continue
            ok = [w for w in wcs if w.ok]
            self.errors += len(wcs) - len(ok)
            for qpn, qp in self.qps.items():
                again = [w.wr_id for w in ok if w.qpn == qpn]
                if again:
                    qp.post_recv(again)
            with self.cv:
                self.count += len(ok)
                self.cv.notify_all()

    def wait_for(self, n: int, timeout: float) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: self.count >= n, timeout)


def _write_template(qp, mr, length: int, remote_addr: int, rkey: int):
    """A WRITE_IMM work request of ``length`` bytes from ``mr`` (latency mode)."""
    wr = ffi.new("struct mrc_wr *")
    wr.opcode = lib.MRC_WR_WRITE_IMM
    wr.num_sge = 1
    wr.sg_list[0].addr, wr.sg_list[0].length, wr.sg_list[0].lkey = mr.addr, length, mr.lkey
    wr.remote_addr, wr.rkey = remote_addr, rkey
    return wr


class _Echo(threading.Thread):
    """Latency mode (server side): every WRITE_IMM that arrives is written
    straight back, same length and immediate, into the client's echo region,
    by a C loop (csrc/bench/pingpong.c) that progresses the NIC itself for
    50 us, then sleeps on the CQ's channel."""

    def __init__(self, ctx: Context, cq, qp, mr, echo: tuple[int, int], depth: int) -> None:
        super().__init__(daemon=True)
        self.cq, self.qp, self.depth = cq, qp, depth
        self.tmpl = _write_template(qp, mr, mr.length, *echo)
        self.count = self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        self.qp.post_recv(list(range(self.depth)))
        while not self.stop.is_set():
            n = lib.mrc_bench_pingpong(self.qp.dev.handle(), self.qp.qpn, self.cq.cqn, self.tmpl, 1 << 30, 1,
                                       100_000_000, ffi.NULL)  # back every 100 ms idle to look at stop
            if n < 0:
                self.errors += 1
                return
            self.count += n


SERVER_MAX_SIZE = 1 << 30    # bytes of remote-writable memory one client may ask for
SERVER_MAX_QPS = 64          # QPs one client may ask for
IDLE_TIMEOUT = 60.0          # seconds a connected client may stay silent
TICK = 10.0                  # the client says it is alive this often during a run


def _client_params(hello: dict, max_size: int, max_qps: int) -> tuple[int, bool, list]:
    """The size, WRITE_IMM flag and extra QPs a client asks for, within this
    server's bounds (ErrnoError otherwise: the client is told why). Its echo
    region (latency mode) is read by :func:`_echo_params`."""
    params = hello.get("params", {})
    if not isinstance(params, dict):
        raise ErrnoError(errno.EPROTO, "params must be an object")
    size = params.get("max_size", 1 << 20)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ErrnoError(errno.EINVAL, f"max_size must be a positive integer, not {str(size)[:40]!r}")
    if size > max_size:
        raise ErrnoError(errno.EMSGSIZE, f"the client asks for {size} bytes of memory; this server allows at most "
                                         f"{max_size} (its --max-size)")
    extra = hello.get("qps", [])
    if not isinstance(extra, list):
        raise ErrnoError(errno.EPROTO, "qps must be a list")
    if 1 + len(extra) > max_qps:
        raise ErrnoError(errno.E2BIG, f"the client asks for {1 + len(extra)} QPs; this server allows at most "
                                      f"{max_qps} (its --max-qps)")
    return size, bool(params.get("imm")), [cm.info_from_json(i) for i in extra]


def _echo_params(hello: dict) -> tuple[int, int] | None:
    """Latency mode: the client's region that echoes go to (its address and
    rkey; the client's own engine checks every write against them)."""
    echo = hello.get("params", {}).get("echo")
    if echo is None:
        return None
    if not (isinstance(echo, dict) and all(isinstance(echo.get(k), int) and not isinstance(echo.get(k), bool)
                                           for k in ("addr", "rkey"))
            and 0 <= echo["addr"] < 1 << 64 and 0 <= echo["rkey"] < 1 << 32):
        raise ErrnoError(errno.EINVAL, "echo must be {addr, rkey}: 64- and 32-bit unsigned integers")
    return echo["addr"], echo["rkey"]


def _connect(qp, conn: cm.Connection, peer) -> None:
    """Connect ``qp`` to ``peer``, under the keys of the setup when it is secured."""
    qp.connect(peer, conn.keys(qp.qpn, peer.qpn))


def _serve_client(ctx: Context, conn: cm.Connection, max_size: int, max_qps: int, idle_timeout: float) -> None:
    """One client from hello to bye; everything it was given is freed on the
    way out, whatever happens."""
    size, imm, extra = _client_params(conn.hello, max_size, max_qps)
    echo = _echo_params(conn.hello)
    if echo and extra:
        raise ErrnoError(errno.EINVAL, "latency mode runs over one QP")
    qps: list = []
    rx = mr = cq = None
    try:
        buf = bytearray(size)
        mr = ctx.reg_mr(buf, remote_write=True)
        cq = ctx.create_cq()
        for peer in [conn.peer, *extra]:  # one QP per client QP (--qps), all writing into the same buffer
            qp = ctx.create_qp(cq=cq, attr=QPAttr(rq_depth=1024) if imm or echo else QPAttr())
            qps.append(qp)
            _connect(qp, conn, peer)
        if echo:
            rx = _Echo(ctx, cq, qps[0], mr, echo, 64)
            rx.start()
        elif imm:
            rx = _Receiver(ctx, cq, qps, 512)
            rx.start()
        conn.reply(ctx.local_info(qps[0], mr), qps=[cm.info_to_json(ctx.local_info(q, mr)) for q in qps[1:]])
        conn.replied = True
        base = 0
        while True:
            msg = conn.recv(timeout=idle_timeout)
            if "check" in msg:
                n, length, want = msg.get("iters"), msg.get("check"), msg.get("sha256")
                if not (isinstance(n, int) and isinstance(length, int) and 0 <= length <= size and 0 <= n < 1 << 40
                        and isinstance(want, str)):
                    raise ErrnoError(errno.EPROTO, "a check needs iters, check (at most the buffer) and sha256")
                if isinstance(rx, _Receiver):  # an echo (latency mode) has nothing to wait for
                    rx.wait_for(base + n, 30)
                    base = rx.count
                got = hashlib.sha256(memoryview(buf)[:length]).hexdigest()
                conn.send({"verified": got == want, "recv_completions": rx.count if rx else 0})
            elif "bye" in msg:
                return
    finally:
        if rx:
            rx.stop.set()
            rx.join()
        for qp in qps:
            qp.destroy()
        if cq is not None:
            cq.destroy()
        if mr is not None:
            mr.close()


def _ports(ports):
    """``--ports``' [(ifname, plane), ...] as the Context takes them (None: the topology's)."""
    return discover_ports(ports) if ports and not isinstance(ports[0], Port) else ports


def _spin(spin_us: float | None) -> dict:
    """The engine's idle spin (Context's spin_us), if one was asked for."""
    if spin_us is None:
        return {}
    if not 0 <= spin_us <= 1_000_000:
        raise UsageError(f"--spin-us must be 0 to 1000000, got {spin_us:g}")
    return {"spin_us": spin_us}


def _open(ports, resolver: PathResolver, spin_us: float | None, packets_per_buffer: int = 1) -> tuple:
    """A client's context and its control endpoint (None where there is none)."""
    ctx = Context(_ports(ports), resolver=resolver, packets_per_buffer=packets_per_buffer, **_spin(spin_us))
    return ctx, endpoint.serve(ctx, sys.stderr, role="mrc perf client")


def _close(ctx: Context, ctl) -> None:
    if ctl:
        ctl.close()
    ctx.close()


def default_bind(resolver: PathResolver) -> str | None:
    """This host's management address, if the topology names it."""
    host = getattr(resolver, "host", None)
    return resolver.mgmt_address(host) if host else None


def server(port: int = cm.DEFAULT_PORT, once: bool = True, out=sys.stderr, resolver: PathResolver | None = None,
           ports=None, bind: str | None = None, max_size: int = SERVER_MAX_SIZE, max_qps: int = SERVER_MAX_QPS,
           psk: bytes | None = None, idle_timeout: float = IDLE_TIMEOUT, spin_us: float | None = None,
           security: str = "off", packets_per_buffer: int = 1) -> int:
    """Serve clients one after the other (``once``: until one got through
    setup). A client that breaks the rules is told why, logged in a line and
    dropped; the server goes on. Returns 0, or 1 when ``once`` and its client
    failed after setup."""
    resolver = resolver or from_environment()
    ctx = Context(_ports(ports), resolver=resolver, packets_per_buffer=packets_per_buffer, **_spin(spin_us))
    ctl = endpoint.serve(ctx, out, role="mrc perf server")
    where = bind or default_bind(resolver)
    try:
        lst = cm.listen(where or "::", port, psk, security=security)
    except BaseException:
        if ctl:
            ctl.close()
        ctx.close()
        raise
    note = "" if where else " (all addresses: no topology names this host's management address; give --bind)"
    print(f"mrc perf server: {len(ctx.ports)} ports, waiting on [{where or '::'}]:{port}{note}"
          f"{'; clients must hold the pre-shared key' if psk else ''}"
          f"{f'; QPs secured ({security})' if security != 'off' else ''}"
          f"{f'; control endpoint {ctl.path}' if ctl else ''}", file=out, flush=True)
    if lst.warning:
        print(f"mrc perf server: warning: {lst.warning}", file=out, flush=True)
    try:
        while True:
            try:
                conn = lst.accept()
            except OSError as e:  # a bad hello: refused, the server goes on
                print(f"mrc perf server: refused {e.strerror or e}", file=out, flush=True)
                continue
            try:
                _serve_client(ctx, conn, max_size, max_qps, idle_timeout)
            except (MrcError, OSError) as e:
                served = getattr(conn, "replied", False)
                print(f"mrc perf server: {'dropped' if served else 'refused'} client [{conn.addr}]: {e}", file=out,
                      flush=True)
                conn.refuse(e)
                if once and served:
                    return 1
                continue
            finally:
                conn.close()
            if once:
                return 0
    finally:
        lst.close()
        if ctl:
            ctl.close()
        ctx.close()


def client(server_host: str, sizes: list[int], iters: int = 100, imm: bool = False, verify: bool = False,
           depth: int = 16, port: int = cm.DEFAULT_PORT, progress: bool = True, qps: int = 1,
           resolver: PathResolver | None = None, ports=None, psk: bytes | None = None,
           spin_us: float | None = None, security: str = "off", packets_per_buffer: int = 1) -> list[dict]:
    """``mrc perf client``: write each size ``iters`` times to a server and measure."""
    resolver = resolver or from_environment()
    addr = cm.setup_address(server_host, resolver)
    ctx, ctl = _open(ports, resolver, spin_us, packets_per_buffer)
    try:
        max_size = max(sizes)
        src = bytearray(os.urandom(max_size))
        mr = ctx.reg_mr(src)
        if qps < 1:
            raise UsageError(f"--qps must be at least 1, got {qps}")
        cq = ctx.create_cq()
        mine = [ctx.create_qp(cq=cq, attr=QPAttr(sq_depth=max(64, depth * 2))) for _ in range(qps)]
        conn = cm.connect(addr, port, ctx.local_info(mine[0]), psk=psk, security=security,
                          params={"max_size": max_size, "imm": imm},
                          qps=[cm.info_to_json(ctx.local_info(q)) for q in mine[1:]])
        peers = [conn.peer] + [cm.info_from_json(i) for i in conn.answer.get("qps", [])]
        if len(peers) != qps:
            raise UsageError(f"the server made {len(peers)} QPs for our {qps}: is it an older mrc?")
        for q, peer in zip(mine, peers, strict=True):
            _connect(q, conn, peer)
        results = []
        alive = time.perf_counter()
        for size in sizes:
            st0 = _sum_stats(mine)
            lat, dt, alive = _timed_writes(conn, cq, mine, mr, size, iters, depth, imm, progress, alive)
            res = _size_result(ctx, conn, src if verify else None, size, iters, qps, imm, lat, dt, st0,
                               _sum_stats(mine))
            results.append(res)
            if progress:
                print(f"\r{size:>10} B  {res['gbps']:8.3f} Gb/s  {res['msg_rate']:9.1f} msg/s  p99 {res['p99_us']} us"
                      f"  rtx {res['retransmits']}" + (f"  verified {res['verified']}" if verify else ""),
                      file=sys.stderr)
        conn.send({"bye": True})
        conn.close()
        return results
    finally:
        _close(ctx, ctl)


def _timed_writes(conn, cq, mine: list, mr, size: int, iters: int, depth: int, imm: bool, progress: bool,
                  alive: float) -> tuple[list[float], float, float]:
    """``iters`` writes of ``size`` bytes, ``depth`` in flight, round robin over the QPs ``mine``: each one's
    latency, the seconds they took, and when the server last heard from us (a tick keeps it from dropping us)."""
    remote = conn.peer
    lat: list[float] = []
    posted = done = 0
    t_post: dict[int, float] = {}
    t0 = time.perf_counter()
    last_draw = 0.0
    with gc_paused():
        while done < iters:
            while posted < iters and posted - done < depth:
                t_post[posted] = time.perf_counter()
                qp = mine[posted % len(mine)]  # round robin over the QPs
                qp.post_write(mr, 0, size, remote.addr, remote.rkey, wr_id=posted,
                              imm=(posted & 0xFFFFFFFF) if imm else None)
                posted += 1
            wcs = cq.poll()
            if not wcs:
                cq.get_event(0.005)
                continue
            now = time.perf_counter()
            for w in wcs:
                if not w.ok:
                    raise UsageError(f"work request {w.wr_id} of size {size} on QP {w.qpn} failed: {w.status_words}")
                lat.append(now - t_post.pop(w.wr_id))
                done += 1
            if now - alive > TICK:  # the server drops a client silent for its idle timeout
                conn.send({"tick": done})
                alive = now
            if progress and now - last_draw > 0.2:
                last_draw = now
                bar = "#" * int(30 * done / iters)
                print(f"\r{size:>10} B [{bar:<30}] {done}/{iters}", end="", file=sys.stderr, flush=True)
    return lat, time.perf_counter() - t0, alive


def _size_result(ctx, conn, src: bytearray | None, size: int, iters: int, qps: int, imm: bool, lat: list[float],
                 dt: float, st0: dict, st1: dict) -> dict:
    """One size's line: rate, latency percentiles, retransmissions, each plane's share; with ``src``, whether
    the server holds what we wrote."""
    verified = None
    if src is not None:
        conn.send({"check": size, "iters": iters, "sha256": hashlib.sha256(memoryview(src)[:size]).hexdigest()})
        verified = bool(conn.recv()["verified"])
    sent = [b - a for a, b in zip(st0["plane_tx"], st1["plane_tx"], strict=True)][: ctx.planes]
    total = sum(sent) or 1
    return {"size": size, "iters": iters, "qps": qps, "op": "WRITE_IMM" if imm else "WRITE",
            "gbps": round(size * iters * 8 / dt / 1e9, 3), "msg_rate": round(iters / dt, 1),
            "p50_us": round(percentile(lat, 0.5) * 1e6, 1), "p99_us": round(percentile(lat, 0.99) * 1e6, 1),
            "p999_us": round(percentile(lat, 0.999) * 1e6, 1),
            "retransmits": st1["rtx_packets"] - st0["rtx_packets"],
            "plane_share": [round(s / total, 4) for s in sent], "verified": verified}


def latency(server_host: str, sizes: list[int], iters: int = 1000, port: int = cm.DEFAULT_PORT,
            progress: bool = True, resolver: PathResolver | None = None, ports=None, psk: bytes | None = None,
            warmup: int = 50, spin_us: float | None = None, security: str = "off",
            packets_per_buffer: int = 1) -> list[dict]:
    """Round trips: a WRITE_IMM of each size to the server, which writes it
    straight back (same length and immediate) into our echo region; one at a
    time, timed in C (csrc/bench/pingpong.c) from the post to our receive
    completion. Both sides wait by progressing the NIC themselves for 50 us,
    then sleep on their CQ's channel."""
    resolver = resolver or from_environment()
    addr = cm.setup_address(server_host, resolver)
    ctx, ctl = _open(ports, resolver, spin_us, packets_per_buffer)
    try:
        size_max = max(sizes)
        src, back = bytearray(os.urandom(size_max)), bytearray(size_max)
        mr, mback = ctx.reg_mr(src), ctx.reg_mr(back, remote_write=True)
        cq = ctx.create_cq()
        qp = ctx.create_qp(cq=cq, attr=QPAttr(rq_depth=64))
        conn = cm.connect(addr, port, ctx.local_info(qp), psk=psk, security=security,
                          params={"max_size": size_max, "imm": True, "echo": {"addr": mback.addr, "rkey": mback.rkey}})
        _connect(qp, conn, conn.peer)
        remote = conn.peer
        results = []
        for size in sizes:
            st0 = qp.stats()
            tmpl = _write_template(qp, mr, size, remote.addr, remote.rkey)
            rtt = ffi.new("uint64_t[]", warmup + iters)
            t0 = time.perf_counter()
            n = lib.mrc_bench_pingpong(qp.dev.handle(), qp.qpn, cq.cqn, tmpl, warmup + iters, 0, 10_000_000_000, rtt)
            if n < 0:
                raise UsageError(f"a {size} B round trip failed: {os.strerror(-n)} (no echo in 10 s: is the server "
                                 f"an older mrc?)" if n == -errno.ETIMEDOUT else f"a {size} B round trip failed: "
                                 f"{os.strerror(-n)}")
            if time.perf_counter() - t0 > TICK / 2:
                conn.send({"tick": n})  # the server drops a client silent for its idle timeout
            st1 = qp.stats()
            xs = [rtt[i] / 1e9 for i in range(warmup, warmup + iters)]
            ok = bytes(back[:size]) == bytes(src[:size])
            res = {"size": size, "iters": iters, "op": "WRITE_IMM round trip",
                   "p50_us": round(percentile(xs, 0.5) * 1e6, 1),
                   "p99_us": round(percentile(xs, 0.99) * 1e6, 1), "min_us": round(min(xs) * 1e6, 1),
                   "mean_us": round(sum(xs) / len(xs) * 1e6, 1),
                   "retransmits": st1["rtx_packets"] - st0["rtx_packets"],
                   "timeouts": st1["timeouts"] - st0["timeouts"],
                   "verified": ok}
            results.append(res)
            if progress:
                print(f"{size:>10} B  round trip p50 {res['p50_us']} us  p99 {res['p99_us']} us  min {res['min_us']} us"
                      f"  rtx {res['retransmits']}", file=sys.stderr)
        conn.send({"bye": True})
        conn.close()
        return results
    finally:
        _close(ctx, ctl)


def _sum_stats(qps: list) -> dict:
    """Counters of several QPs added up (plane_tx element by element)."""
    sts = [q.stats() for q in qps]
    return {"rtx_packets": sum(s["rtx_packets"] for s in sts),
            "plane_tx": [sum(x) for x in zip(*(s["plane_tx"] for s in sts), strict=True)]}


def print_table(results: list[dict]) -> None:
    """Bandwidth results as a table."""
    print(f"{'size':>10} {'Gb/s':>9} {'msg/s':>10} {'p50 us':>8} {'p99 us':>8} {'p99.9 us':>9} {'rtx':>6} verified")
    for r in results:
        print(f"{r['size']:>10} {r['gbps']:>9.3f} {r['msg_rate']:>10.1f} {r['p50_us']:>8} {r['p99_us']:>8} "
              f"{r['p999_us']:>9} {r['retransmits']:>6} {r['verified']}")


def print_latency(results: list[dict]) -> None:
    """Latency results as a table."""
    print(f"{'size':>10} {'p50 us':>8} {'p99 us':>8} {'min us':>8} {'mean us':>8} {'rtx':>5} verified")
    for r in results:
        print(f"{r['size']:>10} {r['p50_us']:>8} {r['p99_us']:>8} {r['min_us']:>8} {r['mean_us']:>8} "
              f"{r['retransmits']:>5} {r['verified']}")


def main_json(results: list[dict]) -> None:
    """Results as JSON."""
    print(json.dumps(results, indent=1))


def stream(ctx: Context, qp, mr, remote, total: int, msg: int = 1 << 20, depth: int = 16,
           window: int | None = None, on_tick=None, tick: float = 0.5, events=None) -> dict:
    """Write ``total`` bytes as ``msg``-byte WRITEs cycling over a ``window``-byte
    remote region (source offset = destination offset, so the region ends equal
    to the source). ``events`` is a list of (fraction, callable) run when that
    share of the bytes has completed. Returns rates and the longest gap between
    two completions (the stall an application would see)."""
    window = window or min(mr.length, remote.length)
    slots = max(1, window // msg)
    n = max(1, total // msg)
    cq = qp.send_cq
    st0 = qp.stats()
    events = sorted(events or [], key=lambda e: e[0])
    posted = done = 0
    t0 = last_wc = last_tick = time.perf_counter()
    max_stall = 0.0
    stall_at = 0.0
    prev = st0["plane_tx"]
    fired: list = []
    gaps: list[tuple[float, float]] = []  # (start, length) of every gap over 0.5 ms
    workers: list[threading.Thread] = []
    with gc_paused():
        while done < n:
            while posted < n and posted - done < depth:
                off = (posted % slots) * msg
                qp.post_write(mr, off, msg, remote.addr + off, remote.rkey, wr_id=posted)
                posted += 1
            wcs = cq.poll()
            now = time.perf_counter()
            if wcs:
                for w in wcs:
                    if not w.ok:
                        raise UsageError(f"write {w.wr_id} failed: {w.status_words}; the QP is {qp.state}")
                # a stall is a gap between two completions; the wait for the first
                # one is latency (the pipeline filling), not a stall
                if done and now - last_wc > max_stall:
                    max_stall, stall_at = now - last_wc, last_wc - t0
                if done and now - last_wc > 0.0005:
                    gaps.append((last_wc - t0, now - last_wc))
                last_wc = now
                done += len(wcs)
                while events and done >= events[0][0] * n:
                    # faults run beside the transfer, as an operator's would: the
                    # completion loop must not wait for them
                    frac, fn = events.pop(0)
                    at = round(now - t0, 3)
                    th = threading.Thread(target=lambda fn=fn, at=at: fired.append((at, fn())), daemon=True)
                    th.start()
                    workers.append(th)
            else:
                cq.get_event(0.002)
            if on_tick and now - last_tick >= tick:
                cur = qp.stats()["plane_tx"]
                rates = [(c - p) * qp.attr_mtu * 8 / (now - last_tick) / 1e9 for c, p in zip(cur, prev, strict=True)]
                on_tick(now - t0, done / n, rates[: ctx.planes])
                prev, last_tick = cur, now
    dt = time.perf_counter() - t0
    for th in workers:
        th.join()
    st1 = qp.stats()
    # the longest gap that ended after the first event fired: the fault's own stall
    first = min((at for at, _ in fired), default=None)
    after = max((g for s, g in gaps if first is not None and s + g >= first), default=0.0)
    # the floor: the longest gap before anything fired (this machine's own
    # stalls with no fault; the first completion's wait is not one)
    floor = max((g for s, g in gaps if first is None or s + g < first), default=0.0)
    # each event's own: the longest gap that ended between it and the next event
    marks = sorted(at for at, _ in fired) + [dt]
    per_event = [round(max((g for s, g in gaps if a <= s + g < b), default=0.0) * 1e3, 3)
                 for a, b in zip(marks, marks[1:], strict=False)]
    return {"bytes": n * msg, "seconds": round(dt, 3), "gbps": round(n * msg * 8 / dt / 1e9, 3),
            "max_stall_ms": round(max_stall * 1e3, 3), "stall_at_s": round(stall_at, 3),
            "max_stall_after_event_ms": round(after * 1e3, 3) if first is not None else None,
            "no_fault_max_stall_ms": round(floor * 1e3, 3), "max_stall_after_each_event_ms": per_event,
            "retransmits": st1["rtx_packets"] - st0["rtx_packets"], "losses": st1["losses"] - st0["losses"],
            "events": fired}
