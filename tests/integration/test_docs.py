"""The docs' blocks that need a fabric, run as they are written (root): the only change is the fabric's
name, which each test makes its own (the blocks name lab, ex1 or the default). tests/unit/test_docs.py
checks every block and names the ones that are skipped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from mrc.fabric import apply
from mrc.fabric.topology import Topology
from tests.docblocks import ROOT, find

from .conftest import _built, stop_group, unique_name

pytestmark = pytest.mark.root
MRC = [sys.executable, "-m", "mrc"]


def _env(name: str) -> dict:
    """The shell the blocks run in: this checkout's mrc first on the PATH, the fabric's name the default."""
    bindir = os.path.dirname(sys.executable)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "MRC_FABRIC": name, "PYTHONPATH": ROOT}


def _bash(script: str, cwd, env: dict, timeout: float = 300, strict: bool = True) -> subprocess.CompletedProcess:
    """``script`` in bash (``strict``: -e, a failing command fails it); what it left in the background is
    ended."""
    wrapped = f"{'set -e' if strict else ''}\n{script}\nkill $(jobs -p) 2>/dev/null || true\nwait || true\n"
    p = subprocess.Popen(["bash", "-c", wrapped], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        try:
            os.killpg(p.pid, signal.SIGKILL)   # a server the block left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@pytest.fixture
def fabric2():
    """2 planes x 2 spines x 2 leaves, 4 hosts (h3 is the api example's server)."""
    yield from _built(Topology(planes=2, spines=2, leaves=2, hosts=4, name=unique_name("d")))


def _server(t: Topology, host: str):
    p = subprocess.Popen([*MRC, "fabric", "exec", host, "--name", t.name, "--", *MRC, "perf", "server", "--forever"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stderr.readline()
    assert "waiting on" in line, line
    return p


def test_api_md_python_example_runs_as_written(fabric2, tmp_path):
    code = find("docs/api.md", "python", "from mrc import cm, verbs").body
    server = _server(fabric2, "h3")
    try:
        p = subprocess.run([*MRC, "fabric", "exec", "h0", "--name", fabric2.name, "--", sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        stop_group(server)
    assert p.returncode == 0, p.stderr[-2000:]


def test_dissector_md_capture_decode_and_the_python_block(fabric2, tmp_path):
    """The capture while mrc perf runs (a server on h1, as the text before the block says), the decode,
    then the Python block that reads the same h1.pcap."""
    block = find("docs/dissector.md", "sh", "mrc capture h1").body
    script = block.replace("--name ex1", f"--name {fabric2.name}")
    server = _server(fabric2, "h1")
    try:
        p = _bash(script, tmp_path, _env(fabric2.name))
    finally:
        stop_group(server)
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r"h1\.pcap: (\d+) MRC packets, 0 malformed", p.stdout)
    assert m and int(m.group(1)) > 8, p.stdout[-2000:]
    code = find("docs/dissector.md", "python", "rdpcap").body
    q = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert q.returncode == 0 and "True" in q.stdout, q.stderr[-2000:]


def test_c_library_md_builds_and_runs_the_examples(tmp_path):
    """Both blocks of docs/c-library.md: the builds through pkg-config, then the fabric, the C client
    against mrc perf server, pingpong both ways and mrc perf against the C server; then the fabric goes."""
    build = find("docs/c-library.md", "sh", "cc -O2 -o write_bw").body
    run = find("docs/c-library.md", "sh", "mrc fabric up --planes 4 --hosts 2").body
    name = unique_name("d")
    env = _env(name)
    (tmp_path / "examples").symlink_to(os.path.join(ROOT, "examples"))   # the block runs from a checkout's top
    try:
        p = _bash(build, tmp_path, env)
        assert p.returncode == 0, p.stderr[-2000:]
        # the servers the block starts in the background need a moment to listen before their clients
        script = re.sub(r"(&\n)", r"\1sleep 2\n", run)
        p = _bash(script, tmp_path, env, timeout=600)
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
        assert '"gbps"' in p.stdout or "Gb/s" in p.stdout, p.stdout[-2000:]
    finally:
        subprocess.run([*MRC, "fabric", "down", "--name", name], capture_output=True, timeout=120)
    assert name not in apply.list_fabrics()


def test_cli_md_example_session(tmp_path):
    block = find("docs/cli.md", "sh", "mrc fabric up --name lab --planes 4").body
    name = unique_name("d")
    script = block.replace("--name lab", f"--name {name}").replace(
        "mrc perf server &", "mrc perf server &\nsleep 2")   # the server listens before its client comes
    try:
        # not -e: `fabric check` exits 1 while a link is down, which the session shows on purpose
        p = _bash(script, tmp_path, _env(name), timeout=600, strict=False)
    finally:
        subprocess.run([*MRC, "fabric", "down", "--name", name], capture_output=True, timeout=120)
        time.sleep(0.1)
    assert "1 packets transmitted, 1 received" in p.stdout, p.stdout[-3000:]
    assert re.search(r"of 192 paths deliver, \d+ failed", p.stdout) and "healed" in p.stdout, p.stdout[-3000:]
    assert "verified" in p.stdout and "True" in p.stdout and "False" not in p.stdout, p.stdout[-3000:]
