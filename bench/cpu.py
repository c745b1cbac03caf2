"""CPU per byte, for the benches: the machine's own floor (a packet copied
and checksummed, apart and in one pass: csrc/bench/passes.c) and the CPU
time of threads, from their CPU clocks, with the user/system split the
kernel's tick accounting gives.

What a thread's CPU clock holds on this kernel: its own work in user space,
its system calls, and the softirq work (the fabric's forwarding, the veths'
delivery) that happened to run on its CPU while it was the running task:
without CONFIG_IRQ_TIME_ACCOUNTING the kernel charges softirqs to whoever was
interrupted. `system_softirq_s` (from /proc/stat) says how much of the whole
machine's time went to softirqs in the same interval; which thread's clock
took it is not recorded anywhere.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

from mrc._dp import ffi, lib

TICK = 1.0 / os.sysconf("SC_CLK_TCK")
PASSES = {"copy": lib.MRC_PASS_COPY, "crc": lib.MRC_PASS_CRC, "apart": lib.MRC_PASS_APART,
          "fused": lib.MRC_PASS_FUSED}


def ghz() -> float:
    """The CPU's clock (what /proc/cpuinfo says): ns -> cycles. Ratios of two
    figures measured here do not depend on it."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    return 1.0


def thread_split(tid: int) -> tuple[float, float]:
    """(user, system) seconds of thread ``tid`` of this process (tick accounting)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) * TICK, int(fields[12]) * TICK  # utime, stime (fields 14 and 15)


def system_softirq() -> float:
    """Seconds every CPU has spent in softirq so far (/proc/stat)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[7]) * TICK


def minimum(payload: int, rounds: int = 5, mib: int = 256, span_mib: int = 64) -> dict:
    """The machine's cost per byte of a packet copied from a region larger
    than the caches into a packet buffer: copy, CRC32C, both apart and both
    fused into one pass; the kinds alternated ``rounds`` times, medians and
    spreads in ns and cycles per byte."""
    src = bytearray(os.urandom(1 << 20)) * span_mib
    dst = bytearray(payload)
    s, d = ffi.from_buffer(src), ffi.from_buffer(dst)
    per: dict[str, list[float]] = {k: [] for k in PASSES}
    for _ in range(rounds):
        for name, kind in PASSES.items():
            ns = lib.mrc_bench_pass(kind, d, s, len(src), payload, mib << 20)
            per[name].append(ns / (mib << 20))
    hz = ghz()
    out = {"payload": payload, "cpu_ghz": hz}
    for name, xs in per.items():
        out[f"{name}_cycles_per_byte"] = round(statistics.median(xs) * hz, 4)
        out[f"{name}_cycles_per_byte_spread"] = [round(min(xs) * hz, 4), round(max(xs) * hz, 4)]
    out["fused_over_apart"] = round(statistics.median(per["fused"]) / statistics.median(per["apart"]), 3)
    return out


def own_cpu() -> tuple[float, float, float]:
    """(CPU, user, system) seconds of the calling thread so far."""
    return (time.thread_time(), *thread_split(threading.get_native_id()))


class Threads:
    """CPU seconds of named threads between start() and stop(): engine
    threads (a context's ``engine.cpu()``) and the calling thread, each with
    its user/system split; threads that measure themselves add theirs."""

    def __init__(self) -> None:
        self.engines: dict[str, object] = {}
        self.me: str | None = None
        self.added: dict[str, dict] = {}

    def engine(self, name: str, ctx) -> None:
        self.engines[name] = ctx

    def this_thread(self, name: str) -> None:
        self.me = name

    def add(self, name: str, before: tuple, after: tuple) -> None:
        """A thread's own own_cpu() readings, taken by itself."""
        self.added[name] = delta(before, after)

    def _read(self) -> dict:
        got = {}
        for name, ctx in self.engines.items():
            c = ctx.engine.cpu()
            got[name] = (c["cpu_ns"] / 1e9, *thread_split(c["tid"]))
        if self.me:
            got[self.me] = own_cpu()
        return got

    def start(self) -> None:
        self.t0, self.sirq0, self.wall0 = self._read(), system_softirq(), time.perf_counter()

    def stop(self) -> dict:
        t1, sirq, wall = self._read(), system_softirq() - self.sirq0, time.perf_counter() - self.wall0
        out = {name: delta(v, t1[name]) for name, v in self.t0.items()}
        out.update(self.added)
        out["system_softirq_s"] = round(sirq, 3)
        out["wall_s"] = round(wall, 3)
        return out


def delta(a: tuple, b: tuple) -> dict:
    """What a thread used between two own_cpu() readings (CPU, user, system seconds)."""
    return {"cpu_s": round(b[0] - a[0], 4), "user_s": round(b[1] - a[1], 3), "sys_s": round(b[2] - a[2], 3)}


def per_byte(cpu: dict, names: list[str], nbytes: int, hz: float) -> dict:
    """Cycles per delivered byte of the threads ``names`` together: all of
    their CPU time, and the user-space part alone."""
    total = sum(cpu[n]["cpu_s"] for n in names)
    split = sum(cpu[n]["user_s"] + cpu[n]["sys_s"] for n in names)
    user = sum(cpu[n]["user_s"] for n in names)
    user_share = user / split if split else 0.0
    return {"cycles_per_byte": round(total * hz * 1e9 / nbytes, 3) if nbytes else None,
            "user_cycles_per_byte": round(total * user_share * hz * 1e9 / nbytes, 3) if nbytes else None}
