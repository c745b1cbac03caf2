"""mrc sim beside a published result: NDP's permutation (Handley et al., "Re-architecting
datacenter networks and stacks for low latency and high performance", SIGCOMM 2017, Figure 14,
the NDP curve; its artifact's sim/EXAMPLES/permutation in github.com/nets-cs-pub-ro/NDP, whose
logfile.rates holds the per-flow throughputs that figure plots).

The published setup: 432 hosts on a 3-tier FatTree (k = 12: 12 pods of 36 hosts, 36 core
switches, 36 paths between pods), 10 Gb/s links, 1 us per link, 9,000-byte packets, switch
queues of 8 packets above which NDP trims to headers, no ECN, a window (IW) of 23 packets, every
host sending to one other (a random permutation) for 200 ms.

Here, `mrc sim` with the same hosts, rates, packets, queues and workload; its fabric is 2-tier,
so the FatTree's pods are its 12 leaves (36 hosts each) and the 36 core switches its spines:
the same 36 paths between pods and the same bisection, the pods' inner edge and aggregation
stages not modelled; 1.5 us per hop gives the 6 us one-way propagation of the FatTree's six links
over four. Each flow writes --size bytes; its rate is that over its completion time (payload
Gb/s). Three windows: the profile's (1.5 x the bandwidth-delay product at the base RTT, as every
`mrc sim` run), NDP's 23 packets, and NDP's 23 packets without NSCC's quick adapt.

    python bench/ndp_permutation.py --json [--save bench/results]    # about a minute here
    python bench/ndp_permutation.py --quick --json                   # 72 hosts (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mrc import simfab as msim  # noqa: E402
from mrc.units import size_type  # noqa: E402

#: the published per-flow throughputs (Gb/s, 432 flows): quantiles of the artifact's
#: sim/EXAMPLES/permutation/logfile.rates (nets-cs-pub-ro/NDP at aafa3cf)
PUBLISHED = {"source": "NDP, SIGCOMM 2017, Figure 14 (github.com/nets-cs-pub-ro/NDP "
                       "sim/EXAMPLES/permutation/logfile.rates, aafa3cf)",
             "flows": 432,
             "gbps": {"min": 8.849, "p1": 8.885, "p10": 9.050, "p50": 9.230, "p90": 9.490, "max": 9.828,
                      "mean": 9.249}}
NDP_WINDOW = 23 * 9000
WINDOWS = {"profile": {}, "ndp_window": {"max_cwnd": NDP_WINDOW},
           "ndp_window_no_quick_adapt": {"max_cwnd": NDP_WINDOW, "disable_qa": 1}}


def fabric(quick: bool, cc: dict) -> msim.Fabric:
    """The published setup on the simulator's 2-tier fabric (the module's docstring)."""
    return msim.Fabric(hosts=72 if quick else 432, planes=1, leaves=2 if quick else 12, spines=36,
                       rate_bps=10**10, hop_ns=1500, mtu=8872, buffer_bytes=1 << 20, trim_bytes=72 << 10,
                       ecn_bytes=0, seed=1, cc=cc)


def quantiles(rates: list[float]) -> dict:
    """min, p1, p10, p50, p90, max and mean of per-flow rates, as PUBLISHED gives them."""
    v, n = sorted(rates), len(rates)

    def q(x: float) -> float:
        return round(v[min(n - 1, int(x * n))], 3)
    return {"min": q(0), "p1": q(0.01), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "max": q(1.0),
            "mean": round(sum(v) / n, 3)}


def run(quick: bool, size: int) -> dict:
    """Each window's per-flow rates against the published ones."""
    out = {"published": PUBLISHED, "hosts": 72 if quick else 432, "size": size, "windows": {}}
    for name, cc in WINDOWS.items():
        fab = fabric(quick, cc)
        sim = msim.simulate(fab, "permutation", size)
        r = sim.result
        g = quantiles([size * 8 / (us * 1e3) for us in sim.fcts_us])
        out["windows"][name] = {
            "max_cwnd": fab.qp_attr().cc["max_cwnd"], "base_rtt_us": round(fab.base_rtt_ns() / 1e3, 1),
            "gbps": g, "over_published": {k: round(v / PUBLISHED["gbps"][k], 3) for k, v in g.items()},
            "flows": len(sim.fcts_us), "trims": r["trims"], "drops": r["drops"], "rtx_packets": r["rtx_packets"],
            "timeouts": r["timeouts"], "qp_errors": r["qp_errors"], "unfinished": r["unfinished"],
            "wall_s": r["wall_s"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--quick", action="store_true", help="72 hosts, 8 MiB a flow (CI-sized)")
    ap.add_argument("--size", type=size_type(1 << 20), default=None,
                    help="bytes each flow writes, at least 1M: a rate over less is mostly the first round trip "
                         "(default 64M; --quick 8M)")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    size = a.size or (8 if a.quick else 64) << 20
    out = run(a.quick, size)
    if a.save:
        store.save("ndp_permutation", out, a.save)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"published: {out['published']['gbps']}")
        for name, w in out["windows"].items():
            print(f"{name}: {w['gbps']} (over published: {w['over_published']}), trims {w['trims']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
