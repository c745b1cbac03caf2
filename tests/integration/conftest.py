import os
import secrets
import selectors
import signal
import subprocess
import time

import pytest

from mrc.fabric import apply, ns
from mrc.fabric.topology import Topology


def unique_name(tag: str) -> str:
    """Namespaces and links carry a unique suffix so runs cannot collide."""
    return f"{tag}{secrets.token_hex(3)}"[:10]


def _built(t: Topology):
    """Build t, hand it out, and always remove it (also after a failed test)."""
    apply.up(t)
    try:
        yield t
    finally:
        apply.down(t.name)
        assert not apply.project_namespaces(ns.list_netns(), t.name)


@pytest.fixture
def small_fabric():
    """2 planes, 2 spines, 2 leaves, 2 hosts, uniquely named, for one test."""
    yield from _built(Topology(planes=2, spines=2, leaves=2, hosts=2, name=unique_name("t")))


@pytest.fixture(scope="module")
def fabric():
    """4 planes, 2 spines, 2 leaves, 2 hosts, shared by one test module."""
    yield from _built(Topology(planes=4, spines=2, leaves=2, hosts=2, name=unique_name("m")))


def pytest_configure(config):
    os.environ.setdefault("MRC_STATE_DIR", "/run/mrc/fabrics")


def wait_for_line(proc, text, timeout=20):
    """Read proc's stderr until a line contains text; returns the lines read.
    Reads the descriptor itself: a buffered reader may hold several lines
    that select() no longer reports."""
    fd = proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf, lines, end = b"", [], time.monotonic() + timeout
    while time.monotonic() < end:
        if not sel.select(timeout=0.2):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            lines.append(line.decode(errors="replace") + "\n")
            if text in lines[-1]:
                return lines
    raise AssertionError(f"{text!r} never appeared: {lines + [buf.decode(errors='replace')]}")


def stop_group(proc, timeout: float = 30) -> None:
    """End a process a test started in a session of its own, and all its children: SIGTERM to the group
    (mrc's commands take down what they built), SIGKILL after ``timeout`` s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stop_process(proc) -> None:
    """End a process a test started: asked first (SIGTERM: mrc's commands take
    down what they built), made after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()

