"""``mrc sim sweep``: a grid of ``mrc sim`` runs (workloads, fabric sizes,
congestion control settings, faults, seeds), each cell deterministic and
keyed by its parameters, run on Dask (a local cluster of every core, or an
existing one) or in this process, into one CSV table that a stopped sweep
resumes from; then medians and spreads over the seeds, and plots.

A grid is JSON or YAML. Each key takes one value or a list (an axis); the
sweep is every combination of the axes::

    workload: victim            # permutation, alltoall, incast, victim, ring-allreduce, all-reduce, all-to-all
    hosts: [16, 64]
    size: 64M
    msg: 256K
    cc:                         # struct mrc_cc_params fields over the fabric's own
      - {algorithm: nscc}
      - {algorithm: nscc, md_by_sample: 1}
      - {algorithm: fixed}
    fault: [null, "t1:0.0@20us"]
    transport: [mrc, roce]      # roce: the RoCEv2 model at every NIC (docs/sim.md)
    roce: {qps: 16, split: 1, pfc_xoff: 98304}   # its settings (mrc.simspec.roce_params)
    seeds: 16                   # a count (seeds 1..16) or a list

Keys: workload, hosts, planes, leaves, spines, rate, hop_delay, buffer, ecn,
trim, mtu, size, msg, incast, victim_at, cc, fault, transport, roce, seeds. Each row of the
table: the cell's key, the commit, its parameters, ``status`` (ok or
error), ``error`` and the run's figures (METRICS).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from mrc import docfile, provenance
from mrc.errors import UsageError

#: grid keys and their defaults (a cell's parameters when the grid leaves them out)
DEFAULTS = {"workload": "permutation", "hosts": 64, "planes": 8, "leaves": 0, "spines": 0, "rate": "100G",
            "hop_delay": "1us", "buffer": "1M", "ecn": "64K", "trim": "128K", "mtu": 4096, "size": "16M",
            "msg": "1M", "incast": 7, "victim_at": "0", "cc": None, "fault": None, "transport": "mrc",
            "roce": None}
#: keys that came after tables were kept: at their default they stay out of a cell's key, which so
#: stays what it was
LATER_KEYS = ("transport", "roce")
#: the figures kept of each run (every one deterministic for a cell but the last two)
METRICS = ("goodput_ratio", "wire_bound_ratio", "victim_ratio", "p50_us", "p99_us", "max_us", "max_gap_us",
           "qp_errors", "unfinished", "drops", "trims", "marks", "pauses", "timeouts", "rtx_packets", "packets",
           "wall_s", "sim_pps")
TIMING = ("wall_s", "sim_pps")
#: the most cells one sweep takes (each is a whole simulation: more is a mistake in the grid)
MAX_CELLS = 100_000
PARAMS = tuple(DEFAULTS) + ("seed",)
COLUMNS = ("key", "commit") + PARAMS + ("status", "error") + METRICS


# ------------------------------------------------------------------ the grid
def load_grid(path: str) -> dict:
    """A grid file (JSON, or YAML with pyyaml) as a mapping; a file that cannot be read says so in one line."""
    grid = docfile.read(path, "the grid")
    if not isinstance(grid, dict):
        raise UsageError(f"{path}: a grid is a mapping of keys to a value or a list of values")
    return grid


def cells(grid: dict) -> list[dict]:
    """Every combination of the grid's axes, each a cell's full parameters (defaults filled in),
    checked: an unknown key, an empty axis, a value the simulator cannot take or a fabric it
    cannot build is refused in one line before anything runs."""
    unknown = sorted(set(grid) - set(DEFAULTS) - {"seeds"})
    if unknown:
        raise UsageError(f"unknown grid key {unknown[0]!r}: the keys are {', '.join(list(DEFAULTS) + ['seeds'])}")
    seeds = grid.get("seeds", 1)
    if isinstance(seeds, bool) or not (isinstance(seeds, int) and seeds >= 1 or isinstance(seeds, list)):
        raise UsageError(f"seeds {seeds!r}: a count (1 or more) or a list of seeds")
    if isinstance(seeds, int) and seeds > MAX_CELLS:
        raise UsageError(f"seeds {seeds:,}: at most {MAX_CELLS:,} cells in one sweep")
    seeds = list(range(1, seeds + 1)) if isinstance(seeds, int) else seeds
    axes = {}
    for k in DEFAULTS:
        v = grid.get(k, DEFAULTS[k])
        axes[k] = v if isinstance(v, list) else [v]
    axes["seed"] = seeds
    for k, v in axes.items():
        if not v:
            raise UsageError(f"grid key {k!r} has an empty list: give it one value or more")
    n = 1
    for v in axes.values():
        n *= len(v)
    if n > MAX_CELLS:
        raise UsageError(f"the grid has {n:,} cells, more than {MAX_CELLS:,}: split it into several sweeps")
    out = []
    for combo in itertools.product(*axes.values()):
        cell = dict(zip(axes, combo, strict=True))
        cell["key"] = cell_key(cell)
        out.append(cell)
    for cell in out:  # every distinct setting built once: the fabric, the workload, the fault
        check_cell(cell)
    return out


def cell_key(cell: dict) -> str:
    """A cell's identity: a digest of its parameters (the same grid cell has the same key, always)."""
    canon = json.dumps({k: cell[k] for k in PARAMS if not (k in LATER_KEYS and cell[k] == DEFAULTS[k])},
                       sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _build(cell: dict):
    """The cell's fabric and workload arguments (raises UsageError on anything it cannot be)."""
    from mrc import simspec
    from mrc.units import parse_rate, parse_size

    for k in ("hosts", "planes", "leaves", "spines", "mtu", "incast"):
        if isinstance(cell[k], bool) or not isinstance(cell[k], int):
            raise UsageError(f"{k} {cell[k]!r}: a whole number")
    if not isinstance(cell["seed"], int) or isinstance(cell["seed"], bool) or cell["seed"] < 0:
        raise UsageError(f"seed {cell['seed']!r}: a whole number >= 0")
    if cell["workload"] not in simspec.WORKLOADS:
        raise UsageError(f"workload {cell['workload']!r}: one of {', '.join(simspec.WORKLOADS)}")
    trim = str(cell["trim"])
    fab = simspec.Fabric(hosts=cell["hosts"], planes=cell["planes"], leaves=cell["leaves"], spines=cell["spines"],
                         rate_bps=parse_rate(str(cell["rate"])), hop_ns=simspec.parse_time(str(cell["hop_delay"])),
                         buffer_bytes=parse_size(str(cell["buffer"])), ecn_bytes=parse_size(str(cell["ecn"])),
                         trim_bytes=0 if trim in ("0", "off") else parse_size(trim), mtu=cell["mtu"],
                         seed=cell["seed"], cc=cell["cc"], transport=str(cell["transport"]),
                         roce=cell["roce"] if isinstance(cell["roce"], dict) else _no_roce(cell["roce"]))
    size, msg = parse_size(str(cell["size"])), parse_size(str(cell["msg"]))
    if size <= 0 or msg <= 0:
        raise UsageError(f"size {cell['size']!r}, msg {cell['msg']!r}: both positive")
    if cell["incast"] < 1:
        raise UsageError("incast must be at least 1")
    faults = [] if cell["fault"] in (None, "", "none") else [simspec.parse_fault(str(cell["fault"]), fab)]
    victim_at = simspec.parse_time(str(cell["victim_at"]))
    return fab, size, msg, faults, victim_at


def _no_roce(v) -> dict:
    """A grid's ``roce`` that is not a mapping: none (null) only."""
    if v is not None:
        raise UsageError(f"roce {v!r}: a mapping of RoCE settings, e.g. {{qps: 16, split: 1}}")
    return {}


def check_cell(cell: dict) -> None:
    """Refuse, in one line naming the cell, a cell the simulator cannot run."""
    from mrc import simfab as sim
    from mrc import simspec

    try:
        fab, size, _msg, _faults, victim_at = _build(cell)
        sim.check_victim_start(cell["workload"], victim_at, f"victim_at {cell['victim_at']}")
        simspec.flows_for(cell["workload"], fab, size, cell["incast"], fab.seed)
    except UsageError as e:
        shown = {k: cell[k] for k in PARAMS if cell[k] != DEFAULTS.get(k)}
        raise UsageError(f"grid cell {json.dumps(shown)}: {e}") from e


# ------------------------------------------------------------------ one cell
def run_cell(cell: dict) -> dict:
    """One cell, run: its row (parameters, status, error, figures). A run that fails is recorded
    with its error (status "error"), never raised: the sweep goes on."""
    from mrc import simfab as sim

    row = {k: cell[k] for k in ("key",) + PARAMS}
    try:
        fab, size, msg, faults, victim_at = _build(cell)
        s = sim.simulate(fab, cell["workload"], size, msg, incast=cell["incast"], faults=faults,
                         victim_start_ns=victim_at)
        r = s.result
        s.close()
        row.update(status="ok", error="", **{m: r.get(m, "") for m in METRICS})
    except Exception as e:  # a cell's failure is data: recorded, and the others go on
        row.update(status="error", error=f"{type(e).__name__}: {e}"[:500], **{m: "" for m in METRICS})
    return row


# ------------------------------------------------------------------ the table
def commit() -> str:
    """The code's commit (with + when the tree differs), or "unknown" outside a checkout."""
    c = provenance.commit()
    return (c + ("+" if provenance.dirty() else "")) if c else "unknown"


def _cell_text(v) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) or v is None else str(v)


