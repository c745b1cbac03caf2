"""``mrc verbs``: run an unmodified libibverbs program over MRC, with
libmrc-verbs.so preloaded (docs/verbs.md).

    mrc fabric exec h1 -- mrc verbs run -- ib_write_bw -d mrc0 -x 0 -F
    mrc fabric exec h0 -- mrc verbs run -- ib_write_bw -d mrc0 -x 0 -F 10.0.0.1
    mrc verbs run --topology lab.json --host h0 -- ibv_devinfo -v
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from mrc.errors import UsageError
from mrc.tools import args

LIBRARY = "libmrc-verbs.so"


def library_path() -> str:
    """Where libmrc-verbs.so is (beside libmrc.so, in the mrc package)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(here, LIBRARY)


def add_parser(sub) -> None:
    """``mrc verbs``'s options."""
    p = sub.add_parser("verbs", help="run an unmodified RDMA (libibverbs) program over MRC",
                       description="Runs CMD with libmrc-verbs.so preloaded: libibverbs then lists an mrc0 "
                                   "device (one port, RoCE v2 GIDs from this host's port addresses, RC QPs with "
                                   "RDMA WRITE and WRITE_WITH_IMM) beside any real one, and every verb on it runs "
                                   "over MRC on every plane. The host and its peers come from the topology "
                                   "($MRC_TOPOLOGY, which `mrc fabric exec` sets, or --topology). Afterwards it "
                                   "prints what each plane carried. docs/verbs.md. Example: `mrc fabric exec h1 "
                                   "-- mrc verbs run -- ib_write_bw -d mrc0 -x 0 -F`.")
    p.set_defaults(run=run, parser=p)
    vsub = p.add_subparsers(dest="vcmd", metavar="run", required=True)
    r = vsub.add_parser("run", help="run CMD with the mrc0 device",
                        description="Run CMD (after --) with libmrc-verbs.so preloaded; exits with CMD's status.")
    r.add_argument("--topology", metavar="FILE", help="the topology file (default: $MRC_TOPOLOGY, which `mrc "
                                                      "fabric exec` sets)")
    r.add_argument("--host", metavar="NAME", help="this host's name in the topology (default: the host whose "
                                                  "port addresses this namespace has)")
    r.add_argument("--stats", metavar="FILE", help="also write each context's per-plane packet counts to FILE "
                                                   "(JSON lines)")
    r.add_argument("--quiet", action="store_true", help="do not print the per-plane counts")
    r.add_argument("cmd", nargs="*", help="-- CMD [ARGS...]: the program to run")
    r.set_defaults(run=_run_program, parser=r)


def planes_line(rows: list[dict]) -> str:
    """One line: the packets each plane sent, summed over the program's contexts."""
    tx: dict[int, int] = {}
    for row in rows:
        for p in row.get("planes", []):
            tx[p["plane"]] = tx.get(p["plane"], 0) + p["tx_packets"]
    return "mrc verbs: packets sent per plane: " + (", ".join(f"{k}: {v}" for k, v in sorted(tx.items())) or "none")


#: ``mrc verbs`` without a subcommand prints its help (each subcommand runs its own function)
run = args.show_help


def _run_program(a: argparse.Namespace) -> int:
    """``mrc verbs run``."""
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        raise UsageError("mrc verbs run needs a program: mrc verbs run -- ib_write_bw -d mrc0 ...")
    lib = library_path()
    if not os.path.exists(lib):
        raise UsageError(f"{lib} is missing: it is built with mrc where libibverbs' headers are installed "
                         "(apt-get install libibverbs-dev, then bash tools/setup.sh)")
    env = dict(os.environ)
    if a.topology:
        if not os.path.isfile(a.topology):
            raise UsageError(f"--topology {a.topology}: no such file")
        env["MRC_TOPOLOGY"] = os.path.abspath(a.topology)
    if not env.get("MRC_TOPOLOGY"):
        raise UsageError("no topology: run it inside a fabric host (`mrc fabric exec HOST -- mrc verbs run -- ...`) "
                         "or give --topology FILE")
    if a.host:
        env["MRC_HOST"] = a.host
    env["LD_PRELOAD"] = " ".join(x for x in (lib, env.get("LD_PRELOAD", "")) if x)
    fd, stats = tempfile.mkstemp(prefix="mrc-verbs-", suffix=".jsonl")
    os.close(fd)
    env["MRC_VERBS_STATS"] = stats
    try:
        try:
            rc = subprocess.call(cmd, env=env)
        except FileNotFoundError:
            raise UsageError(f"{cmd[0]}: no such program (perftest: apt-get install perftest)") from None
        except KeyboardInterrupt:
            rc = 130
        with open(stats) as f:
            rows = [json.loads(x) for x in f if x.strip()]
    finally:
        os.unlink(stats)
    if a.stats:
        with open(a.stats, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    if not a.quiet and rows:
        print(planes_line(rows), file=sys.stderr)
    return rc
