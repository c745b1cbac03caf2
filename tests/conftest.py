import os
import shutil
import sys
import tempfile

import pytest


@pytest.fixture
def sockdir():
    """A short directory for UNIX sockets (a socket path holds at most 107 bytes), removed after."""
    d = tempfile.mkdtemp(prefix="ctl-test-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Root tests need root; on CI a missing privilege is a failure, not a skip."""
    if os.geteuid() == 0:
        return
    for item in items:
        if "root" in item.keywords:
            if os.environ.get("CI") == "true":
                item.add_marker(pytest.mark.xfail(reason="CI must run as root", strict=True, run=False))
            else:
                item.add_marker(pytest.mark.skip(reason="needs root (network namespaces)"))



#: where the project's tests and tools put files: nothing they made may outlive the session
#: (the runtime directories /run/mrc/fabrics and /run/mrc/ctl may stay, but not what is in them)
WATCHED = [tempfile.gettempdir(), "/run/mrc", "/run/mrc/fabrics", "/run/mrc/ctl"]
RUNTIME_DIRS = {"/run/mrc", "/run/mrc/fabrics", "/run/mrc/ctl"}


def _ours_now() -> set[str]:
    out = set()
    for d in WATCHED:
        try:
            out.update(os.path.join(d, x) for x in os.listdir(d))
        except OSError:
            pass
    try:
        out.update("netns:" + n for n in os.listdir("/run/netns") if n.startswith("mrc-"))
    except OSError:
        pass
    return out


def pytest_sessionstart(session):
    session.config._mrc_before = _ours_now()


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a test left a file in /tmp or /run/mrc, or a namespace of ours,
    behind (pytest's own tmp_path directories aside: it manages them)."""
    before = getattr(session.config, "_mrc_before", None)
    if before is None or os.environ.get("MRC_NO_LEFTOVER_CHECK"):
        return
    left = sorted(p for p in _ours_now() - before
                  if p not in RUNTIME_DIRS and not os.path.basename(p).startswith("pytest-of-"))
    if left:
        print(f"\nleft behind by the tests ({len(left)}): {', '.join(left[:20])}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