def read_table(path: str) -> list[dict]:
    """The rows already in the table (none if there is no table yet)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames and list(reader.fieldnames) != list(COLUMNS):
            raise UsageError(f"{path} is not a sweep table of this version (its columns differ): give another --out")
        # a row cut short by a kill mid-write is not a result: its cell runs again
        return [r for r in reader if None not in r.values() and r["status"] in ("ok", "error")]


class Table:
    """The CSV table, a row appended (and flushed) as each cell ends, so that a sweep killed at
    any moment leaves every finished cell recorded."""

    def __init__(self, path: str) -> None:
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        if not new:  # a kill mid-row left a partial line: it goes, and the next row starts on a line of its own
            with open(path, "rb+") as f:
                data = f.read()
                if not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        self.f = open(path, "a", newline="")  # noqa: SIM115 (closed by close())
        self.w = csv.DictWriter(self.f, fieldnames=COLUMNS)
        if new:
            self.w.writeheader()
            self.f.flush()

    def add(self, row: dict, code: str) -> None:
        """One finished cell's row, with the commit, on disk at once."""
        self.w.writerow({k: _cell_text(v) for k, v in ({"commit": code} | row).items()})
        self.f.flush()

    def close(self) -> None:
        """The table's file, closed."""
        self.f.close()


