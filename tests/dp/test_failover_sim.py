"""Failover at the protocol's own speed, in virtual time (bench/failover_sim.py
at a small scale): 8 planes of 100 Gb/s, 1 us per hop, 4 KiB packets."""
import importlib.util
import pathlib

import pytest

_spec = importlib.util.spec_from_file_location(
    "failover_sim", pathlib.Path(__file__).resolve().parents[2] / "bench" / "failover_sim.py")
fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fs)

RUN_NS = 2_000_000  # 2 ms of virtual time after the fault: 250 base RTTs


@pytest.mark.parametrize("name", ["path", "plane", "flap"])
def test_a_dead_path_or_plane_is_left_within_four_rtts_without_a_timeout(name):
    r = fs.scenario(name, RUN_NS)
    assert r["corrupt_messages"] == 0 and r["qp_errors"] == 0
    assert r["losses"] > 0, "the fault never touched the transfer"
    assert r["timeouts"] == 0, r            # losses found by SACKs, not by the timer
    assert r["max_gap_rtts"] <= 4, r
    # a dead plane costs its share (1/8) and nothing more; a path or a flap almost nothing
    assert r["goodput_vs_surviving"] >= 0.97, r


@pytest.mark.parametrize("name", ["loss1", "loss20"])
def test_random_loss_on_a_plane_or_a_path_costs_under_three_percent(name):
    r = fs.scenario(name, RUN_NS)
    assert r["corrupt_messages"] == 0 and r["qp_errors"] == 0
    assert r["retransmits"] > 0
    assert r["goodput_ratio"] >= 0.97, r


def test_when_every_path_dies_the_qp_fails_with_retry_exceeded_within_its_budget():
    r = fs.scenario("all", 6_000_000)
    assert r["error"] == "RETRY_EXC_ERR", r
    assert r["within_budget"], r
    assert r["timeouts"] == 7  # linear_cnt 3 + exp_cnt 3, the seventh ends it


def test_the_same_seed_gives_the_same_run():
    a, b = fs.run("path", 500_000, seed=5), fs.run("path", 500_000, seed=5)
    assert a["times"] == b["times"] and a["stats"] == b["stats"]


def test_a_port_rate_for_a_plane_the_link_does_not_have_is_refused():
    from mrc.errors import ErrnoError
    from mrc.simlink import Sim

    sim = Sim(planes=2, per_plane=1)
    with pytest.raises(ErrnoError):
        sim.set_port_rate(10**9, plane=2)
    sim.set_port_rate(10**9)  # every plane it has
