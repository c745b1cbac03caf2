"""``mrc demo``: the README's first command."""

from __future__ import annotations

import argparse

from mrc.errors import UsageError
from mrc.tools import args
from mrc.units import PORT, bounded


def add_parser(sub) -> None:
    """``mrc demo``'s options."""
    d = sub.add_parser("demo", help="build the default fabric, prove every path, cut a link, tear down",
                       description="The main demo: needs root; always removes what it built.")
    d.add_argument("--name", help="fabric name (default: demo<pid>)")
    d.add_argument("--dash", action="store_true",
                   help="serve the live web view (mrc dash) of the demo's fabric: print its URL, wait for a page "
                        "to open it (up to --dash-wait s), and keep the fabric up --dash-linger s at the end")
    d.add_argument("--dash-port", type=PORT, default=8080, help="the web view's port (default 8080)")
    d.add_argument("--dash-wait", type=bounded(float, 0, 3600),
                   default=60.0, help="seconds to wait for a page (default 60)")
    d.add_argument("--dash-linger", type=bounded(float, 0, 3600),
                   default=30.0, help="seconds the fabric stays up after the "
                                      "transfer for the page (default 30)")
    d.set_defaults(run=run, parser=d)


def run(a: argparse.Namespace) -> int:
    """``mrc demo``."""
    from mrc.tools import demo

    if a.dash:
        args.check_port(a.dash_port, "--dash-port")
        for flag, v in (("--dash-wait", a.dash_wait), ("--dash-linger", a.dash_linger)):
            if not 0 <= v <= 3600:
                raise UsageError(f"{flag} is 0-3600 seconds, not {v}")
    dash_opts = {"port": a.dash_port, "wait": a.dash_wait, "linger": a.dash_linger} if a.dash else None
    return demo.main(a.name, dash=dash_opts)