# ------------------------------------------------------------------ running
def run_serial(todo: list[dict], table: Table, code: str, progress) -> None:
    """The cells in this process, one at a time (no Dask)."""
    for i, cell in enumerate(todo):
        table.add(run_cell(cell), code)
        progress(i + 1, len(todo))


def run_dask(todo: list[dict], table: Table, code: str, progress, scheduler: str | None, workers: int) -> dict:
    """The cells on a Dask cluster: an existing one at ``scheduler``, or a local one of ``workers``
    processes (one thread each: the simulator is single-threaded C). Returns the cluster's size
    and how long it took to start."""
    try:
        import dask
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as e:
        raise UsageError("the sweep runs on Dask: pip install 'dask[distributed]' (or --workers 0: in this "
                         "process, one cell at a time)") from e
    t0 = time.perf_counter()
    cluster = None
    scratch = None if scheduler else tempfile.mkdtemp(prefix="mrc-sweep-dask-")  # the workers' spill space, ours
    try:
        if scheduler:
            client = Client(scheduler, timeout="20s")
        else:
            with dask.config.set({"temporary-directory": scratch}):  # the scheduler's and the workers' files
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, local_directory=scratch)
            client = Client(cluster)
    except OSError as e:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        raise UsageError(f"cannot reach the Dask scheduler {scheduler}: {e}") from e
    started = time.perf_counter() - t0
    try:
        n = len(client.scheduler_info()["workers"])
        futures = client.map(run_cell, todo, key=[f"mrc-cell-{c['key']}" for c in todo], pure=False)
        for done, fut in enumerate(as_completed(futures), 1):
            table.add(fut.result(), code)
            progress(done, len(todo))
    finally:
        client.close()
        if cluster:
            cluster.close()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return {"workers": n, "cluster_start_s": round(started, 2)}


# ------------------------------------------------------------------ the summary
def _num(v: str):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if x.is_integer() and "." not in v else x


def summary(rows: list[dict], grid_cells: list[dict]) -> list[dict]:
    """Per setting (a cell's parameters but its seed): seeds run, errors, and for every figure
    the median and the spread [min, max] over the seeds."""
    keys = {c["key"] for c in grid_cells}
    groups: dict[str, dict] = {}
    for r in rows:
        if r["key"] not in keys:
            continue
        setting = {k: r[k] for k in PARAMS if k != "seed"}
        g = groups.setdefault(json.dumps(setting, sort_keys=True), {"setting": setting, "rows": []})
        g["rows"].append(r)
    out = []
    for g in groups.values():
        ok = [r for r in g["rows"] if r["status"] == "ok"]
        s = {**g["setting"], "seeds": len(g["rows"]), "errors": len(g["rows"]) - len(ok)}
        for m in METRICS:
            vals = [x for x in (_num(r[m]) for r in ok) if x is not None]
            if vals:
                med = statistics.median(vals)
                s[m] = int(med) if float(med).is_integer() else round(med, 4)
                s[m + "_spread"] = [min(vals), max(vals)]
        out.append(s)
    return out


