"""The fault campaign's runs (bench/fault_campaign.py): one transfer over MRC,
kernel TCP or MPTCP, or none (the CPU an idle fabric's faults cost), while the
fault process runs a scenario's plan; the Recorder keeps every delivery's
time and the bytes per bucket for the campaign's figures."""
from __future__ import annotations

import bisect
import os
import socket
import struct
import threading
import time
from array import array

from campaign_report import BUCKET, PauseMonitor
from mrc._dp import ffi, lib

from mrc.fabric import ns
from mrc.fabric.faults import FaultScheduler
from mrc.fabric.pair import qp_pair
from mrc.fabric.topology import Topology
from mrc.units import gc_paused
from mrc.verbs import QPAttr

FAULT_AT = 1.5        # seconds into a run when the first fault fires


class Faulter:
    """The fault process of one run, started before the transfer; ``go``
    starts its schedule, ``finish`` waits for its end and gives its events."""

    def __init__(self, t: Topology, plan: list) -> None:
        self.plan = plan
        self.sched = FaultScheduler(t.name)

    def go(self) -> None:
        self.sched.plan(self.plan)

    def finish(self) -> list[dict]:
        try:
            return self.sched.wait(timeout=30 + max((at for at, *_ in self.plan), default=0))
        finally:
            self.sched.close()


class Recorder:
    """Bytes per bucket and every delivery's time, against a shared t0 (the
    gaps between deliveries make the stall figures and their distribution)."""

    def __init__(self, t0: float, seconds: float) -> None:
        self.t0 = t0
        self.buckets = [0] * (int(seconds / BUCKET) + 2)
        self.times = array("d")   # seconds after t0
        self.last: float | None = None

    def add(self, now: float, nbytes: int) -> None:
        i = int((now - self.t0) / BUCKET)
        if 0 <= i < len(self.buckets):
            self.buckets[i] += nbytes
        self.times.append(now - self.t0)
        self.last = now

    def gaps_after(self, t: float) -> list[float]:
        """Gaps between deliveries that end after t (the first one counted from t)."""
        k = bisect.bisect_right(self.times, t)
        prev, out = t, []
        for x in self.times[k:]:
            out.append(x - prev)
            prev = x
        return out


def _deny_paths(t, ca, qa, deny: list) -> None:
    """[(src, dst, plane, spine), ...]: those paths' EVs are not used."""
    addrs = {t.path_address(*d) for d in deny}
    for e in qa.evs():
        if ca.ev_address(qa, e["ev"]) in addrs:
            qa.set_ev_state(e["ev"], lib.MRC_EV_DENIED)


class _Sampler:
    """Every BUCKET, beside the transfer (the polling loop never waits for it): the QP's EVs by state, its
    smoothed RTT, its counters and the ports' drops, and its EV events."""

    def __init__(self, ca, cb, qa, t0: float) -> None:
        self.ca, self.cb, self.qa, self.t0 = ca, cb, qa, t0
        self.srtt: list = []
        self.timeline: list = []
        self.counters: list = []
        self.ev_events: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(BUCKET):
            now = time.monotonic()
            counts = {"GOOD": 0, "ASSUMED_BAD": 0, "DENIED": 0}
            for e in self.qa.evs():  # active and spare: where every EV of the QP stands
                counts[e["state"]] = counts.get(e["state"], 0) + 1
            st = self.qa.stats()
            self.srtt.append((now - self.t0, st["srtt_ns"]))
            self.timeline.append([round(now - self.t0, 3), counts["GOOD"], counts["ASSUMED_BAD"], counts["DENIED"]])
            # what the QP and the ports did in the sample: to tell real drops (a receiver
            # whose engine did not run fills its rx rings) from reordering and timeouts
            rx_drops = sum(p["rx_ring_drops"] for p in self.cb.port_stats())
            tx_err = sum(p["tx_errors"] for p in self.ca.port_stats())
            self.counters.append([round(now - self.t0, 3), st["losses"], st["timeouts"], st["probes_tx"],
                                  st["rtx_packets"], rx_drops, tx_err, st["retries_max"], st["head_rtx_max"]])
            self.ev_events += self.ca.ev_events()

    def stop(self) -> None:
        """End the sampling thread."""
        self._stop.set()
        self._thread.join()


