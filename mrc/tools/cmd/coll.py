"""``mrc coll`` (nccl-tests' columns over MRC) and ``mrc train`` (a data-parallel
training step under faults). Each subcommand registers itself with
``add_parser(subparsers)`` and runs with ``run(args)``.

    mrc coll all_reduce -b 8 -e 128M -f 2 --fabric lab --check
    mrc train --fabric lab --model 100M --compute-ms 50 --steps 40 --faults t1-reboot/10s,flap/5s --plot steps.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from mrc.errors import UsageError
from mrc.tools.args import SPIN_US
from mrc.units import bounded, rate_type, size_type

COLLS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "all_to_all_v")
DTYPE_ALIASES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32",
                 "double": "float64", "float64": "float64", "int32": "int32", "int": "int32", "int64": "int64"}


_size = size_type(0)


def _job_args(p: argparse.ArgumentParser) -> None:
    """Where the ranks run: a fabric (the launcher), or one rank given by hand."""
    g = p.add_argument_group("where the ranks run")
    g.add_argument("--fabric", metavar="NAME", help="start one rank in each host of this fabric (mrc fabric exec)")
    g.add_argument("--hosts", metavar="H,H,...", help="with --fabric: only these hosts, rank 0 first "
                                                      "(default: every host)")
    g.add_argument("--rank", type=bounded(int, 0, 4095),
                   help="run one rank by hand: this rank's number (0 listens for the others)")
    g.add_argument("--nranks", type=bounded(int, 1, 4096), help="with --rank: the job's size")
    g.add_argument("--root-addr", dest="root_addr", metavar="ADDR",
                   help="with --rank: rank 0's setup address (its management address on a fabric)")
    g.add_argument("--port", type=bounded(int, 0, 65535),
                   default=0, metavar="P", help="rank 0's setup port (default: a random one "
                                                "from the launcher; 18700 by hand)")
    g.add_argument("--job", help="with --rank: the job id every rank is given (a stranger's hello is refused)")
    g.add_argument("--psk-file", metavar="FILE", help="a pre-shared key every rank proves it holds at setup; "
                                                      "the bootstrap's messages travel sealed under it")
    g.add_argument("--security", choices=["off", "auth", "encrypt"], default="off",
                   help="authenticated MRC for every QP of the job (needs --psk-file): auth tags every packet, "
                        "encrypt also hides the payload (default off)")
    g.add_argument("--channels", type=bounded(int, 1, 64),
                   default=2, help="QPs per rank pair (default 2; each sprays over every "
                                   "plane)")
    g.add_argument("--slots", type=bounded(int, 1, 1024),
                   default=8, help="receive slots per channel, the credits (default 8)")
    g.add_argument("--slot-size", type=_size, default=512 << 10, metavar="SIZE",
                   help="bytes per slot, the pipelining chunk (default 512K)")
    g.add_argument("--port-rate", type=rate_type(10**3, 10**12), metavar="RATE",
                   help="pace every NIC port at RATE (e.g. 200mbit): the rate of "
                        "the fabric's ports when it has queues (--link-rate)")
    g.add_argument("--timeout", type=bounded(float, 0, 86_400, above=True), default=120.0, metavar="S",
                   help="abort when one call takes longer (default 120 s)")
    g.add_argument("--spin-us", type=SPIN_US, help="the engine's idle spin (default 200 us)")


def add_parser(sub) -> None:
    """Register ``mrc coll`` and ``mrc train``."""
    p = sub.add_parser("coll", help="collectives over MRC across hosts, in nccl-tests' columns",
                       description="Times a collective at each size from -b to -e (x -f) over MRC, one rank per host, "
                                   "and prints nccl-tests' columns: size, count, type, redop, root, time (mean of -n "
                                   "calls after -w), algbw = size / time and busbw = algbw x the collective's factor "
                                   "(all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast "
                                   "1), and #wrong with --check (every element against numpy's result). "
                                   "docs/coll.md. Example: `mrc coll all_reduce -b 8 -e 128M -f 2 --fabric lab "
                                   "--check`.")
    p.add_argument("collective", choices=COLLS + tuple(c.replace("_", "-") for c in COLLS),
                   help="the collective")
    p.add_argument("-b", "--minbytes", type=_size, default=8, metavar="SIZE", help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", type=_size, default=32 << 20, metavar="SIZE", help="largest size "
                                                                                          "(default 32M)")
    p.add_argument("-f", "--stepfactor", type=bounded(int, 1, 1024),
                   default=2, help="multiply the size by this (default 2)")
    p.add_argument("-i", "--stepbytes", type=_size, default=0, metavar="SIZE", help="add this instead of -f")
    p.add_argument("-n", "--iters", type=bounded(int, 1, 10**9), default=20, help="timed calls per size (default 20)")
    p.add_argument("-w", "--warmup", type=bounded(int, 0, 10**9), default=5, help="untimed calls first (default 5)")
    p.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPE_ALIASES),
                   help="element type (default float: float32)")
    p.add_argument("-o", "--op", default="sum", choices=["sum", "max", "min"], help="reduction (default sum)")
    p.add_argument("-r", "--root", type=bounded(int, 0, 4095), default=0, help="broadcast's root (default 0)")
    p.add_argument("-c", "--check", action="store_true", help="compare every element with numpy's result (#wrong)")
    p.add_argument("--json", action="store_true", help="print one JSON object (rows, ranks, settings)")
    _job_args(p)

    p.set_defaults(run=run, parser=p)
    t = sub.add_parser("train", help="a data-parallel training step over MRC, under faults",
                       description="Each step computes for --compute-ms (real numpy work, calibrated once), then "
                                   "all-reduces the gradients of a --model-byte model in --bucket buckets (as "
                                   "PyTorch DDP does), and with --moe an all-to-all per step. Prints steps/s and the "
                                   "step time's p50, p99 and max; with --faults (on a fabric) the faults run while "
                                   "it trains, and --plot draws step time against time with the faults marked. "
                                   "docs/coll.md. Example: `mrc train --fabric lab --steps 60 --faults "
                                   "t1-reboot/10s,flap/5s --plot steps.png`.")
    t.add_argument("--model", type=_size, default=100 << 20, metavar="SIZE",
                   help="gradient bytes per step (float32; default 100M)")
    t.add_argument("--bucket", type=_size, default=25 << 20, metavar="SIZE", help="all-reduce bucket (default 25M)")
    t.add_argument("--compute-ms", type=bounded(float, 0, 60_000),
                   default=50.0, help="compute per step (default 50 ms)")
    t.add_argument("--moe", type=_size, default=0, metavar="SIZE", help="an all-to-all of this many bytes per step "
                                                                        "(default 0: none)")
    t.add_argument("--steps", type=bounded(int, 1, 10**9), default=30, help="steps (default 30)")
    t.add_argument("--warmup", type=bounded(int, 0, 10**9), default=3, help="untimed steps first (default 3)")
    t.add_argument("--seconds", type=bounded(float, 0, 10**7, above=True), help="train this long instead of --steps")
    t.add_argument("--faults", metavar="SPEC", help="with --fabric: faults while training, e.g. "
                                                    "t1-reboot/10s,flap/5s,plane-cut@20s,loss/1 (docs/coll.md)")
    t.add_argument("--pairs", type=bounded(int, 1, 100),
                   default=1, help="with --faults: phases of --seconds, no faults then "
                                   "faults, this many times over (default 1)")
    t.add_argument("--plot", metavar="PNG", help="step time against time, faults marked")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument("--phase-seconds", type=bounded(float, 0, 10**7, above=True),
                   help=argparse.SUPPRESS)  # the launcher's, with --faults
    _job_args(t)
    t.set_defaults(run=run, parser=t)


def _rank_argv(a: argparse.Namespace, cmd: str) -> list[str]:
    """The command line a rank runs: this one, without the launcher's options."""
    out, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if x.split("=", 1)[0] in ("--fabric", "--hosts", "--faults", "--plot"):
            skip = "=" not in x
            continue
        out.append(x)
    return out


