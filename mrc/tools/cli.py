"""The ``mrc`` command.

    mrc fabric up [--planes 8 --spines 4 --leaves 2 --hosts 4] [--name NAME]
    mrc fabric check [--json]      prove every path delivers
    mrc fabric paths [--json]      every (src, dst, plane, spine) address
    mrc fabric status [--json]     nodes, links, faults in force
    mrc fabric fail|heal|flap|loss|rate ...   real, reversible faults
    mrc fabric qos TARGET|all --rate R   switch egress queues: rate, ECN, trimming
    mrc fabric stats [--json]      the switch queues' counters
    mrc fabric exec HOST -- CMD    run a command inside a namespace
    mrc fabric down [--name NAME | --all]
    mrc fabric topology            the fabric as a topology file (docs/topology.md)
    mrc perf server | client HOST  RDMA WRITE bandwidth and latency
    mrc capture NODE -w FILE       tcpdump of MRC packets inside a namespace
    mrc decode FILE [--json]       per-QP summary of a capture (scapy)
    mrc ctl ev|events|port|cc ...  controller API of a running MRC process
    mrc soak [--seconds S | --packets N]   writes over a misbehaving in-memory link, every byte checked
    mrc coll all_reduce --fabric NAME      collectives across hosts, in nccl-tests' columns
    mrc train --fabric NAME [--faults ..]  a data-parallel training step, under faults

Every error prints one line saying what is wrong and what to do, and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from mrc.errors import MrcError
from mrc.signals import exit_cleanly_on_sigterm

#: the subcommands, in the order of ``mrc --help``: modules with add_parser(sub) and run(args)
COMMANDS = [f"mrc.tools.cmd.{name}" for name in ("demo", "dash", "perf", "capture", "decode", "soak", "sim", "ctl",
                                                 "coll", "fabric", "verbs")]


class Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors: what is wrong, and where the options are listed (its
    subcommands' parsers are of this class too)."""

    def error(self, message: str):
        """Print ``message`` in one line and exit 2."""
        # a subcommand that is not one: "argument fcmd: invalid choice: ..." names an internal field
        message = re.sub(r"^argument (cmd|pcmd|fcmd|ccmd|evcmd|cccmd|vcmd|sim_cmd): ", "", message)
        if message.endswith("expected one argument"):
            message += " (a value that starts with '-' goes as --option=VALUE)"
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``mrc`` command's parser: every subcommand module registers its own."""
    top = Parser(
        prog="mrc",
        description="MRC (Multipath Reliable Connection) in user space: a multi-plane SRv6 uSID fabric "
                    "in network namespaces, and the tools around it.",
        epilog="Run `mrc fabric --help` for the fabric commands. Most commands need root.",
    )
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="cmd")
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the ``mrc`` command; returns its exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first "--" is the command of `mrc fabric exec` (or
    # `mrc verbs run`), wherever the options stand
    command: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    a = parser.parse_args(argv)
    exit_cleanly_on_sigterm()  # a stopped server or fabric takes down what it built
    if command is not None:
        if getattr(a, "vcmd", None) == "run":
            a.cmd = a.cmd + command
        elif getattr(a, "fcmd", None) != "exec":
            parser.error("`--` only goes with `mrc fabric exec NODE -- CMD` and `mrc verbs run -- CMD`")
        else:
            a.argv = a.argv + command
    try:
        if a.version:
            from mrc import __version__

            print(__version__)
            return 0
        run = getattr(a, "run", None)
        if run is None:
            parser.print_help()
            return 2
        return run(a)
    except MrcError as e:
        print(f"mrc: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`mrc ... | head`): what was done stays done, nothing more is printed
        # (stdout goes to /dev/null, so the interpreter's last flush cannot fail again); 141 is what
        # a shell reports for a command that SIGPIPE ended
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
