"""``mrc sim``: the engine at every NIC of a simulated Clos, in virtual time."""

from __future__ import annotations

import argparse
import os

from mrc.tools import args
from mrc.tools.args import SEED
from mrc.units import bounded, checked_text, parse_time, rate_type, size_text_type

#: a time (500ns, 1us, 10ms) of at most 1000 s
TIME = checked_text(parse_time, "time", 0, 10**12, lambda ns: f"{ns // 10**9}s" if ns else "0")


def add_parser(sub) -> None:
    """``mrc sim``'s options."""
    sim = sub.add_parser("sim", help="the engine at up to 8,192 NICs on a simulated multi-plane Clos (virtual time)",
                         description="Every NIC runs the unchanged engine; switches forward on the uSID destination "
                                     "(End next-CSID over the fabric's address plan) and queue at their egress ports "
                                     "(ECN, trimming, drops as the fabric's BPF queues do). Prints per-flow completion "
                                     "times, utilisation per tier and plane, drops/trims/marks, failover gaps, QP "
                                     "errors and the simulator's speed. Deterministic for a seed. docs/sim.md has "
                                     "the model. Example: `mrc sim --hosts 64 --workload permutation --size 16M "
                                     "--single-path --json`.")
    sim.add_argument("--hosts", type=bounded(int, 2, 8192),
                     default=1024, help="NICs (2-8192, default 1024; past 1,024 a packet's "
                                        "last uSID numbers the port on its leaf)")
    sim.add_argument("--planes", type=bounded(int, 1, 16), default=8, help="planes, one NIC port each (default 8)")
    sim.add_argument("--leaves", type=bounded(int, 0, 8192),
                     default=0, help="T0 leaves per plane (default: one per 32 hosts)")
    sim.add_argument("--spines", type=bounded(int, 0, 8192),
                     default=0, help="T1 spines per plane (default: hosts per leaf, "
                                     "non-blocking)")
    sim.add_argument("--rate", type=rate_type(10**6, 10**13), default="100G",
                     help="every link's rate, e.g. 100G, 400G (default 100G)")
    sim.add_argument("--hop-delay", type=TIME, default="1us", help="per link: propagation and switching (default 1us)")
    sim.add_argument("--buffer", type=size_text_type(1, 1 << 30, also=("0", "none")), default=None,
                     help="switch egress buffer per port, dropping above it (default 1M; with --pfc none: PFC "
                          "bounds the queues)")
    sim.add_argument("--ecn", type=size_text_type(0, 1 << 30), default="64K",
                     help="queue above which switches mark CE (default 64K)")
    sim.add_argument("--trim", type=size_text_type(0, 1 << 30, also=("off",)), default="128K",
                     help="queue above which switches trim MRC data (default 128K; 0: off)")
    sim.add_argument("--mtu", type=bounded(int, 64, 8872),
                     default=4096, help="payload bytes per packet (64-8872, default 4096)")
    sim.add_argument("--workload", default="permutation", choices=["permutation", "alltoall", "incast", "victim",
                                                                    "ring-allreduce", "all-reduce", "all-to-all"],
                     help="permutation: each NIC writes to one other (random); alltoall: to every other; incast: "
                          "--incast senders to host 0; victim: that plus one sender's flow to another host; "
                          "ring-allreduce: each to the next, 2(N-1)/N x size; all-reduce, all-to-all: mrc.coll's "
                          "schedule (ring reduce-scatter + all-gather; pairwise), --size bytes of float32 per rank "
                          "in 512 KiB pieces, 16 in flight per pair, each waiting for the piece it depends on")
    sim.add_argument("--size", type=size_text_type(1, 1 << 40), default="16M",
                     help="bytes each sender writes in all (default 16M)")
    sim.add_argument("--msg", type=size_text_type(1, 1 << 30), default="1M", help="bytes per WRITE (default 1M)")
    sim.add_argument("--incast", type=bounded(int, 1, 8191), default=7, help="incast senders (default 7)")
    sim.add_argument("--victim-at", type=TIME, default="0", metavar="TIME",
                     help="victim workload: start the victim flow this long into the incast, e.g. 100us "
                          "(default 0: together)")
    sim.add_argument("--fail", action="append", default=[], metavar="SPEC",
                     help="t1:P.S, t0:P.L, link:P.L.S or host:H.P, then @AT and +DURATION, e.g. t1:0.3@50us "
                          "(repeatable)")
    sim.add_argument("--flap", action="append", default=[], metavar="SPEC",
                     help="link:P.L.S/PERIOD@AT+DURATION: down half of every period, e.g. link:0.0.0/10ms@0+100ms")
    sim.add_argument("--single-path", action="store_true", help="also run the workload with one EV per QP "
                                                                "(ECMP-hashed), the baseline, in the same run")
    sim.add_argument("--no-pacing", action="store_true",
                     help="NICs do not pace their ports: the engine fills one 8-frame queue of all the NIC's ports "
                          "in rotation order (the control for pacing; default: a packet goes when a port is free, "
                          "as in a NIC)")
    _add_roce(sim)
    sim.add_argument("--seed", type=SEED, default=1, help="the workload's and the flows' randomness (default 1)")
    sim.add_argument("--plots", metavar="DIR", help="write the completion-time CDF and utilisation-over-time PNGs")
    sim.add_argument("--quiet", action="store_true",
                     help="no progress on stderr (default: on a terminal a line rewritten each second, in a log "
                          "a line every 10 s of CPU time; stdout, the JSON included, is the same either way)")
    args.json_arg(sim)
    sim.set_defaults(run=run, parser=sim)
    _add_sweep(sim)


