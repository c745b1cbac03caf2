"""Several completion queues per context, and a full CQ: an error the
application sees (a counter and an asynchronous event), never a lost
completion."""
import errno

import pytest

from mrc.errors import ErrnoError

from .harness import Pair, attr, digest


def test_each_qp_completes_into_its_own_cq():
    pair = Pair(seed=31)
    a, b, sim = pair.a, pair.b, pair.sim
    cq1, cq2 = a.create_cq(64), a.create_cq(64)
    q1, q2 = a.create_qp(attr(), send_cq=cq1), a.create_qp(attr(), send_cq=cq2)
    r1, r2 = b.create_qp(attr()), b.create_qp(attr())
    ia, ib = sim.index(a), sim.index(b)
    for q, r in ((q1, r1), (q2, r2)):
        q.connect(r.qpn, ib, rq_psn=r.sq_psn)
        r.connect(q.qpn, ia, rq_psn=q.sq_psn)
    src, dst = bytearray(pair.rng.randbytes(64 << 10)), bytearray(64 << 10)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    q1.post_write(ms, 0, 4096, md.addr, md.rkey, wr_id=11)
    q2.post_write(ms, 4096, 4096, md.addr + 4096, md.rkey, wr_id=22)
    got1 = sim.run_until(lambda: cq1.poll(), budget_ns=10_000_000, step_ns=10_000)
    got2 = sim.run_until(lambda: cq2.poll(), budget_ns=10_000_000, step_ns=10_000)
    assert [(w.wr_id, w.qpn) for w in got1] == [(11, q1.qpn)]
    assert [(w.wr_id, w.qpn) for w in got2] == [(22, q2.qpn)]
    assert a.poll_cq() == [] and digest(dst[:8192]) == digest(src[:8192])
    assert cq1.stats() == {"depth": 64, "waiting": 0, "overflow": 0}


def test_a_cq_in_use_cannot_go_and_cq_0_stays():
    pair = Pair(seed=32)
    cq = pair.a.create_cq(8)
    qp = pair.a.create_qp(attr(), send_cq=cq)
    with pytest.raises(ErrnoError) as e:
        cq.destroy()
    assert e.value.errno == errno.EBUSY
    qp.destroy()
    cq.destroy()
    with pytest.raises(ErrnoError) as e:
        pair.a.cq.destroy()
    assert e.value.errno == errno.EBUSY
    with pytest.raises(ErrnoError) as e:
        pair.a.create_cq(0)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ErrnoError) as e:  # a manual context has no completion channel
        _ = pair.a.cq.fd
    assert e.value.errno == errno.EOPNOTSUPP


def _drain_slowly(sim, cq, want, per_poll):
    """Poll at most per_poll completions each simulated 200 us until want have come."""
    got = []
    deadline = sim.now + 2_000_000_000
    while len(got) < want:
        assert sim.now < deadline, f"{len(got)} of {want} completions"
        sim.run(sim.now + 200_000)
        got += cq.poll(per_poll)
    return got


@pytest.mark.parametrize("imm", [False, True], ids=["send_cq", "recv_cq"])
def test_a_full_cq_loses_nothing_and_says_so(imm):
    """A CQ of depth 2 for 12 messages, polled one at a time: every
    completion arrives, in order; the CQ counts what found it full and the
    context raises CQ_ERR (once per filling, not per completion)."""
    pair = Pair(seed=33)
    a, b, sim = pair.a, pair.b, pair.sim
    small = (b if imm else a).create_cq(2)
    qa = a.create_qp(attr(), send_cq=None if imm else small)
    qb = b.create_qp(attr(rq_depth=64), recv_cq=small if imm else None)
    qa.connect(qb.qpn, sim.index(b), rq_psn=qb.sq_psn)
    qb.connect(qa.qpn, sim.index(a), rq_psn=qa.sq_psn)
    n = 12
    if imm:
        qb.post_recv(list(range(100, 100 + n)))
    src, dst = bytearray(pair.rng.randbytes(n * 5000)), bytearray(n * 5000)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    for i in range(n):
        qa.post_write(ms, i * 5000, 5000, md.addr + i * 5000, md.rkey, wr_id=i, imm=0x77000000 + i if imm else None)
    got = _drain_slowly(sim, small, n, per_poll=1)
    assert all(w.ok for w in got), [w.status_name for w in got]
    if imm:
        assert [w.wr_id for w in got] == list(range(100, 100 + n))
        assert [w.imm_data for w in got] == [0x77000000 + i for i in range(n)]
        assert all(w.byte_len == 5000 for w in got)
        assert b.drops()["no_recv"] == 0
    else:
        assert [w.wr_id for w in got] == list(range(n))
    assert digest(dst) == digest(src)  # every completion came after its data
    owner = b if imm else a
    st = small.stats()
    assert st["overflow"] > 0 and st["waiting"] == 0
    assert owner.stats()["cq_overflow"] == st["overflow"]
    cq_err = [e for e in owner.async_events() if e.type == "CQ_ERR"]
    assert cq_err and all(e.info == small.cqn for e in cq_err)
    assert len(cq_err) < st["overflow"]  # one per filling, not one per completion that waited


def test_flush_into_a_full_cq_goes_on_once_it_is_polled():
    """A QP moved to ERROR with 8 WRs queued and a CQ of depth 2: the flush
    stops at the full CQ and finishes as the application polls."""
    pair = Pair(seed=34)
    a, b, sim = pair.a, pair.b, pair.sim
    small = a.create_cq(2)
    qa = a.create_qp(attr(), send_cq=small)
    qa.connect(12345, sim.index(b))  # nobody answers: the WRs stay queued
    src = bytearray(8 * 4096)
    ms = a.reg_mr(src)
    for i in range(8):
        qa.post_write(ms, i * 4096, 4096, 0, 1, wr_id=i)
    qa.modify(4)  # ERROR
    got = _drain_slowly(sim, small, 8, per_poll=1)
    assert [(w.wr_id, w.status_name) for w in got] == [(i, "WR_FLUSH_ERR") for i in range(8)]
    assert small.stats()["overflow"] > 0
