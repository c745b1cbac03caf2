"""``mrc capture``: tcpdump of MRC packets inside a fabric host's or switch's
namespace, started before the traffic and stopped cleanly. ``mrc decode``
(:mod:`mrc.tools.decode`) summarises what it wrote.

    mrc capture h0 --port 2 -w h0p2.pcap          # Ctrl-C (or --seconds/--count) stops it
    mrc decode h0p2.pcap --json

Capturing needs tcpdump.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time

from mrc import wire
from mrc.errors import MrcError, UsageError
from mrc.fabric import apply, ns


# ------------------------------------------------------------------ capture
class Capture:
    """tcpdump running in a fabric node's namespace, writing MRC packets to a file.

    Start it before the traffic: ``start()`` returns once tcpdump is listening.
    ``stop()`` ends it cleanly (SIGINT, so the file is complete)."""

    def __init__(self, fabric: str, node: str, out: str, interface: str | None = None, count: int | None = None,
                 snaplen: int = 0) -> None:
        self.fabric, self.node, self.out = fabric, node, out
        self.interface, self.count, self.snaplen = interface, count, snaplen
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def argv(self) -> list[str]:
        # -B: a 64 MiB kernel buffer, so a burst at line rate is not dropped
        """The tcpdump command line."""
        a = ["tcpdump", "-n", "-B", "65536", "-i", self.interface or "any", "-w", self.out]
        if self.snaplen:
            a += ["-s", str(self.snaplen)]
        if self.count:
            a += ["-c", str(self.count)]
        return a + ["udp", "port", str(wire.UDP_PORT)]

    def start(self, timeout: float = 10.0) -> Capture:
        """Start tcpdump in the node's namespace; returns once it listens."""
        if not shutil.which("tcpdump"):
            raise MrcError("tcpdump is not installed: apt-get install tcpdump")
        apply.require_root("mrc capture")
        t = apply.load_topology(self.fabric)
        if self.node not in t.nodes():
            raise UsageError(f"unknown node {self.node!r}: use a host h0..h{t.hosts - 1} or a switch such as "
                             f"{t.leaf(0, 0)} or {t.spine(0, 0)}")
        self.proc = ns.popen(t.ns(self.node), self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        ready = threading.Event()

        def read_stderr() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                if "listening on" in line:
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read_stderr, daemon=True)
        self._reader.start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise MrcError(f"tcpdump did not start in {self.node}: {' / '.join(self.lines[-3:]) or 'no output'}")
        return self

    def stop(self, timeout: float = 10.0) -> int:
        """Stop tcpdump; returns the number of packets it says it captured (or -1).
        ``self.dropped`` is how many the kernel dropped because tcpdump fell behind."""
        self.dropped = 0
        if self.proc is None:
            return -1
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout)  # tcpdump ended: its stderr closes after the summary lines
        n = -1
        for line in self.lines:
            if line.endswith("packets captured"):
                n = int(line.split()[0])
            elif line.endswith("packets dropped by kernel"):
                self.dropped = int(line.split()[0])
        return n

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def capture_main(fabric: str, node: str, out: str, port: int | None, interface: str | None, seconds: float | None,
                 count: int | None, snaplen: int, quiet: bool = False) -> int:
    """``mrc capture``: capture until Ctrl-C, SIGTERM, ``seconds`` or ``count``."""
    iface = interface or (f"p{port}" if port is not None else None)
    say = (lambda *x: None) if quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))

    def on_term(signum, frame):
        raise KeyboardInterrupt  # `kill` stops the capture as cleanly as Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    cap = Capture(fabric, node, out, iface, count, snaplen)
    try:
        cap.start()
        say(f"mrc capture: {node} {iface or 'all interfaces'} -> {out}; "
            + (f"for {seconds} s" if seconds else f"until {count} packets" if count else "Ctrl-C to stop"))
        end = time.monotonic() + seconds if seconds else None
        while cap.proc.poll() is None and (end is None or time.monotonic() < end):
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        n = cap.stop()
    say(f"mrc capture: {n if n >= 0 else 'an unknown number of'} packets written to {out}")
    if cap.dropped:
        say(f"mrc capture: the kernel dropped {cap.dropped} packets that tcpdump could not take in time: capture "
            "one port (--port), keep fewer bytes (--snaplen 128) or send more slowly")
    return 0
