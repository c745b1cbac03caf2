"""`mrc soak` on the in-memory link: a short run is clean, and its checks
do catch a byte that landed wrong (in a write's slot or between slots)."""
import json
import subprocess
import sys

from mrc.tools import soak


def test_a_short_soak_is_clean_and_exercises_every_fault():
    s = soak.Soak(seed=3)
    try:
        r = s.run(seconds=None, packets=200_000)
    finally:
        s.close()
    assert r["packets"] >= 200_000 and r["messages"] > 100 and r["bytes"] > 0
    assert r["qp_errors"] == r["corrupt_bytes"] == r["order_errors"] == r["imm_errors"] == 0, r
    assert r["retransmits"] > 0
    link = r["link"]
    assert link["dropped"] and link["duplicated"] and link["trimmed"] and link["flaps"], link


def test_the_soak_sees_a_wrong_byte_in_a_slot_and_between_slots():
    s = soak.Soak(seed=4)
    try:
        s.run(seconds=None, packets=20_000)
        # the writes in flight land (no more faults): then spoil one byte of each before the check
        s.sim.set_all(loss_ppm=0, dup_ppm=0, trim_ppm=0, jitter_ns=0, down_from_ns=0, down_until_ns=0)
        for f in s.flows:
            s._post(f)
        s.sim.run(s.sim.now + 50_000_000)
        spoiled = 0
        for f in s.flows:
            for slot, _src, n, _imm in f.inflight.values():
                off = soak._slot_off(f, slot) + n - 1
                f.dst[off] ^= 0xFF
                spoiled += 1
        before = s.counts["corrupt_bytes"]
        s._check()
        assert spoiled and s.counts["corrupt_bytes"] - before == spoiled
        f = s.flows[0]
        f.dst[f.base + 7] = 1  # in the gap before the first slot
        assert s.gaps_corrupt() == 1
        assert s.result(1.0)["corrupt_bytes"] == s.counts["corrupt_bytes"] + 1
    finally:
        s.close()


def test_mrc_soak_prints_json_and_exits_by_its_result():
    out = subprocess.run([sys.executable, "-m", "mrc", "soak", "--packets", "50000", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert {"packets", "bytes", "qp_errors", "corrupt_bytes", "retransmits"} <= set(r) and r["ok"] is True
    bad = subprocess.run([sys.executable, "-m", "mrc", "soak", "--seconds", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--seconds: wants a number above 0" in bad.stderr
