"""The README's first command.

Builds the default fabric (8 planes), proves every path, then runs one MRC
queue pair from h0 to h3 over all planes with a live per-plane rate display,
cuts a T0-T1 link and then a whole plane mid-transfer, and shows the transfer
completing with verified data and its longest completion stall. Always tears
down what it built."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request

from mrc.fabric import apply, ns
from mrc.fabric.check import check, matrix
from mrc.fabric.faults import FaultScheduler
from mrc.fabric.pair import qp_pair
from mrc.fabric.status import status_text
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm
from mrc.tools.perf import stream


def transfer(t: Topology, total: int = 3 << 30, out=sys.stdout, serve_ctl: bool = False) -> dict:
    """The demo's transfer: one QP h0 -> h3 over every plane, a link cut and a plane cut in it."""
    src_h, dst_h = 0, t.hosts - 1
    window = 64 << 20
    link = f"{t.leaf(3, t.host_leaf(src_h))}-{t.spine(3, 1)}"
    plane = 6
    spines = [t.spine(plane, s) for s in range(t.spines)]
    # faults come from another process, as an operator's would: this one keeps
    # polling completions undisturbed, and the fault process (started now, at
    # the lowest priority) costs the transfer no interpreter start-up
    with qp_pair(t, src_h, dst_h, window) as p, FaultScheduler(t.name) as faults, contextlib.ExitStack() as ctl:
        if serve_ctl:  # the web view finds the contexts through their control sockets
            from mrc.ctl import endpoint

            for ctx, h in ((p.ca, src_h), (p.cb, dst_h)):
                server = endpoint.serve(ctx, out, tag=t.host(h), role=f"mrc demo, {t.host(h)}")
                if server is not None:
                    ctl.callback(server.close)

        def cut_link():
            faults.now("fail", link)
            return f"cut link {link}"

        def cut_plane():
            faults.now("fail", spines)  # one command for the whole plane
            return f"cut plane {plane} (all {len(spines)} spines)"

        peak = [1.0]

        def tick(el, frac, rates):
            peak[0] = max(peak[0], max(rates))
            cells = " ".join(f"p{i}:{r:4.2f}" for i, r in enumerate(rates))
            print(f"  {el:5.1f}s {frac:4.0%}  Gb/s per plane  {cells}  total {sum(rates):5.2f}", file=out, flush=True)

        print(f"\n== one MRC queue pair h{src_h} -> h{dst_h} over {t.planes} planes: {total >> 20} MiB of 1 MiB WRITEs",
              file=out)
        res = stream(p.ca, p.qa, p.ms, p.remote, total, window=window, on_tick=tick,
                     events=[(0.33, cut_link), (0.66, cut_plane)])
        res["verified"] = p.verify()
        res["qp_state"] = p.qa.state
        st = p.qa.stats()
        res["plane_tx"] = st["plane_tx"][: t.planes]
        res["qp"] = {k: st[k] for k in ("timeouts", "losses", "cwnd", "good_evs", "bad_evs", "srtt_ns", "probes_tx")}
        return res


class DashProcess:
    """``mrc dash`` for the demo's fabric, in its own process (the demo's
    polling loop keeps its CPU), with a token made here."""

    def __init__(self, name: str, port: int) -> None:
        self.port = port
        self.token = secrets.token_urlsafe(18)
        self.proc = subprocess.Popen([sys.executable, "-m", "mrc", "dash", "--name", name, "--port", str(port),
                                      "--token", self.token], stdout=subprocess.PIPE, text=True)
        self.banner = self.proc.stdout.readline().strip()
        if self.proc.poll() is not None or not self.banner:
            raise RuntimeError(f"mrc dash did not start (exit {self.proc.wait()}): is the dash extra installed "
                               f"(pip install 'mrc[dash]') and port {port} free?")

    def pages(self) -> int:
        """Pages open on the web view now."""
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/state",
                                         headers={"X-MRC-Token": self.token})
            with urllib.request.urlopen(req, timeout=2) as r:
                return json.load(r).get("pages", 0)
        except OSError:
            return 0

    def wait_for_page(self, timeout: float) -> bool:
        """Wait until a page opens the web view, or ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pages():
                return True
            time.sleep(0.5)
        return False

    def close(self) -> None:
        """Stop the web view."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(name: str | None = None, dash: dict | None = None) -> int:
    """``dash``: {"port", "wait", "linger"} to serve the web view (mrc demo --dash)."""
    name = name or f"demo{os.getpid() % 100000}"
    exit_cleanly_on_sigterm()  # a killed demo still removes its fabric
    t = Topology(name=name)
    print(f"== building fabric {name}: {t.planes} planes x ({t.spines} T1 spines, {t.leaves} T0 leaves), "
          f"{t.hosts} hosts, one port per plane", flush=True)
    view = None
    try:
        secs = apply.up(t)
        print(f"   up in {secs:.2f} s: {len(t.nodes())} namespaces, {len(t.links())} veth links")
        if dash:
            view = DashProcess(name, dash["port"])
            print(f"\n== the live web view: open http://127.0.0.1:{dash['port']}/?token={view.token}\n"
                  f"   ({view.banner})", flush=True)
        print("\n== status")
        print(status_text(t, apply.load_state(name), ns.list_netns())[1])
        example = t.path_address(0, t.hosts - 1, plane=3, spine=1)
        print(f"\n== a path: h0 -> h{t.hosts - 1}, plane 3, spine 1 is the destination address {example}")
        print(f"   {t.decode_address(example)}")
        print("\n== checking every (src, dst, plane, spine) path with one packet each")
        r = check(t)
        print(matrix(t, r))
        if view is not None:
            print(f"   waiting up to {dash['wait']:.0f} s for a page to open it ...", flush=True)
            print("   a page is watching" if view.wait_for_page(dash["wait"]) else "   no page came; going on")
        # with a page watching, a transfer long enough to see (about 15 s here)
        res = transfer(t, total=(16 << 30) if view is not None else (3 << 30), serve_ctl=view is not None)
        for (at, what), stall in zip(sorted(res["events"]), res["max_stall_after_each_event_ms"], strict=True):
            print(f"   at {at:6.3f} s: {what}; longest stall until the next event: {stall} ms")
        print(f"\n== transfer: {res['bytes'] >> 20} MiB in {res['seconds']} s = {res['gbps']} Gb/s; "
              f"{res['retransmits']} packets retransmitted; QP {res['qp_state']}")
        print(f"   data verified by SHA-256: {res['verified']}")
        print(f"   longest completion stall: {res['max_stall_ms']} ms (at {res['stall_at_s']} s); "
              f"before the first fault the longest was {res['no_fault_max_stall_ms']} ms (this machine's floor)")
        ok = r["failed_count"] == 0 and res["verified"] and res["qp_state"] == "RTS"
        print("\n== result: " + ("the transfer rode out a link cut and a plane cut with no error"
                                 if ok else "FAILED"))
        if view is not None and dash["linger"] > 0:
            print(f"== the fabric stays up {dash['linger']:.0f} s for the web view (Ctrl-C ends it)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                time.sleep(dash["linger"])
        return 0 if ok else 1
    finally:
        if view is not None:
            view.close()
        removed = apply.down(name)
        print(f"== torn down: {len(removed)} namespaces removed", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
