"""NSCC after a trim (a NACK TRIMMED: congestion without an RTT sample),
one context driven by hand."""
import pytest

from mrc import wire

from .handdriven import HandDriven


@pytest.mark.parametrize("md_jump", [500, 850, 950])
def test_a_trim_shrinks_the_window_and_never_grows_it(md_jump):
    """A trim is congestion without an RTT sample: the window goes down by
    half the largest decrease (it grew by 27 % with the floor at 0.85)."""
    h = HandDriven(cc={"max_md_jump": md_jump, "max_cwnd": 1 << 20})
    src = bytearray(64 << 10)
    h.qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    assert [p for p, d in h.out() if d["is_data"]]
    before = h.qp.stats()["cwnd"]
    h.now = 10**9  # long after the start: no decrease has happened within a base RTT
    h.deliver(h.nack(0, wire.NACK_TRIMMED))
    after = h.qp.stats()["cwnd"]
    assert h.qp.stats()["trims"] == 1
    want = before * (1 - (1 - md_jump / 1000) / 2)
    assert after < before and abs(after - want) < 0.01 * before, (before, after, want)
