"""The nccl-tests loop, per rank: each size of a collective timed over
``iters`` calls after ``warmup``, and its columns (size, count, type, redop,
root, time, algbw, busbw, #wrong).

Inputs are small whole numbers made from the rank and the size, so every
rank can compute what every call must give (``check``), exactly, in any
dtype and any order of reduction.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mrc.coll import schedule
from mrc.coll.comm import Communicator

COLUMNS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")
TYPE_NAMES = {"float16": "half", "float32": "float", "float64": "double", "int32": "int32", "int64": "int64"}


def sizes(begin: int, end: int, factor: int = 2, step: int = 0) -> list[int]:
    """nccl-tests' -b -e -f (or -i: a fixed step)."""
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = s + step if step else s * factor
        if not step and factor < 2:
            break
    return out


def data(rank: int, n: int, dtype: str, seed: int) -> np.ndarray:
    """Rank ``rank``'s input: small integers, the same for a seed on every machine."""
    rng = np.random.default_rng([seed, rank])
    return rng.integers(-4, 5, n).astype(dtype)


def counts_v(n: int, base: int) -> np.ndarray:
    """all_to_all_v's counts: counts[i][j] elements from rank i to rank j, uneven as an MoE's routing is."""
    return np.array([[base * (1 + (i + 2 * j) % n) // n for j in range(n)] for i in range(n)], dtype=np.int64)


class Case:
    """One collective at one size: its inputs, its call and what it must give."""

    def __init__(self, coll: str, size: int, dtype: str, op: str, root: int, n: int, rank: int) -> None:
        self.coll, self.dtype, self.op, self.root, self.n, self.rank = coll, dtype, op, root, n, rank
        isz = np.dtype(dtype).itemsize
        count = max(0, size // isz)
        if coll in ("all_gather", "all_to_all", "all_to_all_v", "reduce_scatter"):
            count -= count % n
        self.count = count
        self.seed = size
        if coll == "all_gather":
            self.x = data(rank, count // n, dtype, self.seed)
        elif coll == "all_to_all_v":
            self.cv = counts_v(n, count // n)
            self.x = data(rank, int(self.cv[rank].sum()), dtype, self.seed)
        else:
            self.x = data(rank, count, dtype, self.seed)
        self.size = count * isz
        if coll == "all_to_all_v":
            self.size = int(self.cv[rank].sum()) * isz

    def start(self, comm: Communicator):
        """Start the case's collective on ``comm``; returns its handle."""
        if self.coll in ("all_reduce", "reduce_scatter"):
            return getattr(comm, self.coll)(self.x, self.op, async_op=True)
        if self.coll == "broadcast":
            return comm.broadcast(self.x.copy() if self.rank != self.root else self.x, self.root, async_op=True)
        if self.coll == "all_to_all_v":
            return comm.all_to_all_v(self.x, self.cv[self.rank], self.cv[:, self.rank], async_op=True)
        return getattr(comm, self.coll)(self.x, async_op=True)

    def expected(self) -> np.ndarray:
        """What this rank must hold afterwards, computed with numpy."""
        n, c = self.n, self.coll
        if c == "all_gather":
            return np.concatenate([data(r, self.count // n, self.dtype, self.seed) for r in range(n)])
        if c == "broadcast":
            return data(self.root, self.count, self.dtype, self.seed)
        if c == "all_to_all":
            return np.concatenate([np.split(data(r, self.count, self.dtype, self.seed), n)[self.rank]
                                   for r in range(n)])
        if c == "all_to_all_v":
            parts = []
            for r in range(n):
                xr = data(r, int(self.cv[r].sum()), self.dtype, self.seed)
                parts.append(np.split(xr, np.cumsum(self.cv[r])[:-1])[self.rank])
            return np.concatenate(parts)
        ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[self.op]
        acc = data(0, self.count, self.dtype, self.seed)
        for r in range(1, n):
            acc = ufunc(acc, data(r, self.count, self.dtype, self.seed))
        return acc if c == "all_reduce" else np.array_split(acc, n)[self.rank]


def run(comm: Communicator, coll: str, size_list: list[int], dtype: str = "float32", op: str = "sum",
        root: int = 0, iters: int = 20, warmup: int = 5, check: bool = False, progress=None) -> list[dict]:
    """Every size: the mean time of ``iters`` calls (after ``warmup``); algbw and busbw from
    rank 0's view; ``wrong`` summed over the ranks (an all-reduce of the counts)."""
    rows = []
    factor = schedule.bus_factor(coll, comm.nranks)
    for size in size_list:
        case = Case(coll, size, dtype, op, root, comm.nranks, comm.rank)
        for _ in range(warmup):
            case.start(comm).wait()
        comm.barrier()
        t0 = time.perf_counter()
        last = None
        for i in range(iters):
            last = case.start(comm).wait()
            if progress:
                progress(coll, case.size, i + 1, iters)
        dt = (time.perf_counter() - t0) / max(1, iters)
        wrong = 0
        if check and last is not None:
            want = case.expected()
            wrong = int(np.count_nonzero(np.asarray(last).reshape(-1) != want)) + abs(last.size - want.size)
        # the slowest rank's time is the collective's, and every rank's wrong elements count
        tw = comm.all_reduce(np.array([dt], np.float64), "max")[0]
        wrong = int(comm.all_reduce(np.array([wrong], np.int64))[0])
        nbytes = {"all_gather": case.count * np.dtype(dtype).itemsize}.get(coll, case.size)
        algbw = nbytes / tw / 1e9 if tw > 0 else 0.0
        rows.append({"coll": coll, "size": nbytes, "count": case.count, "type": dtype,
                     "redop": op if coll in ("all_reduce", "reduce_scatter") else "none",
                     "root": root if coll == "broadcast" else -1, "time_us": round(tw * 1e6, 2),
                     "algbw_GBps": round(algbw, 3), "busbw_GBps": round(algbw * factor, 3),
                     "algbw_gbps": round(algbw * 8, 3), "busbw_gbps": round(algbw * factor * 8, 3),
                     "wrong": wrong if check else None, "iters": iters})
    return rows


def header(coll: str, n: int, out=sys.stdout) -> None:
    """nccl-tests' header lines for ``coll`` on ``n`` ranks."""
    print(f"# mrc coll {coll}: {n} ranks; busbw = algbw x {schedule.bus_factor(coll, n):.4g} "
          f"({_factor_text(coll)})", file=out)
    print(f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} {'time':>10} {'algbw':>8} {'busbw':>8} "
          f"{'#wrong':>7}", file=out)
    print(f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}", file=out)


def _factor_text(coll: str) -> str:
    return {"all_reduce": "2(n-1)/n", "broadcast": "1"}.get(coll, "(n-1)/n")


def line(r: dict) -> str:
    """One size's row in nccl-tests' columns."""
    wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
    return (f"{r['size']:>12} {r['count']:>13} {TYPE_NAMES.get(r['type'], r['type']):>9} {r['redop']:>7} "
            f"{r['root']:>7} {r['time_us']:>10.2f} {r['algbw_GBps']:>8.3f} {r['busbw_GBps']:>8.3f} {wrong:>7}")
