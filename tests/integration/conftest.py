import os
import secrets
import selectors
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
    """Read proc's stderr until a line contains text; returns the lines read."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    lines, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        if sel.select(timeout=0.2):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if text in line:
                return lines
    raise AssertionError(f"{text!r} never appeared: {lines}")
