"""``mrc soak``: writes over a misbehaving in-memory link, every byte checked."""

from __future__ import annotations

import argparse

from mrc.errors import UsageError
from mrc.tools import args
from mrc.tools.args import SEED
from mrc.units import bounded


def add_parser(sub) -> None:
    """``mrc soak``'s options."""
    soak = sub.add_parser("soak", help="many writes over a misbehaving in-memory link, every byte checked (rootless)",
                          description="Two contexts with QPs both ways keep random writes (1 B to 1 MiB, WRITE and "
                                      "WRITE_IMM) in flight over the in-memory link while its 16 paths lose, "
                                      "reorder, duplicate, trim and mark packets and flap; every landed byte, every "
                                      "gap between writes, every immediate and the order of completions are "
                                      "checked. Prints packets, bytes, retransmits, qp_errors and corrupt_bytes; "
                                      "exits 1 on any error. Example: `mrc soak --seconds 10 --json`.")
    soak.add_argument("--seconds", type=bounded(float, 0, 10**7, above=True),
                      help="stop after this much wall-clock time (default 10 unless "
"--packets is given)")
    soak.add_argument("--packets", type=bounded(int, 1, 10**12),
                      help="stop once the endpoints have sent this many packets")
    soak.add_argument("--seed", type=SEED, default=1, help="the link's and the writes' randomness (default 1)")
    args.json_arg(soak)
    soak.set_defaults(run=run, parser=soak)


def run(a: argparse.Namespace) -> int:
    """``mrc soak``."""
    from mrc.tools import soak

    if (a.seconds is not None and a.seconds <= 0) or (a.packets is not None and a.packets <= 0):
        raise UsageError("--seconds and --packets must be positive")
    return soak.main(a.seconds, a.packets, a.seed, a.json)
