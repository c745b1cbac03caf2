"""Which code made a result: the checkout's commit and whether the tree
differed from it (for the benches' stored runs and the sweep's table).
Outside a git checkout, or without git, both are empty."""

from __future__ import annotations

import os
import subprocess

#: the checkout this package runs from
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> str:
    try:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


def commit() -> str:
    """The short commit of the checkout ("" when there is none)."""
    return _git("rev-parse", "--short", "HEAD")


def dirty(*paths: str) -> bool:
    """Whether the files under ``paths`` (all when none is given) differ from the commit, new ones included."""
    return bool(_git("status", "--porcelain", "--", *paths))
