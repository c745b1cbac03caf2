"""The MPI baseline's program: OpenMPI through mpi4py, one rank per fabric
host, run by bench/coll_bench.py through mpirun (mrc.fabric.baseline.mpirun_argv).

    coll  all_reduce|all_to_all --size BYTES: MPI_Allreduce / MPI_Alltoall,
          the same inputs, timing and #wrong as `mrc coll` (mrc.coll.perf)
    train --model ... : the same training steps as `mrc train` (mrc.tools.train.steps)

Rank 0 prints one line: ``@result JSON`` (and ``@start NS`` first in train).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

from mrc.coll import perf, schedule
from mrc.tools import train


def coll_main(a, comm) -> dict:
    n, r = comm.Get_size(), comm.Get_rank()
    case = perf.Case(a.coll, a.size, "float32", "sum", 0, n, r)
    out = np.empty_like(case.x)

    def call():
        if a.coll == "all_reduce":
            comm.Allreduce(case.x, out, op=MPI.SUM)
        else:
            comm.Alltoall(case.x, out)

    for _ in range(a.warmup):
        call()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        call()
    dt = comm.allreduce((time.perf_counter() - t0) / a.iters, op=MPI.MAX)
    wrong = int(np.count_nonzero(out != case.expected())) if a.check else 0
    wrong = comm.allreduce(wrong, op=MPI.SUM)
    algbw = case.size / dt / 1e9
    f = schedule.bus_factor(a.coll, n)
    return {"coll": a.coll, "size": case.size, "count": case.count, "type": "float32", "time_us": round(dt * 1e6, 2),
            "algbw_GBps": round(algbw, 4), "busbw_GBps": round(algbw * f, 4), "algbw_gbps": round(algbw * 8, 4),
            "busbw_gbps": round(algbw * f * 8, 4), "wrong": wrong if a.check else None, "iters": a.iters}


def train_main(a, comm) -> dict | None:
    n = comm.Get_size()
    start = comm.bcast(time.monotonic_ns() + 2_000_000_000, root=0)
    if comm.Get_rank() == 0:
        print(f"@start {start}", flush=True)

    def allreduce(x):
        y = np.empty_like(x)
        comm.Allreduce(x, y, op=MPI.SUM)
        return y

    def alltoall(x):
        y = np.empty_like(x)
        comm.Alltoall(x, y)
        return y

    seconds = 2 * a.pairs * a.phase_seconds if a.phase_seconds else a.seconds
    rows = train.steps(allreduce, alltoall, n, a.model, a.bucket, a.compute_ms, a.moe, None if seconds else a.steps,
                       seconds, a.warmup, start)
    return {"transport": "mpi", "ranks": n, **train.phases(rows, a.phase_seconds), "qp_errors": 0, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["coll", "train"])
    ap.add_argument("--coll", default="all_reduce", choices=["all_reduce", "all_to_all"])
    ap.add_argument("--size", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--model", type=int, default=8 << 20)
    ap.add_argument("--bucket", type=int, default=2 << 20)
    ap.add_argument("--compute-ms", type=float, default=50.0)
    ap.add_argument("--moe", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--phase-seconds", type=float)
    ap.add_argument("--pairs", type=int, default=1)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    res = coll_main(a, comm) if a.mode == "coll" else train_main(a, comm)
    if comm.Get_rank() == 0:
        print("@result " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
