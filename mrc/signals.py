"""How an mrc process ends when it is told to: SIGTERM (kill, a CI
timeout, a test stopping a server) runs the same ``finally`` blocks as
Ctrl-C, so what it built (namespaces, control sockets, contexts) is taken
down. ``mrc`` installs it for every command."""

from __future__ import annotations

import os
import signal
import sys


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM end this process like Ctrl-C, so that every ``finally``
    runs. A child forked later (pyroute2 forks one to make each namespace,
    and ends it with SIGTERM) inherits the handler: there it ends at once,
    as the default action would, instead of running the parent's ``finally``
    blocks."""
    owner = os.getpid()

    def on_term(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
