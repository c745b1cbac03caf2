"""Collectives and a training step over MRC against OpenMPI on the same fabric,
in the same run, under the same faults; and the collectives in mrc sim.

The fabric: 4 hosts x 8 planes (4 spines, 2 leaves per plane), every switch
port and every NIC port at --rate (default 25 Mbit/s), queues that mark ECN,
trim MRC data and drop (mrc fabric up --link-rate): a host's NIC then
carries 8 x --rate, far below what this 2-core machine forwards, so the
network is the bottleneck, not the CPU.

The bound of a collective's busbw is the NIC's goodput: planes x rate x
payload / (payload + 98 bytes of frame headers per 8 KiB packet). Ring
all-reduce sends 2(n-1)/n of the buffer per rank and all-to-all (n-1)/n, so
busbw (algbw x that factor) can reach the NIC's rate and no more.

The fabric routes kernel traffic with FRR's BGP (ECMP over the spines, BFD;
mrc fabric up --routing bgp), as a datacenter fabric routes TCP; --routing
static keeps the SRv6 encap through one spine per host pair.

Transports, alternated in every round (A B C D, then B C D A, ...), each with
one warm-up call and --iters timed calls, as MRC:
  mrc              mrc coll (one rank per host, its NIC paced at the ports' rate)
  mpi_tcp          OpenMPI's TCP BTL over one plane's kernel address: one path
                   per peer, as ECMP gives a flow
  mpi_tcp_striped  OpenMPI's TCP BTL over every plane's kernel address (it stripes
                   over every interface it is given; ob1 set to split a message
                   over all 8 when the sweep finds it faster)
  mpi_mptcp        the one-plane configuration with MPTCP sockets (Debian's
                   mptcpize) and one subflow per plane, in both directions
                   (every host announces its planes: ip mptcp endpoint signal)
Before them, a sweep picks each MPI configuration's collective algorithm
(OpenMPI's rules, ring, Rabenseifner, recursive doubling; all-to-all: linear,
pairwise, modified Bruck) and, striped, ob1's striping parameters: one call
of each at --size; `mpi_tuning` has every figure, `mpi_settings` the --mca
options each configuration then ran with (--skip tune: ring and pairwise).
`planes_used`: the planes h0 sent on in an MPI run.
  gloo             torch.distributed's Gloo over every plane's kernel address
                   (GLOO_SOCKET_IFNAME), where torch is installed (a line says
                   so where it is not; never a dependency)

Then a training step (mrc train's emulator; bench/coll_mpi.py runs the same
steps over MPI) in phases of --train-seconds, alternated --train-pairs times:
without faults, then under a T1 reboot every 10 s and a link flap every 5 s
(the machine's own drift falls on both). MRC's and the striped MPI's phases
are longer where a short job without faults shows that their steps need it
for --train-steps per condition. Then mrc sim's ring
all-reduce and all-to-all at 256 and 1,024 NICs, with a T1 failed mid-run.

    python bench/coll_bench.py --json
    python bench/coll_bench.py --rounds 1 --size 16M --train-seconds 20 --train-pairs 1 --sim-nics 64 --json   # quicker
    python bench/coll_bench.py --security --json   # MRC alone, security off, auth and encrypt alternated
                                                   # (mrc coll --security, one key): auth_over_off, encrypt_over_off

Needs root, OpenMPI and mpi4py (tools/setup.sh installs them; without them
the MPI rows are skipped with a line).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fabric_args  # noqa: E402 (bench/, beside this file)

from mrc.errors import UsageError  # noqa: E402
from mrc.fabric import apply, baseline, qos  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402
from mrc.tools import launch, train  # noqa: E402
from mrc.units import parse_rate, parse_size  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD, FRAME_HDRS = 8192, 98
FAULTS = "t1-reboot/10s,flap/5s"
MPI_CONFIGS = {"mpi_tcp": {"planes": [0]}, "mpi_tcp_striped": {"planes": list(range(8)), "stripe": True},
               "mpi_mptcp": {"planes": [0], "mptcp": True}}
#: without the sweep (--skip tune): what a competent user picks for large messages
MPI_UNSWEPT = {"all_reduce": 4, "all_to_all": 2}


def log(msg: str) -> None:
    print(f"coll_bench: {msg}", file=sys.stderr, flush=True)


def bound_gbps(t: Topology, rate_bps: int) -> float:
    return t.planes * rate_bps * PAYLOAD / (PAYLOAD + FRAME_HDRS) / 1e9


class Mpi:
    """OpenMPI on the fabric: the per-plane interfaces, the launch agent, the hostfile."""

    def __init__(self, t: Topology) -> None:
        self.t = t
        self.dir = tempfile.mkdtemp(prefix="mrc-coll-mpi-")
        self.agent = os.path.join(self.dir, "agent")
        with open(self.agent, "w") as f:
            f.write(f'#!/bin/sh\nhost="$1"; shift\nexec ip netns exec "{t.prefix}$host" sh -c "$*"\n')
        os.chmod(self.agent, 0o755)
        self.hostfile = os.path.join(self.dir, "hosts")
        with open(self.hostfile, "w") as f:
            f.writelines(f"{h} slots=1\n" for h in t.host_nodes())
        self.mptcp = bool(shutil.which("mptcpize"))
        self.retries = 0
        #: per configuration, what it runs with: {"algorithms": {coll: number}, "ob1": {...}} (_tune)
        self.tuned = {c: {"algorithms": dict(MPI_UNSWEPT), "ob1": baseline.MPI_STRIPE_OB1 if v.get("stripe") else {}}
                      for c, v in MPI_CONFIGS.items()}
        if self.mptcp:
            for h in range(t.hosts):
                baseline.mptcp_setup(t, h)

    def run(self, config: str, program_args: list[str], out=None, timeout: float = 1800,
            tuning: dict | None = None) -> tuple[int, dict | None]:
        """One mpirun; up to twice more if it died without a result before the program started,
        or by a signal (OpenMPI's runtime in namespaces now and then crashes on its own, at the
        launch or in its routing between daemons, exit 139): counted in ``retries``."""
        mca = baseline.mpi_tuning_mca(**(tuning or self.tuned[config]))
        rc, res, started = self._run(config, program_args, out, timeout, mca)
        for _ in range(2):
            if res is not None or (started and rc < 128):  # (a timeout is ours: -9)
                break
            self.retries += 1
            log(f"{config}: mpirun ended without a result (exit {rc}, the program "
                f"{'had' if started else 'had not'} started); once more")
            rc, res, started = self._run(config, program_args, out, timeout, mca)
        return rc, res

    def _run(self, config: str, program_args: list[str], out, timeout: float,
             mca: list[str]) -> tuple[int, dict | None, bool]:
        cfg = MPI_CONFIGS[config]
        argv = baseline.mpirun_argv(self.t, self.agent, self.hostfile, cfg["planes"],
                                    [sys.executable, os.path.join(HERE, "coll_mpi.py"), *program_args],
                                    mptcp=cfg.get("mptcp", False), mca=mca)
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(HERE)}
        p = subprocess.Popen([sys.executable, "-m", "mrc", "fabric", "exec", "--name", self.t.name, "h0", "--",
                              *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
        err: list[str] = []
        th = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
        th.start()
        result, started = None, False
        try:
            for line in p.stdout:
                started = True
                if out is not None:
                    out.write(line)
                if line.startswith("@result "):
                    result = json.loads(line[8:])
            p.wait(timeout)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
            th.join(5)
        if result is None:
            log(f"{config}: no result (exit {p.returncode}): " + "".join(e for e in err if "PMIX" not in e)[-600:])
        return p.returncode, result, started

    def close(self) -> None:
        if self.mptcp:
            for h in range(self.t.hosts):
                baseline.mptcp_teardown(self.t, h)
        shutil.rmtree(self.dir, ignore_errors=True)


class _Capture:
    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, s: str) -> None:
        self.text.append(s)

    def flush(self) -> None:
        pass


def run_mrc_coll(t: Topology, a, coll: str, security: str = "off") -> dict | None:
    root = t.mgmt_address(0)
    argv = ["coll", coll, "-b", str(a.size_bytes), "-e", str(a.size_bytes), "-n", str(a.iters), "-w", "1",
            "--check", "--json", "--port-rate", a.rate, "--spin-us", "0"]
    if security != "off":  # every QP sealed, the bootstrap too, under the bench's key
        argv += ["--security", security, "--psk-file", a.psk_file]
    cap = _Capture()
    rc = launch.launch(t.name, t.host_nodes(), root, argv, out=cap, err=_Capture(), timeout=1800)
    try:
        res = json.loads("".join(cap.text))
    except ValueError:
        log(f"mrc {coll}: no JSON (exit {rc}): {''.join(cap.text)[-400:]}")
        return None
    row = res["rows"][0]
    return {**row, "qp_errors": res["qp_errors"], "qp_counters": res["qp_counters"]}


def run_gloo_coll(t: Topology, a, coll: str) -> dict | None:
    """torch.distributed's Gloo, one rank per host, over every plane's kernel address."""
    port = 24000 + os.getpid() % 4000
    env = {**os.environ, "GLOO_SOCKET_IFNAME": ",".join(f"{baseline.MPI_PORT}{p}" for p in range(t.planes)),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(HERE)}
    procs, before = [], baseline.plane_bytes(t, 0)
    for k in range(t.hosts):
        argv = [sys.executable, "-m", "mrc", "fabric", "exec", "--name", t.name, t.host(k), "--", sys.executable,
                os.path.join(HERE, "coll_gloo.py"), "--rank", str(k), "--world", str(t.hosts), "--master",
                t.mgmt_address(0), "--port", str(port), "--coll", coll, "--size", str(a.size_bytes),
                "--iters", str(a.iters)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE if k == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, env=env, start_new_session=True))
    try:
        out, err = procs[0].communicate(timeout=1800)
        for p in procs[1:]:
            p.wait(60)
    except subprocess.TimeoutExpired:
        out, err = "", "timed out"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for line in out.splitlines():
        if line.startswith("@result "):
            return {**json.loads(line[8:]), "qp_errors": 0,
                    "planes_used": baseline.planes_used(before, baseline.plane_bytes(t, 0))}
    log(f"gloo {coll}: no result: {err[-400:]}")
    return None


def run_mpi_coll(mpi: Mpi, config: str, a, coll: str, iters: int | None = None, warmup: int = 1,
                 tuning: dict | None = None, size: int | None = None) -> dict | None:
    """One MPI collective run: ``warmup`` calls, then ``iters`` timed (as MRC's: 1 and --iters), with
    the configuration's tuning (or ``tuning``); ``planes_used``: the planes h0 sent on."""
    before = baseline.plane_bytes(mpi.t, 0)
    _, res = mpi.run(config, ["coll", "--coll", coll, "--size", str(size or a.size_bytes), "--iters",
                              str(iters or a.iters), "--warmup", str(warmup), "--check"], tuning=tuning)
    if res is not None:
        res["qp_errors"] = 0
        res["planes_used"] = baseline.planes_used(before, baseline.plane_bytes(mpi.t, 0))
    return res


def tune_mpi(mpi: Mpi, a, configs: list[str], bound: float) -> dict:
    """The sweep that picks each MPI configuration's algorithm per collective (and, striped, ob1's
    striping parameters or their defaults): one call of each candidate at the bench's size, after
    no warm-up, the best busbw wins. Sets ``mpi.tuned``; returns every candidate's figure."""
    out: dict = {}
    for config in configs:
        ob1s = [{}, baseline.MPI_STRIPE_OB1] if MPI_CONFIGS[config].get("stripe") else [{}]
        best_ob1: dict[str, tuple[float, dict]] = {}
        out[config] = {}
        for coll in ("all_reduce", "all_to_all"):
            rows = []
            for ob1 in ob1s:
                for alg in baseline.MPI_ALGORITHMS[coll]:
                    tuning = {"algorithms": {coll: alg}, "ob1": ob1}
                    r = run_mpi_coll(mpi, config, a, coll, iters=1, warmup=0, tuning=tuning)
                    bw = r["busbw_gbps"] if r and not r["wrong"] else 0.0
                    rows.append({"algorithm": alg, "name": baseline.MPI_ALGORITHMS[coll][alg], "ob1": ob1,
                                 "busbw_gbps": bw, "busbw_vs_bound": round(bw / bound, 4)})
                    log(f"tune {config} {coll}: {baseline.MPI_ALGORITHMS[coll][alg]}"
                        f"{' + ob1 striping' if ob1 else ''}: {bw} Gb/s")
            best = max(rows, key=lambda x: x["busbw_gbps"])
            mpi.tuned[config]["algorithms"][coll] = best["algorithm"]
            best_ob1[coll] = (best["busbw_gbps"], best["ob1"])
            out[config][coll] = {"chosen": best["name"], "algorithm": best["algorithm"], "sweep": rows}
        # one ob1 setting per configuration (a training step runs both collectives): the all-reduce's
        mpi.tuned[config]["ob1"] = best_ob1["all_reduce"][1]
        out[config]["ob1"] = mpi.tuned[config]["ob1"]
    return out


def run_train(t: Topology, a, transport: str, mpi: Mpi | None, seconds: float, pairs: int,
              faults: bool = True) -> dict | None:
    """One training job over ``transport``: ``pairs`` pairs of ``seconds`` phases, no faults then
    FAULTS (none with ``faults`` False)."""
    plan = train.fault_plan(t, FAULTS, seconds, pairs) if faults else []
    common = ["--model", str(a.model_bytes), "--bucket", str(a.bucket_bytes), "--compute-ms", str(a.compute_ms),
              "--phase-seconds", str(seconds), "--pairs", str(pairs)]
    if transport == "mrc":
        argv = ["train", *common, "--port-rate", a.rate, "--spin-us", "0", "--warmup", "2"]
        rc, res, events, start = train.drive(t.name, plan, seconds, lambda out: launch.launch(
            t.name, t.host_nodes(), t.mgmt_address(0), argv, out=out, err=_Capture(), timeout=1800))
    else:
        args = ["train", *common, "--warmup", "2"]
        rc, res, events, start = train.drive(t.name, plan, seconds, lambda out: mpi.run(transport, args,
                                                                                         out=out)[0])
    if res is None:
        log(f"train over {transport}: no result (exit {rc})")
        return None
    res["events"], res["start_ns"] = events, start
    return res


# the compared pair gets phases long enough for --train-steps per condition; mpi_tcp (one plane,
# about 4 s a step) keeps --train-seconds and states its steps
CALIBRATED = ("mrc", "mpi_tcp_striped")
CALIBRATION_S = 6.0    # seconds per phase of the calibration job (one pair, no faults)
STEP_MARGIN = 1.25     # a fault phase's steps are slower, and a phase's first step starts late


def phase_seconds(t: Topology, a, transport: str, mpi: Mpi | None) -> tuple[float, float | None]:
    """Seconds per phase for ``transport``: --train-seconds, or longer where a short job without
    faults shows that its steps need more for --train-steps per condition. Returns the seconds
    and the calibration's median step (s), None where none ran."""
    if not a.train_steps or transport not in CALIBRATED:
        return a.train_seconds, None
    r = run_train(t, a, transport, mpi, CALIBRATION_S, 1, faults=False)
    if r is None or not r["no_fault"]["steps"]:
        return a.train_seconds, None
    step_s = r["no_fault"]["step_p50_ms"] / 1000
    need = math.ceil(a.train_steps * step_s * STEP_MARGIN / a.train_pairs)
    log(f"train over {transport}: a step takes {step_s:.3f} s without faults; "
        f"{max(a.train_seconds, need):g} s per phase for {a.train_steps} steps per condition")
    return float(max(a.train_seconds, need)), step_s


def sim_collectives(a) -> dict:
    """mrc sim's ring all-reduce and all-to-all (the schedule mrc.coll runs), each also with a T1
    failed a third of the way in. All-to-all stops at 256 NICs: it has a QP pair per pair of NICs,
    a million at 1,024, beyond this machine's memory."""
    out: dict = {}
    for nics in a.sim_nics:
        for coll in ("all_reduce", "all_to_all"):
            if coll == "all_to_all" and nics > 256:
                log(f"sim all_to_all at {nics} NICs: skipped ({nics * (nics - 1):,} QP pairs; 256 NICs take 3.6 GB)")
                continue
            size = a.sim_size if coll == "all_reduce" else a.sim_a2a_size
            base = _sim(nics, coll, size, [])
            at_us = max(1, int(base["collective"]["time_us"] / 3))
            fail = _sim(nics, coll, size, ["--fail", f"t1:0.1@{at_us}us"])
            spines = base["fabric"]["spines"]
            ratio = fail["collective"]["time_us"] / base["collective"]["time_us"]
            key = f"{coll}_{nics}"
            out[key] = {"nics": nics, "collective": coll, "size": size, "planes": 8, "spines": spines,
                        "busbw_vs_bound": base["collective"]["busbw_vs_bound"],
                        "busbw_gbps": base["collective"]["busbw_gbps"], "bound_gbps": base["collective"]["bound_gbps"],
                        "time_us": base["collective"]["time_us"], "t1_failed_at_us": at_us,
                        "t1_time_us": fail["collective"]["time_us"], "t1_completion_ratio": round(ratio, 4),
                        "t1_completion_bound": round(1 + 1 / (8 * spines) + 0.02, 4),
                        "qp_errors": base["qp_errors"] + fail["qp_errors"],
                        "wall_s": round(base["wall_s"] + fail["wall_s"], 1), "peak_rss_mb": base["peak_rss_mb"]}
            log(f"sim {coll} {nics} NICs: busbw {out[key]['busbw_vs_bound']} of the bound; a T1 failed: "
                f"{out[key]['t1_completion_ratio']} x the time")
    big = [v for v in out.values() if v["collective"] == "all_reduce"]
    if big:
        top = max(big, key=lambda v: v["nics"])
        out.update(nics=top["nics"], busbw_vs_bound=top["busbw_vs_bound"],
                   t1_completion_ratio=top["t1_completion_ratio"], t1_completion_bound=top["t1_completion_bound"])
    return out


def _sim(nics: int, coll: str, size: int, extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "mrc", "sim", "--hosts", str(nics), "--workload", coll.replace("_", "-"),
            "--size", str(size), "--json", "--quiet", *extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"mrc sim failed: {p.stderr[-400:]}")
    r = json.loads(p.stdout)
    return {**r["spray"], "fabric": r["fabric"]}


def summarize(runs: list[dict], bound: float) -> dict:
    bws = [r["busbw_gbps"] for r in runs if r]
    if not bws:
        return {}
    last = runs[-1]
    return {"busbw_gbps": round(statistics.median(bws), 4), "busbw_gbps_runs": bws,
            "algbw_gbps": round(statistics.median(r["algbw_gbps"] for r in runs if r), 4),
            "bound_gbps": round(bound, 4), "busbw_vs_bound": round(statistics.median(bws) / bound, 4),
            "wrong": sum(r["wrong"] or 0 for r in runs if r),
            "qp_errors": sum(r.get("qp_errors", 0) for r in runs if r),
            "size": last["size"], "time_us": statistics.median(r["time_us"] for r in runs if r),
            **({"planes_used": sorted(set().union(*(r["planes_used"] for r in runs if r)))}
               if "planes_used" in last else {})}


def _args() -> argparse.Namespace:
    """The bench's options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="25mbit", help="every port's rate (default 25mbit)")
    ap.add_argument("--size", default="64M", help="bytes per collective (default 64M)")
    ap.add_argument("--iters", type=int, default=3, help="timed calls per run (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    ap.add_argument("--model", default="4M", help="train: gradient bytes (default 4M)")
    ap.add_argument("--bucket", default="1M", help="train: bucket bytes (default 1M)")
    ap.add_argument("--compute-ms", type=float, default=500.0, help="train: compute per step (default 500)")
    ap.add_argument("--train-seconds", type=float, default=40.0, help="train: seconds per phase at least "
                                                                     "(default 40)")
    ap.add_argument("--train-steps", type=int, default=100,
                    help="train: steps per condition (no faults, faults) for MRC and the striped MPI: a 12 s "
                         "job without faults measures each one's step and lengthens its phases to fit "
                         "(default 100; 0: --train-seconds as given)")
    ap.add_argument("--train-pairs", type=int, default=3, help="train: pairs of phases, no faults then faults, "
                                                               "alternated (default 3)")
    ap.add_argument("--sim-nics", default="256,1024", help="mrc sim's sizes (default 256,1024; empty: none)")
    ap.add_argument("--sim-size", default="16M", help="mrc sim's all-reduce bytes per NIC (default 16M)")
    ap.add_argument("--sim-a2a-size", default="4M", help="mrc sim's all-to-all bytes per NIC (default 4M)")
    ap.add_argument("--skip", default="", help="parts to leave out: coll,train,sim,mpi,gloo,tune (tune: no "
                                               "sweep; MPI runs ring all-reduce and pairwise all-to-all)")
    fabric_args.add_routing(ap)
    ap.add_argument("--security", action="store_true",
                    help="MRC's collectives alone with security off, auth and encrypt in alternated rounds "
                         "(no baselines, train or sim); saved as coll_bench_security")
    ap.add_argument("--json", action="store_true")
    import store  # bench/, beside this file

    store.add_argument(ap)
    ap.add_argument("--plot", metavar="PNG", help="step time against time, MRC and MPI, faults marked")
    a = ap.parse_args()
    a.size_bytes, a.model_bytes, a.bucket_bytes = parse_size(a.size), parse_size(a.model), parse_size(a.bucket)
    a.sim_nics = [int(x) for x in a.sim_nics.split(",") if x]
    a.sim_size, a.sim_a2a_size = parse_size(a.sim_size), parse_size(a.sim_a2a_size)
    return a


def _collectives(t: Topology, a, mpi, transports: list[str], bound: float, out: dict) -> None:
    """Every transport's all-reduce and all-to-all, in alternated rounds, and MRC's ratios to each."""
    raw = {tr: {c: [] for c in ("all_reduce", "all_to_all")} for tr in transports}
    for rnd in range(a.rounds):
        order = transports[rnd % len(transports):] + transports[:rnd % len(transports)]
        for coll in ("all_reduce", "all_to_all"):
            for tr in order:
                log(f"round {rnd + 1}/{a.rounds}: {coll} {a.size} over {tr}")
                r = run_mrc_coll(t, a, coll, tr[4:] or "off") if tr.startswith("mrc") else \
                    run_gloo_coll(t, a, coll) if tr == "gloo" else run_mpi_coll(mpi, tr, a, coll)
                raw[tr][coll].append(r)
                if r:
                    log(f"  busbw {r['busbw_gbps']} Gb/s ({r['busbw_gbps'] / bound:.3f} of the bound), "
                        f"wrong {r['wrong']}")
    _ratios(out, raw, transports, bound)


def _ratios(out: dict, raw: dict, transports: list[str], bound: float) -> None:
    """Each transport's summary, and MRC's busbw over each other's, with the spread of the rounds' ratios."""
    for tr in transports:
        out[tr] = {c: summarize(raw[tr][c], bound) for c in raw[tr]}
    for c in ("all_reduce", "all_to_all"):
        m = out["mrc"][c].get("busbw_gbps")
        for tr in transports[1:]:
            o = out[tr][c].get("busbw_gbps")
            if m and o:
                pairs = [x["busbw_gbps"] / y["busbw_gbps"] for x, y in zip(raw["mrc"][c], raw[tr][c],
                                                                           strict=False) if x and y]
                out["mrc"][c][f"over_{tr}"] = round(m / o, 3)
                out["mrc"][c][f"over_{tr}_spread"] = [round(min(pairs), 3), round(max(pairs), 3)]
                if tr.startswith("mrc_"):  # a secured mode over off, round by round
                    sec = [1 / x for x in pairs]
                    out[f"{tr[4:]}_over_off"] = {**out.get(f"{tr[4:]}_over_off", {}),
                                                 c: round(statistics.median(sec), 3),
                                                 f"{c}_spread": [round(min(sec), 3), round(max(sec), 3)]}


def _training(t: Topology, a, mpi, out: dict) -> None:
    """The training step over MRC and the MPI baselines, without faults and then under them."""
    tr_out = {}
    for tr in ["mrc"] + ([c for c in ("mpi_tcp_striped", "mpi_tcp") if mpi] if mpi else []):
        secs, cal_step_s = phase_seconds(t, a, tr, mpi)
        log(f"train over {tr}: {a.train_pairs} x ({secs:g} s without faults, then {secs:g} s of {FAULTS})")
        r = run_train(t, a, tr, mpi, secs, a.train_pairs)
        if r is None:
            continue
        nf, wf = r["no_fault"], r["with_faults"]
        tr_out[tr] = {"step_p50_ms": wf["step_p50_ms"], "step_p99_ms": wf["step_p99_ms"],
                      "no_fault_step_p50_ms": nf["step_p50_ms"], "no_fault_step_p99_ms": nf["step_p99_ms"],
                      "p99_inflation": round(wf["step_p99_ms"] / nf["step_p99_ms"], 3)
                      if nf["step_p99_ms"] else None,
                      "comm_p50_ms": wf["comm_p50_ms"], "comm_p99_ms": wf["comm_p99_ms"],
                      "no_fault_comm_p50_ms": nf["comm_p50_ms"],
                      "no_fault_comm_p99_ms": nf["comm_p99_ms"],
                      "steps_per_s": wf["steps_per_s"], "no_fault_steps_per_s": nf["steps_per_s"],
                      "steps": [nf["steps"], wf["steps"]], "qp_errors": r["qp_errors"],
                      "seconds_per_phase": secs, "calibration_step_s": cal_step_s,
                      "faults": FAULTS, "fault_events": len(r["events"]), "rows": r["rows"],
                      "events": r["fault_events"], "qp_counters": r.get("qp_counters")}
        log(f"  step p99 {nf['step_p99_ms']} -> {wf['step_p99_ms']} ms "
            f"({tr_out[tr]['p99_inflation']} x), collectives p99 {nf['comm_p99_ms']} -> "
            f"{wf['comm_p99_ms']} ms, {len(r['events'])} fault events")
    out["train"] = {**tr_out.get("mrc", {}), "transports": tr_out, "faults": FAULTS,
                    "min_seconds_per_phase": a.train_seconds, "phase_pairs": a.train_pairs,
                    "steps_wanted": a.train_steps,
                    "model_bytes": a.model_bytes,
                    "bucket_bytes": a.bucket_bytes, "compute_ms": a.compute_ms}
    if a.plot and tr_out:
        series = {tr: v["rows"] for tr, v in tr_out.items()}
        evs = [{"t_ns": int(e["t_s"] * 1e9), "op": e["op"]}
               for e in tr_out.get("mrc", {}).get("events", [])]
        phase = tr_out.get("mrc", {}).get("seconds_per_phase", a.train_seconds)
        out["train"]["plot"] = train.plot({"series": series, "phase_s": phase, "rows": []},
                                          evs, 0, a.plot, "step time against time (MRC's faults and fault "
                                          "phases marked; each transport ran the schedule over its own phases)")


def main() -> int:
    a = _args()
    from mrc.signals import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()  # a stopped run still removes its fabric
    import store  # bench/, beside this file

    skip = {x for x in a.skip.split(",") if x} | ({"train", "sim", "mpi", "gloo"} if a.security else set())
    rate = parse_rate(a.rate)
    if a.security:
        keyfile = tempfile.NamedTemporaryFile("w", prefix="coll_bench_key_", delete=False)
        keyfile.write(os.urandom(32).hex())
        keyfile.close()
        a.psk_file = keyfile.name
    apply.require_root("bench/coll_bench.py")
    have_mpi = bool(shutil.which("mpirun")) and importlib.util.find_spec("mpi4py") is not None
    if "mpi" in skip:
        have_mpi = False
    elif not have_mpi:
        log("OpenMPI or mpi4py is missing: the MPI baselines are skipped (bash tools/setup.sh installs them)")
    have_gloo = importlib.util.find_spec("torch") is not None and "gloo" not in skip
    if not have_gloo and "gloo" not in skip:
        log("torch is not installed: the Gloo baseline (torch.distributed) is skipped; `pip install torch` runs it")
    out: dict = {"rate_bps": rate,
                 "bound_formula": "planes x rate x 8192 / (8192 + 98): the NIC's goodput in 8 KiB packets"}
    t, srv6 = None, None
    if {"coll", "train"} - skip:
        t = Topology(planes=8, spines=4, leaves=2, hosts=4, name=f"cb{os.getpid() % 100000}")
        apply.up(t, routing=a.routing, bfd_ms=a.bfd_ms)
    mpi, ports = None, False
    try:
        if t is not None:
            apply.set_queues(t.name, None, qos.PortQoS(rate, **qos.DEFAULT_THRESHOLDS).check())
            if have_mpi or have_gloo:
                baseline.mpi_ports(t)
                ports = True
            bound = bound_gbps(t, rate)
            out["fabric"] = {"hosts": t.hosts, "planes": t.planes, "spines": t.spines, "leaves": t.leaves,
                             "bound_gbps": round(bound, 4)}
            if have_mpi:
                mpi = Mpi(t)
                if not mpi.mptcp:
                    log("mptcpize (Debian's package of that name) is missing: MPI over MPTCP is skipped "
                        "(bash tools/setup.sh installs it)")
            transports = ["mrc"] + ([c for c in MPI_CONFIGS if c != "mpi_mptcp" or mpi.mptcp] if mpi else []) + \
                (["gloo"] if have_gloo else []) + (["mrc_auth", "mrc_encrypt"] if a.security else [])
            out["routing"], out["bfd_ms"] = a.routing, a.bfd_ms
            if mpi and "tune" not in skip and {"coll", "train"} - skip:
                out["mpi_tuning"] = tune_mpi(mpi, a, [c for c in transports if c in MPI_CONFIGS], bound)
            if mpi:
                out["mpi_settings"] = {c: {**v, "mca": baseline.mpi_tuning_mca(**v)} for c, v in mpi.tuned.items()}
            if "coll" not in skip:
                _collectives(t, a, mpi, transports, bound, out)
            if "train" not in skip:
                _training(t, a, mpi, out)
        if "sim" not in skip and a.sim_nics:
            out["sim"] = sim_collectives(a)
    finally:
        if mpi is not None:
            out["mpi_launch_retries"] = mpi.retries
            mpi.close()
        if ports:
            baseline.mpi_ports(t, up=False)
        if t is not None:
            srv6 = apply.srv6(t.name)
            apply.down(t.name)
    for tr in out.get("train", {}).get("transports", {}).values():
        tr.pop("rows", None)
    if a.security:
        os.unlink(a.psk_file)
        out["targets"] = {"auth_over_off": 0.95, "encrypt_over_off": 0.90}
    if a.save:
        store.save("coll_bench_security" if a.security else "coll_bench", out, a.save, srv6=srv6,
                   files={"steps": a.plot})
    print(json.dumps(out, indent=1) if a.json else json.dumps(out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        print(f"coll_bench: {e}", file=sys.stderr)
        sys.exit(2)
