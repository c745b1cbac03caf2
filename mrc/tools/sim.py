"""``mrc sim``: the unchanged engine at every NIC of a simulated multi-plane
Clos, in virtual time (csrc/simfab.c; docs/sim.md has the model).

    mrc sim --hosts 64 --planes 8 --workload permutation --size 16M --single-path --json
    mrc sim --hosts 256 --workload alltoall --size 4M --json
    mrc sim --hosts 64 --workload permutation --size 64M --fail t1:0.3@100us --plots out/

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

import random
import re
import resource
import time
from dataclasses import dataclass

from mrc._dp import ffi, lib
from mrc.coll import schedule
from mrc.core import QPAttr
from mrc.errors import UsageError, check
from mrc.units import parse_rate, parse_size, percentile

WORKLOADS = ("permutation", "alltoall", "incast", "victim", "ring-allreduce", "all-reduce", "all-to-all")
#: workloads that run mrc.coll's schedule: float32 elements, the communicator's slots as pieces and its
#: credits (slots x channels) as the WRITEs in flight per pair; each WRITE_IMM waits for the one it depends on
COLLECTIVES = {"all-reduce": "all_reduce", "all-to-all": "all_to_all"}
COLL_PIECE, COLL_CREDITS = 512 << 10, 16
TIERS = ("nic", "leaf_up", "spine_down", "leaf_down")
#: bytes on the wire beyond an MRC packet, as the simulator counts them
WIRE_EXTRA = lib.MRC_FAB_WIRE_EXTRA
#: MRC headers of a data packet with a RETH (csrc/wire.c)
DATA_HDRS = lib.MRC_BTH_LEN + lib.MRC_RETH_LEN + lib.MRC_ICRC_LEN
NEVER = 1 << 62


def parse_time(s: str) -> int:
    """'1us', '10ms', '2.5s', '500ns', '750' (ns) -> nanoseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*", s)
    if not m:
        raise UsageError(f"cannot read time {s!r}: use for example 500ns, 1us, 10ms or 2s")
    return int(float(m.group(1)) * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[m.group(2) or "ns"])


