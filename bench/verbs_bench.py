"""Unmodified perftest over MRC (libmrc-verbs.so, docs/verbs.md), beside
`mrc perf` on the same hosts in the same run.

On the default fabric (8 planes x 4 spines x 2 leaves, 4 hosts), between
h0 and the last host (under another leaf), each contender a fresh server
and client pair:

  bw       Debian's ib_write_bw -d mrc0 -x 0 -F -s 1M -D SECONDS against
           mrc perf client --sizes 1M, alternated for --rounds rounds:
           perftest_over_mrc_perf, the median of the rounds' ratios
  lat      ib_write_lat -d mrc0 -x 0 -F -s 64 -n ITERS (t_typical, perftest's
           half round trip, doubled) against mrc perf --latency --sizes 64:
           lat_delta_us, the median of the rounds' differences. The control:
           mrc perf --latency again with a busy loop in each of the two hosts,
           as perftest's two processes spin on their memory and CQs, on this
           machine's two cores, beside the engine threads that must run
           (lat_control_delta_us: that over mrc perf alone)
  sizes    ib_write_bw -a: every size 2 B .. 8 MiB reported, its exit status
  cut      ib_write_bw -D 1 --run_infinitely with plane 1 cut (every spine of
           it failed) after a few seconds: the per-second rates after the cut
           over those before (plane_cut_ratio), and a -D run with the same
           cut that must exit 0
  check    examples/verbs/verbs_check.c (verbs.h only) writing patterned 1 MiB
           messages with a link cut and a plane cut in the run: wrong bytes

    python bench/verbs_bench.py --json [--save bench/results]

Needs root, perftest and the verbs layer (bash tools/setup.sh installs both).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mrc.fabric import apply  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402

MRC = [sys.executable, "-m", "mrc"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)")


def log(msg: str) -> None:
    print(f"verbs_bench: {msg}", file=sys.stderr, flush=True)


def in_host(t: Topology, host: str, argv: list[str], verbs: bool = True, stats: str | None = None) -> list[str]:
    """argv in a fabric host, under `mrc verbs run` (``stats``: its per-plane counts to that file)."""
    extra = ["--stats", stats] if stats else []
    return [*MRC, "fabric", "exec", "--name", t.name, host, "--", *(
        [*MRC, "verbs", "run", "--quiet", *extra, "--"] if verbs else []), *argv]


def pair(t: Topology, server: list[str], client: list[str], srv_host: str, cli_host: str, timeout: float = 120,
         during=None) -> tuple[int, str, int, str]:
    """A server in srv_host and a client in cli_host (its last argument the server's address): exit statuses
    and outputs. ``during(proc)`` runs while the client does."""
    s = subprocess.Popen(server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.5)
        c = subprocess.Popen(client, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if during:
            during(c)
        cout, _ = c.communicate(timeout=timeout)
        try:
            sout, _ = s.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            s.kill()
            sout, _ = s.communicate()
        return c.returncode, cout, s.returncode, sout
    finally:
        for p in (s,):
            if p.poll() is None:
                p.kill()
                p.wait()


def perftest(t: Topology, prog: str, args: list[str], src: str, dst: str, during=None, timeout: float = 180):
    dst_ip = t.mgmt_ipv4(int(dst[1:]))
    base = [prog, "-d", "mrc0", "-x", "0", "-F", *args]
    return pair(t, in_host(t, dst, base), in_host(t, src, [*base, dst_ip]), dst, src, timeout, during)


def rows(out: str) -> list[tuple[int, float]]:
    """perftest's result rows: (bytes, the average column)."""
    return [(int(m[1]), float(m[4])) for m in (ROW.match(x) for x in out.splitlines()) if m]


def mrc_perf(t: Topology, args: list[str], src: str, dst: str) -> dict:
    rc, out, _, _ = pair(t, in_host(t, dst, ["mrc", "perf", "server"], verbs=False),
                         in_host(t, src, ["mrc", "perf", "client", dst, *args, "--json"], verbs=False), dst, src)
    if rc:
        raise RuntimeError(f"mrc perf client failed: {out[-400:]}")
    return json.loads(out[out.index("["):])[0]


def lat_typical(out: str) -> float | None:
    """ib_write_lat's t_typical (us): the 5th column of its result row."""
    for x in out.splitlines():
        f = x.split()
        if len(f) >= 5 and f[0].isdigit() and f[1].isdigit():
            return float(f[4])
    return None


def cut_plane(t: Topology, plane: int) -> None:
    for s in range(t.spines):
        apply.fail(t.name, t.spine(plane, s))


def _bw_and_lat(t: Topology, a, src: str, dst: str, out: dict) -> None:
    """1 MiB bandwidth and 64 B latency, perftest and mrc perf alternated, with the busy-loop control."""
    bw: dict[str, list[float]] = {"perftest": [], "mrc_perf": []}
    lat: dict[str, list[float]] = {"perftest": [], "mrc_perf": [], "mrc_perf_spinners": []}
    iters_1m = max(200, int(a.seconds * 1300))
    for r in range(a.rounds):
        for who in (("perftest", "mrc_perf") if r % 2 == 0 else ("mrc_perf", "perftest")):
            if who == "perftest":
                rc, o, _, _ = perftest(t, "ib_write_bw", ["--report_gbits", "-s", "1048576", "-D",
                                                          str(a.seconds)], src, dst)
                got = rows(o)
                bw[who].append(got[-1][1] if rc == 0 and got else 0.0)
                rc, o, _, _ = perftest(t, "ib_write_lat", ["-s", "64", "-n", str(a.lat_iters)], src, dst)
                typ = lat_typical(o)
                lat[who].append(2 * typ if rc == 0 and typ else float("nan"))
            else:
                bw[who].append(mrc_perf(t, ["--sizes", "1M", "--iters", str(iters_1m)], src, dst)["gbps"])
                lat[who].append(mrc_perf(t, ["--latency", "--sizes", "64", "--iters", str(a.lat_iters)],
                                         src, dst)["p50_us"])
                spin = [subprocess.Popen(in_host(t, h, [sys.executable, "-c", "while True: pass"], verbs=False))
                        for h in (src, dst)]
                try:
                    lat["mrc_perf_spinners"].append(mrc_perf(
                        t, ["--latency", "--sizes", "64", "--iters", str(a.lat_iters)], src, dst)["p50_us"])
                finally:
                    for p in spin:
                        p.kill()
                        p.wait()
            log(f"round {r + 1}: {who} {bw[who][-1]:.2f} Gb/s, 64 B round trip {lat[who][-1]:.1f} us")
    ratios = [p / m for p, m in zip(bw["perftest"], bw["mrc_perf"], strict=True) if m]
    deltas = [p - m for p, m in zip(lat["perftest"], lat["mrc_perf"], strict=True)]
    control = [c - m for c, m in zip(lat["mrc_perf_spinners"], lat["mrc_perf"], strict=True)]
    out.update(bw_gbps=bw, rtt_us=lat, perftest_over_mrc_perf=round(statistics.median(ratios), 3),
               perftest_over_mrc_perf_spread=[round(min(ratios), 3), round(max(ratios), 3)],
               lat_delta_us=round(statistics.median(deltas), 1),
               lat_delta_spread_us=[round(min(deltas), 1), round(max(deltas), 1)],
               lat_control_delta_us=round(statistics.median(control), 1),
               lat_control_delta_spread_us=[round(min(control), 1), round(max(control), 1)])


def _every_size(t: Topology, src: str, dst: str, out: dict) -> None:
    """ib_write_bw -a: every size perftest runs."""
    rc, o, src_rc, _ = perftest(t, "ib_write_bw", ["--report_gbits", "-a", "-n", "1000"], src, dst, timeout=600)
    got = rows(o)
    out.update(perftest_rc=rc, perftest_server_rc=src_rc, perftest_sizes=[s for s, _ in got],
               perftest_size_gbps={str(s): g for s, g in got})
    log(f"ib_write_bw -a: exit {rc}, {len(got)} sizes from {got[0][0] if got else '-'} to "
        f"{got[-1][0] if got else '-'} B")


def _plane_cut(t: Topology, src: str, dst: str, out: dict) -> None:
    """A plane cut under ib_write_bw: its per-second rates around it, then a run that must exit 0."""
    marks: list[float] = []

    def cut_after(seconds):
        def go(proc):
            time.sleep(seconds)
            marks.append(time.monotonic())
            cut_plane(t, 1)
        return go

    try:
        s = subprocess.Popen(in_host(t, dst, ["ib_write_bw", "-d", "mrc0", "-x", "0", "-F", "--report_gbits",
                                              "-s", "1048576", "-D", "1", "--run_infinitely"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        c = subprocess.Popen(in_host(t, src, ["ib_write_bw", "-d", "mrc0", "-x", "0", "-F", "--report_gbits",
                                              "-s", "1048576", "-D", "1", "--run_infinitely",
                                              t.mgmt_ipv4(int(dst[1:]))]),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[tuple[float, float]] = []
        t0 = time.monotonic()
        for x in c.stdout:
            m = ROW.match(x)
            if m:
                lines.append((time.monotonic(), float(m[4])))
            if not marks and time.monotonic() - t0 > 8:
                marks.append(time.monotonic())
                cut_plane(t, 1)
            if marks and time.monotonic() - marks[0] > 6:
                break
        for p in (c, s):
            p.terminate()
            p.wait(timeout=10)
    finally:
        apply.heal(t.name, None)
    before = [g for at, g in lines if at < marks[0]][1:] if marks else []
    after = [g for at, g in lines if marks and at > marks[0] + 1.0]
    out.update(cut_rates_gbps={"before": before, "after": after},
               plane_cut_ratio=round(statistics.median(after) / statistics.median(before), 3)
               if before and after else None)
    log(f"plane cut: {before} -> {after} Gb/s")
    marks.clear()
    rc, o, _, _ = perftest(t, "ib_write_bw", ["--report_gbits", "-s", "1048576", "-D", "8"], src, dst,
                           during=cut_after(4))
    apply.heal(t.name, None)
    got = rows(o)
    out.update(plane_cut_rc=rc, plane_cut_run_gbps=got[-1][1] if got else None)
    log(f"ib_write_bw -D 8 with plane 1 cut at 4 s: exit {rc}, {out['plane_cut_run_gbps']} Gb/s")


def _check_program(t: Topology, src: str, dst: str, tmp: str, out: dict) -> None:
    """examples/verbs/verbs_check.c through a link cut and a plane cut: every byte checked."""
    exe = os.path.join(tmp, "verbs_check")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(ROOT, "examples", "verbs", "verbs_check.c"),
                    "-libverbs"], check=True)

    def faults(proc):
        time.sleep(2)
        apply.fail(t.name, f"{t.leaf(0, t.host_leaf(0))}-{t.spine(0, 1)}")
        time.sleep(2)
        cut_plane(t, 2)

    args = [exe, "-s", "1M", "-n", "300"]
    rc, o, src_rc, so = pair(t, in_host(t, dst, args), in_host(t, src, [*args, t.mgmt_ipv4(int(dst[1:]))]),
                             dst, src, 180, faults)
    apply.heal(t.name, None)
    srv = next((json.loads(x) for x in so.splitlines() if x.startswith("{")), {})
    out.update(check_rc=rc, check_server_rc=src_rc, check_bytes=srv.get("checked_bytes"),
               check_wrong_bytes=srv.get("wrong_bytes"))
    log(f"verbs_check with a link and a plane cut: exit {rc}/{src_rc}, {srv.get('wrong_bytes')} wrong bytes "
        f"of {srv.get('checked_bytes')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of bw and lat (default 3)")
    ap.add_argument("--seconds", type=int, default=4, help="ib_write_bw -D (default 4)")
    ap.add_argument("--lat-iters", type=int, default=5000, help="round trips per latency run (default 5000)")
    ap.add_argument("--planes", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("verbs_bench: needs root (it builds a fabric of namespaces)", file=sys.stderr)
        return 2
    if not shutil.which("ib_write_bw"):
        print("verbs_bench: perftest is missing (apt-get install perftest, or bash tools/setup.sh)", file=sys.stderr)
        return 2
    t = Topology(planes=a.planes, spines=4, leaves=2, hosts=4, name=f"vb{os.getpid() % 10000}")
    src, dst = t.host(0), t.host(t.hosts - 1)
    out: dict = {"fabric": {"planes": t.planes, "spines": t.spines, "leaves": t.leaves, "hosts": t.hosts},
                 "src": src, "dst": dst, "rounds": a.rounds, "seconds": a.seconds}
    tmp = tempfile.mkdtemp(prefix="verbs_bench_")
    apply.up(t)
    try:
        _bw_and_lat(t, a, src, dst, out)
        _every_size(t, src, dst, out)
        _plane_cut(t, src, dst, out)
        _check_program(t, src, dst, tmp, out)
    finally:
        apply.down(t.name)
        shutil.rmtree(tmp, ignore_errors=True)
    out["targets"] = {"perftest_over_mrc_perf": 0.95, "lat_delta_us": 1.0, "plane_cut_ratio":
                      round((t.planes - 1) / t.planes * 0.9, 3), "check_wrong_bytes": 0}
    if a.save:
        store.save("verbs_bench", out, a.save, srv6=None)
    print(json.dumps(out, indent=1) if a.json else json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
