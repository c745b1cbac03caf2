"""``mrc train``: a data-parallel training step, per rank.

Each step computes for about ``compute_ms`` (matrix products, calibrated
once at start so that every step does the same work), then all-reduces a
model's gradients in buckets (25 MB by default, as PyTorch DDP does), and
optionally exchanges an MoE layer's tokens with an all-to-all. The loop is
written against two callables, so that the MPI baseline
(bench/coll_mpi.py) runs the very same steps over mpi4py.

With faults, the run alternates phases of equal length from one start time
that every rank agrees on: no faults, then the fault schedule, ``pairs``
times over (the launcher drives it, :func:`launch_with_faults`), so that a
drift of the machine's own speed falls on both. Each step is reported with
its start (CLOCK_MONOTONIC, shared by every namespace of a machine), its
length and the time of its collectives.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

from mrc.errors import UsageError
from mrc.units import percentile

MATRIX = 192


class Compute:
    """Real numpy work of about ``ms`` milliseconds, the same amount every step."""

    def __init__(self, ms: float) -> None:
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((MATRIX, MATRIX)).astype(np.float32)
        self.b = rng.standard_normal((MATRIX, MATRIX)).astype(np.float32)
        self.reps = 0
        if ms <= 0:
            return
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.2:
            self.a @ self.b
            n += 1
        self.reps = max(1, round(ms / 1e3 / ((time.perf_counter() - t0) / n)))

    def __call__(self) -> None:
        for _ in range(self.reps):
            self.a @ self.b


def buckets(model_bytes: int, bucket_bytes: int) -> list[int]:
    """float32 elements per bucket (the last one holds the rest)."""
    if model_bytes <= 0 or bucket_bytes <= 0:
        raise UsageError("--model and --bucket must be positive")
    n = model_bytes // 4
    per = max(1, bucket_bytes // 4)
    return [min(per, n - i) for i in range(0, n, per)]


def steps(allreduce, alltoall, nranks: int, model_bytes: int, bucket_bytes: int, compute_ms: float, moe_bytes: int,
          n_steps: int | None, seconds: float | None, warmup: int, start_ns: int | None = None,
          on_step=None) -> list[list[float]]:
    """Run the steps; returns [[start_s, length_s, comm_s], ...] from ``start_ns``
    (the agreed start; steps before it are warm-up): comm_s is the part of the
    step after the compute (the collectives, including any wait for a slower
    rank). ``allreduce(array)`` and ``alltoall(array)`` return new arrays."""
    compute = Compute(compute_ms)
    grads = [np.full(n, 1.0 / nranks, np.float32) for n in buckets(model_bytes, bucket_bytes)]
    moe = None
    if moe_bytes:
        per = max(1, moe_bytes // 4 // nranks)
        moe = np.ones(per * nranks, np.float32)

    def one() -> float:
        compute()
        c = time.monotonic()
        for g in grads:
            allreduce(g)
        if moe is not None:
            alltoall(moe)
        return time.monotonic() - c

    for _ in range(warmup):
        one()
    t0 = start_ns / 1e9 if start_ns is not None else time.monotonic()
    while time.monotonic() < t0:
        time.sleep(min(0.01, t0 - time.monotonic()))
    out: list[list[float]] = []
    while True:
        s = time.monotonic()
        if n_steps is not None and len(out) >= n_steps:
            break
        # every rank must make the same calls: the ranks stop together, when any one's time is up
        if seconds is not None and allreduce(np.array([s - t0 >= seconds], np.int32))[0]:
            break
        comm = one()
        out.append([round(s - t0, 6), round(time.monotonic() - s, 6), round(comm, 6)])
        if on_step:
            on_step(out)
    return out


def summary(rows: list[list[float]]) -> dict:
    """Step and communication time statistics of ``rows`` (as :func:`steps` returns them)."""
    xs = [r[1] for r in rows]
    ms, comm = [x * 1e3 for x in xs], [r[2] * 1e3 for r in rows]
    return {"steps": len(ms), "step_p50_ms": round(percentile(ms, 0.5), 2),
            "step_p99_ms": round(percentile(ms, 0.99), 2), "step_max_ms": round(max(ms), 2) if ms else 0.0,
            "comm_p50_ms": round(percentile(comm, 0.5), 2), "comm_p99_ms": round(percentile(comm, 0.99), 2),
            "steps_per_s": round(len(ms) / sum(xs), 3) if xs and sum(xs) > 0 else 0.0}


def faulted(start_s: float, phase_s: float) -> bool:
    """Whether a step that started at ``start_s`` is in a fault phase (the odd ones)."""
    return int(start_s // phase_s) % 2 == 1


def phases(rows: list[list[float]], phase_s: float | None) -> dict:
    """Step statistics, split into the no-fault and the fault phases (alternated,
    ``phase_s`` each), by the phase each step started in."""
    if phase_s is None:
        return {"all": summary(rows)}
    return {"no_fault": summary([r for r in rows if not faulted(r[0], phase_s)]),
            "with_faults": summary([r for r in rows if faulted(r[0], phase_s)])}


def fault_plan(topo, spec: str, phase_s: float, pairs: int) -> list[tuple]:
    """The fault process's steps, in seconds from the start: ``spec``'s schedule
    over each fault phase (the second of every pair), each pair's rotation of
    switches and links its own."""
    from mrc.fabric.faults import schedule

    plan: list[tuple] = []
    for k in range(pairs):
        off = (2 * k + 1) * phase_s
        plan += [(at + off, op, target, arg) for at, op, target, arg in schedule(topo, spec, phase_s, seed=7 + k)]
    return plan


def rank_main(comm, a) -> int:
    """One rank of ``mrc train`` (its options checked by mrc.tools.cmd.coll.check_args); rank 0 prints the result."""
    phased = getattr(a, "phase_seconds", None)
    pairs = getattr(a, "pairs", 1) or 1
    # one start time for every rank: rank 0's clock, two seconds on (CLOCK_MONOTONIC is shared on one machine,
    # and on several machines the phases only shift by their clock offset)
    start = np.array([time.monotonic_ns() + 2_000_000_000], np.int64)
    comm.broadcast(start, root=0)
    if comm.rank == 0:
        print(f"@start {int(start[0])}", flush=True)
    seconds = 2 * pairs * phased if phased else a.seconds
    shown = [0.0]

    def progress(rows) -> None:
        if comm.rank == 0 and time.monotonic() - shown[0] > 2:
            shown[0] = time.monotonic()
            print(f"mrc train: step {len(rows)}, last {rows[-1][1] * 1e3:.1f} ms", file=sys.stderr, flush=True)

    rows = steps(lambda x: comm.all_reduce(x), lambda x: comm.all_to_all(x), comm.nranks, a.model, a.bucket,
                 a.compute_ms, a.moe, None if seconds else a.steps, seconds, a.warmup, int(start[0]), progress)
    cnt = comm.qp_counters()
    tot = comm.all_reduce(np.array([*cnt.values(), comm.stats["qp_errors"]], np.int64))
    counters = dict(zip(cnt, (int(v) for v in tot[:-1]), strict=True))
    errs = counters["qps_not_rts"] + int(tot[-1])
    if comm.rank == 0:
        res = {"transport": "mrc", "ranks": comm.nranks, "model_bytes": a.model, "bucket_bytes": a.bucket,
               "compute_ms": a.compute_ms, "moe_bytes": a.moe, "qp_errors": errs, "qp_counters": counters,
               **phases(rows, phased), "rows": rows}
        print("@result " + json.dumps(res), flush=True)
    return 1 if errs else 0


def report(res: dict, out=sys.stdout) -> None:
    """Print the phases' step and collective times to ``out``."""
    for name in ("all", "no_fault", "with_faults"):
        if name in res:
            s = res[name]
            print(f"{name:>9}: {s['steps']} steps, {s['steps_per_s']} steps/s, step p50 {s['step_p50_ms']} ms, "
                  f"p99 {s['step_p99_ms']} ms, max {s['step_max_ms']} ms; collectives p50 {s['comm_p50_ms']} ms, "
                  f"p99 {s['comm_p99_ms']} ms", file=out)
    if "with_faults" in res and res["no_fault"]["step_p99_ms"]:
        print(f"step p99 with faults / without: "
              f"{res['with_faults']['step_p99_ms'] / res['no_fault']['step_p99_ms']:.3f}; "
              f"QP errors {res['qp_errors']}", file=out)