def _add_roce(sim: argparse.ArgumentParser) -> None:
    """``mrc sim``'s RoCE options."""
    roce = sim.add_argument_group("RoCEv2 beside MRC (docs/sim.md, \"RoCEv2 on the fabric\")")
    roce.add_argument("--transport", choices=["mrc", "roce"], default="mrc",
                      help="what every NIC runs: mrc (the engine; default) or roce (the RoCEv2 model: one ECMP "
                           "path per QP, go-back-N, DCQCN)")
    roce.add_argument("--roce-qps", type=bounded(int, 1, 64), default=1, metavar="N",
                      help="RoCE QPs per flow, spread over the planes (default 1; NCCL-like: 16)")
    roce.add_argument("--roce-split", action="store_true",
                      help="split each WRITE over the flow's QPs in equal parts (default: WRITEs to the QPs in turn)")
    roce.add_argument("--converge", type=TIME, default="500ms",
                      help="how long routing takes to see a link go down or up, black-holing meanwhile "
                           "(default 500ms)")
    roce.add_argument("--pfc", metavar="XOFF[:XON]",
                      help="PFC on every switch ingress: pause above XOFF bytes queued, resume at XON "
                           "(default XOFF less a quarter), e.g. 96K:64K (default off)")
    roce.add_argument("--roce-param", action="append", default=[], metavar="NAME=N",
                      help="a RoCE model setting: timeout (4.096 us x 2^N, default 20, NCCL's), retry_cnt (default 7), "
                           "dcqcn (1, default, or 0), ack_every, or a DCQCN parameter of struct mrc_roce_cfg "
                           "(g, alpha_ns, timer_ns, byte_b, f, rai_bps, rhai_bps, min_bps, cnp_ns) (repeatable)")


def _add_sweep(sim: argparse.ArgumentParser) -> None:
    """``mrc sim sweep``'s options."""
    sweeps = sim.add_subparsers(dest="sim_cmd", metavar="sweep")
    sw = sweeps.add_parser("sweep", help="a grid of runs (workloads, sizes, CC settings, faults, seeds) on Dask",
                           description="Runs every cell of a grid (JSON or YAML: each key one value or a list, the "
                                       "sweep every combination) on a Dask cluster, each cell deterministic and keyed "
                                       "by its parameters, into one CSV table with the commit; a stopped sweep "
                                       "resumes where it left off (cells already in the table are not run again); "
                                       "then prints the median and spread over the seeds of each setting. A bad "
                                       "grid is refused in one line before anything runs; a cell that fails is "
                                       "recorded with its error and the others go on. Example: `mrc sim sweep "
                                       "docs/examples/victim-cc.yaml --plot out/`. docs/sim.md has the format.")
    sw.add_argument("grid", help="the grid file (.json, .yaml or .yml)")
    sw.add_argument("--out", metavar="CSV",
                    help="the results table (default: the grid's file name with .csv, in the current directory)")
    sw.add_argument("--workers", type=bounded(int, 0, 256), default=os.cpu_count() or 1,
                    help="local Dask workers, one process each (default: every core; 0: run in this process, "
                         "one cell at a time, without Dask)")
    sw.add_argument("--scheduler", metavar="ADDRESS", help="use the Dask cluster at this scheduler address "
                                                           "(e.g. tcp://10.0.0.5:8786) instead of a local one")
    sw.add_argument("--plot", metavar="DIR", help="write a CDF over the seeds of --metric per value of each "
                                                  "parameter that varies")
    sw.add_argument("--metric", default="goodput_ratio",
                    help="the figure the summary leads with and --plot draws (default goodput_ratio; e.g. "
                         "victim_ratio, p99_us)")
    sw.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args.json_arg(sw)
    sw.set_defaults(run=run_sweep, parser=sw)


def run_sweep(a: argparse.Namespace) -> int:
    """``mrc sim sweep``."""
    from mrc.errors import UsageError
    from mrc.tools import sweep

    if a.workers < 0:
        raise UsageError("--workers is 0 (in this process) or more")
    if a.metric not in sweep.METRICS:
        raise UsageError(f"--metric {a.metric!r}: one of {', '.join(sweep.METRICS)}")
    return sweep.main(a)


def run(a: argparse.Namespace) -> int:
    """``mrc sim``."""
    from mrc.tools import sim

    return sim.main(a)