def varying(grid_cells: list[dict]) -> list[str]:
    """The parameters (but the seed) that take more than one value in the grid."""
    return [k for k in PARAMS if k != "seed" and len({_cell_text(c[k]) for c in grid_cells}) > 1]


def plot(rows: list[dict], grid_cells: list[dict], outdir: str, metric: str) -> list[str]:
    """For each parameter that varies: ``metric`` over the seeds as a CDF per value of it."""
    try:
        import matplotlib
    except ImportError as e:
        raise UsageError("--plot needs matplotlib (pip install matplotlib); the table is written all the same") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    keys = {c["key"] for c in grid_cells}
    ok = [r for r in rows if r["key"] in keys and r["status"] == "ok" and _num(r[metric]) is not None]
    written = []
    for param in varying(grid_cells) or ["workload"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for value in sorted({r[param] for r in ok}):
            xs = sorted(_num(r[metric]) for r in ok if r[param] == value)
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], drawstyle="steps-post", label=f"{param}={value}")
        ax.set_xlabel(metric)
        ax.set_ylabel("fraction of runs")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        path = os.path.join(outdir, f"sweep_{metric}_by_{param}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# ------------------------------------------------------------------ the command
def main(a) -> int:
    """``mrc sim sweep``: check the grid, run what the table lacks, print the summary."""
    grid_cells = cells(load_grid(a.grid))
    # in the directory the user runs it from, not beside the grid (which may be a checkout's docs)
    out = a.out or os.path.splitext(os.path.basename(a.grid))[0] + ".csv"
    done = {r["key"] for r in read_table(out)}
    todo = [c for c in grid_cells if c["key"] not in done]
    code = commit()
    say = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    say(f"sweep: {len(grid_cells)} cells, {len(grid_cells) - len(todo)} already in {out}, {len(todo)} to run "
        + ("in this process" if a.workers == 0 else f"on {a.scheduler or f'a local Dask cluster of {a.workers}'}"))
    last = [time.monotonic()]
    t0 = time.perf_counter()

    tty = sys.stderr.isatty()

    def progress(i: int, n: int) -> None:
        """On a terminal a line rewritten each second; in a log a line every 10 s, and the last."""
        if not a.quiet and (time.monotonic() - last[0] > (1 if tty else 10) or i == n):
            last[0] = time.monotonic()
            print(f"{chr(13) if tty else ''}  {i}/{n} cells, {time.perf_counter() - t0:.0f} s",
                  end="\n" if i == n or not tty else "", file=sys.stderr, flush=True)

    table = Table(out)
    info: dict = {}
    try:
        if not todo:
            pass
        elif a.workers == 0 and not a.scheduler:
            run_serial(todo, table, code, progress)
        else:
            info = run_dask(todo, table, code, progress, a.scheduler, a.workers)
    finally:
        table.close()
    rows = read_table(out)
    summ = summary(rows, grid_cells)
    res = {"grid": a.grid, "table": out, "commit": code, "cells": len(grid_cells), "ran": len(todo),
           "run_s": round(time.perf_counter() - t0, 2), **info,
           "errors": sum(1 for r in rows if r["key"] in {c["key"] for c in grid_cells} and r["status"] != "ok"),
           "summary": summ}
    if a.plot:
        res["plots"] = plot(rows, grid_cells, a.plot, a.metric)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        show = [m for m in (a.metric, "goodput_ratio", "p99_us", "qp_errors") if any(m in s for s in summ)]
        show = list(dict.fromkeys(show))
        vary = varying(grid_cells)
        for s in summ:
            label = ", ".join(f"{k}={_cell_text(s[k])}" for k in vary) or s["workload"]
            figs = "  ".join(f"{m} {s[m]} [{s[m + '_spread'][0]}-{s[m + '_spread'][1]}]" for m in show if m in s)
            print(f"{label}: {s['seeds']} seeds, {s['errors']} errors  {figs}")
        print(f"{res['errors']} cells failed; table {out}" + (f"; plots in {a.plot}" if a.plot else ""))
    return 1 if res["errors"] else 0