def check_args(a: argparse.Namespace, cmd: str, nranks: int | None) -> None:
    """Every option of ``mrc coll``/``mrc train`` checked before anything starts (UsageError); those that
    depend on the job's size only once ``nranks`` is known."""
    from mrc.coll.comm import CollError, check_params

    try:
        check_params(0, nranks or 2, a.channels, a.slots, a.slot_size)
    except CollError as e:
        raise UsageError(str(e).replace("channels=", "--channels ").replace("slots=", "--slots ")
                         .replace("slot_bytes=", "--slot-size ")) from None
    if not a.timeout > 0:
        raise UsageError(f"--timeout must be above 0 s, not {a.timeout}")
    if a.security != "off" and not a.psk_file:
        raise UsageError(f"--security {a.security} needs --psk-file (the job's pre-shared key)")
    if cmd == "coll":
        if a.minbytes > a.maxbytes:
            raise UsageError(f"-b {a.minbytes} is above -e {a.maxbytes}")
        if a.stepfactor < 1 or a.iters < 1 or a.warmup < 0:
            raise UsageError("-f and -n are at least 1, -w at least 0")
        if nranks is not None and not 0 <= a.root < nranks:
            raise UsageError(f"--root {a.root} is not a rank (0 to {nranks - 1})")
        return
    if a.steps < 1 or a.warmup < 0 or (a.seconds is not None and a.seconds <= 0):
        raise UsageError("--steps at least 1, --warmup 0 or more, --seconds above 0")
    if not 0 <= a.compute_ms <= 60_000:
        raise UsageError("--compute-ms is 0 to 60000")
    if a.model < 4 or a.bucket < 4:
        raise UsageError("--model and --bucket are at least 4 bytes (one float32)")
    if a.faults and not a.seconds:
        raise UsageError("--faults needs --seconds: the length of each phase (no faults, then faults)")
    if not 1 <= a.pairs <= 100:
        raise UsageError(f"--pairs is 1 to 100, not {a.pairs}")


