"""PyTorch DDP over backend mrc on a 4-host fabric (root): examples/torch/ddp_train.py run unchanged
but for --backend, one process per host, a link cut while it trains; its losses are Gloo's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install 'mrc[torch]'): DDP over mrc untested")

from mrc.fabric import apply  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402

from .conftest import _built, unique_name  # noqa: E402

pytestmark = pytest.mark.root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "torch", "ddp_train.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
from ddp_bench import LOSS_TOL  # noqa: E402


@pytest.fixture(scope="module")
def four():
    yield from _built(Topology(planes=2, spines=2, leaves=2, hosts=4, name=unique_name("dd")))


def ddp(t: Topology, backend: str, port: int, steps: int = 24, at_step=None, extra_env=None) -> dict:
    """The script on every host; rank 0's @result. ``at_step = (k, fn)``: fn() once rank 0 began step k."""
    env = {**os.environ, "WORLD_SIZE": str(t.hosts), "MASTER_ADDR": t.mgmt_address(0), "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT, **(extra_env or {})}
    procs = [subprocess.Popen([sys.executable, "-m", "mrc", "fabric", "exec", "--name", t.name, t.host(k), "--",
                               sys.executable, SCRIPT, "--backend", backend, "--steps", str(steps), "--hidden", "512",
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, "RANK": str(k)}, start_new_session=True) for k in range(t.hosts)]
    errs: list[list[str]] = [[] for _ in procs]
    done = threading.Event()

    def read(k: int) -> None:
        for line in procs[k].stderr:
            errs[k].append(line)
            if k == 0 and at_step and line.startswith(f"step {at_step[0]} ") and not done.is_set():
                done.set()
                at_step[1]()

    readers = [threading.Thread(target=read, args=(k,), daemon=True) for k in range(len(procs))]
    for r in readers:
        r.start()
    try:
        out0 = procs[0].stdout.read()
        for p in procs:
            p.wait(240)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for r in readers:
            r.join(10)
    for k, p in enumerate(procs):
        assert p.returncode == 0, f"rank {k}: {''.join(errs[k])[-2000:]}"
    if at_step:
        assert done.is_set(), "the fault never came: rank 0 did not reach its step"
    line = next(x for x in out0.splitlines() if x.startswith("@result "))
    return json.loads(line[8:])


def test_ddp_over_mrc_rides_out_a_link_cut_with_the_losses_of_gloo(four, tmp_path):
    link = f"{four.leaf(0, 0)}-{four.spine(0, 1)}"
    try:
        mine = ddp(four, "mrc", 29611, at_step=(4, lambda: apply.fail(four.name, link)),
                   extra_env={"MRC_TORCH_REPORT": str(tmp_path / "qps")})
    finally:
        apply.heal(four.name, None)
    theirs = ddp(four, "gloo", 29612, extra_env={"GLOO_SOCKET_IFNAME": "mgmt"})
    assert len(mine["rows"]) == len(theirs["rows"]) == 24
    for k, (a, b) in enumerate(zip(mine["rows"], theirs["rows"], strict=True)):
        assert abs(a[2] - b[2]) <= LOSS_TOL * abs(b[2]), (k, a[2], b[2])
    assert mine["rows"][-1][2] < mine["rows"][0][2]            # it learns
    reps = [json.loads((tmp_path / f"qps.{k}.json").read_text()) for k in range(four.hosts)]
    assert sum(r["qp_errors"] + r["qp_counters"]["qps_not_rts"] for r in reps) == 0
    assert all(r["calls"] >= 24 for r in reps)               # every step's buckets went through mrc
