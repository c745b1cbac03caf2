"""``mrc capture``: tcpdump of MRC packets inside a fabric's namespace."""

from __future__ import annotations

import argparse

from mrc.tools import args


def add_parser(sub) -> None:
    """``mrc capture``'s options."""
    cap = sub.add_parser("capture", help="capture MRC packets with tcpdump inside a fabric host or switch",
                         description="Run tcpdump (filter: udp port 4791) in NODE's namespace and write a pcap. "
                                     "It returns to you once tcpdump listens, so start it before the traffic; "
                                     "Ctrl-C, --seconds or --count stop it cleanly. Example: "
                                     "`mrc capture h0 --port 2 -w h0p2.pcap --seconds 5`, then "
                                     "`mrc decode h0p2.pcap`.")
    cap.add_argument("node", help="a host (h0) or a switch (p0l0, p0s1)")
    cap.add_argument("-w", "--write", required=True, metavar="FILE", help="pcap file to write")
    cap.add_argument("--port", type=int, help="a host's port (plane) P: capture on interface pP")
    cap.add_argument("-i", "--interface", help="any interface of the node (default: all of them)")
    cap.add_argument("--seconds", type=float, help="stop after this many seconds")
    cap.add_argument("--count", type=int, help="stop after this many packets")
    cap.add_argument("--snaplen", type=int, default=0, help="bytes kept per packet (default: all, so the "
                                                            "ICRC can be checked)")
    args.name_arg(cap)
    cap.set_defaults(run=run, parser=cap)


def run(a: argparse.Namespace) -> int:
    """``mrc capture``."""
    from mrc.fabric import capture

    return capture.capture_main(a.name, a.node, a.write, a.port, a.interface, a.seconds, a.count,
                                a.snaplen)