def plot(res: dict, fault_events: list[dict], start_ns: int, path: str, title: str = "") -> str:
    """Step time against time, the faults marked (red: down, green: up)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'mrc[bench]'") from None
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for name, rows in res.get("series", {"mrc": res["rows"]}).items():
        ax.plot([r[0] for r in rows], [r[1] * 1e3 for r in rows], ".-", ms=3, lw=0.8, label=name)
    for ev in fault_events:
        t = (ev["t_ns"] - start_ns) / 1e9
        ax.axvline(t, color="red" if ev["op"] == "fail" else "green", lw=0.6, alpha=0.6)
    if res.get("phase_s"):
        end, ph = ax.get_xlim()[1], res["phase_s"]
        for k in range(int(end // (2 * ph)) + 1):
            if (2 * k + 1) * ph < end:
                ax.axvspan((2 * k + 1) * ph, min(end, (2 * k + 2) * ph), color="orange", alpha=0.08,
                           label="fault schedule" if k == 0 else None)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title or "training step time; red: a link or switch down, green: back up", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def drive(fabric: str, plan: list[tuple], phase_s: float | None, run_ranks) -> tuple[int, dict | None, list, int]:
    """Run a training job whose rank 0 prints ``@start NS`` and ``@result JSON``:
    ``run_ranks(out)`` starts the ranks and streams rank 0's output into ``out``;
    the fault process runs ``plan`` (:func:`fault_plan`: seconds from the
    start). Returns the exit status, the result, the fault events and the start
    (ns). Every fault is healed at the end, whatever happens."""
    from mrc.fabric import apply
    from mrc.fabric.faults import FaultScheduler

    out = _Tee()
    sched = FaultScheduler(fabric) if plan else None
    started = threading.Event()

    def watch() -> None:
        while not started.is_set():
            m = out.find("@start ")
            if m is not None:
                out.start_ns = int(m)
                started.set()
                if sched:
                    delay = (out.start_ns - time.monotonic_ns()) / 1e9
                    sched.plan([(max(0.0, at + delay), op, target, arg) for at, op, target, arg in plan])
                return
            time.sleep(0.02)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    events: list[dict] = []
    try:
        rc = run_ranks(out)
    finally:
        started.set()
        if sched:
            try:
                events = sched.wait(timeout=60) if out.start_ns else []
            except Exception:  # noqa: BLE001 (the run's own failure is what the user needs)
                events = list(sched.events)
            sched.close()
            apply.heal(fabric, None)
    res = out.result()
    if res is not None and out.start_ns:
        res["fault_events"] = [{"t_s": round((e["t_ns"] - out.start_ns) / 1e9, 3), "op": e["op"],
                                "target": e["target"], "late_ms": e.get("late_ms")} for e in events]
        res["phase_s"] = phase_s
    return rc, res, events, out.start_ns


def launch_with_faults(a, hosts: list[str], root: str, rank_argv: list[str]) -> int:
    """``mrc train --fabric NAME [--faults SPEC --seconds S [--pairs N]]``: with
    faults the ranks train for N pairs of phases of ``--seconds`` (no faults,
    then the schedule, which the fault process runs from each fault phase's
    start); rank 0's result is printed (and plotted)."""
    from mrc.fabric import apply
    from mrc.tools import launch

    plan = fault_plan(apply.load_topology(a.fabric), a.faults, a.seconds, a.pairs) if a.faults else []
    extra = ["--phase-seconds", str(a.seconds)] if a.faults else []
    rc, res, events, start_ns = drive(a.fabric, plan, a.seconds if a.faults else None,
                                      lambda out: launch.launch(a.fabric, hosts, root, rank_argv + extra, out=out,
                                                                port=a.port or None))
    if res is None:
        return rc or 1
    res["fault_spec"] = a.faults
    if a.plot:
        res["plot"] = plot(res, events, start_ns, a.plot)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        report(res)
    return rc


class _Tee:
    """Rank 0's output, kept: the launcher reads its @start and @result lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.start_ns = 0

    def write(self, s: str) -> None:
        with self.lock:
            self.lines.append(s)
        if not s.startswith("@"):
            sys.stdout.write(s)

    def flush(self) -> None:
        sys.stdout.flush()

    def find(self, prefix: str) -> str | None:
        with self.lock:
            for line in self.lines:
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
        return None

    def result(self) -> dict | None:
        r = self.find("@result ")
        return json.loads(r) if r else None

    def text(self) -> str:
        with self.lock:
            return "".join(self.lines)
