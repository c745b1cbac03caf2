"""``mrc decode``: a capture summarised per QP."""

from __future__ import annotations

import argparse

from mrc.tools import args


def add_parser(sub) -> None:
    """``mrc decode``'s options."""
    dec = sub.add_parser("decode", help="summarise a capture per QP (needs the dissect extra: scapy)",
                         description="Decode every MRC packet of a pcap with the scapy layers of mrc.dissect and "
                                     "print, per QP, packets, bytes, retransmissions, counts per EV and per plane, "
                                     "SACK and NACK counts by reason, a reorder-distance histogram and ICRC "
                                     "failures, and the malformed packets. Example: `mrc decode h0p2.pcap --json`.")
    dec.add_argument("file", help="a pcap or pcapng file")
    args.where_args(dec, ports=False)
    args.json_arg(dec)
    dec.set_defaults(run=run, parser=dec)


def run(a: argparse.Namespace) -> int:
    """``mrc decode``."""
    from mrc.tools import decode

    decode.check_capture(a.file)   # a bad file is said before anything else
    r = decode.decode(a.file, args.resolver(a, "mrc decode", several_ok=True))
    args.print_result(r, a.json, decode.decode_text(r))
    return 1 if r["malformed"] else 0
