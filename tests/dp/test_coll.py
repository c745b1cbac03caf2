"""The communicator (mrc.coll) on the in-memory link, rootless: every
collective x dtype x op at 2, 3, 4, 5 and 8 ranks against numpy, awkward
sizes, bad input refused before anything is sent, a lossy link, and a rank
that dies mid-collective."""
from __future__ import annotations

import numpy as np
import pytest

from mrc.coll import schedule
from mrc.coll.comm import CollError, CommAborted
from mrc.coll.memworld import MemWorld
from mrc.coll.proto import imm_pack, imm_unpack

DTYPES = ["float16", "float32", "float64", "int32", "int64"]
OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum}
RANKS = [2, 3, 4, 5, 8]


def inputs(n: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    # small whole numbers: every order of summation gives the same result, in float16 too
    rng = np.random.default_rng(seed)
    return [rng.integers(-8, 9, count).astype(dtype) for _ in range(n)]


def reduce_all(xs, op):
    out = xs[0].copy()
    for x in xs[1:]:
        out = OPS[op](out, x)
    return out


def ok(results):
    for r, res in enumerate(results):
        assert not isinstance(res, BaseException), f"rank {r}: {res!r}"
    return results


@pytest.fixture(scope="module", params=RANKS)
def world(request):
    # small slots: every call spans several pieces per transfer, and several credits per channel
    w = MemWorld(request.param, slot_bytes=256, slots=3, channels=2)
    yield w
    w.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_product(world, dtype):
    # factors of -2 to 2: exact in every dtype and every order, up to 8 ranks
    n = len(world.comms)
    rng = np.random.default_rng(n)
    xs = [rng.integers(-2, 3, 3 * n + 1).astype(dtype) for _ in range(n)]
    want = np.prod(np.stack(xs), axis=0).astype(dtype)
    got = ok(world.run(lambda c: c.all_reduce(xs[c.rank], "prod", async_op=True)))
    for r in range(n):
        assert np.array_equal(got[r], want), r


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_all_reduce_and_reduce_scatter(world, dtype, op):
    n = len(world.comms)
    for count in (0, 1, n - 1, 3 * n + 1, 517):
        xs = inputs(n, count, dtype, seed=count)
        want = reduce_all(xs, op)
        got = ok(world.run(lambda c, xs=xs: c.all_reduce(xs[c.rank], op, async_op=True)))
        for r in range(n):
            assert got[r].dtype == np.dtype(dtype) and np.array_equal(got[r], want), (count, r)
        got = ok(world.run(lambda c, xs=xs: c.reduce_scatter(xs[c.rank], op, async_op=True)))
        parts = np.array_split(want, n)
        for r in range(n):
            assert np.array_equal(got[r], parts[r]), (count, r)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_broadcast_all_to_all(world, dtype):
    n = len(world.comms)
    for count in (0, 1, 7, 130):
        xs = inputs(n, count, dtype, seed=100 + count)
        got = ok(world.run(lambda c, xs=xs: c.all_gather(xs[c.rank], async_op=True)))
        for r in range(n):
            assert np.array_equal(got[r], np.concatenate(xs))
        for root in (0, n - 1):
            bufs = [x.copy() for x in xs]
            got = ok(world.run(lambda c, root=root, bufs=bufs: c.broadcast(bufs[c.rank], root=root, async_op=True)))
            for r in range(n):
                assert got[r] is bufs[r] and np.array_equal(bufs[r], xs[root])
        ys = inputs(n, count * n, dtype, seed=200 + count)
        got = ok(world.run(lambda c, ys=ys: c.all_to_all(ys[c.rank], async_op=True)))
        for r in range(n):
            want = np.concatenate([np.split(ys[i], n)[r] for i in range(n)])
            assert np.array_equal(got[r], want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all_v(world, dtype):
    n = len(world.comms)
    rng = np.random.default_rng(n)
    counts = rng.integers(0, 90, (n, n))        # counts[i][j]: elements rank i sends rank j
    counts[0, :] = 0                            # a rank that sends nothing
    xs = [inputs(1, int(counts[i].sum()), dtype, seed=i)[0] for i in range(n)]
    got = ok(world.run(lambda c: c.all_to_all_v(xs[c.rank], counts[c.rank], counts[:, c.rank], async_op=True)))
    for r in range(n):
        parts = [np.split(xs[i], np.cumsum(counts[i])[:-1])[r] for i in range(n)]
        assert np.array_equal(got[r], np.concatenate(parts))


def test_pieces_pipeline_and_out_buffers():
    w = MemWorld(4, slot_bytes=1024, slots=2, channels=3)
    try:
        xs = inputs(4, 100_003, "float32", seed=5)   # 98 pieces per block, over 3 channels of 2 slots
        outs = [np.empty(100_003, np.float32) for _ in range(4)]
        got = ok(w.run(lambda c: c.all_reduce(xs[c.rank], out=outs[c.rank], async_op=True)))
        for r in range(4):
            assert got[r] is outs[r] and np.array_equal(outs[r], sum(xs))
        # the credits bound what is in flight: a sender never holds more slots than granted
        assert all(len(link.credits) <= 2 for c in w.comms for link in c.links.values())
    finally:
        w.close()


def test_blocking_calls_and_many_calls_in_a_row():
    w = MemWorld(3, slot_bytes=512, slots=2)
    try:
        for i in range(40):  # more calls than the immediate's 16 sequence values
            xs = inputs(3, 50 + i, "int64", seed=i)
            coll = ["all_reduce", "all_gather", "all_to_all"][i % 3]
            if coll == "all_to_all":
                xs = inputs(3, 3 * (i + 1), "int64", seed=i)
            got = ok(w.run(lambda c, coll=coll, xs=xs: getattr(c, coll)(xs[c.rank], async_op=True)))
            assert got[0] is not None
        assert [c.seq for c in w.comms] == [40, 40, 40]
    finally:
        w.close()


def test_a_rank_left_behind_on_calls_that_carry_nothing_is_not_overrun():
    """A reduce_scatter of 1 element on 4 ranks leaves 3 of 4 blocks empty, so most pairs carry
    nothing; while rank 0 is not moved on, the others make their calls as fast as they can. A rank
    waited for no one on a pair without data, ran two calls ahead of its sender and wrote its grant
    over the one of the same parity the sender had not read yet: "rank 1 is at call 3 while rank 0
    is at call 1", every rank aborted (seen once in CI on the fabric)."""
    w = MemWorld(4, slot_bytes=256, slots=2)
    calls = [lambda c: c.reduce_scatter(np.arange(1, dtype="float32"), async_op=True)] * 2 + \
            [lambda c: c.all_reduce(np.full(4, c.rank, dtype="float32"), async_op=True)]
    try:
        h = {r: calls[0](w.comms[r]) for r in range(4)}
        done = {r: [] for r in range(4)}

        def move(ranks):
            for r in ranks:
                if h[r] is not None and h[r].test():
                    done[r].append(h[r]._result)
                    h[r] = calls[len(done[r])](w.comms[r]) if len(done[r]) < len(calls) else None
            w.step()
        for _ in range(500):   # rank 0 left alone
            move((1, 2, 3))
        assert any(len(done[r]) for r in (1, 2, 3))  # the others did get ahead of it
        for _ in range(5000):
            move(range(4))
            if all(x is None for x in h.values()):
                break
        assert all(len(done[r]) == len(calls) for r in range(4)), done
        for r in range(4):
            assert np.array_equal(done[r][2], np.full(4, 6, dtype="float32"))
    finally:
        w.close()


def test_lossy_link_is_invisible():
    w = MemWorld(4, slot_bytes=2048, slots=4)
    try:
        w.sim.set_all(loss_ppm=20_000, jitter_ns=5_000)
        xs = inputs(4, 20_000, "float64", seed=9)
        got = ok(w.run(lambda c: c.all_reduce(xs[c.rank], "max", async_op=True)))
        for r in range(4):
            assert np.array_equal(got[r], np.maximum.reduce(xs))
        assert sum(c.stats["qp_errors"] for c in w.comms) == 0
        assert w.sim.stats()["dropped"] > 0
    finally:
        w.close()


# ----------------------------------------------------------------- bad input
BAD_LOCAL = [
    (lambda c, x: c.all_reduce(x[::2]), "not contiguous"),
    (lambda c, x: c.all_reduce(x.astype(np.uint8)), "dtype uint8"),
    (lambda c, x: c.all_reduce(list(x)), "numpy array"),
    (lambda c, x: c.all_reduce(x, op="mean"), "unknown op 'mean'"),
    (lambda c, x: c.broadcast(x, root=3), "root 3 is not a rank"),
    (lambda c, x: c.broadcast(x, root=-1), "root -1 is not a rank"),
    (lambda c, x: c.all_to_all(x[:7]), "3 equal blocks"),
    (lambda c, x: c.all_to_all_v(x, [1, 2], [1, 2, 3]), "send_counts must be 3"),
    (lambda c, x: c.all_to_all_v(x, [1, 2, 3], [1, 2, 3]), "add up to 6"),
    (lambda c, x: c.all_reduce(x, out=np.empty(3, np.float32)), "out has 3"),
]


@pytest.mark.parametrize("call,msg", BAD_LOCAL, ids=[m for _, m in BAD_LOCAL])
def test_bad_input_one_clear_error_nothing_sent(call, msg):
    w = MemWorld(3)
    try:
        x = np.arange(12, dtype=np.float32)
        before = w.sim.stats()["delivered"]
        with pytest.raises(CollError, match=msg):
            call(w.comms[0], x)
        assert w.sim.stats()["delivered"] == before and w.comms[0].seq == 0
        # the communicator is still good
        got = ok(w.run(lambda c: c.all_reduce(x, async_op=True)))
        assert np.array_equal(got[1], 3 * x)
    finally:
        w.close()


MISMATCH = [
    ({1: dict(count=11)}, "sizes, dtypes, ops and roots must match"),
    ({2: dict(dtype="float64")}, "float64"),
    ({1: dict(op="max")}, "all_reduce max"),
    ({0: dict(coll="all_gather")}, "all_gather"),
    ({2: dict(coll="broadcast", root=1)}, "broadcast"),
]


@pytest.mark.parametrize("diff,msg", MISMATCH, ids=[m for _, m in MISMATCH])
def test_calls_that_differ_across_ranks_abort_every_rank_before_data(diff, msg):
    w = MemWorld(3)
    try:
        def call(c):
            d = {"coll": "all_reduce", "count": 12, "dtype": "float32", "op": "sum", "root": 0, **diff.get(c.rank, {})}
            x = np.ones(d["count"], d["dtype"])
            if d["coll"] == "all_reduce":
                return c.all_reduce(x, d["op"], async_op=True)
            if d["coll"] == "broadcast":
                return c.broadcast(x, d["root"], async_op=True)
            return getattr(c, d["coll"])(x, async_op=True)

        res = w.run(call)
        assert all(isinstance(r, CommAborted) for r in res), res
        assert any(msg in str(r) for r in res), [str(r) for r in res]
        # no data byte of a call that differs crossed: the rank that made it sent none, got none
        odd = next(iter(diff))
        assert w.comms[odd].stats["bytes_sent"] == 0
        assert all(c.bytes_to[odd] == 0 for c in w.comms)
        with pytest.raises(CommAborted):                              # and it stays aborted
            w.comms[0].all_reduce(np.ones(3, np.float32), async_op=True)
    finally:
        w.close()


def test_all_to_all_v_counts_that_disagree_abort():
    w = MemWorld(2)
    try:
        res = w.run(lambda c: c.all_to_all_v(np.ones(4, np.int32), [2, 2], [2, 3] if c.rank == 0 else [2, 2],
                                             async_op=True))
        assert all(isinstance(r, CommAborted) for r in res)
        assert any("send_counts and recv_counts must agree" in str(r) for r in res)
    finally:
        w.close()


def test_a_rank_killed_mid_collective():
    w = MemWorld(4, slot_bytes=1024, slots=2)
    try:
        xs = inputs(4, 50_000, "float32", seed=3)
        steps = []

        def kill_later(world):
            steps.append(1)
            if len(steps) == 5:
                world.kill(2)

        res = w.run(lambda c: c.all_reduce(xs[c.rank], async_op=True), on_step=kill_later)
        assert res[2] is None
        for r in (0, 1, 3):
            assert isinstance(res[r], CommAborted) and res[r].rank == 2 and "died" in res[r].cause
        assert len(steps) < 10  # every survivor raised at the next step
    finally:
        w.close()


def test_a_qp_error_aborts_naming_the_peer():
    w = MemWorld(2, slot_bytes=512, slots=2)
    try:
        ok(w.run(lambda c: c.all_reduce(np.ones(10, np.float32), async_op=True)))
        for link in w.comms[1].links.values():  # rank 1's slots vanish: rank 0's writes fail remote access
            link.region.close()
        res = w.run(lambda c: c.all_reduce(np.ones(1000, np.float32), async_op=True), budget_ns=10**9)
        # rank 1's QP fails first (its region is gone: LOC_PROT_ERR, as InfiniBand's responder); it names itself
        assert isinstance(res[0], CommAborted) and res[0].rank == 1 and "no region of rank 1" in res[0].cause
        assert w.comms[1].stats["qp_errors"] >= 1
    finally:
        w.close()


def test_timeout_names_the_rank_waited_for():
    w = MemWorld(3, timeout=0.0)
    try:
        w.dead.add(1)  # rank 1 never calls, and nobody says it died
        res = w.run(lambda c: c.all_reduce(np.ones(5, np.float32), async_op=True))
        assert isinstance(res[0], CommAborted) and "took over 0 s" in res[0].cause
    finally:
        w.close()


# ----------------------------------------------------------------- the schedule
def test_imm_round_trip():
    for v in [(0, 15, 4095, 16383), (2, 3, 0, 0), (1, 0, 17, 5)]:
        assert imm_unpack(imm_pack(*v)) == v


@pytest.mark.parametrize("n", RANKS)
def test_schedules_pair_up(n):
    """What rank a sends rank b, in order, is what rank b expects from rank a."""
    for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"):
        count = 6 * n + 5 if coll != "all_to_all" else 6 * n
        plans = [schedule.plan(coll, n, r, count, root=n - 1) for r in range(n)]
        for a in range(n):
            for b in range(n):
                sent = [x.count for x in plans[a].xfers if x.send and x.peer == b]
                got = [x.count for x in plans[b].xfers if not x.send and x.peer == a]
                assert sent == got, (coll, a, b)
                assert (b in plans[a].send_to) == (a in plans[b].recv_from)


def test_sim_messages_chain_the_ring():
    msgs = schedule.sim_messages("all_reduce", 4, 4000, 4, 1024)
    assert len(msgs) == 4 and all(m["dst"] == (m["src"] + 1) % 4 for m in msgs)
    per = msgs[0]["msgs"]
    assert sum(b for b, _ in per) == 2 * 3 * 1000 * 4      # 2(n-1) blocks of 1000 floats
    assert per[0][1] is None and per[-1][1] is not None    # the first goes at once, later ones wait


def test_bus_factors():
    assert schedule.bus_factor("all_reduce", 4) == 1.5
    assert schedule.bus_factor("all_gather", 8) == 7 / 8
    assert schedule.bus_factor("broadcast", 8) == 1.0


# ----------------------------------------------------------------- a hostile peer
def _rogue(w, imm: int, nbytes: int, offset: int = 0, payload: bytes = b""):
    """Rank 1 writes ``nbytes`` into rank 0's channel-0 region at ``offset`` with immediate
    ``imm``, as a rank that breaks the protocol would; rank 0 runs a call that receives from it."""
    src = bytearray(payload.ljust(max(64, nbytes), b"\x5a"))
    mr = w.ctxs[1].reg_mr(src)
    link = w.comms[1].links[(0, 0)]
    h = w.comms[0].all_reduce(np.ones(4096, np.float32), async_op=True)
    link.qp.post_write(mr, 0, nbytes, link.raddr + offset, link.rkey, wr_id=99, imm=imm)
    for _ in range(2000):
        try:
            if h.test():
                return None
        except CommAborted as e:
            return e
        w.step()
    raise AssertionError("rank 0 neither finished nor aborted")


@pytest.mark.parametrize("what", ["slot", "tag", "length", "call", "grant"])
def test_a_peer_that_breaks_the_protocol_aborts_naming_it(what):
    w = MemWorld(2, slot_bytes=1024, slots=2, channels=1)
    try:
        ok(w.run(lambda c: c.all_reduce(np.ones(8, np.float32), async_op=True)))   # connected, call 1 done
        seq = 2
        mailbox = 2 * 1024 + (seq & 1) * 64
        if what == "slot":
            e = _rogue(w, imm_pack(0, seq, 0, 3), 1024)
        elif what == "tag":
            e = _rogue(w, imm_pack(0, seq, 5, 0), 1024)
        elif what == "length":
            e = _rogue(w, imm_pack(0, seq, 0, 0), 8)
        elif what == "call":
            e = _rogue(w, imm_pack(0, seq + 3, 0, 0), 1024)
        else:
            e = _rogue(w, imm_pack(2, seq, 0, 0), 48, offset=mailbox, payload=b"\x00" * 48)
        assert isinstance(e, CommAborted) and e.rank == 1, e
        msg = {"slot": "slot 3", "tag": "carries tag 5", "length": "sent 8 bytes where",
               "call": "disagree on the calls", "grant": "not a call description"}[what]
        assert msg in e.cause, e.cause
        # nothing was reduced into what rank 0 hands back: the call raised instead of returning
        assert w.comms[0]._run is None
    finally:
        w.close()


def test_credits_for_slots_that_do_not_exist_are_ignored():
    w = MemWorld(2, slot_bytes=1024, slots=2, channels=1)
    try:
        ok(w.run(lambda c: c.all_reduce(np.ones(8, np.float32), async_op=True)))
        link = w.comms[1].links[(0, 0)]
        for slot in (2, 9, 16383):   # a credit of rank 1's to rank 0 for a slot rank 1 does not have
            link.qp.post_write(w.comms[1]._ctl(), 0, 0, link.raddr, link.rkey, imm=imm_pack(1, 2, 0, slot))
        sent = []   # they reach rank 0 (its next call reads them); rank 1's own completions of them go here
        while len(sent) < 3:
            w.step()
            sent += w.ctxs[1].poll_cq()
        xs = inputs(2, 3000, "int32", seed=1)
        got = ok(w.run(lambda c: c.all_reduce(xs[c.rank], async_op=True)))
        assert np.array_equal(got[0], xs[0] + xs[1])
        assert all(s < 2 for c in w.comms for link in c.links.values() for s in link.credits)
    finally:
        w.close()


def test_large_calls_in_place_use_the_callers_array_as_the_work_buffer():
    """From 1 MiB, a call whose result is its whole work buffer (all-reduce, broadcast, all-gather) works
    in the caller's ``out``, registered once and kept: no copy out, and none in for an all-reduce in place."""
    w = MemWorld(3, slot_bytes=1 << 16, slots=4)
    try:
        n = 1 << 18                                    # 1 MiB of float32
        xs = [np.arange(n, dtype=np.float32) % 97 + r for r in range(3)]
        want = xs[0] + xs[1] + xs[2]
        ys = [x.copy() for x in xs]
        mrs = None
        for _ in range(2):                            # the second call reuses the first one's registration
            for y, x in zip(ys, xs, strict=True):
                y[...] = x
            got = ok(w.run(lambda c: c.all_reduce(ys[c.rank], out=ys[c.rank], async_op=True)))
            for r in range(3):
                assert got[r] is ys[r] and np.array_equal(ys[r], want)
            now = [list(c._direct.values()) for c in w.comms]
            assert all(len(m) == 1 for m in now)
            assert mrs is None or all(a[0] is b[0] for a, b in zip(now, mrs, strict=True))
            mrs = now
        b = [np.full(n, r, np.int32) for r in range(3)]
        ok(w.run(lambda c: c.broadcast(b[c.rank], root=1, async_op=True)))
        assert all(np.array_equal(x, np.full(n, 1, np.int32)) for x in b)
        assert all(len(c._direct) == 2 for c in w.comms)
        outs = [np.zeros(3 * n, np.float32) for _ in range(3)]
        got = ok(w.run(lambda c: c.all_gather(xs[c.rank], out=outs[c.rank], async_op=True)))
        assert all(g is o and np.array_equal(o, np.concatenate(xs)) for g, o in zip(got, outs, strict=True))
        small = [np.ones(10, np.float32) for _ in range(3)]
        ok(w.run(lambda c: c.all_reduce(small[c.rank], out=small[c.rank], async_op=True)))
        assert all(np.array_equal(s, np.full(10, 3.0)) for s in small)
        assert all(len(c._direct) <= 4 for c in w.comms)
    finally:
        w.close()
