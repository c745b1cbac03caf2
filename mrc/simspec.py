"""What ``mrc sim`` simulates: the fabric (planes, leaves, spines, hosts, rates,
queues), the faults it runs (``--fail``, ``--flap``) and the workloads' flows,
collectives included (mrc.coll's schedule as gated messages). Pure
descriptions and their parsing; mrc.simfab runs them over csrc/sim/simfab.c."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from mrc._dp import ffi, lib
from mrc.coll import schedule
from mrc.core import QPAttr
from mrc.errors import UsageError
from mrc.units import parse_time  # noqa: F401 (mrc.simspec.parse_time: the simulator's readers use it)
from mrc.usid import host_usid

WORKLOADS = ("permutation", "alltoall", "incast", "victim", "ring-allreduce", "all-reduce", "all-to-all")
#: workloads that run mrc.coll's schedule: float32 elements, the communicator's slots as pieces and its
#: credits (slots x channels) as the WRITEs in flight per pair; each WRITE_IMM waits for the one it depends on
COLLECTIVES = {"all-reduce": "all_reduce", "all-to-all": "all_to_all"}
COLL_PIECE, COLL_CREDITS = 512 << 10, 16
TIERS = ("nic", "leaf_up", "spine_down", "leaf_down")
#: bytes on the wire beyond an MRC packet, as the simulator counts them
WIRE_EXTRA = lib.MRC_FAB_WIRE_EXTRA
#: MRC headers of a data packet with a RETH (csrc/wire/wire.c)
DATA_HDRS = lib.MRC_BTH_LEN + lib.MRC_RETH_LEN + lib.MRC_ICRC_LEN
NEVER = 1 << 62


CC_FIELDS = tuple(name for name, _ in ffi.typeof("struct mrc_cc_params").fields)
#: the congestion controls by name, from C's table (enum mrc_cc_algorithm)
CC_ALGORITHMS = {ffi.string(lib.mrc_cc_algorithm_name(i)).decode(): i for i in range(lib.MRC_CC_NALGORITHMS)}


TRANSPORTS = {"mrc": lib.MRC_FAB_MRC, "roce": lib.MRC_FAB_ROCE}
ROCE_CFG_FIELDS = tuple(name for name, _ in ffi.typeof("struct mrc_roce_cfg").fields)
#: the fabric's side of a RoCE run (the rest are struct mrc_roce_cfg fields)
ROCE_FABRIC = ("qps", "split", "converge_ns", "pfc_xoff", "pfc_xon")
#: a RoCE QP as NCCL sets one up (its IB_TIMEOUT 20: 4.096 us x 2^20 = 4.3 s; IB_RETRY_CNT 7; NCCL's
#: net_ib source, 18 and 14 in older releases), DCQCN on, routing converging 500 ms after a link
#: changes (BGP with BFD: hundreds of milliseconds)
ROCE_DEFAULTS = {"qps": 1, "converge_ns": 500_000_000, "timeout": 20, "retry_cnt": 7, "dcqcn": 1}


def roce_params(roce: dict | None) -> dict:
    """The RoCE model's settings (docs/sim.md, "RoCEv2"): ``qps`` per flow, ``converge_ns``, and
    struct mrc_roce_cfg fields over ROCE_DEFAULTS, checked as whole numbers (``g`` a fraction)."""
    out = dict(ROCE_DEFAULTS)
    fields = ROCE_FABRIC + tuple(f for f in ROCE_CFG_FIELDS if f not in ("line_bps", "mtu", "wire_extra"))
    for k, v in (roce or {}).items():
        if k not in fields:
            raise UsageError(f"roce field {k!r}: one of {', '.join(fields)}")
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if k == "g" and not (number and 0 < v < 1):
            raise UsageError(f"roce g={v!r}: a fraction between 0 and 1")
        if k != "g" and not (number and isinstance(v, int) and v >= 0):
            raise UsageError(f"roce {k}={v!r}: a whole number >= 0")
        out[k] = v
    if not 1 <= out["qps"] <= lib.MRC_FAB_ROCE_QPS:
        raise UsageError(f"roce qps={out['qps']}: 1 to {lib.MRC_FAB_ROCE_QPS} QPs per flow")
    if out.get("pfc_xon", 0) > out.get("pfc_xoff", 0):
        raise UsageError(f"roce pfc_xon={out['pfc_xon']} above pfc_xoff={out.get('pfc_xoff', 0)}: PFC resumes "
                         "below where it paused")
    if not 1 <= out["timeout"] <= 31 or out["retry_cnt"] > 7 or out["dcqcn"] > 1 or out.get("split", 0) > 1:
        raise UsageError("roce timeout 1-31 (4.096 us x 2^timeout), retry_cnt 0-7, dcqcn and split 0 or 1")
    return out


def cc_params(cc: dict | None) -> dict:
    """Congestion control settings (struct mrc_cc_params fields, ``algorithm`` by name or number) checked,
    as numbers; an unknown field or a value that is not a whole number >= 0 is refused in one line."""
    if cc is None:
        return {}
    if not isinstance(cc, dict):
        raise UsageError(f"cc {cc!r}: a mapping of congestion control fields, e.g. {{\"algorithm\": \"fixed\"}}")
    out = {}
    for k, v in cc.items():
        if k not in CC_FIELDS:
            raise UsageError(f"cc field {k!r} is not one of {', '.join(CC_FIELDS)}")
        if k == "algorithm" and isinstance(v, str):
            if v not in CC_ALGORITHMS:
                raise UsageError(f"cc algorithm {v!r}: one of {', '.join(CC_ALGORITHMS)}")
            v = CC_ALGORITHMS[v]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise UsageError(f"cc {k}={v!r}: a whole number >= 0")
        out[k] = v
    return out


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
    cc: dict = field(default_factory=dict)  # struct mrc_cc_params fields over the fabric's own (algorithm: nscc, fixed)
    transport: str = "mrc"   # or "roce": the RoCEv2 model at every NIC (docs/sim.md)
    roce: dict = field(default_factory=dict)  # roce_params: qps, converge_ns, struct mrc_roce_cfg fields

    def __post_init__(self) -> None:
        if not 2 <= self.hosts <= lib.MRC_FAB_MAX_HOSTS:
            raise UsageError(f"--hosts {self.hosts}: the simulator takes 2 to {lib.MRC_FAB_MAX_HOSTS} hosts")
        if not 1 <= self.planes <= 16:
            raise UsageError(f"--planes {self.planes}: 1 to 16 planes (a uSID carries the plane in 4 bits)")
        self.leaves = self.leaves or max(1, (self.hosts + 31) // 32)
        self.spines = self.spines or (self.hosts + self.leaves - 1) // self.leaves
        if not 1 <= self.leaves <= min(256, self.hosts) or not 1 <= self.spines <= 256:
            raise UsageError(f"{self.leaves} leaves, {self.spines} spines: 1 to 256 each, no more leaves than hosts")
        if -(-self.hosts // self.leaves) > lib.MRC_FAB_LEAF_HOSTS:
            raise UsageError(f"{self.hosts} hosts on {self.leaves} leaves: at most {lib.MRC_FAB_LEAF_HOSTS} "
                             "under one leaf (host port uSIDs carry 10 bits)")
        if not 1_000_000 <= self.rate_bps <= 8 * 10**12:
            raise UsageError(f"--rate {self.rate_bps}: between 1 Mbit/s and 8 Tbit/s")
        if not isinstance(self.paced, bool):
            raise UsageError(f"paced={self.paced!r}: True (NICs pace their ports) or False (the control)")
        if not 0 < self.hop_ns <= 10**9:
            raise UsageError(f"--hop-delay {self.hop_ns} ns: above 0 and at most 1 s")
        if isinstance(self.mtu, bool) or not isinstance(self.mtu, int) or \
                not lib.MRC_MIN_MTU <= self.mtu <= lib.MRC_MAX_MTU:
            raise UsageError(f"--mtu {self.mtu!r}: payload bytes per packet, {lib.MRC_MIN_MTU} to {lib.MRC_MAX_MTU}")
        self.cc = cc_params(self.cc)
        if self.transport not in TRANSPORTS:
            raise UsageError(f"--transport {self.transport!r}: one of {', '.join(TRANSPORTS)}")
        self.roce = roce_params(self.roce)

    def fab_cfg(self) -> dict:
        """What struct mrc_fab_cfg takes of the transport."""
        r = {k: v for k, v in self.roce.items() if k not in ROCE_FABRIC}
        return {"transport": TRANSPORTS[self.transport], "roce_qps": self.roce["qps"],
                "roce_split": self.roce.get("split", 0),
                "converge_ns": self.roce["converge_ns"], "roce": r,
                "pfc_xoff": self.roce.get("pfc_xoff", 0) if self.transport == "roce" else 0,
                "pfc_xon": self.roce.get("pfc_xon", 0) if self.transport == "roce" else 0}

    def host_leaf(self, h: int) -> int:
        """Host ``h``'s leaf (as mrc.fabric.topology places hosts)."""
        return h * self.leaves // self.hosts  # as mrc.fabric.topology places hosts

    def host_usid(self, h: int, plane: int) -> int:
        """Host ``h``'s port uSID on ``plane``: mrc.usid.host_usid up to
        MRC_FAB_NAMED_HOSTS hosts; past that the port's number on its leaf (csrc/sim/fab.h)."""
        i = h
        if self.hosts > lib.MRC_FAB_NAMED_HOSTS:
            leaf = self.host_leaf(h)
            i = h - -(-leaf * self.hosts // self.leaves)  # the leaf's first host
        return host_usid(i, plane)  # the same kinds and bits, for the number i

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
        """A NIC's rate, every plane together."""
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
        while mpr * lib.MRC_MPR_UNIT * self.mtu < need and mpr < lib.MRC_MAX_MPR:
            mpr *= 2
        per_plane = max(16, self.spines)
        return QPAttr(planes=self.planes, mtu=self.mtu, mpr=mpr, sq_depth=16, rq_depth=16,
                      ev_count=min(lib.MRC_MAX_EV_COUNT, per_plane * self.planes), ev_backup=4,
                      ev_min_active=1 if single_path else 8,
                      reorder_ns=base, skip_ns=2 * base, probe_interval_ns=max(5 * base, 20_000),
                      timeout=self.timeout_exp(), linear_cnt=3, exp_cnt=7,
                      cc={"base_rtt": base, "target_delay": base, "max_cwnd": max_cwnd,
                          # quick adapt's delay threshold scaled as the defaults have it (40 us over a
                          # 10 us base): a fixed 40 us is less than one packet's serialization on a
                          # slow link, where every ACK would call quick adapt
                          "qa_threshold": 4 * base, **self.cc})

    def link_host(self, h: int, p: int) -> int:
        """The link number of host ``h``'s port on plane ``p``."""
        return p * self.hosts + h

    def link_fabric(self, p: int, leaf: int, s: int) -> int:
        """The link number of plane ``p``'s leaf ``leaf`` to spine ``s``."""
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
        """The fault's link changes: (time, link, up)."""
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
