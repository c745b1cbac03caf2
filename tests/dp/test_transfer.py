"""Every message size under loss, reordering, duplication and trimming:
destination bytes equal the source, every completion exactly once,
WRITE_IMM completions in order with the right immediate and byte count."""
import pytest

from .harness import PER_PLANE, SIZES, Pair, attr, digest, finish, start_big

CONDITIONS = {
    "clean": {},
    "loss1": {"loss_ppm": 10_000},
    "loss10": {"loss_ppm": 100_000},
    "reorder": {"jitter_ns": 8000},
    "dup": {"dup_ppm": 50_000},
    "trim": {"trim_ppm": 20_000},
}
#: a fixed seed per condition (the same in every run, unlike hash() of a str)
SEEDS = {cond: 101 + i for i, cond in enumerate(CONDITIONS)}


def check_result(pair, src, dst, send, recv, sizes, imm):
    assert digest(dst) == digest(src)
    assert sorted(w.wr_id for w in send) == list(range(len(sizes)))
    assert all(w.ok for w in send), [w.status_name for w in send if not w.ok]
    assert [w.wr_id for w in send] == list(range(len(sizes)))  # in order
    if imm:
        assert [w.wr_id for w in recv] == [1000 + i for i in range(len(sizes))]
        assert [w.imm_data for w in recv] == [0xABC00000 + i for i in range(len(sizes))]
        assert [w.byte_len for w in recv] == sizes
        assert all(w.ok for w in recv)
    else:
        assert recv == []


@pytest.mark.parametrize("cond", list(CONDITIONS))
@pytest.mark.parametrize("imm", [False, True], ids=["write", "write_imm"])
def test_sizes_under_conditions(cond, imm):
    sizes = SIZES
    pair = Pair(seed=SEEDS[cond], **CONDITIONS[cond])
    src, dst, send, recv = pair.transfer(sizes, imm=imm)
    check_result(pair, src, dst, send, recv, sizes, imm)
    st = pair.qa.stats()
    if cond.startswith("loss") or cond == "trim":
        assert st["rtx_packets"] > 0
    if cond == "dup":
        assert pair.b.drops()["duplicate"] > 0
    if cond == "trim":
        assert pair.b.drops()["trimmed"] > 0 and st["trims"] > 0


def test_many_small_messages_with_imm_stay_in_order_under_reordering():
    sizes = [100 + (i * 37) % 5000 for i in range(300)]
    pair = Pair(seed=5, qp_attr=attr(rq_depth=512, max_wimm=16), jitter_ns=10_000, loss_ppm=5000)
    src, dst, send, recv = pair.transfer(sizes, imm=True)
    check_result(pair, src, dst, send, recv, sizes, True)


def test_multi_sge_gathers_in_order():
    pair = Pair(seed=2)
    parts = [bytearray(b"A" * 5000), bytearray(b"B" * 3), bytearray(b"C" * 9000)]
    mrs = [pair.a.reg_mr(p) for p in parts]
    dst = bytearray(14003)
    md = pair.b.reg_mr(dst, remote_write=True)
    pair.qa.post_write(None, 0, 0, md.addr, md.rkey, wr_id=9,
                       sges=[(m, 0, len(p)) for m, p in zip(mrs, parts, strict=True)])
    wc = pair.sim.run_until(lambda: pair.a.poll_cq())
    assert wc[0].ok and wc[0].byte_len == 14003
    assert bytes(dst) == b"A" * 5000 + b"B" * 3 + b"C" * 9000


def test_ecn_marks_above_the_queue_threshold_steer_and_cut_the_window():
    # every path is a 1 Gb/s queue that marks CE above 8 KB
    pair = Pair(seed=21, rate_bps=1_000_000_000, ecn_queue_bytes=8192)
    src, dst, send, recv = pair.transfer([8 << 20])
    check_result(pair, src, dst, send, recv, [8 << 20], False)
    st = pair.qa.stats()
    assert pair.sim.stats()["ecn_marked"] > 0 and st["ecn_marks"] > 0
    assert st["cwnd"] < 187500  # NSCC decreased from max_cwnd
    assert st["rtx_packets"] == 0  # congestion is not loss


def test_loss_mask_drops_exactly_those_packets_deterministically():
    runs = []
    for _ in range(2):
        pair = Pair(seed=22)
        pair.sim.set_path(pair.sim.path(0, 0), loss_mask=0b1001)  # 2 of every 64 on one path
        src, dst, send, recv = pair.transfer([2 << 20])
        check_result(pair, src, dst, send, recv, [2 << 20], False)
        runs.append((pair.sim.stats()["dropped"], pair.qa.stats()["rtx_packets"], pair.sim.now))
    assert runs[0] == runs[1] and runs[0][0] >= 2


def _wide_window_run(loss_ppm):
    """64 MiB over 100 us RTT paths with the software-timed attributes the
    contexts use: a full congestion window (45 packets) plus what is sent while
    a hole waits out the reorder allowance spans more than the bitmap's 64 PSNs."""
    from mrc.verbs import SOFTWARE_CC, SOFTWARE_TIMING

    a = attr(sq_depth=256, ev_count=128, ev_backup=16, ev_min_active=8, cc=dict(SOFTWARE_CC),
             **{k: v for k, v in SOFTWARE_TIMING.items() if k != "ack_bytes"})
    pair = Pair(seed=5, qp_attr=a)
    pair.sim.set_all(delay_ns=50_000)
    for i in range(PER_PLANE):
        pair.sim.set_path(pair.sim.path(0, i), delay_ns=50_000, loss_ppm=loss_ppm)
    src, dst = start_big(pair, 64 << 20)
    t0 = pair.sim.now
    wc = finish(pair, budget_ns=20_000_000_000)
    assert wc[0].ok and digest(dst) == digest(src)
    return pair.sim.now - t0, pair.qa.stats()


def test_a_loss_behind_a_window_wider_than_the_sack_bitmap_is_found_without_the_timer():
    """1% loss on one plane of four. Each SACK's 64-PSN bitmap must reach the
    packet that triggered it: when it always started at the hole, a window of
    more than 64 packets behind one loss was never acknowledged past the
    bitmap, nothing visible was sent late enough to call the hole lost, and
    every loss waited for the retransmit timer (3 x slower here)."""
    clean, _ = _wide_window_run(0)
    lossy, st = _wide_window_run(10_000)
    assert st["losses"] > 10
    assert st["timeouts"] == 0, st["timeouts"]
    assert clean / lossy >= 0.9, (clean, lossy)
