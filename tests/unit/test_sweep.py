"""mrc sim sweep (mrc/tools/sweep.py): a grid of simulator runs on Dask
gives the same table as in one process; a sweep killed mid-way resumes and
runs only what is missing; a bad grid is refused in one line before
anything runs; a cell that fails is recorded with its error and the others
go on."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mrc.errors import UsageError
from mrc.tools import sweep

GRID = {"workload": "victim", "hosts": 16, "size": "4M", "msg": "256K",
        "cc": [{"algorithm": "nscc"}, {"algorithm": "fixed"}], "seeds": 3}
TIMING = {"wall_s", "sim_pps", "commit"}


def write(tmp_path, grid, name="grid.json"):
    p = tmp_path / name
    p.write_text(json.dumps(grid))
    return str(p)


def table(path):
    with open(path, newline="") as f:
        return {r["key"]: {k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(f)}


def sweep_cmd(grid, out, *extra):
    return [sys.executable, "-m", "mrc.tools.cli", "sim", "sweep", grid, "--out", out, "--json", "--quiet", *extra]


def scratch_env(tmp_path):
    """The sweep's temporary files (Dask's spill space) go under the test's own directory."""
    d = tmp_path / "tmp"
    d.mkdir()
    return d, {**os.environ, "TMPDIR": str(d)}


def test_on_dask_the_table_is_the_same_as_in_one_process(tmp_path):
    g = write(tmp_path, GRID)
    serial, dask = str(tmp_path / "serial.csv"), str(tmp_path / "dask.csv")
    r1 = subprocess.run(sweep_cmd(g, serial, "--workers", "0"), capture_output=True, text=True, timeout=300)
    scratch, env = scratch_env(tmp_path)
    r2 = subprocess.run(sweep_cmd(g, dask, "--workers", "2"), capture_output=True, text=True, timeout=300, env=env)
    assert r1.returncode == 0 and r2.returncode == 0, (r1.stderr, r2.stderr)
    assert not list(scratch.iterdir()), "the local cluster left files behind"
    out = json.loads(r2.stdout)
    assert out["cells"] == 6 and out["ran"] == 6 and out["workers"] == 2 and out["errors"] == 0
    a, b = table(serial), table(dask)
    assert len(a) == 6 and a == b
    assert {r["status"] for r in a.values()} == {"ok"} and all(float(r["victim_ratio"]) > 0 for r in a.values())
    # the summary: one line per setting, medians over the three seeds
    summ = out["summary"]
    assert len(summ) == 2 and all(s["seeds"] == 3 and len(s["victim_ratio_spread"]) == 2 for s in summ)


