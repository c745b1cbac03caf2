"""The leftover check (tests/leftovers.py) looks only at what the tests own: it fails a run that leaves a
file in the run's TMPDIR or a namespace behind, and passes while another program writes to /tmp."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inner(tmp_path, body: str) -> subprocess.CompletedProcess:
    """A pytest run of one test with only the leftover plugin loaded."""
    (tmp_path / "test_inner.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("MRC_NO_LEFTOVER_CHECK", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.leftovers", "-p", "no:cacheprovider",
                           "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_file_left_in_the_runs_tmpdir_fails_the_run(tmp_path):
    p = _inner(tmp_path, "import os, tempfile\n"
                         "def test_leaves():\n"
                         "    open(os.path.join(tempfile.gettempdir(), 'left-behind.txt'), 'w').close()\n")
    assert p.returncode == 1 and "left behind by the tests (1)" in p.stderr and "left-behind.txt" in p.stderr, \
        p.stdout + p.stderr


def test_what_another_program_writes_to_tmp_is_not_the_tests(tmp_path):
    stop = threading.Event()
    made: list[str] = []

    def other_program() -> None:   # creates files in /tmp during the run, removes some only afterwards
        k = 0
        while not stop.is_set():
            path = f"/tmp/not-the-tests-{os.getpid()}-{k}"
            open(path, "w").close()
            made.append(path)
            k += 1
            stop.wait(0.05)

    t = threading.Thread(target=other_program, daemon=True)
    t.start()
    try:
        p = _inner(tmp_path, "import os, tempfile, time\n"
                             "def test_cleans_up():\n"
                             "    path = os.path.join(tempfile.gettempdir(), 'mine.txt')\n"
                             "    open(path, 'w').close(); time.sleep(1.0); os.unlink(path)\n")
    finally:
        stop.set()
        t.join(5)
        for path in made:
            os.unlink(path)
    assert len(made) > 5 and p.returncode == 0, p.stdout + p.stderr


def test_the_runs_tmpdir_is_gone_after_the_run(tmp_path):
    p = _inner(tmp_path, "import os, tempfile\n"
                         "def test_where():\n"
                         "    print('TMP=' + tempfile.gettempdir() + ' ENV=' + os.environ['TMPDIR'])\n"
                         "    assert os.path.basename(tempfile.gettempdir()).startswith('mrc-tests-')\n")
    assert p.returncode == 0, p.stdout + p.stderr
    p = _inner(tmp_path, "import os, tempfile, pathlib\n"
                         "def test_where(tmp_path):\n"
                         f"    pathlib.Path({str(tmp_path / 'where')!r}).write_text(tempfile.gettempdir())\n"
                         "    assert str(tmp_path).startswith(tempfile.gettempdir())\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not os.path.exists((tmp_path / "where").read_text())


@pytest.mark.root
def test_a_namespace_left_behind_fails_the_run(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    name = f"mrc-leftover-{uuid.uuid4().hex[:8]}"
    try:
        p = _inner(tmp_path, "import subprocess\n"
                             "def test_leaves_a_namespace():\n"
                             f"    subprocess.run(['ip', 'netns', 'add', {name!r}], check=True)\n")
        assert p.returncode == 1 and f"netns:{name}" in p.stderr, p.stdout + p.stderr
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
