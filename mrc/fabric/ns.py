"""Network-namespace helpers that need no fork.

``setns(2)`` with CLONE_NEWNET changes the namespace of the calling *thread*
only, and a socket stays in the namespace it was created in. So a short-lived
thread can enter a namespace, open sockets or write sysctls there, and hand
the results back; the main thread never moves.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

from mrc.errors import FabricError

NETNS_RUN_DIR = "/var/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def netns_path(name: str) -> str:
    """The bind-mount path of namespace ``name``."""
    return os.path.join(NETNS_RUN_DIR, name)


def list_netns() -> list[str]:
    """The named network namespaces on this machine."""
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


def _enter(name: str) -> None:
    try:
        fd = os.open(netns_path(name), os.O_RDONLY)
    except FileNotFoundError:
        raise FabricError(f"network namespace {name!r} does not exist; is the fabric up?") from None
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(name: str, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in a thread inside namespace ``name`` and return its result."""
    box: dict = {}

    def body() -> None:
        try:
            _enter(name)
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{name}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def write_sysctls(name: str, values: dict[str, str]) -> None:
    """Write ``net.*`` sysctls inside namespace ``name`` (``/proc/sys/net`` is per thread)."""

    def body() -> None:
        for key, value in values.items():
            with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
                f.write(value)

    run_in(name, body)


def command(name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a program inside namespace ``name`` (setns in the child, then exec)."""
    return subprocess.run(argv, preexec_fn=lambda: _enter(name), **kw)


def popen(name: str, argv: list[str], **kw) -> subprocess.Popen:
    """Start ``argv`` inside namespace ``name``."""
    return subprocess.Popen(argv, preexec_fn=lambda: _enter(name), **kw)


def execvp(name: str, argv: list[str]) -> None:
    """Replace this process by ``argv`` running inside namespace ``name``."""
    _enter(name)
    os.execvp(argv[0], argv)
