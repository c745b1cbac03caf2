"""bench/ndp_permutation.py at CI size: mrc sim beside NDP's published permutation (docs/sim.md,
"Beside a published result"), and the two findings that explain the differences."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_published_permutation_runs_with_each_window_and_shows_why_it_differs():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "ndp_permutation.py"), "--quick", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    pub = out["published"]["gbps"]
    assert pub["min"] <= pub["p10"] <= pub["p50"] <= pub["p90"] <= pub["max"]
    w = out["windows"]
    assert set(w) == {"profile", "ndp_window", "ndp_window_no_quick_adapt"}
    for x in w.values():
        assert x["flows"] == out["hosts"] and x["qp_errors"] == 0 and x["unfinished"] == 0, x
        assert x["over_published"]["p50"] == round(x["gbps"]["p50"] / pub["p50"], 3)
    # the profile's window (1.5 x BDP at the base RTT) is the limit: NDP's 23 packets fill the links
    assert w["profile"]["max_cwnd"] < w["ndp_window"]["max_cwnd"] == 23 * 9000
    assert w["profile"]["gbps"]["p50"] < 0.8 * w["ndp_window"]["gbps"]["p50"]
    # the slowest flows with NDP's window are quick adapt's answer to the first round's trims
    assert w["ndp_window"]["trims"] > 0
    assert w["ndp_window_no_quick_adapt"]["gbps"]["min"] > w["ndp_window"]["gbps"]["min"]


def test_a_size_it_cannot_use_is_one_line_and_exit_2():
    for bad in ("abc", "0", "-5", "4K"):
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "ndp_permutation.py"), "--quick", f"--size={bad}"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 2 and "Traceback" not in r.stderr and "--size" in r.stderr, (bad, r.stderr)
