"""Small-message latency over the fabric: MRC against the kernel, same run.

On the default fabric, h0 <-> h3:
  mrc    `mrc perf client h3 --latency --sizes 64`: a 64 B WRITE_IMM to the
         server, which writes it straight back when its receive completes;
         timed from the post to the client's receive completion. Both ends
         wait by progressing the NIC in their own thread (mrc_ctx_progress)
  mrc_nospin  the same with `--spin-us 0` at both ends: engine threads that
         sleep as soon as they are idle (the waiting threads do the work)
  udp    a UDP ping-pong in C (csrc/bench/udpping.c, blocking sockets) over
         the kernel's own SRv6 route between the hosts' inner addresses
         (plane 0, one uSID path: the one TCP uses in the other benches)
  icmp   ping -6 over the same route
Each runs ROUNDS times, alternating (mrc, mrc_nospin, udp, icmp, ...), so the VM's
drift touches all of them alike; the figures are the medians of the rounds'
p50 and p99. ratio_udp = MRC p50 / UDP p50 (the target is <= 1.5).

With --security, authenticated MRC joins the alternation (mrc_auth,
mrc_encrypt: the same as mrc with --security auth or encrypt under a key),
and auth_minus_off_us, encrypt_minus_off_us are the medians of the rounds'
p50 differences to mrc (the target is at most 2 us).

    python bench/latency_bench.py [--json] [--iters 2000] [--rounds 3] [--size 64] [--security]

Needs root (it builds a fabric of namespaces).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading

from mrc._dp import ffi, lib

from mrc.fabric import apply, ns
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm
from mrc.units import percentile

MRC = [sys.executable, "-m", "mrc"]


def summary(xs: list[float]) -> dict:
    """p50, p99 and min of round trips in microseconds."""
    return {"p50_us": round(percentile(xs, 0.5), 1), "p99_us": round(percentile(xs, 0.99), 1),
            "min_us": round(min(xs), 1)}


def run_mrc(t: Topology, size: int, iters: int, port: int, spin_us: float | None = None,
            security: tuple[str, str] | None = None) -> dict:
    src, dst = t.host(0), t.host(t.hosts - 1)
    spin = [] if spin_us is None else ["--spin-us", str(spin_us)]
    if security:  # (mode, key file): the same on both sides
        spin += ["--security", security[0], "--psk-file", security[1]]
    server = subprocess.Popen(MRC + ["fabric", "exec", dst, "--name", t.name, "--"] + MRC
                              + ["perf", "server", "--port", str(port), *spin], stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True)
    try:
        server.stderr.readline()  # "mrc perf server: ... waiting on ...": it listens
        out = subprocess.run(MRC + ["fabric", "exec", src, "--name", t.name, "--"] + MRC
                             + ["perf", "client", dst, "--port", str(port), "--latency", "--sizes", str(size),
                                "--iters", str(iters), "--json", *spin], capture_output=True, text=True, timeout=300)
        if out.returncode:
            raise RuntimeError(f"mrc perf client failed: {out.stderr.strip()[-400:]}")
        r = json.loads(out.stdout)[0]
        return {"p50_us": r["p50_us"], "p99_us": r["p99_us"], "min_us": r["min_us"], "verified": r["verified"],
                "retransmits": r["retransmits"]}
    finally:
        server.wait(30)


def run_udp(t: Topology, size: int, iters: int, port: int) -> dict:
    dst = t.hosts - 1
    addr = t.inner_address(dst, 0)
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
    cli = ns.run_in(t.ns(t.host(0)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
    try:
        srv.bind(("::", port))
        # blocking sockets for the C loops, with a kernel receive timeout
        # (Python's settimeout would make them non-blocking)
        tv = struct.pack("ll", 5, 0)
        for sk in (srv, cli):
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        cli.connect((addr, port))
        done = {}
        th = threading.Thread(target=lambda: done.update(n=lib.mrc_bench_udp_echo(srv.fileno(), iters + 50)))
        th.start()
        rtt = ffi.new("uint64_t[]", iters + 50)
        n = lib.mrc_bench_udp_pingpong(cli.fileno(), size, iters + 50, rtt)
        th.join(10)
        if n < 0:
            raise RuntimeError(f"UDP ping-pong failed: {os.strerror(-n)}")
        xs = [rtt[i] / 1e3 for i in range(50, iters + 50)]  # the first 50 warm up
        return summary(xs)
    finally:
        srv.close()
        cli.close()


def run_icmp(t: Topology, size: int, iters: int) -> dict:
    addr = t.inner_address(t.hosts - 1, 0)
    out = ns.command(t.ns(t.host(0)), ["ping", "-6", "-n", "-c", str(iters), "-i", "0.002", "-s", str(size), addr],
                     capture_output=True, text=True)
    xs = [float(m) * 1e3 for m in re.findall(r"time=([\d.]+) ms", out.stdout)]
    if not xs:
        raise RuntimeError(f"ping -6 {addr} gave no replies: {out.stdout[-300:]} {out.stderr[-300:]}")
    return {**summary(xs), "replies": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    ap.add_argument("--iters", type=int, default=2000, help="round trips per contender per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--size", type=int, default=64, help="message size in bytes (default 64)")
    ap.add_argument("--security", action="store_true", help="also mrc with --security auth and encrypt")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("the latency bench builds a fabric of namespaces: run it as root", file=sys.stderr)
        return 2
    exit_cleanly_on_sigterm()
    t = Topology(name=f"lt{os.getpid() % 10000}")
    apply.up(t)
    rounds: dict[str, list[dict]] = {"mrc": [], "udp": [], "icmp": [], "mrc_nospin": []}
    import tempfile

    keydir = tempfile.TemporaryDirectory(prefix="mrc-latency-")  # the key both ends read, removed after
    key = os.path.join(keydir.name, "key")
    with open(key, "w") as f:
        f.write(os.urandom(24).hex())
    if a.security:
        rounds.update(mrc_auth=[], mrc_encrypt=[])
    try:
        for k in range(a.rounds):
            # mrc and its secured runs in an order that turns each round: none always follows the same one
            modes = ["off", "auth", "encrypt"] if a.security else ["off"]
            for mode in modes[k % len(modes):] + modes[:k % len(modes)]:
                if mode == "off":
                    rounds["mrc"].append(run_mrc(t, a.size, a.iters, 18600 + k))
                else:
                    rounds[f"mrc_{mode}"].append(run_mrc(t, a.size, a.iters, 18900 + 10 * k + len(mode),
                                                         security=(mode, key)))
            # the same with engines that sleep as soon as they are idle: what the wake-ups cost
            rounds["mrc_nospin"].append(run_mrc(t, a.size, a.iters, 18800 + k, spin_us=0))
            rounds["udp"].append(run_udp(t, a.size, a.iters, 18700 + k))
            rounds["icmp"].append(run_icmp(t, a.size, a.iters))
            print(f"round {k + 1}: " + "  ".join(f"{p} p50 {r[-1]['p50_us']} us p99 {r[-1]['p99_us']} us"
                                               for p, r in rounds.items()), file=sys.stderr, flush=True)
    finally:
        apply.down(t.name)
        keydir.cleanup()
    out: dict = {"size": a.size, "iters": a.iters, "rounds": a.rounds}
    for p, rs in rounds.items():
        out[p] = {k: statistics.median(r[k] for r in rs) for k in ("p50_us", "p99_us", "min_us")}
        out[p]["per_round_p50_us"] = [r["p50_us"] for r in rs]
    out["mrc"]["verified"] = all(r["verified"] for r in rounds["mrc"] + rounds["mrc_nospin"])
    ratios = [m["p50_us"] / u["p50_us"] for m, u in zip(rounds["mrc"], rounds["udp"], strict=True)]
    out["ratio_udp"] = round(statistics.median(ratios), 2)
    out["ratio_udp_spread"] = [round(min(ratios), 2), round(max(ratios), 2)]
    out["ratio_icmp"] = round(out["mrc"]["p50_us"] / out["icmp"]["p50_us"], 2)
    for mode in ("auth", "encrypt") if a.security else ():
        d = [s["p50_us"] - m["p50_us"] for s, m in zip(rounds[f"mrc_{mode}"], rounds["mrc"], strict=True)]
        out[f"{mode}_minus_off_us"] = round(statistics.median(d), 1)
        out[f"{mode}_minus_off_spread_us"] = [round(min(d), 1), round(max(d), 1)]
        out["mrc"]["verified"] &= all(r["verified"] for r in rounds[f"mrc_{mode}"])
    if a.save:
        store.save("latency_bench_security" if a.security else "latency_bench", out, a.save)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for p in rounds:
            r = out[p]
            print(f"{p:>10}  p50 {r['p50_us']:8.1f} us  p99 {r['p99_us']:8.1f} us  min {r['min_us']:8.1f} us")
        print(f"ratio_udp {out['ratio_udp']} ({out['ratio_udp_spread'][0]}-{out['ratio_udp_spread'][1]}), "
              f"ratio_icmp {out['ratio_icmp']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
