"""Options that several ``mrc`` subcommands share, and what they parse to."""

from __future__ import annotations

import argparse
import json
import os

from mrc.errors import UsageError
from mrc.units import size_type

DEFAULT_NAME = os.environ.get("MRC_FABRIC", "mrc0")

#: a size argument of at least one byte (4K, 1M, 1G)
SIZE = size_type(1)


def name_arg(p: argparse.ArgumentParser) -> None:
    """``--name``: which fabric."""
    p.add_argument("--name", default=DEFAULT_NAME,
                   help=f"fabric name, 1-10 lower-case letters or digits (default: {DEFAULT_NAME}, or $MRC_FABRIC)")


def json_arg(p: argparse.ArgumentParser) -> None:
    """``--json``."""
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def spin_arg(p: argparse.ArgumentParser) -> None:
    """``--spin-us``: how long an idle engine polls."""
    p.add_argument("--spin-us", type=float, metavar="US",
                   help="how long the engine thread polls after its last work before it sleeps (default 200; "
                        "0 sleeps at once and saves a CPU, more can lower latency on a machine with cores to spare)")


def where_args(p: argparse.ArgumentParser, ports: bool = True) -> None:
    """Options that say which host this is and where its ports and peers are."""
    p.add_argument("--topology", metavar="FILE", help="a topology file naming hosts, ports and paths "
                                                      "(docs/topology.md; default: $MRC_TOPOLOGY, which "
                                                      "`mrc fabric exec` sets)")
    p.add_argument("--host", help="this host's name in the topology (default: $MRC_HOST, else the host whose "
                                  "port addresses this machine has)")
    if ports:
        p.add_argument("--ports", metavar="IF[:PLANE],...", help="the MRC ports, instead of the topology's: "
                                                                 "interface names, planes 0.. in order "
                                                                 "unless given (eth1:0,eth2:1)")


def ports_spec(spec: str | None) -> list | None:
    """``--ports eth1:0,eth2:1`` as [(ifname, plane), ...] (None: the topology's)."""
    if not spec:
        return None
    out = []
    for i, item in enumerate(x for x in spec.split(",") if x):
        name, _, plane = item.partition(":")
        try:
            out.append((name, int(plane) if plane else i))
        except ValueError:
            raise UsageError(f"bad port {item!r}: write IFNAME or IFNAME:PLANE") from None
    return out


def psk_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--psk-file``."""
    p.add_argument("--psk-file", metavar="FILE", help=f"a pre-shared key (at least 16 bytes, e.g. `head -c 32 "
                                                      f"/dev/urandom | base64 > key`): {what}")


def security_arg(p: argparse.ArgumentParser) -> None:
    """``--security``."""
    p.add_argument("--security", choices=("off", "auth", "encrypt"), default="off",
                   help="authenticated MRC: auth tags every packet (AES-256-GCM), encrypt also hides the payload; "
                        "keys per QP from an X25519 exchange under the --psk-file key; both sides the same "
                        "(default off)")


def read_psk(a: argparse.Namespace) -> bytes | None:
    """The key ``--psk-file`` names, or None."""
    from mrc import cm

    return cm.read_psk(a.psk_file) if a.psk_file else None


def resolver(a: argparse.Namespace):
    """The path resolver ``--topology`` and ``--host`` (or the environment) give."""
    from mrc.paths import from_environment

    return from_environment(a.host, a.topology)


def check_port(port: int, flag: str) -> None:
    """A TCP port given on the command line is 1-65535."""
    if not 1 <= port <= 65535:
        raise UsageError(f"{flag} must be 1-65535, not {port}")


def print_result(obj, as_json: bool, text: str) -> None:
    """``obj`` as JSON with ``--json``, else ``text``."""
    print(json.dumps(obj, indent=1) if as_json else text)


def read_token(path: str) -> str:
    """A token from a file (``mrc.cm.read_psk``'s rules), printable ASCII without spaces: it travels in headers."""
    from mrc import cm

    token = cm.read_psk(path, "token")
    if not all(33 <= b < 127 for b in token):
        raise UsageError(f"the token in {path} must be printable ASCII without spaces (e.g. `head -c 18 "
                         f"/dev/urandom | base64 > {path}`)")
    return token.decode()


def show_help(a: argparse.Namespace) -> int:
    """A command run without its subcommand: print its help (``parser``, from set_defaults) and exit 0."""
    a.parser.parse_args(["--help"])
    return 0  # not reached: --help exits