def run(a: argparse.Namespace) -> int:
    """``mrc coll`` or ``mrc train``: launch on a fabric, or be one rank."""
    cmd = "coll" if a.cmd == "coll" else "train"
    check_args(a, cmd, None)   # what the options say on their own, before any fabric is looked at
    if a.fabric and a.rank is not None:
        raise UsageError("--fabric starts the ranks itself: give --fabric or --rank, not both")
    if a.fabric:
        return _launch(a, cmd)
    if a.rank is None:
        raise UsageError(f"say where the ranks run: `mrc {cmd} ... --fabric NAME` starts one per host; `--rank R "
                         f"--nranks N --root-addr ADDR --job ID` runs one by hand")
    return _rank(a, cmd)


def _launch(a: argparse.Namespace, cmd: str) -> int:
    from mrc.tools import launch

    hosts, root = launch.fabric_hosts(a.fabric, a.hosts)
    check_args(a, cmd, len(hosts))
    if cmd == "train":
        from mrc.tools import train

        return train.launch_with_faults(a, hosts, root, _rank_argv(a, cmd))
    return launch.launch(a.fabric, hosts, root, _rank_argv(a, cmd), port=a.port or None)


def _comm(a: argparse.Namespace):
    from mrc.coll.comm import Communicator
    from mrc.coll.net import FabricNet
    from mrc.units import parse_rate

    if a.nranks is None or a.root_addr is None or a.job is None:
        raise UsageError("--rank needs --nranks, --root-addr and --job")
    check_args(a, "coll" if a.cmd == "coll" else "train", a.nranks)
    psk = None
    if a.psk_file:
        from mrc import cm

        psk = cm.read_psk(a.psk_file)
    rate = parse_rate(a.port_rate) if a.port_rate else 0
    prof = None
    if rate:  # timers and NSCC for ports this slow (as the congestion bench gives its QPs)
        from mrc.fabric.qos import qp_profile
        from mrc.paths import from_environment

        prof = qp_profile(rate, len(from_environment().local_ports()) or 1)
    net = FabricNet(a.rank, a.nranks, a.root_addr, a.port or 18700, a.job, psk=psk, port_rate_bps=rate,
                    spin_us=a.spin_us, qp_attr=prof, security=a.security)
    try:
        return Communicator(a.rank, a.nranks, net, channels=a.channels, slots=a.slots, slot_bytes=a.slot_size,
                            timeout=a.timeout)
    except BaseException:
        net.close()
        raise


def _rank(a: argparse.Namespace, cmd: str) -> int:
    from mrc.coll.comm import CommAborted

    comm = _comm(a)
    try:
        if cmd == "train":
            from mrc.tools import train

            return train.rank_main(comm, a)
        return _coll_rank(comm, a)
    except CommAborted as e:
        print(f"mrc {cmd}: rank {comm.rank}: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        comm.close()


def _coll_rank(comm, a: argparse.Namespace) -> int:
    import numpy as np

    from mrc.coll import perf, schedule

    coll = a.collective.replace("-", "_")
    dtype = DTYPE_ALIASES[a.datatype]
    sizes = perf.sizes(a.minbytes, a.maxbytes, a.stepfactor, a.stepbytes)
    lead = comm.rank == 0
    if lead and not a.json:
        perf.header(coll, comm.nranks)
    shown = [0.0]

    def progress(name: str, size: int, i: int, n: int) -> None:
        now = time.monotonic()
        if lead and now - shown[0] > 1.0:
            shown[0] = now
            print(f"mrc coll: {name} {size} B: {i}/{n} calls", file=sys.stderr, flush=True)

    rows = []
    for s in sizes:
        row = perf.run(comm, coll, [s], dtype, a.op, a.root, a.iters, a.warmup, a.check, progress)[0]
        rows.append(row)
        if lead and not a.json:
            print(perf.line(row), flush=True)
    qp_errors = int(comm.all_reduce(np.array([comm.stats["qp_errors"]], np.int64))[0])
    cnt = comm.qp_counters()
    tot = comm.all_reduce(np.array(list(cnt.values()), np.int64))
    counters = dict(zip(cnt, (int(v) for v in tot), strict=True))
    qp_errors = max(qp_errors, counters["qps_not_rts"])
    if lead:
        if a.json:
            print(json.dumps({"collective": coll, "ranks": comm.nranks, "channels": comm.channels,
                              "slots": comm.slots, "slot_bytes": comm.slot_bytes,
                              "bus_factor": round(schedule.bus_factor(coll, comm.nranks), 6),
                              "qp_errors": qp_errors, "qp_counters": counters, "rows": rows}, indent=1))
        else:
            wrong = sum(r["wrong"] or 0 for r in rows)
            print(f"# {len(rows)} sizes, {'#wrong ' + str(wrong) if a.check else 'not checked (-c)'}, "
                  f"QP errors {qp_errors}; " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    bad = qp_errors or (a.check and any(r["wrong"] for r in rows))
    return 1 if bad else 0
