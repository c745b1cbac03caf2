"""EV probes over the in-memory link: connectionless, answered on the EV they
came on, timed from the poll that sent them (protocol.md 3, mrc_ctl.h)."""
import errno

import pytest

from mrc.errors import ErrnoError
from mrc.manual import ManualContext
from mrc.simlink import Sim
from mrc.wire import ev_make

from .harness import PER_PLANE, PLANES

DELAY_NS = 5000


@pytest.fixture
def link():
    sim = Sim(PLANES, PER_PLANE, seed=3)
    a, b = ManualContext(planes=PLANES), ManualContext(planes=PLANES)
    ia, ib = sim.attach(a), sim.attach(b)
    sim.set_all(delay_ns=DELAY_NS)
    yield sim, a, b, ia, ib
    sim.close()
    a.close()
    b.close()


def wait_answer(sim, ep, pid, budget_ns=2_000_000):
    """The answer, or None when none came within budget_ns of simulated time."""
    try:
        return sim.run_until(lambda: ep.probe_result(pid), budget_ns=budget_ns, step_ns=1000)
    except TimeoutError:
        return None


def test_probe_needs_no_qp_and_returns_the_round_trip(link):
    sim, a, b, _ia, ib = link
    ev = ev_make(2, 3)
    pid = a.probe_send(ib, ev, now_ns=sim.now)
    r = wait_answer(sim, a, pid)
    assert r is not None and r["ev"] == ev and r["peer"] == ib
    assert r["port"] == 2  # the answer came back on the plane the probe went out on
    # two one-way delays, and not much more (the link steps in 1 us)
    assert 2 * DELAY_NS <= r["rtt_ns"] <= 2 * DELAY_NS + 5000
    # answered on the same path: exactly one packet each way on path plane 2, index 3
    per_path = sim.stats()["per_path_tx"]
    assert per_path[sim.path(2, 3)] == 2 and sum(per_path) == 2
    # the answer is handed out once
    with pytest.raises(ErrnoError) as e:
        a.probe_result(pid)
    assert e.value.errno == errno.ENOENT


def test_probe_on_a_dead_path_gets_no_answer_and_a_late_one_is_dropped(link):
    sim, a, b, _ia, ib = link
    dead = sim.path(1, 2)
    sim.set_path(dead, down_from_ns=0, down_until_ns=1 << 62)
    pid = a.probe_send(ib, ev_make(1, 2), now_ns=sim.now)
    assert wait_answer(sim, a, pid, budget_ns=1_000_000) is None
    a.probe_cancel(pid)
    # a slow path: the prober gives up before the answer comes back
    slow = sim.path(0, 1)
    sim.set_path(slow, delay_ns=500_000)
    pid = a.probe_send(ib, ev_make(0, 1), now_ns=sim.now)
    sim.run(sim.now + 100_000)
    assert a.probe_result(pid) is None
    a.probe_cancel(pid)
    sim.run(sim.now + 2_000_000)
    assert a.drops()["stale_probe"] == 1
    # the other paths of plane 1 still answer
    pid = a.probe_send(ib, ev_make(1, 1), now_ns=sim.now)
    assert wait_answer(sim, a, pid) is not None


def test_many_probes_at_once_each_get_their_own_answer(link):
    sim, a, b, _ia, ib = link
    for path in range(PLANES * PER_PLANE):
        sim.set_path(path, delay_ns=DELAY_NS * (1 + path))
    ids = {a.probe_send(ib, ev_make(p, e), now_ns=sim.now): (p, e) for p in range(PLANES) for e in range(PER_PLANE)}
    got = {}
    sim.run_until(lambda: [got.setdefault(i, r) for i in ids if i not in got and (r := a.probe_result(i))]
                  and len(got) == len(ids), budget_ns=10_000_000)
    assert len(got) == len(ids)
    for pid, (p, e) in ids.items():
        rtt = got[pid]["rtt_ns"]
        want = 2 * DELAY_NS * (1 + sim.path(p, e))
        assert want <= rtt <= want + 5000, (p, e, rtt)


def test_probe_errors(link):
    sim, a, b, _ia, ib = link
    with pytest.raises(ErrnoError) as e:
        a.probe_send(ib, ev_make(PLANES, 0))
    assert e.value.errno == errno.EINVAL
    a.set_port(3, False)
    with pytest.raises(ErrnoError) as e:
        a.probe_send(ib, ev_make(3, 0))
    assert e.value.errno == errno.ENETDOWN
    with pytest.raises(ErrnoError) as e:
        a.probe_cancel(12345)
    assert e.value.errno == errno.ENOENT
