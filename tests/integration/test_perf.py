"""Root test: `mrc perf` between two fabric hosts, as a user runs it
(`mrc fabric exec ... -- mrc perf server|client`), with the JSON the issue
asks for."""
import json
import subprocess
import sys

import pytest

from tests.integration.conftest import wait_for_line

pytestmark = pytest.mark.root
MRC = [sys.executable, "-m", "mrc"]




def perf(t, *client_args):
    server = subprocess.Popen(MRC + ["fabric", "exec", "h1", "--name", t.name, "--"] + MRC + ["perf", "server"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        wait_for_line(server, "waiting on port")
        out = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                             + ["perf", "client", "h1", "--json", *client_args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert server.wait(20) == 0  # it serves one client, then exits
        return json.loads(out.stdout)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize("args,qps,op", [(["--sizes", "1,4K,64K,1M", "--iters", "20"], 1, "WRITE"),
                                         (["--sizes", "4K,1M", "--iters", "30", "--qps", "3", "--imm"], 3,
                                          "WRITE_IMM")])
def test_perf_json_is_verified_for_every_size(fabric, args, qps, op):
    res = perf(fabric, "--verify", *args)
    sizes = [int(x) if x.isdigit() else int(x[:-1]) << (10 if x[-1] == "K" else 20)
             for x in args[args.index("--sizes") + 1].split(",")]
    assert [r["size"] for r in res] == sizes
    for r in res:
        assert r["verified"] is True and r["qps"] == qps and r["op"] == op
        assert {"gbps", "msg_rate", "p50_us", "p99_us", "p999_us", "retransmits", "plane_share"} <= set(r)
        assert r["gbps"] >= 0 and r["msg_rate"] > 0 and r["p99_us"] >= r["p50_us"] > 0
        assert len(r["plane_share"]) == fabric.planes and abs(sum(r["plane_share"]) - 1) < 0.01
    big = res[-1]  # 1 MiB messages: packets spread evenly over the planes
    assert all(abs(s - 1 / fabric.planes) < 0.1 / fabric.planes for s in big["plane_share"]), big["plane_share"]


def test_perf_client_errors_are_one_line(fabric):
    out = subprocess.run(MRC + ["perf", "client", "h1", "--sizes", "4Q"], capture_output=True, text=True)
    assert out.returncode == 2 and "cannot read size" in out.stderr and "Traceback" not in out.stderr
