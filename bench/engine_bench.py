"""Engine benchmark: two engines over the in-memory link in one process.

4 KiB payloads, no loss; the measured loop is mrc_sim_run() in C (Python
only starts it and reads the counters). Prints packets per second per core
(data packets per CPU second of this process, which runs both engines and
the link), bytes per second, cycles per byte (both ends and the link)
against the machine's floor measured in the same run (a packet copied and
checksummed in one pass at each end: bench/cpu.py), and the per-QP engine
memory at the default MPR (1024 PSNs).

    python bench/engine_bench.py [--json] [--mib 512] [--qps-check 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from mrc._dp import ffi, lib

from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import ghz, minimum  # noqa: E402 (bench/, beside this file)


def engines(nqp: int, mtu: int, sq_depth: int, msg: int, **ctx_kw):
    """Two engines over the in-memory link (8 planes, 2 us a path) with ``nqp`` QPs from the first
    to the second and a ``msg``-byte region at each end: (link, sender, its QPs, source, target)."""
    sim = Sim(planes=8, per_plane=4, seed=1)
    sim.set_all(delay_ns=2000)
    a, b = ManualContext(planes=8, **ctx_kw), ManualContext(planes=8, **ctx_kw)
    qps = [sim.connect(a, b, QPAttr(planes=8, mtu=mtu, sq_depth=sq_depth))[0] for _ in range(nqp)]
    src, dst = bytearray(msg), bytearray(msg)
    return sim, a, qps, a.reg_mr(src), b.reg_mr(dst, remote_write=True)


def run(mib: int, payload: int) -> dict:
    msg = 4 << 20
    sim, a, (qa,), ms, md = engines(1, payload, 256, msg)
    n_msgs = max(1, (mib << 20) // msg)
    done = posted = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while done < n_msgs:
        while posted < n_msgs and posted - done < 128:
            qa.post_write(ms, 0, msg, md.addr, md.rkey, wr_id=posted)
            posted += 1
        sim.run(sim.now + 50_000_000)  # 50 ms of simulated time per call, all in C
        wcs = a.poll_cq()
        if any(not w.ok for w in wcs):
            raise SystemExit(f"benchmark transfer failed: {wcs[0].status_name}")
        done += len(wcs)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    st = qa.stats()
    pkts = st["tx_packets"]
    return {
        "payload": payload,
        "data_packets": pkts,
        "cpu_seconds": round(cpu, 4),
        "wall_seconds": round(wall, 4),
        "packets_per_sec_per_core": round(pkts / cpu),
        "bytes_per_sec": round(st["tx_bytes"] / cpu),
        "gbps_per_core": round(st["tx_bytes"] * 8 / cpu / 1e9, 2),
        # both engines and the link run on this CPU: cycles per byte of sender and receiver together
        "cycles_per_byte": round(cpu * ghz() * 1e9 / st["tx_bytes"], 4),
        "simulated_gbps": round(st["tx_bytes"] * 8 / (sim.now / 1e9) / 1e9, 1),
        "retransmits": st["rtx_packets"],
    }


def run_qps(nqp: int, mib: int, msg: int = 64 << 10, depth: int = 8) -> float:
    """Data packets per CPU second with ``nqp`` QPs between the two engines, ``msg``-byte WRITEs
    posted round robin, ``depth`` in flight on each: what many active QPs cost the engine alone (its
    state for each QP is touched in turn, as at a NIC of an all-to-all)."""
    sim, a, qps, ms, md = engines(nqp, 4096, 64, msg, max_qps=nqp + 2)
    n, done, posted, inflight = max(1, (mib << 20) // msg), 0, 0, [0] * nqp
    cpu0 = time.process_time()
    while done < n:
        for i, qa in enumerate(qps):
            while posted < n and inflight[i] < depth:
                qa.post_write(ms, 0, msg, md.addr, md.rkey, wr_id=i)
                inflight[i] += 1
                posted += 1
        sim.run(sim.now + 1_000_000)
        for w in a.poll_cq():
            if not w.ok:
                raise SystemExit(f"benchmark transfer failed: {w.status_name}")
            inflight[w.wr_id] -= 1
            done += 1
    cpu = time.process_time() - cpu0
    return sum(qa.stats()["tx_packets"] for qa in qps) / cpu


def qp_state_bytes() -> int:
    a = ffi.new("struct mrc_qp_attr *")
    lib.mrc_qp_attr_default(a)
    assert a.mpr * 128 == 1024
    return int(lib.mrc_qp_state_bytes(a))


def create_qps(n: int) -> bool:
    ep = ManualContext(planes=8, max_qps=n)
    qps = [ep.create_qp(QPAttr()) for _ in range(n)]
    ok = len({q.qpn for q in qps}) == n
    ep.close()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--mib", type=int, default=512, help="MiB to transfer (default 512)")
    ap.add_argument("--payload", type=int, default=4096, help="payload bytes per packet (default 4096)")
    ap.add_argument("--qps-check", type=int, default=1000, help="QPs to create in one context (default 1000)")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    res = run(a.mib, a.payload)
    floor = minimum(a.payload)
    res["min_cycles_per_byte"] = round(2 * floor["fused_cycles_per_byte"], 4)  # one fused pass at each end
    res["cpu_vs_min"] = round(res["cycles_per_byte"] / res["min_cycles_per_byte"], 2)
    res["floor"] = floor
    res["qp_state_bytes"] = qp_state_bytes()
    res["qps_created"] = a.qps_check if create_qps(a.qps_check) else 0
    res["target_packets_per_sec_per_core"] = 1_000_000
    res["target_qp_state_bytes"] = 65536
    res["meets_targets"] = (res["packets_per_sec_per_core"] >= 1_000_000 and res["qp_state_bytes"] <= 65536
                            and res["qps_created"] == a.qps_check)
    if a.save:
        store.save("engine_bench", res, a.save)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:34} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
