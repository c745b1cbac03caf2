"""``mrc capture``: tcpdump of MRC packets inside a fabric's namespace."""

from __future__ import annotations

import argparse

from mrc.tools import args
from mrc.units import bounded


def add_parser(sub) -> None:
    """``mrc capture``'s options."""
    cap = sub.add_parser("capture", help="capture MRC packets with tcpdump inside a fabric host or switch",
                         description="Run tcpdump (filter: udp port 4791) in NODE's namespace and write a pcap. "
                                     "It stays in the foreground until Ctrl-C, SIGTERM, --seconds or --count stops it "
                                     "(cleanly: the pcap is whole), and says on stderr when tcpdump listens: start "
                                     "the traffic after that line, from another shell or with the capture in the "
                                     "background (&). Example: `mrc capture h0 --port 2 -w h0p2.pcap --seconds 5 &`, "
                                     "the traffic, then `wait; mrc decode h0p2.pcap`.")
    cap.add_argument("node", help="a host (h0) or a switch (p0l0, p0s1)")
    cap.add_argument("-w", "--write", required=True, metavar="FILE", help="pcap file to write")
    cap.add_argument("--port", type=bounded(int, 0, 15), help="a host's port (plane) P: capture on interface pP")
    cap.add_argument("-i", "--interface", help="any interface of the node (default: all of them)")
    cap.add_argument("--seconds", type=bounded(float, 0, 10**7, above=True), help="stop after this many seconds")
    cap.add_argument("--count", type=bounded(int, 1, 10**12), help="stop after this many packets")
    cap.add_argument("--snaplen", type=bounded(int, 0, 262_144),
                     default=0, help="bytes kept per packet (default: all, so the "
                                     "ICRC can be checked)")
    args.name_arg(cap)
    cap.set_defaults(run=run, parser=cap)


def run(a: argparse.Namespace) -> int:
    """``mrc capture``."""
    from mrc.fabric import capture

    return capture.capture_main(a.name, a.node, a.write, a.port, a.interface, a.seconds, a.count,
                                a.snaplen)