@dataclass
class Fabric:
    """The simulated fabric's shape and ports."""

    hosts: int = 1024
    planes: int = 8
    leaves: int = 0          # 0: one leaf per 32 hosts
    spines: int = 0          # 0: as many as hosts per leaf (non-blocking)
    rate_bps: int = 100_000_000_000
    hop_ns: int = 1000
    buffer_bytes: int = 1 << 20
    ecn_bytes: int = 64 << 10
    trim_bytes: int = 128 << 10
    mtu: int = 4096
    seed: int = 1
    bucket_ns: int = 10_000
    paced: bool = True       # NICs send on a port only when it is free (False: one 8-frame queue for all ports)

    def __post_init__(self) -> None:
        if not 2 <= self.hosts <= 1024:
            raise UsageError(f"--hosts {self.hosts}: the simulator takes 2 to 1024 hosts (uSIDs carry 10 host bits)")
        if not 1 <= self.planes <= 16:
            raise UsageError(f"--planes {self.planes}: 1 to 16 planes (a uSID carries the plane in 4 bits)")
        self.leaves = self.leaves or max(1, (self.hosts + 31) // 32)
        self.spines = self.spines or (self.hosts + self.leaves - 1) // self.leaves
        if not 1 <= self.leaves <= min(256, self.hosts) or not 1 <= self.spines <= 256:
            raise UsageError(f"{self.leaves} leaves, {self.spines} spines: 1 to 256 each, no more leaves than hosts")
        if not 1_000_000 <= self.rate_bps <= 8 * 10**12:
            raise UsageError(f"--rate {self.rate_bps}: between 1 Mbit/s and 8 Tbit/s")
        if not isinstance(self.paced, bool):
            raise UsageError(f"paced={self.paced!r}: True (NICs pace their ports) or False (the control)")
        if not 0 < self.hop_ns <= 10**9:
            raise UsageError(f"--hop-delay {self.hop_ns} ns: above 0 and at most 1 s")
        if isinstance(self.mtu, bool) or not isinstance(self.mtu, int) or \
                not lib.MRC_MIN_MTU <= self.mtu <= lib.MRC_MAX_MTU:
            raise UsageError(f"--mtu {self.mtu!r}: payload bytes per packet, {lib.MRC_MIN_MTU} to {lib.MRC_MAX_MTU}")

    def host_leaf(self, h: int) -> int:
        return h * self.leaves // self.hosts  # as mrc.fabric.topology places hosts

    def ser_ns(self) -> float:
        """One full data packet's serialization at a port."""
        return (self.mtu + DATA_HDRS + WIRE_EXTRA) * 8e9 / self.rate_bps

    def base_rtt_ns(self) -> int:
        """Unloaded round trip: 4 links each way, a full packet serialised at every port out, an ACK back."""
        return int(8 * self.hop_ns + 4 * self.ser_ns() + 4 * 128 * 8e9 / self.rate_bps)

    def timeout_exp(self) -> int:
        """The retransmit timer (1.024 us x 2^n) above the longest round trip the
        switch ports let build: every port a packet and its ACK cross (four each
        way) holding a queue up to the trim threshold (the buffer without
        trimming), as mrc.fabric.qos.qp_profile does for the namespace fabric. A
        timer under it fires on queues, not losses (all-to-all, 64 NICs: 31
        expiries with 4 base RTTs, 0 with this; goodput 0.48 -> 0.55)."""
        worst_q = self.trim_bytes or self.buffer_bytes
        worst = self.base_rtt_ns() + 8 * worst_q * 8e9 / self.rate_bps
        n = 1
        while 1024 * (1 << n) < worst and n < 20:
            n += 1
        return n

    def nic_bps(self) -> int:
        return self.rate_bps * self.planes

    def qp_attr(self, single_path: bool = False, flow_bytes: int | None = None) -> QPAttr:
        """What a NIC on this fabric is given: windows from the NIC's BDP, timers and delay
        thresholds from the base RTT.
        The PSN window (MPR, and with it the QP's memory) covers twice the largest congestion
        window, or the whole flow when that is smaller (an all-to-all's many small flows)."""
        base = self.base_rtt_ns()
        max_cwnd = int(1.5 * self.nic_bps() / 8 * base / 1e9)
        need = min(2 * max_cwnd, flow_bytes) if flow_bytes else 2 * max_cwnd
        mpr = 1
        while mpr * 128 * self.mtu < need and mpr < 64:
            mpr *= 2
        per_plane = max(16, self.spines)
        return QPAttr(planes=self.planes, mtu=self.mtu, mpr=mpr, sq_depth=16, rq_depth=16,
                      ev_count=min(4096, per_plane * self.planes), ev_backup=4, ev_min_active=1 if single_path else 8,
                      reorder_ns=base, skip_ns=2 * base, probe_interval_ns=max(5 * base, 20_000),
                      timeout=self.timeout_exp(), linear_cnt=3, exp_cnt=7,
                      cc={"base_rtt": base, "target_delay": base, "max_cwnd": max_cwnd,
                          # quick adapt's delay threshold scaled as the defaults have it (40 us over a
                          # 10 us base): the fixed 40 us is less than one packet's serialization on a
                          # slow link, so every ACK called quick adapt and the windows fell to what
                          # one round trip delivered (7:1 incast at 100 Mbit/s: 0.45 of the link)
                          "qa_threshold": 4 * base})

    def link_host(self, h: int, p: int) -> int:
        return p * self.hosts + h

    def link_fabric(self, p: int, leaf: int, s: int) -> int:
        return self.planes * self.hosts + (p * self.leaves + leaf) * self.spines + s


@dataclass
class Fault:
    """Links going down (and maybe up again) at given times."""

    what: str
    links: list[int]
    at_ns: int
    until_ns: int = NEVER
    period_ns: int = 0       # flapping: down half of every period between at and until

    def events(self) -> list[tuple[int, int, bool]]:
        if not self.period_ns:
            out = [(self.at_ns, link, False) for link in self.links]
            return out + ([(self.until_ns, link, True) for link in self.links] if self.until_ns < NEVER else [])
        out, t = [], self.at_ns
        while t < self.until_ns:
            out += [(t, link, False) for link in self.links]
            out += [(min(t + self.period_ns // 2, self.until_ns), link, True) for link in self.links]
            t += self.period_ns
        return out


def parse_fault(spec: str, fab: Fabric, flap: bool = False) -> Fault:
    """``t1:P.S``, ``t0:P.L``, ``link:P.L.S`` (a leaf-spine link) or ``host:H.P``
    (a host port), then ``@AT`` and ``+DURATION`` (healed after it); with
    flap, ``/PERIOD`` after the target (down half of every period)."""
    m = re.fullmatch(r"(t1|t0|link|host):([0-9.]+)(?:/([0-9.]+\w*))?(?:@([0-9.]+\w*))?(?:\+([0-9.]+\w*))?", spec)
    if not m or (flap and not m.group(3)) or (not flap and m.group(3)):
        form = "link:P.L.S/PERIOD@AT+DURATION" if flap else "t1:P.S@AT+DURATION, t0:P.L, link:P.L.S or host:H.P"
        raise UsageError(f"cannot read {'--flap' if flap else '--fail'} {spec!r}: use {form}")
    kind, nums = m.group(1), [int(x) for x in m.group(2).split(".")]
    want = {"t1": 2, "t0": 2, "link": 3, "host": 2}[kind]
    if len(nums) != want:
        raise UsageError(f"{spec!r}: {kind} takes {want} numbers")
    p = nums[1] if kind == "host" else nums[0]
    if p >= fab.planes:
        raise UsageError(f"{spec!r}: plane {p} does not exist ({fab.planes} planes)")
    if kind == "t1":
        if nums[1] >= fab.spines:
            raise UsageError(f"{spec!r}: spine {nums[1]} does not exist ({fab.spines} spines)")
        links = [fab.link_fabric(p, leaf, nums[1]) for leaf in range(fab.leaves)]
    elif kind == "t0":
        if nums[1] >= fab.leaves:
            raise UsageError(f"{spec!r}: leaf {nums[1]} does not exist ({fab.leaves} leaves)")
        links = [fab.link_fabric(p, nums[1], s) for s in range(fab.spines)]
        links += [fab.link_host(h, p) for h in range(fab.hosts) if fab.host_leaf(h) == nums[1]]
    elif kind == "link":
        if nums[1] >= fab.leaves or nums[2] >= fab.spines:
            raise UsageError(f"{spec!r}: no such leaf-spine link ({fab.leaves} leaves, {fab.spines} spines)")
        links = [fab.link_fabric(p, nums[1], nums[2])]
    else:
        if nums[0] >= fab.hosts:
            raise UsageError(f"{spec!r}: host {nums[0]} does not exist ({fab.hosts} hosts)")
        links = [fab.link_host(nums[0], p)]
    at = parse_time(m.group(4)) if m.group(4) else 0
    until = at + parse_time(m.group(5)) if m.group(5) else NEVER
    period = parse_time(m.group(3)) if m.group(3) else 0
    if flap and period < 2:
        raise UsageError(f"{spec!r}: a flap period of at least 2 ns")
    if flap and until == NEVER:
        raise UsageError(f"{spec!r}: say how long it flaps (+DURATION, e.g. +100ms)")
    if flap and (until - at) // period > 100_000:
        raise UsageError(f"{spec!r}: more than 100,000 flaps; use a longer period or a shorter duration")
    return Fault(spec, links, at, until, period)


def flows_for(workload: str, fab: Fabric, size: int, incast: int = 7, seed: int = 1) -> list[tuple[int, int, int]]:
    """(src, dst, bytes) of a workload; every sender writes ``size`` bytes in all."""
    h = fab.hosts
    rng = random.Random(seed)
    if workload == "permutation":
        while True:  # a random derangement: nobody writes to itself
            dst = list(range(h))
            rng.shuffle(dst)
            if all(d != s for s, d in enumerate(dst)):
                return [(s, d, size) for s, d in enumerate(dst)]
    if workload == "alltoall":
        # each sender's flows in shifted order (s+1, s+2, ...), as collective libraries schedule an
        # all-to-all: a NIC serves its QPs in turn, so in the same order everyone would hit one receiver
        per = max(1, size // (h - 1))
        return [(s, (s + k) % h, per) for s in range(h) for k in range(1, h)]
    if workload in COLLECTIVES:
        return [(st["src"], st["dst"], sum(b for b, _ in st["msgs"])) for st in coll_streams(workload, fab, size)]
    if workload == "ring-allreduce":
        return [(s, (s + 1) % h, max(1, 2 * (h - 1) * size // h)) for s in range(h)]
    if workload in ("incast", "victim"):
        need = incast + 1 + (workload == "victim")
        if h < need:
            raise UsageError(f"--workload {workload} with {incast} senders needs {need} hosts, not {h}")
        out = [(s, 0, size) for s in range(1, incast + 1)]
        if workload == "victim":  # one of the incast senders also writes elsewhere: its uplink is shared
            out.append((1, incast + 1, size))
        return out
    raise UsageError(f"unknown workload {workload!r}: pick from {', '.join(WORKLOADS)}")


def coll_streams(workload: str, fab: Fabric, size: int) -> list[dict]:
    """The messages of a collective workload (``size`` bytes of float32 per rank), from mrc.coll's schedule."""
    count = size // 4
    if workload == "all-to-all":
        count -= count % fab.hosts
    if count < 1:
        raise UsageError(f"--size {size}: a collective needs at least {4 * fab.hosts} bytes")
    return schedule.sim_messages(COLLECTIVES[workload], fab.hosts, count, 4, COLL_PIECE)


def coll_result(workload: str, fab: Fabric, size: int, streams: list[dict], span_ns: float) -> dict:
    """busbw (nccl-tests' factors) and the workload's wire bound: the time a network at line rate,
    with only the links' latency, would take for the same messages and dependencies."""
    coll = COLLECTIVES[workload]
    nbytes = (size // 4 - (size // 4) % fab.hosts if workload == "all-to-all" else size // 4) * 4
    goodput = fab.nic_bps() / 8e9 * fab.mtu / (fab.mtu + DATA_HDRS + WIRE_EXTRA)   # bytes per ns
    latency = 4 * fab.hop_ns + 3 * fab.ser_ns()   # the NIC serialises at its rate, 3 switches store and forward
    ideal = schedule.ideal_time_ns(streams, goodput, latency, fab.hosts)
    f = schedule.bus_factor(coll, fab.hosts)
    bus = lambda t: nbytes / t * 8 * f if t > 0 else 0.0  # noqa: E731  (Gb/s: bytes per ns x 8)
    return {"collective": coll, "bytes": nbytes, "time_us": round(span_ns / 1e3, 2), "ideal_us": round(ideal / 1e3, 2),
            "busbw_gbps": round(bus(span_ns), 2), "algbw_gbps": round(bus(span_ns) / f, 2),
            "bound_gbps": round(bus(ideal), 2), "busbw_vs_bound": round(ideal / span_ns, 4) if span_ns else 0.0}


class FabricSim:
    """One simulated fabric with its flows (``run`` once)."""

    def __init__(self, fab: Fabric, single_path: bool = False, max_qps: int = 64,
                 flow_bytes: int | None = None, check_times: bool = False) -> None:
        """``check_times``: every NIC checks at each wake that no QP waits past its time (the
        engine's kept times, mrc_ep_check_times); the result gains ``late_times``, 0 when it holds."""
        self.fab, self.single_path, self.check_times = fab, single_path, check_times
        self.result: dict = {}
        self.series: list = []
        self.fcts_us: list = []
        self.attr = fab.qp_attr(single_path, flow_bytes)
        cfg = ffi.new("struct mrc_fab_cfg *", {
            "hosts": fab.hosts, "planes": fab.planes, "leaves": fab.leaves, "spines": fab.spines,
            "rate_bps": fab.rate_bps, "hop_ns": fab.hop_ns, "buffer_bytes": fab.buffer_bytes,
            "ecn_bytes": fab.ecn_bytes, "trim_bytes": fab.trim_bytes, "max_qps": max_qps, "cq_depth": 1024,
            "bucket_ns": fab.bucket_ns, "seed": fab.seed, "unpaced": int(not fab.paced),
            "check_times": int(check_times)})
        out = ffi.new("struct mrc_fab **")
        check(lib.mrc_fab_create(cfg, self.attr.to_c(), out), "create the simulated fabric")
        self._f = out[0]
        self.flows: list[tuple[int, int, int]] = []
        self.faults: list[Fault] = []

    def add_flows(self, flows: list[tuple[int, int, int]], msg: int, depth: int = 8, start_ns: int = 0) -> None:
        for src, dst, nbytes in flows:
            fl = ffi.new("struct mrc_fab_flow *", {"src": src, "dst": dst, "bytes": nbytes, "msg": min(msg, nbytes),
                                                   "depth": depth, "start_ns": start_ns,
                                                   "single_path": int(self.single_path)})
            check(lib.mrc_fab_add_flow(self._f, fl), f"add flow {src} -> {dst}")
            self.flows.append((src, dst, nbytes))

    def add_fault(self, fault: Fault) -> None:
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
        tiers = {name: {"packets": t.packets, "marks": t.marked, "trims": t.trimmed, "drops": t.dropped,
                        "down_drops": t.down_dropped + t.cut, "refused": t.down_dropped, "cut": t.cut,
                        "hwm_kb": round(t.hwm_bytes / 1024, 1),
                        "utilization": round(t.bytes * 8 / (span * fab.rate_bps * self._ports(name)), 4) if span else 0}
                 for name, t in zip(TIERS, st.tier, strict=True)}
        n = lib.mrc_fab_series(self._f, ffi.NULL, 0)
        buf = ffi.new("uint64_t[]", max(1, n))
        lib.mrc_fab_series(self._f, buf, n)
        w = 1 + fab.planes
        self.series = [list(buf[i * w:(i + 1) * w]) for i in range(n // w)]
        plane_bytes = [sum(row[1 + p] for row in self.series) for p in range(fab.planes)]
        per_plane_cap = span * fab.rate_bps / 8 * fab.hosts  # every host's leaf sends this much up at most
        out = {
            "nics": fab.hosts, "flows": len(self.flows), "done": done, "single_path": self.single_path,
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
            "no_route": st.no_route, "rtx_packets": rtx, "timeouts": timeouts,
            "tiers": tiers,
            "plane_utilization": [round(b * 8 / 8 / per_plane_cap, 4) if per_plane_cap else 0 for b in plane_bytes],
            "packets": st.sent, "events": st.events,
            "data_packets": data,
            "wall_s": round(wall, 3), "sim_pps": int(st.sent / wall) if wall > 0 else 0,
            "sim_data_pps": int(data / wall) if wall > 0 else 0,
            "per_qp_bytes": self.attr.state_bytes(),
            "qps_per_nic_max": max(sum((s == h) + (d == h) for s, d, _ in self.flows) for h in range(fab.hosts)),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        if self.check_times:
            out["late_times"] = st.late_times
        self.fcts_us = fcts
        return out

    def _ports(self, tier: str) -> int:
        f = self.fab
        return f.hosts * f.planes if tier in ("nic", "leaf_down") else f.planes * f.leaves * f.spines

    def close(self) -> None:
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
        if self.tty and self.shown_at:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def parse_args_to_fabric(a) -> Fabric:
    return Fabric(hosts=a.hosts, planes=a.planes, leaves=a.leaves, spines=a.spines, rate_bps=parse_rate(a.rate),
                  hop_ns=parse_time(a.hop_delay), buffer_bytes=parse_size(a.buffer), ecn_bytes=parse_size(a.ecn),
                  trim_bytes=0 if a.trim in ("0", "off") else parse_size(a.trim), seed=a.seed,
                  paced=not a.no_pacing, mtu=a.mtu)


def main(a) -> int:
    """``mrc sim``: run, print (or JSON), plot; 1 when a QP failed or a flow did not finish."""
    import json
    import sys

    fab = parse_args_to_fabric(a)
    size, msg = parse_size(a.size), parse_size(a.msg)
    if size <= 0 or msg <= 0:
        raise UsageError("--size and --msg must be positive")
    faults = [parse_fault(s, fab) for s in a.fail] + [parse_fault(s, fab, flap=True) for s in a.flap]
    if a.incast < 1:
        raise UsageError("--incast must be at least 1")
    victim_at = parse_time(a.victim_at)
    check_victim_start(a.workload, victim_at, f"--victim-at {a.victim_at}")
    flows_for(a.workload, fab, size, a.incast, fab.seed)  # a workload that cannot be built says so first
    runs = {}
    for single in ([False, True] if a.single_path else [False]):
        name = "single_path" if single else "spray"
        if not a.json:
            print(f"{name}: {fab.hosts} NICs x {fab.planes} planes ({fab.leaves} leaves, {fab.spines} spines per "
                  f"plane), {a.workload} ...", file=sys.stderr, flush=True)
        prog = None if a.quiet else Progress(name, sys.stderr)
        s = simulate(fab, a.workload, size, msg, incast=a.incast, faults=faults, single_path=single,
                     victim_start_ns=victim_at, progress=prog)
        if prog:
            prog.close()
        runs[name] = s
        s.close()
    out = {"fabric": {"hosts": fab.hosts, "planes": fab.planes, "leaves": fab.leaves, "spines": fab.spines,
                      "rate_gbps": fab.rate_bps / 1e9, "hop_ns": fab.hop_ns, "mtu": fab.mtu,
                      "base_rtt_ns": fab.base_rtt_ns(),
                      "rto_us": round((1024 << fab.timeout_exp()) / 1000, 1),
                      "buffer_bytes": fab.buffer_bytes, "ecn_bytes": fab.ecn_bytes, "trim_bytes": fab.trim_bytes,
                      "paced": fab.paced, "seed": fab.seed},
           "workload": a.workload, "size": size, "msg": msg, "faults": [f.what for f in faults],
           **({"victim_at_ns": victim_at} if victim_at else {}),
           "spray": runs["spray"].result}
    if "single_path" in runs:
        out["single_path"] = runs["single_path"].result
        sp = runs["single_path"].result["goodput_ratio"]
        out["spray_over_single_path"] = round(runs["spray"].result["goodput_ratio"] / sp, 3) if sp else None
    if a.plots:
        out["plots"] = plots(runs, faults, fab, a.plots)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for name, s in runs.items():
            r = s.result
            print(f"{name:>12}: goodput {r['goodput_ratio']:.3f} of line rate (at most {r['wire_bound_ratio']:.3f}: "
                  f"the busiest NIC's bytes, then a round trip), completion p50 {r['p50_us']} us "
                  f"p99 {r['p99_us']} us max {r['max_us']} us, longest gap {r['max_gap_us']} us, "
                  f"drops {r['drops']} trims {r['trims']} marks {r['marks']}, QP errors {r['qp_errors']}, "
                  f"{r['packets']} packets in {r['wall_s']} s ({r['sim_pps']} /s)")
            if "victim_ratio" in r:
                print(f"{'':>12}  the victim: {r['victim_gbps']} Gb/s of a fair {r['victim_fair_gbps']} "
                      f"({r['victim_ratio']})")
    bad = any(s.result["qp_errors"] or s.result["unfinished"] for s in runs.values())
    return 1 if bad else 0


def plots(runs: dict, faults: list[Fault], fab: Fabric, outdir: str) -> list[str]:
    """The completion-time CDF and goodput/plane load over time; the paths written."""
    import os

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plots needs matplotlib: pip install 'mrc[bench]'") from None
    os.makedirs(outdir, exist_ok=True)
    paths = []

    def save(fig, ax, name: str, xlabel: str, ylabel: str) -> None:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
        paths.append(os.path.join(outdir, name))
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in runs.items():
        xs = sorted(s.fcts_us)
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=name)
    save(fig, ax, "sim_fct_cdf.png", "flow completion time (us)", "fraction of flows")
    fig, ax = plt.subplots(figsize=(7, 4))
    bucket = fab.bucket_ns
    for name, s in runs.items():
        ts = [i * bucket / 1e3 for i in range(len(s.series))]
        ax.plot(ts, [row[0] * 8 / (bucket / 1e9) / 1e12 for row in s.series], label=f"{name}: goodput (Tb/s)")
    for f in faults:
        ax.axvline(f.at_ns / 1e3, color="red", ls="--", lw=0.8)
    save(fig, ax, "sim_goodput.png", "virtual time (us)", "Tb/s")
    return paths
