"""The libibverbs layer's shape, without a fabric: libmrc-verbs.so exports
exactly the calls of its version script, each at the version the installed
libibverbs gives it (so a program linked against libibverbs binds to ours);
it links libmrc and nothing of rdma-core; mrc0 is listed only where a
topology is given, and opening it where the topology's host has no ports
fails in one line instead of crashing; `mrc verbs run` refuses what it
cannot run in one line, exit 2."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "mrc", "libmrc-verbs.so")
MAP = os.path.join(ROOT, "csrc", "ibv", "libmrc-verbs.map")
REAL = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"

pytestmark = pytest.mark.skipif(not os.path.exists(LIB), reason="libmrc-verbs.so is not built (libibverbs-dev "
                                                                  "missing: bash tools/setup.sh installs it)")


def exports(path: str) -> dict[str, str]:
    """name -> default version of each defined dynamic symbol."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 7 and f[3] == ".text" and not f[-2].startswith("("):
            got[f[-1]] = f[-2]
    return got


def test_every_export_is_in_the_version_script_at_libibverbs_own_version():
    ours = exports(LIB)
    text = open(MAP).read()
    listed = set(re.findall(r"\b(_?ibv_\w+);", text))
    assert set(ours) == listed, set(ours) ^ listed
    if os.path.exists(REAL):
        real = exports(REAL)
        for name, ver in ours.items():
            assert real.get(name) == ver, (name, ver, real.get(name))


def test_it_links_libmrc_and_not_rdma_core():
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", out)
    assert "libmrc.so" in needed and not any("ibverbs" in n for n in needed), needed


def _devices(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "LD_PRELOAD": LIB, **env})


@pytest.mark.skipif(not shutil.which("ibv_devices"), reason="ibverbs-utils is not installed")
def test_mrc0_is_listed_only_with_a_topology_and_a_host_without_ports_fails_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MRC_TOPOLOGY"}
    out = subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=30,
                         env={**env, "LD_PRELOAD": LIB})
    assert "mrc0" not in out.stdout
    topo = tmp_path / "t.json"
    topo.write_text('{"name": "t", "hosts": {"far": {"ports": [{"plane": 0, "ifname": "nosuchif0", '
                    '"address": "fd99::1"}]}}}')
    out = subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=30,
                         env={**env, "LD_PRELOAD": LIB, "MRC_TOPOLOGY": str(topo), "MRC_HOST": "far"})
    assert "mrc0" in out.stdout
    out = subprocess.run(["ibv_devinfo", "-d", "mrc0"], capture_output=True, text=True, timeout=30,
                         env={**env, "LD_PRELOAD": LIB, "MRC_TOPOLOGY": str(topo), "MRC_HOST": "far"})
    assert out.returncode != 0 and out.returncode < 128  # an error, not a signal
    lines = [x for x in out.stderr.splitlines() if x.startswith("libmrc-verbs:")]
    assert len(lines) == 1 and "cannot open mrc0" in lines[0] and "nosuchif0" in lines[0], out.stderr


@pytest.mark.parametrize("argv,says", [
    ([], "needs a program"),
    (["--topology", "/nonexistent/t.json", "--", "true"], "no such file"),
    (["--", "/nonexistent/program"], "no such program"),
])
def test_mrc_verbs_run_refuses_in_one_line(tmp_path, argv, says):
    env = {k: v for k, v in os.environ.items() if k != "MRC_TOPOLOGY"}
    if argv[:1] == ["--"]:
        topo = tmp_path / "t.json"
        topo.write_text("{}")
        env["MRC_TOPOLOGY"] = str(topo)
    out = subprocess.run([sys.executable, "-m", "mrc", "verbs", "run", *argv], capture_output=True, text=True,
                         timeout=30, env=env)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert len([x for x in out.stderr.splitlines() if x.strip()]) == 1, out.stderr


def test_without_a_topology_mrc_verbs_run_says_where_to_run_it():
    env = {k: v for k, v in os.environ.items() if k != "MRC_TOPOLOGY"}
    out = subprocess.run([sys.executable, "-m", "mrc", "verbs", "run", "--", "true"], capture_output=True, text=True,
                         timeout=30, env=env)
    assert out.returncode == 2 and "mrc fabric exec" in out.stderr
