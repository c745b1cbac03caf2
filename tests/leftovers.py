"""The test run's leftover check (a pytest plugin: tests/conftest.py loads it).

The run gets a temporary directory of its own: TMPDIR for every test and every
process they start, pytest's tmp_path base inside it. At the end the check
fails the run for anything left in that directory, for a new entry in
/run/mrc (its runtime directories aside) and for a new network namespace
named mrc-*; then it removes the directory. What other programs on the
machine write to /tmp meanwhile is not the tests' and is not looked at.
Libraries' caches (torch's) go to TMPDIR/caches, which is not a leftover.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

#: directories whose new entries are the tests' (the runtime directories themselves may stay)
RUNTIME = ["/run/mrc", "/run/mrc/fabrics", "/run/mrc/ctl"]
#: where the libraries the tests use keep their caches (torch's compile cache, which it would otherwise
#: make as TMPDIR/torchinductor_<user>): inside the run's directory, removed with it, not a leftover
CACHES = "caches"


def _entries(own: str) -> set[str]:
    out = set()
    for d in [own, *RUNTIME]:
        try:
            out.update(os.path.join(d, x) for x in os.listdir(d))
        except OSError:
            pass
    try:
        out.update("netns:" + n for n in os.listdir("/run/netns") if n.startswith("mrc-"))
    except OSError:
        pass
    return out


def pytest_configure(config):
    """Point TMPDIR (and this process's tempfile) at a new directory of the run's own."""
    own = tempfile.mkdtemp(prefix="mrc-tests-")
    config._mrc_own_tmp = own
    config._mrc_saved_tmp = (os.environ.get("TMPDIR"), tempfile.tempdir, os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    os.environ["TMPDIR"] = own
    tempfile.tempdir = own
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(own, CACHES, "torchinductor")
    config._mrc_before = _entries(own)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a test left a file in the run's directory or in /run/mrc, or a namespace of ours,
    behind (pytest's own tmp_path directories aside: it manages them)."""
    cfg = session.config
    own = getattr(cfg, "_mrc_own_tmp", None)
    if own is None:
        return
    left = sorted(p for p in _entries(own) - cfg._mrc_before
                  if p not in RUNTIME and not os.path.basename(p).startswith("pytest-of-")
                  and p != os.path.join(own, CACHES))
    if left and not os.environ.get("MRC_NO_LEFTOVER_CHECK"):
        print(f"\nleft behind by the tests ({len(left)}): {', '.join(left[:20])}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    """Give TMPDIR back and remove the run's directory (pytest's tmp_path directories with it)."""
    own = getattr(config, "_mrc_own_tmp", None)
    if own is None:
        return
    env, tdir, cache = config._mrc_saved_tmp
    for key, value in (("TMPDIR", env), ("TORCHINDUCTOR_CACHE_DIR", cache)):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = tdir
    shutil.rmtree(own, ignore_errors=True)
