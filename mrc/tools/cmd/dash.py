"""``mrc dash``: the live web view of a fabric."""

from __future__ import annotations

import argparse

from mrc.errors import UsageError
from mrc.tools import args
from mrc.units import PORT, bounded


def add_parser(sub) -> None:
    """``mrc dash``'s options."""
    dash = sub.add_parser("dash", help="a live web view of a running fabric and its MRC connections, with fault "
                                       "buttons (needs the dash extra: aiohttp)",
                          description="Serves one page that shows the fabric (links coloured by state and load), "
                                      "per-plane and per-host rates, every MRC context in the fabric's hosts with "
                                      "its QPs and a QP's EV grid, EV events and link changes on a timeline, and "
                                      "the switch queues, updated 5 times a second. Clicking a link or switch "
                                      "fails, heals, flaps, adds loss or limits its rate (as `mrc fabric` does) "
                                      "with the token printed at start; with the read-only token printed beside it "
                                      "the page only watches, and without a token it shows nothing. It binds "
                                      "to 127.0.0.1 unless told otherwise. Example: `mrc fabric up --name lab` "
                                      "then `mrc dash --name lab` and open the URL it prints. docs/dash.md.")
    dash.add_argument("--name", help="the fabric (default: the only one up)")
    dash.add_argument("--port", type=PORT, default=8080, help="TCP port (default 8080)")
    dash.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                          "only; 0.0.0.0 opens it to the network)")
    dash.add_argument("--hz", type=bounded(float, 0.5, 20), default=5.0, help="updates per second (0.5-20, default 5)")
    tok = dash.add_mutually_exclusive_group()
    tok.add_argument("--token", help="the token that allows changes (default: a random one, or $MRC_DASH_TOKEN); "
                                     "on a shared machine prefer --token-file (a command line is visible to all)")
    tok.add_argument("--token-file", metavar="FILE", help="read the token that allows changes from FILE")
    dash.set_defaults(run=run, parser=dash)


def run(a: argparse.Namespace) -> int:
    """``mrc dash``."""
    from mrc.dash.server import run
    from mrc.fabric import apply

    args.check_port(a.port, "--port")
    if not 0.5 <= a.hz <= 20:
        raise UsageError(f"--hz must be 0.5-20, not {a.hz}")
    name = a.name
    if name is None:
        found = apply.list_fabrics()
        if len(found) != 1:
            raise UsageError(f"{len(found)} fabrics are up ({', '.join(found) or 'none'}): name one with "
                             "--name" if found else "no fabric is up: `mrc fabric up --name lab` first")
        name = found[0]
    apply.require_root("mrc dash (it reads the fabric's namespaces)")
    return run(name, a.port, a.bind, a.hz, args.read_token(a.token_file) if a.token_file else a.token)

