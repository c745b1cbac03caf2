"""The fault campaign's pause monitor: the control that tells a stall of the
machine (its CPUs, or the hypervisor taking a virtual CPU away) from one of MRC."""
from __future__ import annotations

import importlib.util
import os
import signal
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench(name: str):
    """bench/<name>.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _report():
    return _bench("campaign_report")


def _monitor():
    return _bench("pause_monitor")


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
    long = [p for p in pauses if p[2] >= 140_000_000]
    assert long, pauses  # (the machine may add a pause of its own: not asserted away)
    start, length, away, steal = max(long, key=lambda p: p[2])
    assert length == away < 1_000_000_000 and isinstance(steal, float) and steal >= 0.0


def test_the_figures_take_the_pause_that_overlaps_the_longest_gap_most():
    figures = _report().monitor_figures
    gaps = {"max_ends_at_s": 5.0, "max_ms": 100.0}  # the gap: 4.9 s to 5.0 s
    # the middle two pauses overlap it by 50 and 20 ms; the last is a window of steal on another CPU
    pauses = [(1.0, 0.5, 0.5, 0.0), (4.95, 0.1, 0.1, 90.0), (4.80, 0.12, 0.12, 10.0), (4.9, 0.1, 0.0, 20.0)]
    out = figures(pauses, [(2.0, 0.02, 0.02, 0.0)], gaps)
    assert out == {"monitor_max_pause_ms": 500.0, "no_fault_monitor_max_pause_ms": 20.0,
                   "monitor_pause_in_longest_gap_ms": 50.0, "steal_in_longest_gap_ms": 90.0}
    assert figures([], [], gaps)["steal_in_longest_gap_ms"] == 0.0
    stolen = figures([(4.9, 0.1, 0.0, 30.0)], [], gaps)  # only another CPU's time was stolen in the gap
    assert stolen["monitor_pause_in_longest_gap_ms"] == 0.0 and stolen["steal_in_longest_gap_ms"] == 30.0
    assert "steal_in_longest_gap_ms" not in figures([], [], {"max_ends_at_s": None})


def test_steal_is_read_per_cpu_and_what_is_not_a_cpu_line_is_left_out():
    m = _monitor()
    text = ("cpu  10 0 5 100 0 0 0 90 0 0\n"                      # the total: not one CPU
            "cpu0 1 0 1 50 0 0 0 40 0 0\n"
            "cpu1 1 0 1 50 0 0 0 50 0 0\n"
            "cpu2 1 0 1\n"                                      # too short
            "cpu3 1 0 1 50 0 0 0 -4 0 0\n"                      # not a count
            "cpu4 1 0 1 50 0 0 0 x 0 0\n"
            "intr 1 2 3 4 5 6 7 8 9\n"
            "\x00\xff garbage line with many words in it\n")
    assert m.steal_ticks(text) == {"cpu0": 40, "cpu1": 50}
    assert m.steal_ticks("") == {} and m.steal_ticks("cpu0\n" * 1000) == {}


def test_the_most_steal_compares_the_same_cpus_and_never_goes_negative():
    m = _monitor()
    assert m.most_steal({"cpu0": 40, "cpu1": 50}, {"cpu0": 43, "cpu1": 60}) == 10
    assert m.most_steal({"cpu0": 40, "cpu1": 50}, {"cpu1": 52}) == 2  # cpu0 went offline: not paired with cpu1
    assert m.most_steal({"cpu0": 40}, {"cpu0": 30}) == 0  # a counter that went back
    assert m.most_steal({}, {"cpu0": 30}) == 0 and m.most_steal({"cpu0": 1}, {}) == 0


def test_the_monitor_refuses_a_bad_argument():
    import subprocess
    import sys

    for bad in ([], ["-5"], ["ten"], ["1", "2"]):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pause_monitor.py"), *bad],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and "usage" in r.stderr, (bad, r)


def test_the_monitors_lines_that_do_not_parse_are_left_out():
    parse = _report().parse_pauses
    text = ("100 20000000 20000000 30.0\n1 2 3\n1 2 3 4 5\nx 2 2 3.0\n5 -1 -1 0.0\n5 10 11 0.0\n"
            "6 7 7 nan\n8 9 9 inf\n9 10 10 -1.5\n11 100000000 0 20.0\n13 14")
    assert parse(text) == [(100, 20_000_000, 20_000_000, 30.0), (11, 100_000_000, 0, 20.0)]
    assert parse("") == []