def _drain(cq, left: int, check, timeout: float = 10.0) -> int:
    """Wait up to ``timeout`` s for the ``left`` writes still in flight (checked, not counted); returns the
    failed ones."""
    errors = 0
    deadline = time.monotonic() + timeout
    while left > 0 and time.monotonic() < deadline and not errors:
        for w in cq.poll():
            errors += not w.ok
            if w.ok:
                check(w.wr_id)
            left -= 1
        cq.get_event(0.01)
    return errors


def run_mrc(t, seconds, plan, msg, depth=64, deny=None, attr: QPAttr | None = None, k: int = 1) -> dict:
    """One MRC transfer h0 -> the last host under ``plan``'s faults, every completion checked;
    ``k`` packets of a path per kernel buffer."""
    src, dst = 0, t.hosts - 1
    window = 64 << 20
    # two source versions per slot, alternating lap by lap: each completion is
    # checked against what it had to write, so a write that never landed (the
    # slot still holds the last lap's bytes) counts as corrupt
    p = qp_pair(t, src, dst, 2 * window, attr, packets_per_buffer=k)
    ca, cb, qa, ms, ib = p.ca, p.cb, p.qa, p.ms, p.remote
    want, got = ffi.from_buffer(p.src), ffi.from_buffer(p.dst)
    corrupt = [0, 0]  # bytes that differ, bytes checked

    def check(wr_id: int) -> None:
        off = (wr_id % slots) * msg
        corrupt[0] += lib.mrc_bench_check(want + ((wr_id // slots) & 1) * window + off, got + off, msg)
        corrupt[1] += msg
    faulter = Faulter(t, plan) if plan else None
    try:
        if deny:
            _deny_paths(t, ca, qa, deny)
        cq = p.cq
        slots = window // msg
        st0 = qa.stats()
        errors = 0
        t0 = time.monotonic()
        t0_ns = time.monotonic_ns()
        if faulter:
            faulter.go()
        rec = Recorder(t0, seconds)
        posted = done = 0
        sampler = _Sampler(ca, cb, qa, t0)
        monitor = PauseMonitor()
        with gc_paused():  # the loop polls the completions whose gaps are measured
            while True:
                now = time.monotonic()
                if now - t0 >= seconds or errors:
                    break
                while posted - done < depth:
                    off = (posted % slots) * msg
                    qa.post_write(ms, ((posted // slots) & 1) * window + off, msg, ib.addr + off, ib.rkey, wr_id=posted)
                    posted += 1
                wcs = cq.poll()
                now = time.monotonic()
                if wcs:
                    bad = [w for w in wcs if not w.ok]
                    errors += len(bad)
                    for w in wcs:
                        if w.ok:
                            check(w.wr_id)
                    rec.add(now, msg * (len(wcs) - len(bad)))
                    done += len(wcs)
                else:
                    cq.get_event(0.002)
        sampler.stop()
        pauses = [((a - t0_ns) / 1e9, d / 1e9, w / 1e9, st) for a, d, w, st in monitor.stop()]
        sampler.ev_events += ca.ev_events()
        if not errors:  # let what is in flight finish (not counted): a clean QP at the end
            errors += _drain(cq, posted - done, check)
        st1 = qa.stats()
        qp_errors = errors + (qa.state != "RTS")
        faults = faulter.finish() if faulter else []
        evs_by_address = {e["ev"]: ca.ev_address(qa, e["ev"]) for e in qa.evs()}
        return {"rec": rec, "faults": faults, "qp_errors": qp_errors, "t0_ns": t0_ns,
                "retransmitted_bytes": st1["rtx_bytes"] - st0["rtx_bytes"],
                "losses": st1["losses"] - st0["losses"], "timeouts": st1["timeouts"] - st0["timeouts"],
                "timeline": sampler.timeline, "ev_events": sampler.ev_events, "srtt": sampler.srtt,
                "ev_address": evs_by_address, "counters": sampler.counters, "corrupt_bytes": corrupt[0],
                "verified_bytes": corrupt[1], "pauses": pauses}
    finally:
        if faulter:
            faulter.sched.close()
        p.close()


def _cpu_busy() -> float:
    """CPU seconds this machine has spent not idle (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def run_idle(t, seconds, plan) -> dict:
    """No transfer: the fault alone. The busy cores (of the machine's) in the
    second before the fault and the second after it."""
    faulter = Faulter(t, plan)
    t0 = time.monotonic()
    t0_ns = time.monotonic_ns()
    faulter.go()
    samples = []
    while time.monotonic() - t0 < seconds:
        samples.append((time.monotonic() - t0, _cpu_busy()))
        time.sleep(0.05)
    faults = faulter.finish()
    first = (faults[0]["t_ns"] - t0_ns) / 1e9 if faults else FAULT_AT

    def busy(a, b):
        pts = [(x, c) for x, c in samples if a <= x <= b]
        return round((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]), 3) if len(pts) > 1 else None
    return {"cpu_busy_cores_before": busy(first - 1.0, first), "cpu_busy_cores_after": busy(first, first + 1.0),
            "cores": os.cpu_count(), "fault_times_s": [round((f["t_ns"] - t0_ns) / 1e9, 3) for f in faults]}


def _retrans_segs(t, h) -> int:
    out = ns.command(t.ns(t.host(h)), ["cat", "/proc/net/snmp"], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("RetransSegs")])


def run_tcp(t, seconds, plan, proto=0, port=5201, sport=0) -> dict:
    """A stream from h0 to the last host's plane-0 kernel address under ``plan``; ``sport``: its
    source port (on a BGP fabric, the one ECMP hashes through the faults: bgp.sport_through)."""
    src, dst = 0, t.hosts - 1
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", port))
    srv.listen(1)
    faulter = Faulter(t, plan) if plan else None
    errors = []
    box: dict = {}
    stop = threading.Event()

    def serve():
        c, _ = srv.accept()
        c.settimeout(0.1)
        buf = bytearray(1 << 20)
        rec = box["rec"]
        try:
            while not stop.is_set():
                try:
                    k = c.recv_into(buf)
                except TimeoutError:
                    continue
                if not k:
                    break
                rec.add(time.monotonic(), k)
        except OSError as e:
            errors.append(f"receiver: {e}")
        finally:
            c.close()

    cli = ns.run_in(t.ns(t.host(src)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    rs0 = _retrans_segs(t, src)
    try:
        if sport:
            cli.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            cli.bind((t.inner_address(src, 0), sport))
        cli.connect((t.inner_address(dst, 0), port))
        t0 = time.monotonic()
        box["rec"] = Recorder(t0, seconds)
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        if faulter:
            faulter.go()
        cli.settimeout(0.1)
        chunk = memoryview(b"\0" * (1 << 20))
        with gc_paused():  # the same for the receiver's reads (one process)
            while time.monotonic() - t0 < seconds:
                try:
                    cli.send(chunk)
                except TimeoutError:
                    continue
                except OSError as e:
                    errors.append(f"sender: {e}")
                    break
        mss = 0
        if proto == 0:
            info = cli.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            mss = struct.unpack_from("I", info, 16)[0]  # tcpi_snd_mss: after 8 u8 and rto, ato
        stop.set()
        th.join(5)
    finally:
        cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset: no tail to drain
        cli.close()
        srv.close()
        faults = faulter.finish() if faulter else []
    return {"rec": box["rec"], "faults": faults, "qp_errors": len(errors), "errors": errors,
            "retrans_segs": _retrans_segs(t, src) - rs0, "mss": mss, "t0": t0}