def test_a_killed_sweep_resumes_and_runs_only_what_is_missing(tmp_path):
    g = write(tmp_path, GRID | {"seeds": 16})
    out = str(tmp_path / "t.csv")
    p = subprocess.Popen(sweep_cmd(g, out, "--workers", "0"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.exists(out) and sum(1 for _ in open(out)) >= 3:  # the header and two rows at least
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(30)
    before = table(out)
    assert 2 <= len(before) < 32, "the kill came too late to show a resume"
    r = subprocess.run(sweep_cmd(g, out, "--workers", "0"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ran"] == 32 - len(before)
    keys = [row["key"] for row in csv.DictReader(open(out))]
    assert len(keys) == len(set(keys)) == 32  # every cell once
    whole = str(tmp_path / "whole.csv")
    subprocess.run(sweep_cmd(g, whole, "--workers", "0"), capture_output=True, timeout=300, check=True)
    assert table(out) == table(whole)


@pytest.mark.parametrize("grid,says", [
    ({"workload": "victim", "hostz": 16}, "unknown grid key 'hostz'"),
    ({"workload": "victim", "hosts": []}, "'hosts' has an empty list"),
    ({"workload": "victim", "hosts": [16, 9000]}, "the simulator takes 2 to 8192 hosts"),
    ({"workload": "victim", "cc": {"algorithm": "reno"}}, "cc algorithm 'reno'"),
    ({"workload": "telepathy"}, "workload 'telepathy'"),
    ({"workload": "permutation", "fault": "t1:9.0@10us"}, "grid cell"),
    ({"seeds": 0}, "seeds 0"),
    ({"seeds": 10**12}, "at most 100,000 cells"),
    ({"hosts": list(range(2, 1002)), "seeds": 1000}, "more than 100,000"),
    ({"workload": "victim", "cc": {"gamma": -1}}, "cc gamma=-1"),
    ({"workload": "victim", "cc": "fast"}, "a mapping of congestion control fields"),
    ({"transport": "carrier-pigeon"}, "--transport 'carrier-pigeon'"),
    ({"transport": "roce", "roce": {"qps": 99}}, "roce qps=99"),
    ({"transport": "roce", "roce": "fast"}, "a mapping of RoCE settings"),
    ([1, 2, 3], "a grid is a mapping"),
])
def test_a_bad_grid_is_refused_in_one_line_before_anything_runs(tmp_path, grid, says):
    g = write(tmp_path, grid)
    out = tmp_path / "t.csv"
    r = subprocess.run(sweep_cmd(g, str(out), "--workers", "0"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


def test_a_grid_that_is_not_json_or_yaml_says_so(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("{workload: victim")
    with pytest.raises(UsageError, match="not valid JSON"):
        sweep.load_grid(str(p))
    y = tmp_path / "g.yaml"
    y.write_text("workload: victim\nhosts: [16, 32]\nseeds: 2\n")
    assert len(sweep.cells(sweep.load_grid(str(y)))) == 4


def test_a_cell_that_fails_is_recorded_and_the_others_go_on(tmp_path, monkeypatch):
    from mrc import simfab as sim

    real = sim.simulate

    def fails_for_seed_2(fab, *a, **kw):
        if fab.seed == 2:
            raise RuntimeError("the simulator ran out of something")
        return real(fab, *a, **kw)

    monkeypatch.setattr(sim, "simulate", fails_for_seed_2)
    rows = [sweep.run_cell(c) for c in sweep.cells(GRID)]
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 2 and all(r["seed"] == 2 and "ran out of something" in r["error"] for r in bad)
    assert all(r["status"] == "ok" and r["victim_ratio"] > 0 for r in rows if r["seed"] != 2)


def test_cells_are_keyed_by_their_parameters():
    a, b = sweep.cells(GRID), sweep.cells(GRID)
    assert [c["key"] for c in a] == [c["key"] for c in b] and len({c["key"] for c in a}) == 6
    other = sweep.cells(GRID | {"size": "8M"})
    assert not {c["key"] for c in a} & {c["key"] for c in other}


def test_a_grid_runs_roce_beside_mrc_and_mrc_cells_keep_their_keys():
    import hashlib

    grid = {"workload": "permutation", "hosts": 16, "planes": 2, "size": "1M", "transport": ["mrc", "roce"],
            "roce": {"qps": 2, "split": 1, "pfc_xoff": 65536}}
    rows = {c["transport"]: (c, sweep.run_cell(c)) for c in sweep.cells(grid)}
    assert all(r["status"] == "ok" and r["goodput_ratio"] > 0 for _, r in rows.values())
    assert rows["roce"][1]["goodput_ratio"] != rows["mrc"][1]["goodput_ratio"]
    # an MRC cell's key is what it was before the transport keys came (stored tables resume)
    mrc = rows["mrc"][0]
    old = json.dumps({k: mrc[k] for k in sweep.PARAMS if k not in ("transport", "roce")}, sort_keys=True,
                     separators=(",", ":"))
    assert sweep.cells({**grid, "transport": "mrc", "roce": None})[0]["key"] == \
        hashlib.sha256(old.encode()).hexdigest()[:16]


def test_a_table_cut_mid_row_or_of_another_kind_is_handled(tmp_path):
    g = write(tmp_path, GRID | {"seeds": 1})
    out = tmp_path / "t.csv"
    r = subprocess.run(sweep_cmd(g, str(out), "--workers", "0"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    whole = out.read_text()
    out.write_text(whole[:-20])  # a kill in the middle of the last row
    r = subprocess.run(sweep_cmd(g, str(out), "--workers", "0"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["ran"] == 1, r.stderr
    assert len(table(str(out))) == 2 and all(r["status"] == "ok" for r in table(str(out)).values())
    assert out.read_text().count("\n") == 3  # the cut row is gone, its cell ran again
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    r = subprocess.run(sweep_cmd(g, str(other), "--workers", "0"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a sweep table" in r.stderr and other.read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("flag,says", [(["--workers", "-1"], "--workers: wants an integer from 0 to 256"),
                                       (["--metric", "speed"], "--metric")])
def test_bad_flags_are_refused_in_one_line(tmp_path, flag, says):
    g = write(tmp_path, GRID)
    r = subprocess.run(sweep_cmd(g, str(tmp_path / "t.csv"), *flag), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "t.csv").exists()


def test_the_table_goes_where_the_sweep_runs_not_beside_the_grid(tmp_path):
    """The README's sweep names a grid in the checkout's docs/: its table must not land there."""
    grids, here = tmp_path / "docs", tmp_path / "here"
    grids.mkdir()
    here.mkdir()
    g = write(grids, GRID | {"seeds": 1}, name="small.json")
    cmd = [c for c in sweep_cmd(g, "-", "--workers", "0") if c not in ("--out", "-")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=here)
    assert r.returncode == 0, r.stderr
    assert os.listdir(grids) == ["small.json"] and os.listdir(here) == ["small.csv"]
    assert len(table(str(here / "small.csv"))) == 2
