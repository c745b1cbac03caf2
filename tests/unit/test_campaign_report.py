"""The fault campaign's pause monitor: the control that tells a stall of the
machine (its CPUs, or the hypervisor taking a virtual CPU away) from one of MRC."""
from __future__ import annotations

import importlib.util
import os
import signal
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _report():
    spec = importlib.util.spec_from_file_location("campaign_report", os.path.join(ROOT, "bench", "campaign_report.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_monitor_reports_a_pause_it_was_kept_from_running_with_the_steal_time_then():
    """Stopped for 150 ms (SIGSTOP), it notes one pause of about that length and
    a steal figure read from /proc/stat (0 or more: this VM's hypervisor decides)."""
    m = _report().PauseMonitor()
    try:
        time.sleep(0.3)  # started and looking
        os.kill(m.proc.pid, signal.SIGSTOP)
        time.sleep(0.15)
        os.kill(m.proc.pid, signal.SIGCONT)
        time.sleep(0.1)
    finally:
        pauses = m.stop()
    long = [p for p in pauses if p[1] >= 140_000_000]
    assert long, pauses  # (the machine may add a pause of its own: not asserted away)
    start, away, steal = max(long, key=lambda p: p[1])
    assert away < 1_000_000_000 and isinstance(steal, float) and steal >= 0.0


def test_the_figures_take_the_pause_that_overlaps_the_longest_gap_most():
    figures = _report().monitor_figures
    gaps = {"max_ends_at_s": 5.0, "max_ms": 100.0}  # the gap: 4.9 s to 5.0 s
    pauses = [(1.0, 0.5, 0.0), (4.95, 0.1, 90.0), (4.80, 0.12, 10.0)]  # the last two overlap it: 50 and 20 ms
    out = figures(pauses, [(2.0, 0.02, 0.0)], gaps)
    assert out == {"monitor_max_pause_ms": 500.0, "no_fault_monitor_max_pause_ms": 20.0,
                   "monitor_pause_in_longest_gap_ms": 50.0, "steal_in_longest_gap_ms": 90.0}
    assert figures([], [], gaps)["steal_in_longest_gap_ms"] == 0.0
    assert "steal_in_longest_gap_ms" not in figures([], [], {"max_ends_at_s": None})
