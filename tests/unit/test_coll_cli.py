"""mrc coll / mrc train: their options, their refusals and the fault schedules (rootless)."""
from __future__ import annotations

import time

import pytest

from mrc.coll import perf
from mrc.errors import UsageError
from mrc.fabric.faults import schedule
from mrc.fabric.topology import Topology
from mrc.tools import cli, train


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_help_names_the_columns_and_factors(capsys):
    with pytest.raises(SystemExit):
        cli.main(["coll", "--help"])
    out = capsys.readouterr().out
    for word in ("busbw", "algbw", "#wrong", "2(n-1)/n", "--fabric", "--check"):
        assert word in out


def test_coll_needs_a_place_to_run(capsys):
    rc, _, err = run(capsys, "coll", "all_reduce")
    assert rc == 2 and "say where the ranks run" in err and "\n" == err[-1] and err.count("\n") == 1


def test_coll_refuses_fabric_and_rank_together(capsys):
    rc, _, err = run(capsys, "coll", "all_reduce", "--fabric", "x", "--rank", "0")
    assert rc == 2 and "not both" in err


def test_rank_needs_its_job(capsys):
    rc, _, err = run(capsys, "coll", "all_reduce", "--rank", "1")
    assert rc == 2 and "--nranks, --root-addr and --job" in err


BY_HAND = ["--rank", "1", "--nranks", "4", "--root-addr", "fd6e::1", "--job", "j"]


@pytest.mark.parametrize("argv,msg", [
    (["coll", "all_reduce", "-b", "1M", "-e", "1K"], "-b 1048576 is above -e 1024"),
    (["coll", "all_reduce", "-n", "0"], "--iters: wants an integer from 1"),
    (["coll", "all_reduce", "-w", "-1"], "--warmup: wants an integer from 0"),
    (["coll", "broadcast", "-r", "4"], "--root 4 is not a rank"),
    (["coll", "all_reduce", "--channels", "0"], "--channels: wants an integer from 1 to 64"),
    (["coll", "all_reduce", "--slots", "100000"], "--slots: wants an integer from 1 to 1024"),
    (["coll", "all_reduce", "--slot-size", "100"], "--slot-size 100"),
    (["coll", "all_reduce", "--timeout", "0"], "--timeout: wants a number above 0"),
    (["coll", "all_reduce", "-b", "-5"], "--minbytes: wants a size from 0"),
    (["coll", "all_reduce", "-e", "lots"], "cannot read size"),
    (["coll", "all_reduce", "-d", "uint8"], "invalid choice"),
    (["train", "--steps", "0"], "--steps: wants an integer from 1"),
    (["train", "--compute-ms", "-1"], "--compute-ms: wants a number from 0 to 60000"),
    (["train", "--model", "2"], "--model and --bucket are at least 4 bytes"),
    (["train", "--faults", "flap/1s"], "--faults needs --seconds"),
])
def test_bad_options_are_refused_before_anything_starts(capsys, argv, msg):
    """One line, exit 2, and no rank joins (rank 1 would otherwise wait for rank 0 for a minute)."""
    try:
        rc = cli.main(argv + BY_HAND)
    except SystemExit as e:  # argparse's own refusals
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and msg in err, err


def test_sizes_follow_nccl_tests():
    assert perf.sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert perf.sizes(8, 40, 1, 16) == [8, 24, 40]
    assert perf.sizes(1 << 20, 1 << 20) == [1 << 20]


def test_cases_give_numpys_answer_for_every_rank():
    for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "all_to_all_v"):
        cases = [perf.Case(coll, 4096, "int32", "max", 1, 4, r) for r in range(4)]
        assert all(c.expected().size > 0 for c in cases), coll
    assert perf.Case("all_gather", 4096, "float32", "sum", 0, 4, 0).count % 4 == 0


