"""The pause monitor's own process (bench/campaign_report.PauseMonitor runs
it): it sleeps 1 ms at a time and prints ``<start, ns> <length, ns> <how
long it was away, ns> <the most steal time one CPU counted, ms>`` for every
time it woke more than LATE_NS late (away = length), and for every window
of at most 100 ms in which a CPU counted steal time while it ran on another
(away 0). Steal time is /proc/stat's eighth CPU column: the hypervisor
running something else on that virtual CPU. Standard library only.

    python bench/pause_monitor.py LATE_NS
"""
from __future__ import annotations

import os
import sys
import time


def steal_ticks(text: str) -> dict[str, int]:
    """Each CPU's steal time so far in clock ticks, from /proc/stat's text:
    {"cpu0": n, ...}. Lines that are not one CPU's (the "cpu" total, intr,
    ...), too short or not numbers are left out."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) > 8 and f[0].startswith("cpu") and f[0] != "cpu" and f[8].isdigit():
            out[f[0]] = int(f[8])
    return out


def most_steal(before: dict[str, int], after: dict[str, int]) -> int:
    """The most steal ticks one CPU counted between two readings: CPUs in
    both only (one may go offline), a counter that went back counts 0."""
    return max((max(after[c] - before[c], 0) for c in after.keys() & before.keys()), default=0)


def _read() -> dict[str, int]:
    try:
        with open("/proc/stat") as f:
            return steal_ticks(f.read())
    except OSError:
        return {}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: pause_monitor.py LATE_NS", file=sys.stderr)
        return 2
    late, tick_ms = int(argv[1]), 1000 / os.sysconf("SC_CLK_TCK")
    prev = time.monotonic_ns()
    base, base_at = _read(), prev
    while True:
        time.sleep(0.001)
        now = time.monotonic_ns()
        if now - prev > late:
            st = _read()
            print(prev, now - prev, now - prev, round(most_steal(base, st) * tick_ms, 1), flush=True)
            base, base_at = st, now
        elif now - base_at > 100_000_000:  # a look every 100 ms: steal on a CPU this process was not on
            st = _read()
            stolen = most_steal(base, st)
            if stolen:
                print(base_at, now - base_at, 0, round(stolen * tick_ms, 1), flush=True)
            base, base_at = st, now
        prev = now


if __name__ == "__main__":
    sys.exit(main(sys.argv))
