"""The fabric simulator's driver: the unchanged engine at every NIC of a
simulated multi-plane Clos, in virtual time (csrc/sim/simfab.c; docs/sim.md
has the model). ``mrc sim`` (mrc.tools.sim's command), the benches and the tests run it.

    with FabricSim(Fabric(hosts=64)) as sim: ...       # or simulate(fab, "permutation", 16 << 20)

Every NIC is a context driven by hand with flows of WRITEs; switches
forward on the uSID destination (End with next-CSID over the address plan
of ``mrc.fabric.topology``) and queue at their egress ports (trim, drop,
mark: the rules of the fabric's BPF queues). ``--single-path`` runs the same
workload again with one EV per QP (hashed onto one plane and spine, as ECMP
places a RoCE flow) as the baseline in the same run. Deterministic: the same
arguments and seed give the same JSON, byte for byte, apart from ``wall_s``,
``sim_pps`` and ``peak_rss_mb``.
"""

from __future__ import annotations

import resource
import time

from mrc._dp import ffi, lib
from mrc.errors import UsageError, check
from mrc.simspec import (
    COLL_CREDITS,
    COLLECTIVES,
    DATA_HDRS,
    TIERS,
    WIRE_EXTRA,
    Fabric,
    Fault,
    coll_result,
    coll_streams,
    flows_for,
)
from mrc.units import percentile


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program (VmHWM: the kernel carries
    getrusage's maximum over from the parent of a child that was forked, VmHWM starts again at exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class FabricSim:
    """One simulated fabric with its flows (``run`` once)."""

    def __init__(self, fab: Fabric, single_path: bool = False, max_qps: int = 64,
                 flow_bytes: int | None = None, check_times: bool = False, fill: int = 0,
                 heap_only: bool = False) -> None:
        """``check_times``: every NIC checks at each wake that no QP waits past its time (the
        engine's kept times, mrc_ep_check_times); the result gains ``late_times``, 0 when it holds.
        ``fill``: the byte every payload holds (0: zeros, not carried in flight; tests).
        ``heap_only``: every event on the heap, none on the calendar (tests: the same order)."""
        self.fab, self.single_path, self.check_times = fab, single_path, check_times
        self.result: dict = {}
        self.series: list = []
        self.fcts_us: list = []
        self.attr = fab.qp_attr(single_path, flow_bytes)
        cfg = ffi.new("struct mrc_fab_cfg *", {
            "hosts": fab.hosts, "planes": fab.planes, "leaves": fab.leaves, "spines": fab.spines,
            "rate_bps": fab.rate_bps, "hop_ns": fab.hop_ns, "buffer_bytes": fab.buffer_bytes,
            "ecn_bytes": fab.ecn_bytes, "trim_bytes": fab.trim_bytes, "max_qps": max_qps, "cq_depth": 1024,
            "bucket_ns": fab.bucket_ns, "seed": fab.seed, "unpaced": int(not fab.paced), **fab.fab_cfg()})
        out = ffi.new("struct mrc_fab **")
        check(lib.mrc_fab_create(cfg, self.attr.to_c(), out), "create the simulated fabric")
        self._f = out[0]
        if check_times or fill or heap_only:
            checks = {"check_times": int(check_times), "fill": fill, "heap_only": int(heap_only)}
            try:
                check(lib.mrc_fab_set_checks(self._f, ffi.new("struct mrc_fab_checks *", checks)), "the checks")
            except BaseException:
                self.close()
                raise
        self.flows: list[tuple[int, int, int]] = []
        self.faults: list[Fault] = []

    def add_flows(self, flows: list[tuple[int, int, int]], msg: int, depth: int = 8, start_ns: int = 0) -> None:
        """Add flows of ``msg``-byte WRITEs, ``depth`` in flight, from ``start_ns``."""
        for src, dst, nbytes in flows:
            fl = ffi.new("struct mrc_fab_flow *", {"src": src, "dst": dst, "bytes": nbytes, "msg": min(msg, nbytes),
                                                   "depth": depth, "start_ns": start_ns,
                                                   "single_path": int(self.single_path)})
            check(lib.mrc_fab_add_flow(self._f, fl), f"add flow {src} -> {dst}")
            self.flows.append((src, dst, nbytes))

    def add_fault(self, fault: Fault) -> None:
        """Schedule a fault's link changes."""
        for at, link, up in fault.events():
            check(lib.mrc_fab_link_at(self._f, link, int(up), at), f"schedule {fault.what}")
        self.faults.append(fault)

    def trace(self, src: int, plane: int, daddr: bytes) -> tuple[list[tuple[str, int, int]], bool]:
        """Where forwarding takes a packet for ``daddr`` from ``src``'s port on ``plane``."""
        nodes, n = ffi.new("uint32_t[16]"), ffi.new("uint32_t *")
        rc = lib.mrc_fab_trace(self._f, src, plane, daddr, nodes, 16, n)
        kinds = {0: "host", 1: "leaf", 2: "spine"}
        return [(kinds[x >> 28], (x >> 24) & 0xF, x & 0xFFFFFF) for x in nodes[0:n[0]]], rc == 0

    def run(self, until_ns: int = 10**12, progress=None, every_s: float = 1.0) -> dict:
        """Run to ``until_ns`` of virtual time, or until every flow is done or nothing is left to
        happen. ``progress(now_ns, done_bytes, total_bytes, packets, cpu_s)``, when given, is called
        every ``every_s`` of CPU time or so: the run goes in slices of virtual time then (the same
        events in the same order: a slice ends between two events)."""
        t0 = time.process_time()
        if progress is None:
            done = self._run_to(until_ns)
        else:
            st = ffi.new("struct mrc_fab_stats *")
            step, last = 1_000, t0  # ns of virtual time per slice: kept to 0.2-1 s of CPU each
            total = sum(n for _, _, n in self.flows)
            while True:
                lib.mrc_fab_stats(self._f, st)
                end = min(until_ns, st.now_ns + step)
                s0 = time.process_time()
                done = self._run_to(end)
                took = time.process_time() - s0
                lib.mrc_fab_stats(self._f, st)
                if done or end >= until_ns or st.now_ns < end:  # done, the end, or nothing left to happen
                    break
                step = step * 2 if took < 0.2 else max(1_000, step // 2) if took > 1.0 else step
                if time.process_time() - last >= every_s:
                    last = time.process_time()
                    progress(st.now_ns, st.done_bytes, total, st.sent, last - t0)
        wall = time.process_time() - t0
        return self.report(bool(done), wall)

    def _run_to(self, until_ns: int) -> int:
        return check(lib.mrc_fab_run(self._f, until_ns), "run the simulation",
                     "the packets in flight and the event heap grow with the fabric and its windows: "
                     "fewer hosts, or more memory")

    def report(self, done: bool, wall: float) -> dict:
        """The run's figures: completion times, utilisation, drops, gaps, errors, speed."""
        fab = self.fab
        st = ffi.new("struct mrc_fab_stats *")
        lib.mrc_fab_stats(self._f, st)
        fs, qs = ffi.new("struct mrc_fab_flow_stats *"), ffi.new("struct mrc_qp_stats *")
        fcts, gaps, errors, rtx, timeouts, ratios, data = [], [], 0, 0, 0, [], 0
        self.flow_bps: list[float | None] = []
        total = end = 0
        wire = DATA_HDRS + WIRE_EXTRA
        load = [0] * fab.hosts  # bytes each NIC had to put on the wire: its data, once, and its share of control
        data_wire, answers = 0, []
        for i in range(len(self.flows)):
            lib.mrc_fab_flow_stats(self._f, i, fs, qs)
            load[fs.src] += qs.tx_bytes + qs.tx_packets * wire
            data_wire += qs.tx_bytes + qs.rtx_bytes + (qs.tx_packets + qs.rtx_packets) * wire
            answers.append((fs.dst, qs.sacks_rx + qs.nacks_rx))
            finished = fs.done >= fs.bytes and fs.end_ns
            errors += int(fs.errors > 0 or qs.state != lib.MRC_QPS_RTS)
            rtx += qs.rtx_packets
            data += qs.tx_packets + qs.rtx_packets
            timeouts += qs.timeouts
            total += fs.done
            if finished:
                fcts.append((fs.end_ns - fs.start_ns) / 1e3)
                end = max(end, fs.end_ns)
                ratios.append(fs.bytes * 8 / ((fs.end_ns - fs.start_ns) / 1e9) / fab.nic_bps())
            self.flow_bps.append(fs.bytes * 8 / ((fs.end_ns - fs.start_ns) / 1e9) if finished else None)
            gaps.append(fs.max_gap_ns / 1e3)
        senders = len({s for s, _, _ in self.flows})
        span = (end or st.now_ns) / 1e9
        # control (SACKs, NACKs, probes): what the NICs sent beyond data, shared by the answers each flow got
        ctrl, n_answers = max(0, st.tier[0].bytes - data_wire), sum(a for _, a in answers)
        for dst, a in answers:
            load[dst] += ctrl * a / n_answers if n_answers else 0
        # the busiest NIC's bytes at line rate, then its last packet's way on (one base RTT less its
        # first serialization): no run of these flows ends sooner
        bound_s = max(load) * 8 / fab.nic_bps() + (fab.base_rtt_ns() - fab.ser_ns()) / 1e9
        tiers = {name: self._tier(name, t, span) for name, t in zip(TIERS, st.tier, strict=True)}
        n = lib.mrc_fab_series(self._f, ffi.NULL, 0)
        buf = ffi.new("uint64_t[]", max(1, n))
        lib.mrc_fab_series(self._f, buf, n)
        w = 1 + fab.planes
        self.series = [list(buf[i * w:(i + 1) * w]) for i in range(n // w)]
        plane_bytes = [sum(row[1 + p] for row in self.series) for p in range(fab.planes)]
        per_plane_cap = span * fab.rate_bps / 8 * fab.hosts  # every host's leaf sends this much up at most
        out = {
            "nics": fab.hosts, "flows": len(self.flows), "done": done, "single_path": self.single_path,
            "transport": fab.transport,
            "goodput_ratio": round(total * 8 / (span * senders * fab.nic_bps()), 4) if span else 0.0,
            "mean_flow_ratio": round(sum(ratios) / len(ratios), 4) if ratios else 0.0,
            "wire_bound_ratio": round(total * 8 / (bound_s * senders * fab.nic_bps()), 4) if senders else 0.0,
            "sim_time_us": round(span * 1e6, 2),
            "p50_us": round(percentile(fcts, 0.5), 2), "p99_us": round(percentile(fcts, 0.99), 2),
            "max_us": round(max(fcts), 2) if fcts else 0.0,
            "max_gap_us": round(max(gaps), 2) if gaps else 0.0,
            "qp_errors": errors, "unfinished": len(self.flows) - len(fcts),
            "drops": sum(t["drops"] for t in tiers.values()),
            "down_drops": sum(t["down_drops"] for t in tiers.values()),
            "trims": sum(t["trims"] for t in tiers.values()), "marks": sum(t["marks"] for t in tiers.values()),
            "pauses": sum(t["pauses"] for t in tiers.values()),
            "no_route": st.no_route, "rtx_packets": rtx, "timeouts": timeouts,
            "tiers": tiers,
            "plane_utilization": [round(b * 8 / 8 / per_plane_cap, 4) if per_plane_cap else 0 for b in plane_bytes],
            "packets": st.sent, "events": st.events,
            "data_packets": data,
            "wall_s": round(wall, 3), "sim_pps": int(st.sent / wall) if wall > 0 else 0,
            "sim_data_pps": int(data / wall) if wall > 0 else 0,
            "per_qp_bytes": self.attr.state_bytes(),
            "sim_memory_mb": {"packets": round(st.packet_bytes / 2**20, 1), "events": round(st.event_bytes / 2**20, 1),
                              "tables": round(st.table_bytes / 2**20, 1)},
            "qps_per_nic_max": max(sum((s == h) + (d == h) for s, d, _ in self.flows) for h in range(fab.hosts)),
            "peak_rss_mb": peak_rss_mb(),
        }
        if self.check_times:
            out["late_times"] = st.late_times
        self.fcts_us = fcts
        return out

    def _tier(self, name: str, t, span: float) -> dict:
        """One tier's figures (struct mrc_fab_tier) over a run of span seconds."""
        fab = self.fab
        return {"packets": t.packets, "marks": t.marked, "trims": t.trimmed, "drops": t.dropped,
                "pauses": t.pauses, "paused_us": round(t.paused_ns / 1e3, 2),
                "down_drops": t.down_dropped + t.cut, "refused": t.down_dropped, "cut": t.cut,
                "hwm_kb": round(t.hwm_bytes / 1024, 1),
                "utilization": round(t.bytes * 8 / (span * fab.rate_bps * self._ports(name)), 4) if span else 0}

    def _ports(self, tier: str) -> int:
        f = self.fab
        return f.hosts * f.planes if tier in ("nic", "leaf_down") else f.planes * f.leaves * f.spines

    def close(self) -> None:
        """Free the simulator."""
        if self._f is not None:
            lib.mrc_fab_destroy(self._f)
            self._f = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> FabricSim:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_victim_start(workload: str, start_ns: int, shown: str | None = None) -> None:
    """A victim start goes with the victim workload and lies within 1 s of virtual time."""
    what = shown or f"victim_start_ns={start_ns!r}"
    if not isinstance(start_ns, int) or isinstance(start_ns, bool) or start_ns < 0:
        raise UsageError(f"{what}: a whole number of nanoseconds, 0 or more")
    if start_ns and workload != "victim":
        raise UsageError(f"{what} goes with the victim workload (not {workload})")
    if start_ns > 10**9:
        raise UsageError(f"{what}: at most 1 s of virtual time")


def simulate(fab: Fabric, workload: str, size: int, msg: int = 1 << 20, depth: int = 8, incast: int = 7,
             faults: list[Fault] | None = None, single_path: bool = False, until_ns: int = 10**12,
             victim_start_ns: int = 0, progress=None, check_times: bool = False) -> FabricSim:
    """Build, run and report one workload; the FabricSim keeps ``result``, ``series`` and ``fcts_us``.
    ``victim_start_ns``: the victim workload's victim flow starts then, into an incast already
    running (its share is reckoned from its own start); with another workload it is refused."""
    check_victim_start(workload, victim_start_ns)
    flows = flows_for(workload, fab, size, incast, fab.seed)
    per_host = max(sum(1 for s, _, _ in flows if s == h) + sum(1 for _, d, _ in flows if d == h)
                   for h in range(fab.hosts))
    sim = FabricSim(fab, single_path, max_qps=per_host + 2, flow_bytes=max(n for _, _, n in flows),
                    check_times=check_times)
    if workload in COLLECTIVES:
        streams = coll_streams(workload, fab, size)
        sim.add_flows(flows, max(b for st in streams for b, _ in st["msgs"]), COLL_CREDITS)
        for i, st in enumerate(streams):
            lens = ffi.new("uint32_t[]", [b for b, _ in st["msgs"]])
            dflow = ffi.new("int32_t[]", [-1 if d is None else d[0] for _, d in st["msgs"]])
            dmsg = ffi.new("uint32_t[]", [0 if d is None else d[1] for _, d in st["msgs"]])
            check(lib.mrc_fab_flow_msgs(sim._f, i, len(st["msgs"]), lens, dflow, dmsg), "a collective's messages")
    else:
        sim.add_flows(flows[:-1] if victim_start_ns else flows, msg, depth)
    if victim_start_ns:  # the victim flow is the last
        sim.add_flows(flows[-1:], msg, depth, start_ns=victim_start_ns)
    for f in faults or []:
        sim.add_fault(f)
    sim.result = sim.run(until_ns, progress)
    sim.result["workload"] = workload
    if workload in COLLECTIVES:  # done when the last piece is in at its receiver (not when its sender hears so)
        fs = ffi.new("struct mrc_fab_flow_stats *")
        last = 0
        for i in range(len(streams)):
            lib.mrc_fab_flow_stats(sim._f, i, fs, ffi.NULL)
            last = max(last, fs.arrived_ns if fs.arrived == len(streams[i]["msgs"]) else 10**15)
        sim.result["collective"] = coll_result(workload, fab, size, streams, last if sim.result["done"] else 0)
    if workload == "victim":
        # its sender's NIC also carries an incast flow held to 1/incast of the receiver's NIC: max-min, the
        # victim's fair share is the rest of its NIC
        fair = fab.nic_bps() * (1 - 1 / incast)
        got = sim.flow_bps[-1] or 0.0
        sim.result["victim_gbps"] = round(got / 1e9, 2)
        sim.result["victim_fair_gbps"] = round(fair / 1e9, 2)
        sim.result["victim_ratio"] = round(got / fair, 4)
    return sim


class Progress:
    """A long run's progress on stderr: on a terminal one line rewritten about once a second; in a
    log (not a terminal) a line every 10 s of CPU time, so a run of minutes shows it is alive."""

    def __init__(self, name: str, stream, every_s: float = 10.0) -> None:
        self.name, self.stream, self.every_s = name, stream, every_s
        self.tty = stream.isatty()
        self.shown_at = 0.0

    def __call__(self, now_ns: int, done_bytes: int, total_bytes: int, packets: int, cpu_s: float) -> None:
        if not self.tty and cpu_s - self.shown_at < self.every_s:
            return
        self.shown_at = cpu_s
        line = (f"{self.name:>12}: {now_ns / 1e3:,.1f} us simulated, {100 * done_bytes / max(1, total_bytes):.0f} % "
                f"of the bytes written, {packets / 1e6:.1f} M packets in {cpu_s:.0f} s of CPU "
                f"({packets / max(cpu_s, 1e-9) / 1e6:.2f} M/s)")
        self.stream.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Clear the progress line."""
        if self.tty and self.shown_at:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
