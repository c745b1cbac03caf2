"""Keeping a bench's run: ``--save DIR`` writes its JSON to
``DIR/NAME-DATE-COMMIT.json`` with where and how it was made: the commit (and
whether mrc/, csrc/ or bench/ differed from it), the date, the machine
(cores, kernel, and for a run on the fabric how its SRv6 ran) and the command.
The project keeps its runs in bench/results/; ``python tools/results.py``
renders docs/results.md from them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time

from mrc import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")


def add_argument(ap) -> None:
    """The ``--save DIR`` option every bench takes."""
    ap.add_argument("--save", metavar="DIR", help="also write the JSON, with the commit, date, machine and "
                                                  "command, to DIR/NAME-DATE-COMMIT.json (the project keeps its "
                                                  "runs in bench/results)")


def run_info(srv6: str | None = None) -> dict:
    """Where a run was made: the commit (and whether the tree differed from it), date, machine, command."""
    argv = [os.path.relpath(sys.argv[0], ROOT) if os.path.isabs(sys.argv[0]) else sys.argv[0], *sys.argv[1:]]
    info = {"commit": provenance.commit(),
            "dirty": provenance.dirty("mrc", "csrc", "bench", ":!bench/results"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cores": os.cpu_count(), "kernel": os.uname().release},
            "command": "python " + shlex.join(argv)}
    if srv6:
        info["machine"]["srv6"] = srv6
    return info


#: the tree as the run found it: a bench imports this module as it starts, and the tree may move on
#: while a long run goes (the commit and the state of the code are the start's)
START = run_info()


def save(name: str, out: dict, where: str, srv6: str | None = None, files: dict[str, str] | None = None) -> str:
    """Write ``out`` with :func:`run_info` to ``where``; returns the path. ``files``:
    {label: path} of what the run drew (PNGs), copied beside it as ``NAME-DATE-COMMIT-label.png``.
    The commit and ``dirty`` are the tree's when the run started; ``date`` is when it ended."""
    info = run_info(srv6)
    if START["commit"] != info["commit"] or START["dirty"] != info["dirty"]:
        info["ended_on_commit"] = info["commit"] + (" (tree differed)" if info["dirty"] else "")
    info["commit"], info["dirty"] = START["commit"], START["dirty"]
    os.makedirs(where, exist_ok=True)
    stem = os.path.join(where, f"{name}-{info['date'][:10]}-{info['commit']}")
    k = 1
    while os.path.exists(f"{stem}.json" if k == 1 else f"{stem}-r{k}.json"):  # another run, same day and commit
        k += 1
    if k > 1:
        stem = f"{stem}-r{k}"
    for label, src in (files or {}).items():
        if src and os.path.exists(src):
            shutil.copyfile(src, f"{stem}-{label}{os.path.splitext(src)[1]}")
    with open(stem + ".json", "w") as f:
        json.dump({"bench": name, **info, **out}, f, indent=1)
        f.write("\n")
    print(f"{name}: saved {stem}.json", file=sys.stderr)
    return stem + ".json"
