"""Data-parallel training with PyTorch's DistributedDataParallel: an ordinary script.

A 3-layer MLP (512 -> 2048 -> 2048 -> 16; 5.3 M parameters, 21 MB of float32
gradients a step) learns a fixed random "teacher" network from generated
data: every rank draws its own batches from (seed, rank, step), so a run is
the same on any backend. DDP all-reduces the gradients in 25 MB buckets
while the backward pass runs; SGD with momentum steps the model. Rank 0
prints the loss of every step.

The one line that is about MRC: with ``--backend mrc`` the script imports
``mrc.torch``, which registers the backend. Launch one process per host the
way torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment), e.g. on a fabric:

    for k in 0 1 2 3; do
      RANK=$k WORLD_SIZE=4 MASTER_ADDR=fd6e::1 MASTER_PORT=29500 MRC_PORT_RATE=25mbit \\
        mrc fabric exec --name lab h$k -- python examples/torch/ddp_train.py --backend mrc --steps 20 &
    done; wait

``--seconds S`` trains for S seconds instead of a number of steps (the ranks
agree to stop with an all-reduce of a flag, so each takes the same steps).
Before training, ``--calibrate N`` times N steps of compute alone (under
``no_sync``: no all-reduce) and N all-reduces of the gradients' size alone,
and N buckets' all-reduce launched during a compute loop of the same length
(and during a wait of that length: the compute of a GPU, which leaves the CPU
to the network).
``--json`` makes rank 0 print ``@start NS`` (the agreed start, CLOCK_MONOTONIC)
and, at the end, ``@result {...}``: every step's start, length and loss, and
the calibration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

#: synchronized steps (-1, -2, ...) that --calibrate trains before it times anything
WARMUP = 2


def mlp(width: int, hidden: int, out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, out))


def batch(a, teacher: nn.Module, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + rank * 10_007 + step)
    x = torch.randn(a.batch, a.width, generator=g)
    with torch.no_grad():
        y = teacher(x) + 0.01 * torch.randn(a.batch, a.out, generator=g)
    return x, y


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="gloo", help="gloo or mrc (default gloo)")
    ap.add_argument("--steps", type=int, default=20, help="steps to train (default 20)")
    ap.add_argument("--seconds", type=float, default=0.0, help="train this long instead of --steps")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank and step (default 32)")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--out", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--calibrate", type=int, default=0, metavar="N", help="time compute and all-reduce alone first")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads per rank (default 1)")
    ap.add_argument("--json", action="store_true", help="rank 0 prints @start and @result lines")
    return ap


def main() -> int:
    ap = parser()
    a = ap.parse_args()
    if a.steps < 1 and a.seconds <= 0:
        ap.error("give --steps >= 1 or --seconds > 0")
    if a.seconds < 0 or a.calibrate < 0 or min(a.batch, a.width, a.hidden, a.out, a.threads) < 1 or \
            a.bucket_cap_mb <= 0 or a.lr <= 0:
        ap.error("--seconds and --calibrate must be >= 0; --batch, --width, --hidden, --out and --threads >= 1; "
                 "--bucket-cap-mb and --lr > 0")
    if a.backend not in ("gloo", "mrc"):
        ap.error(f"--backend {a.backend}: gloo or mrc")
    if a.backend == "mrc":
        import mrc.torch  # noqa: F401  (registers backend "mrc")
    torch.set_num_threads(a.threads)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(a.seed)
    model, teacher = mlp(a.width, a.hidden, a.out), mlp(a.width, 64, a.out)
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    params = sum(p.numel() for p in model.parameters())

    def step(k: int, sync: bool = True) -> float:
        x, y = batch(a, teacher, rank, k)
        if sync:
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:   # compute alone: the same work, no all-reduce, no update
            with ddp.no_sync():
                loss = nn.functional.mse_loss(ddp(x), y)
                opt.zero_grad()
                loss.backward()
        return loss.item()

    cal = calibrate(a, ddp, step, params, world) if a.calibrate else {}
    start = torch.tensor([time.monotonic_ns() + 2_000_000_000], dtype=torch.int64)
    dist.broadcast(start, 0)     # one start for every rank (CLOCK_MONOTONIC: one machine's clock)
    t0 = int(start[0]) / 1e9
    if rank == 0 and a.json:
        print(f"@start {int(start[0])}", flush=True)
    while time.monotonic() < t0:
        time.sleep(min(0.01, max(0.0, t0 - time.monotonic())))
    rows, k = [], 0
    while True:
        s = time.monotonic()
        if a.seconds:
            flag = torch.tensor([int(s - t0 >= a.seconds)], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                break
        elif k >= a.steps:
            break
        loss = step(k)
        rows.append([round(s - t0, 6), round(time.monotonic() - s, 6), loss])
        if rank == 0:
            print(f"step {k} loss {loss:.6f} {rows[-1][1] * 1e3:.1f} ms", file=sys.stderr if a.json else sys.stdout,
                  flush=True)
        k += 1
    if rank == 0 and a.json:
        print("@result " + json.dumps({"backend": a.backend, "world": world, "params": params,
                                       "grad_bytes": params * 4, "batch": a.batch, "bucket_cap_mb": a.bucket_cap_mb,
                                       "calibration": cal, "rows": rows,
                                       "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}), flush=True)
    dist.destroy_process_group()
    return 0


def calibrate(a, ddp, step, params: int, world: int) -> dict:
    """Compute alone, the all-reduce of the gradients alone (in DDP's bucket size), and the two at once."""
    for k in range(WARMUP):                  # warm-up: DDP builds its buckets on the first steps
        step(-1 - k)
    n = a.calibrate
    comp = []
    for k in range(n):
        s = time.monotonic()
        step(-10 - k, sync=False)
        comp.append(time.monotonic() - s)
    cap = int(a.bucket_cap_mb * 2**20) // 4
    bufs = [torch.ones(min(cap, params - off)) for off in range(0, params, cap)]
    comm = []
    for _ in range(n):
        dist.barrier()
        s = time.monotonic()
        for w in [dist.all_reduce(b, async_op=True) for b in bufs]:
            w.wait()
        comm.append(time.monotonic() - s)
    # overlap: the buckets' all-reduces launched, then a compute loop of about the same length
    c, m = statistics.median(comp), statistics.median(comm)
    reps = max(1, round(m / c)) if c > 0 else 1
    both = []
    for k in range(n):
        dist.barrier()
        s = time.monotonic()
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for r in range(reps):
            step(-100 - k * reps - r, sync=False)
        for w in works:
            w.wait()
        both.append(time.monotonic() - s)
    # the same with the compute on a device: the CPU waits (a GPU kernel's stand-in), so what is left is the
    # backend's own overlap, without the 2-core machine's contention between the ranks' compute and the network
    idle = []
    for _ in range(n):
        dist.barrier()
        s = time.monotonic()
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        time.sleep(m)
        for w in works:
            w.wait()
        idle.append(time.monotonic() - s)
    return {"compute_s": round(c, 6), "comm_s": round(m, 6), "compute_reps": reps,
            "overlap_s": round(statistics.median(both), 6), "samples": n,
            "overlap_over_longer": round(statistics.median(both) / max(c * reps, m), 4),
            "overlap_idle_s": round(statistics.median(idle), 6),
            "overlap_idle_over_longer": round(statistics.median(idle) / m, 4)}


if __name__ == "__main__":
    sys.exit(main())