def test_buckets_and_compute():
    assert train.buckets(10 << 20, 4 << 20) == [1 << 20, 1 << 20, (2 << 20) // 4 * 1]
    with pytest.raises(UsageError):
        train.buckets(0, 1)
    assert train.Compute(0).reps == 0 and train.Compute(5).reps >= 1


def test_phases_split_at_the_schedule():
    rows = [[0.0, 0.1, 0.02], [0.1, 0.1, 0.03], [1.0, 0.3, 0.2], [1.3, 0.1, 0.01]]
    p = train.phases(rows, 1.0)
    assert p["no_fault"]["steps"] == 2 and p["with_faults"]["steps"] == 2
    assert p["with_faults"]["step_max_ms"] == 300.0 and p["with_faults"]["comm_p99_ms"] == 200.0
    assert p["no_fault"]["comm_p50_ms"] in (20.0, 30.0)


def test_phases_alternate_and_the_fault_plan_falls_in_the_fault_phases():
    rows = [[s, 0.1, 0.05] for s in (0.2, 1.2, 2.2, 2.9, 3.5, 4.1)]
    p = train.phases(rows, 1.0)
    assert p["no_fault"]["steps"] == 4 and p["with_faults"]["steps"] == 2   # phases 0, 2, 4 and 1, 3
    plan = train.fault_plan(T, "t1-reboot/10s,flap/5s", 30, 3)
    assert plan and all(train.faulted(at, 30) or (at % 60 == 0 and op == "heal") for at, op, *_ in plan)
    for k in range(3):   # each fault phase has its own schedule, every fault healed by its end
        mine = [s for s in plan if 30 + 60 * k <= s[0] <= 60 + 60 * k]
        assert sum(s[1] == "fail" for s in mine) == sum(s[1] == "heal" for s in mine) == 3 + 6
    assert [s[2] for s in plan[:6]] != [s[2] for s in plan if s[0] >= 90][:6]


def test_steps_time_the_collectives_apart_from_the_compute():
    calls = []

    def slow_allreduce(x):
        calls.append(x.size)
        time.sleep(0.02)
        return x

    rows = train.steps(slow_allreduce, None, 2, 8 << 10, 4 << 10, 0, 0, 2, None, 0)
    assert len(rows) == 2 and calls == [1024, 1024] * 2
    for start, length, comm in rows:
        assert start >= 0 and 0.04 <= comm <= length
    assert rows[1][0] >= rows[0][0] + rows[0][1]


T = Topology(planes=8, spines=4, leaves=2, hosts=4, name="x")


def test_fault_schedule_rotates_and_heals_everything():
    plan = schedule(T, "t1-reboot/10s,flap/5s", 60)
    fails = [s for s in plan if s[1] == "fail"]
    heals = [s for s in plan if s[1] == "heal"]
    assert len(fails) == len(heals) == 6 + 12
    assert all(0 < at < 60 for at, *_ in fails) and all(at <= 60 for at, *_ in heals)
    assert len({s[2] for s in fails}) > 6                  # not the same switch every time
    assert plan == sorted(plan, key=lambda s: s[0])
    assert schedule(T, "t1-reboot/10s", 60) == schedule(T, "t1-reboot/10s", 60)   # seeded


@pytest.mark.parametrize("spec,msg", [
    ("", "empty fault schedule"),
    ("reboot/10s", "cannot read the fault"),
    ("flap@5s", "flap takes /"),
    ("plane-cut/5s", "plane-cut takes @"),
    ("flap/1s+2s", "longer than the time down"),
    ("loss/0", "above 0"),
    ("flap/xs", "cannot read the fault"),
])
def test_bad_fault_schedules_get_one_line(spec, msg):
    with pytest.raises(UsageError, match=msg):
        schedule(T, spec, 30)


def test_plane_cut_takes_every_spine_of_one_plane():
    plan = schedule(T, "plane-cut@5s+3s", 20)
    (at, op, target, _), (at2, op2, target2, _) = plan
    assert (at, op, at2, op2) == (5.0, "fail", 8.0, "heal") and target == target2 and len(target) == 4
    assert len({s[:2] for s in target}) == 1


@pytest.mark.parametrize("pairs", ["0", "101", "-3"])
def test_a_pairs_count_out_of_range_is_refused_before_anything_starts(pairs):
    from mrc.tools.cmd.coll import check_args

    argv = ["train", "--seconds", "5", "--faults", "flap/1s", f"--pairs={pairs}", "--rank", "0", "--nranks", "2",
            "--root-addr", "::1", "--job", "j"]
    with pytest.raises(SystemExit) as e:     # argparse refuses it, in one line (tests/unit/test_bad_inputs.py)
        cli.build_parser().parse_args(argv)
    assert e.value.code == 2
    a = cli.build_parser().parse_args([x if not x.startswith("--pairs") else "--pairs=1" for x in argv])
    a.pairs = int(pairs)   # and check_args too, for a caller that builds the options by hand
    with pytest.raises(UsageError, match="--pairs is 1 to 100"):
        check_args(a, "train", 2)
