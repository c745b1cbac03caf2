"""The Gloo baseline's program: torch.distributed with the Gloo backend, one rank
per fabric host, started by bench/coll_bench.py in each host's namespace
(where torch is installed; the bench skips it with a line where it is not).

Gloo reaches its peers over the interfaces GLOO_SOCKET_IFNAME names: the
bench gives it the per-plane interfaces of mrc.fabric.baseline.mpi_ports
(mpi0 alone, or mpi0..mpi7: Gloo then opens a pair per interface and
spreads a collective's bytes over them). MPI_Allreduce-like inputs and
#wrong as mrc coll's (mrc.coll.perf). Rank 0 prints ``@result JSON``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist

from mrc.coll import perf, schedule


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="rank 0's management address")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--coll", default="all_reduce", choices=["all_reduce", "all_to_all"])
    ap.add_argument("--size", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://[{a.master}]:{a.port}", rank=a.rank, world_size=a.world)
    case = perf.Case(a.coll, a.size, "float32", "sum", 0, a.world, a.rank)
    x = torch.from_numpy(case.x.copy())
    out = torch.empty_like(x)

    def call():
        if a.coll == "all_reduce":
            y = x.clone()
            dist.all_reduce(y)
            return y
        dist.all_to_all_single(out, x)
        return out

    for _ in range(a.warmup):
        call()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        y = call()
    dt = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    wrong = torch.tensor([int(np.count_nonzero(y.numpy() != case.expected()))], dtype=torch.int64)
    dist.all_reduce(wrong)
    if a.rank == 0:
        t = float(dt[0])
        algbw = case.size / t / 1e9
        f = schedule.bus_factor(a.coll, a.world)
        print("@result " + json.dumps({"coll": a.coll, "size": case.size, "count": case.count, "type": "float32",
                                       "time_us": round(t * 1e6, 2), "algbw_GBps": round(algbw, 4),
                                       "busbw_GBps": round(algbw * f, 4), "algbw_gbps": round(algbw * 8, 4),
                                       "busbw_gbps": round(algbw * f * 8, 4), "wrong": int(wrong[0]),
                                       "iters": a.iters, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
