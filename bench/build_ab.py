"""A bench against an earlier build, alternated: the checkout (A) and REV (B,
built in a scratch worktree) run the same bench command in turn, A B A B ...,
and each figure asked for is reported as the median of the pairs' A/B
ratios, with their spread. A restructuring that changes no behaviour should
give ratios around 1 within the spread.

    python bench/build_ab.py a52ae51 --pairs 7 --key packets_per_sec_per_core \\
        -- bench/engine_bench.py --json --mib 2048 --qps-check 10
    sudo python bench/build_ab.py a52ae51 --pairs 4 --key mrc_gbps --key ratio_copy \\
        -- bench/fabric_bench.py --json --seconds 2

The bench command must print one JSON object on stdout; a key names a figure
in it (``a.b`` for a nested one). With ``--same`` the command's whole JSON
must also be equal between the builds, but for the keys ``--volatile`` names
(wall-clock figures): for deterministic commands such as ``mrc sim``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOLATILE = ("wall_s", "sim_pps", "sim_data_pps", "peak_rss_mb")


def build(rev: str, where: str) -> None:
    """REV's tree at ``where``, its data path built with this interpreter."""
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", where, rev], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, "csrc/build_dp.py"], cwd=where, check=True, stdout=subprocess.DEVNULL)


def run(tree: str, cmd: list[str]) -> dict:
    """The bench command in ``tree`` (its package first on the path): its JSON."""
    env = {**os.environ, "PYTHONPATH": tree}
    argv = [sys.executable, *cmd] if cmd[0].endswith(".py") else [sys.executable, "-m", *cmd]
    r = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"build_ab: {' '.join(cmd)} failed in {tree}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def figure(d: dict, key: str) -> float:
    for part in key.split("."):
        d = d[part]
    return float(d)


def strip(x, volatile: tuple):
    """x without the volatile keys, at any depth."""
    if isinstance(x, dict):
        return {k: strip(v, volatile) for k, v in x.items() if k not in volatile}
    if isinstance(x, list):
        return [strip(v, volatile) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, cmd = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(usage="%(prog)s REV [--pairs N] [--key FIGURE]... [--same] -- BENCH [ARGS]",
                                 description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", help="the earlier build: a commit, tag or branch")
    ap.add_argument("--pairs", type=int, default=5, help="A B pairs (default 5)")
    ap.add_argument("--key", action="append", default=[], help="a figure of the JSON to compare (repeatable)")
    ap.add_argument("--same", action="store_true", help="the JSON must be equal but for --volatile keys")
    ap.add_argument("--volatile", default=",".join(VOLATILE), help=f"keys --same ignores (default {VOLATILE})")
    a = ap.parse_args(argv)
    if not cmd or a.pairs < 1 or not (a.key or a.same):
        ap.error("give a bench command after --, --pairs >= 1, and --key or --same")
    scratch = tempfile.mkdtemp(prefix="mrc-build-ab-")
    other = os.path.join(scratch, "tree")
    try:
        build(a.rev, other)
        ratios: dict[str, list[float]] = {k: [] for k in a.key}
        volatile = tuple(x for x in a.volatile.split(",") if x)
        differ = 0
        for i in range(a.pairs):
            mine, theirs = run(ROOT, cmd), run(other, cmd)
            for k in a.key:
                ratios[k].append(figure(mine, k) / figure(theirs, k))
            differ += a.same and strip(mine, volatile) != strip(theirs, volatile)
            print(f"pair {i + 1}: " + ", ".join(f"{k} {figure(mine, k):g} / {figure(theirs, k):g}" for k in a.key),
                  file=sys.stderr)
        out = {"rev": a.rev, "pairs": a.pairs, "command": cmd,
               "ratios": {k: {"median": round(statistics.median(v), 3), "spread": [round(min(v), 3), round(max(v), 3)]}
                          for k, v in ratios.items()}}
        if a.same:
            out["json_differs_in_pairs"] = differ
        print(json.dumps(out, indent=1))
        return 1 if differ else 0
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", other], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
