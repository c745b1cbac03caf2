"""PyTorch DDP over MRC against DDP over Gloo, on one fabric, under the same faults.

The program is examples/torch/ddp_train.py, unchanged but for --backend:
a 3-layer MLP (5.3 M parameters, 21 MB of gradients a step) trained with
DistributedDataParallel (bucket_cap_mb=25) and SGD, one process per fabric
host (4 hosts x 8 planes), launched as torchrun would (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) by `mrc fabric exec` in each host's namespace.

Every switch port and NIC port runs at --rate (default 25 Mbit/s) with the
fabric's queues, so the network, not this 2-core machine, is the bottleneck
(as in bench/coll_bench.py); the fabric routes the kernel's traffic with
FRR's BGP and ECMP (--routing bgp), as a datacenter fabric routes TCP.

Backends, one run each, in turn:
  mrc          backend "mrc" (import mrc.torch): MRC QPs over every plane, the
               NIC paced at --rate (MRC_PORT_RATE)
  gloo_planes  Gloo with one interface per plane (GLOO_SOCKET_IFNAME=mpi0,...,mpi7)
  gloo_one     Gloo over one plane (GLOO_SOCKET_IFNAME=mpi0)
Each run first calibrates (--calibrate N: N steps of compute alone, N
all-reduces of the gradients alone, N with the two at once), then trains for
2 x --pairs phases of --phase-seconds, alternated: no faults, then --faults
(default a T1 reboot every 10 s and a link flap every 5 s; mrc train's
schedule, from a separate process), so that the machine's drift falls on both.

    python bench/ddp_bench.py --json --save bench/results --plot ddp-steps.png
    python bench/ddp_bench.py --phase-seconds 20 --pairs 1 --calibrate 2 --only mrc,gloo_planes --json   # quicker

JSON: per backend the steps and their statistics per condition, the
calibration, the collectives' share of a step; `losses` (rank 0's loss at
every step of each run against a reference trajectory that this program
computes in one process, with no network: every rank's gradients, their
mean, the SGD step; per condition, so MRC's fault phases are compared too),
`losses_mrc_vs_gloo` (the steps both took), `losses_equal` (all of them
within `loss_tolerance`),
`p99_inflation` (step p99 with faults over without), `steps_per_s_over_gloo`
(MRC's no-fault steps/s over the better Gloo's), `overlap_ratio`.
Needs root and torch (tools/setup.sh installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import fabric_args  # noqa: E402 (bench/, beside this file)

from mrc.errors import UsageError  # noqa: E402
from mrc.fabric import apply, baseline, qos  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402
from mrc.tools import train  # noqa: E402
from mrc.units import parse_rate  # noqa: E402

SCRIPT = os.path.join(ROOT, "examples", "torch", "ddp_train.py")
BACKENDS = ("mrc", "gloo_planes", "gloo_one")
FAULTS = "t1-reboot/10s,flap/5s"
#: how far rank 0's loss over MRC may be from Gloo's at the same step: the two sum the four ranks' gradients in
#: different orders (a ring here, Gloo's own algorithm there), so float32 rounds them differently by an ulp or
#: so per element, and SGD carries that on; relative to the loss, far below what a transport that lost or
#: misplaced a byte would give (a bucket of zeros or of another step's gradients moves the loss by percents)
LOSS_TOL = 1e-3


def log(msg: str) -> None:
    print(f"ddp_bench: {msg}", file=sys.stderr, flush=True)


def run_backend(t: Topology, a, backend: str, report_dir: str) -> dict | None:
    """One run of the script on every host, the fault plan from its agreed start; rank 0's result."""
    seconds = 2 * a.pairs * a.phase_seconds
    plan = train.fault_plan(t, a.faults, a.phase_seconds, a.pairs) if a.faults else []
    port = 29000 + (os.getpid() + len(backend)) % 3000
    env = {**os.environ, "WORLD_SIZE": str(t.hosts), "MASTER_ADDR": t.mgmt_address(0), "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    if backend == "mrc":
        env["MRC_PORT_RATE"] = a.rate
        env["MRC_TORCH_REPORT"] = os.path.join(report_dir, "qps")
    else:
        planes = t.planes if backend == "gloo_planes" else 1
        env["GLOO_SOCKET_IFNAME"] = ",".join(f"{baseline.MPI_PORT}{p}" for p in range(planes))
    argv = ["--backend", "mrc" if backend == "mrc" else "gloo", "--seconds", str(seconds), "--calibrate",
            str(a.calibrate), "--json", "--seed", str(a.seed)]
    before = baseline.plane_bytes(t, 0)

    def run_ranks(out) -> int:
        procs = []
        for k in range(t.hosts):
            cmd = [sys.executable, "-m", "mrc", "fabric", "exec", "--name", t.name, t.host(k), "--", sys.executable,
                   SCRIPT, *argv]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE if k == 0 else subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True, env={**env, "RANK": str(k)},
                                          start_new_session=True))
        errs: list[list[str]] = [[] for _ in procs]

        def drain(k: int) -> None:
            for line in procs[k].stderr:
                errs[k].append(line)
                if k == 0 and line.startswith("step ") and a.verbose:
                    log(f"{backend}: {line.strip()}")
        pumps = [threading.Thread(target=drain, args=(k,), daemon=True) for k in range(len(procs))]
        for p in pumps:
            p.start()
        try:
            for line in procs[0].stdout:
                out.write(line)
            deadline = time.monotonic() + seconds + 1800
            rcs = [p.wait(max(1, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            rcs = [1]
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.wait()
            for p in pumps:
                p.join(5)
        for k, rc in enumerate(rcs):
            if rc:
                log(f"{backend}: rank {k} exited {rc}: {''.join(errs[k])[-600:]}")
        return max(rcs)

    log(f"{backend}: {seconds:g} s of training ({a.pairs} pairs of {a.phase_seconds:g} s phases)")
    rc, res, events, start_ns = train.drive(t.name, plan, a.phase_seconds if a.faults else None, run_ranks)
    if res is None:
        log(f"{backend}: no result (exit {rc})")
        return None
    res["exit"] = rc
    res["planes_used"] = baseline.planes_used(before, baseline.plane_bytes(t, 0))
    res["events"], res["start_ns"] = events, start_ns
    if backend == "mrc":
        reps = []
        for k in range(t.hosts):
            path = os.path.join(report_dir, f"qps.{k}.json")
            if os.path.exists(path):
                with open(path) as f:
                    reps.append(json.load(f))
        res["qp_errors"] = sum(r["qp_errors"] + r["qp_counters"]["qps_not_rts"] for r in reps) \
            if len(reps) == t.hosts else None
        res["qp_counters"] = {k: sum(r["qp_counters"][k] for r in reps) for k in reps[0]["qp_counters"]} \
            if reps else {}
    return res


def analyse(res: dict, phase_s: float) -> dict:
    """Per condition: steps and step times; the collectives' share of a step (the step beyond its compute
    alone, as the calibration measured it, over the step)."""
    comp = res["calibration"].get("compute_s", 0.0)
    rows = [[r[0], r[1], max(0.0, r[1] - comp)] for r in res["rows"]]
    out = train.phases(rows, phase_s)
    for cond in out.values():
        if cond["steps"]:
            cond["comm_share"] = round(cond["comm_p50_ms"] / cond["step_p50_ms"], 3) if cond["step_p50_ms"] else 0
    return out


def reference(steps: int, world: int, seed: int) -> list[float]:
    """Rank 0's loss at each of ``steps`` steps of the script's DDP training, computed in this process with no
    network: every rank's gradients from its own batch, their mean (what DDP's all-reduce gives), one SGD
    step; after the synchronized warm-up steps that --calibrate trains first (every run here calibrates)."""
    import torch
    import torch.nn as nn

    sys.path.insert(0, os.path.dirname(SCRIPT))
    import ddp_train

    a = ddp_train.parser().parse_args(["--seed", str(seed)])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, teacher = ddp_train.mlp(a.width, a.hidden, a.out), ddp_train.mlp(a.width, 64, a.out)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    params = list(model.parameters())
    out = []
    for k in [-1 - w for w in range(ddp_train.WARMUP)] + list(range(steps)):
        total = [torch.zeros_like(p) for p in params]
        for r in range(world):
            x, y = ddp_train.batch(a, teacher, r, k)
            loss = nn.functional.mse_loss(model(x), y)
            grads = torch.autograd.grad(loss, params)
            for t, g in zip(total, grads, strict=True):
                t += g
            if r == 0 and k >= 0:
                out.append(loss.item())
        for p, t in zip(params, total, strict=True):
            p.grad = t / world
        opt.step()
    return out


def losses(rows: list, ref: list[float], phase_s: float) -> dict:
    """A run's rank-0 loss at every step it took against ``ref`` (another run's, or :func:`reference`'s), the
    largest relative difference per condition of this run's phases."""
    n = min(len(rows), len(ref))
    rel: dict = {"no_fault": [], "with_faults": []}
    for k in range(n):
        rel["with_faults" if train.faulted(rows[k][0], phase_s) else "no_fault"].append(
            abs(rows[k][2] - ref[k]) / max(abs(ref[k]), 1e-12))
    worst = max(rel["no_fault"] + rel["with_faults"], default=0.0)
    return {"steps_compared": n, "steps": {c: len(v) for c, v in rel.items()},
            "max_rel_diff": {c: float(f"{max(v, default=0.0):.3g}") for c, v in rel.items()},
            "equal": n == len(rows) and n > 0 and worst <= LOSS_TOL,
            "first": [rows[0][2], ref[0]] if n else None, "last": [rows[n - 1][2], ref[n - 1]] if n else None}


def summarize(out: dict, runs: dict, phase_s: float, ref: list[float] | None) -> None:
    """The headline figures: steps, p99 inflation, MRC over the better Gloo, losses, overlap, QP errors."""
    bk = out["backends"]
    out["steps"] = {b: {c: bk[b][c]["steps"] for c in ("no_fault", "with_faults")} for b in bk}
    out["p99_inflation"] = {b: round(bk[b]["with_faults"]["step_p99_ms"] / bk[b]["no_fault"]["step_p99_ms"], 3)
                            for b in bk if bk[b]["no_fault"]["step_p99_ms"] and bk[b]["with_faults"]["steps"]}
    gloos = [b for b in bk if b.startswith("gloo")]
    if "mrc" in bk and gloos:
        best = max(gloos, key=lambda b: bk[b]["no_fault"]["steps_per_s"])
        out["best_gloo"] = best
        out["steps_per_s_over_gloo"] = round(bk["mrc"]["no_fault"]["steps_per_s"] /
                                             bk[best]["no_fault"]["steps_per_s"], 3)
        # MRC against Gloo over the steps both took (the slower run reaches fewer of them)
        out["losses_mrc_vs_gloo"] = {}
        for g in gloos:
            n = min(len(runs["mrc"]["rows"]), len(runs[g]["rows"]))
            out["losses_mrc_vs_gloo"][g] = losses(runs["mrc"]["rows"][:n], [r[2] for r in runs[g]["rows"][:n]],
                                                  phase_s)
    if ref is not None:
        # every run against the reference, at every step it took: MRC's fault phases included
        out["losses"] = {b: losses(runs[b]["rows"], ref, phase_s) for b in bk}
        out["losses_equal"] = all(v["equal"] for v in [*out["losses"].values(),
                                                       *out.get("losses_mrc_vs_gloo", {}).values()])
    if "mrc" in bk:
        cal, nf = bk["mrc"]["calibration"], bk["mrc"]["no_fault"]
        out["overlap_ratio"] = round(nf["step_p50_ms"] / 1e3 / max(cal["compute_s"], cal["comm_s"]), 3)
        out["qp_errors"] = bk["mrc"]["qp_errors"]


def plot(out: dict, runs: dict, path: str) -> str:
    series = {b: [[r[0], r[1]] for r in res["rows"]] for b, res in runs.items()}
    first = next(iter(runs.values()))
    return train.plot({"series": series, "phase_s": out["phase_seconds"], "rows": []}, first["events"],
                      first["start_ns"], path, title="DDP step time; red: a link or switch down (in MRC's run), "
                      "green: back up")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="25mbit", help="every switch and NIC port's rate (default 25mbit)")
    ap.add_argument("--phase-seconds", type=float, default=75.0, help="seconds per phase (default 75)")
    ap.add_argument("--pairs", type=int, default=2, help="pairs of phases, no faults then faults (default 2)")
    ap.add_argument("--faults", default=FAULTS, help=f"the fault phases' schedule (default {FAULTS}; '' for none)")
    ap.add_argument("--calibrate", type=int, default=3, help="calibration samples per run (default 3)")
    ap.add_argument("--only", default=",".join(BACKENDS), help=f"backends to run (default {','.join(BACKENDS)})")
    ap.add_argument("--seed", type=int, default=0)
    fabric_args.add_routing(ap)
    ap.add_argument("--verbose", action="store_true", help="every step's line on stderr")
    ap.add_argument("--plot", metavar="PNG", help="step time against time per backend, faults marked")
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    ap.add_argument("--save", metavar="DIR", help="also write the JSON (and the plot) to DIR, as bench/store.py does")
    a = ap.parse_args()
    only = [b for b in a.only.split(",") if b]
    bad = [b for b in only if b not in BACKENDS]
    if bad or not only:
        raise UsageError(f"--only {a.only!r}: choose from {', '.join(BACKENDS)}")
    if a.pairs < 1 or a.phase_seconds <= 0 or a.calibrate < 1:
        raise UsageError("--pairs and --calibrate must be >= 1 and --phase-seconds > 0")
    from mrc.signals import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()
    import importlib.util

    import store

    if importlib.util.find_spec("torch") is None:
        raise UsageError("torch is not installed: bash tools/setup.sh installs it (pip install 'mrc[torch]')")
    apply.require_root("bench/ddp_bench.py")
    rate = parse_rate(a.rate)
    t = Topology(planes=8, spines=4, leaves=2, hosts=4, name=f"db{os.getpid() % 100000}")
    out: dict = {"rate_bps": rate, "routing": a.routing, "bfd_ms": a.bfd_ms, "phase_seconds": a.phase_seconds,
                 "pairs": a.pairs, "faults": a.faults, "loss_tolerance": LOSS_TOL,
                 "fabric": {"hosts": t.hosts, "planes": t.planes, "spines": t.spines, "leaves": t.leaves},
                 "program": "examples/torch/ddp_train.py", "backends": {}}
    runs: dict = {}
    srv6 = None
    apply.up(t, routing=a.routing, bfd_ms=a.bfd_ms)
    try:
        apply.set_queues(t.name, None, qos.PortQoS(rate, **qos.DEFAULT_THRESHOLDS).check())
        baseline.mpi_ports(t)
        with tempfile.TemporaryDirectory(prefix="mrc-ddp-") as tmp:
            for b in only:
                res = run_backend(t, a, b, tmp)
                if res is None:
                    continue
                runs[b] = res
                cal = res["calibration"]
                out["backends"][b] = {"params": res["params"], "grad_bytes": res["grad_bytes"],
                                      "calibration": cal, **analyse(res, a.phase_seconds),
                                      "planes_used": res["planes_used"], "exit": res["exit"],
                                      "gloo_socket_ifname": res.get("gloo_ifname"),
                                      "qp_errors": res.get("qp_errors", 0), "qp_counters": res.get("qp_counters")}
                s = out["backends"][b]
                log(f"{b}: no faults {s['no_fault']['steps']} steps, {s['no_fault']['steps_per_s']} steps/s, p99 "
                    f"{s['no_fault']['step_p99_ms']} ms; with faults {s['with_faults']['steps']} steps, p99 "
                    f"{s['with_faults']['step_p99_ms']} ms; compute {cal['compute_s']} s, all-reduce alone "
                    f"{cal['comm_s']} s, overlapped {cal['overlap_s']} s (CPU idle: {cal.get('overlap_idle_s')} s)")
        srv6 = apply.srv6(t.name)
    finally:
        try:
            baseline.mpi_ports(t, up=False)
        finally:
            apply.down(t.name)
    ref = None
    if runs:
        log("the reference losses (DDP's arithmetic in this process, no network)")
        ref = reference(max(len(r["rows"]) for r in runs.values()), t.hosts, a.seed)
    summarize(out, runs, a.phase_seconds, ref)
    out["failed_runs"] = [b for b in only if b not in out["backends"] or out["backends"][b]["exit"]]
    if a.plot and runs:
        out["plot"] = plot(out, runs, a.plot)
    if a.save:
        store.save("ddp_bench", out, a.save, srv6=srv6, files={"steps": a.plot} if a.plot else None)
    print(json.dumps(out, indent=1) if a.json else json.dumps(out))
    return 0 if not out["failed_runs"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        print(f"ddp_bench: {e}", file=sys.stderr)
        sys.exit(2)
