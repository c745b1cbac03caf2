"""Options that several ``mrc`` subcommands share, and what they parse to."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mrc.errors import UsageError
from mrc.units import bounded, size_type

DEFAULT_NAME = os.environ.get("MRC_FABRIC", "mrc0")

#: a size argument of at least one byte (4K, 1M, 1G)
SIZE = size_type(1)
#: an engine's idle spin in microseconds (up to a second)
SPIN_US = bounded(float, 0, 1_000_000)
#: a seed for a run's randomness
SEED = bounded(int, 0, 2**63 - 1)
#: a QP number (24 bits)
QPN = bounded(int, 0, (1 << 24) - 1)
#: a switch queue's threshold in KiB (up to 1 GiB)
KB = bounded(int, 0, 1 << 20)


def name_arg(p: argparse.ArgumentParser) -> None:
    """``--name``: which fabric."""
    p.add_argument("--name", default=DEFAULT_NAME,
                   help=f"fabric name, 1-10 lower-case letters or digits (default: {DEFAULT_NAME}, or $MRC_FABRIC)")


def json_arg(p: argparse.ArgumentParser) -> None:
    """``--json``."""
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def spin_arg(p: argparse.ArgumentParser) -> None:
    """``--spin-us``: how long an idle engine polls."""
    p.add_argument("--spin-us", type=SPIN_US, metavar="US",
                   help="how long the engine thread polls after its last work before it sleeps (default 200; "
                        "0 sleeps at once and saves a CPU, more can lower latency on a machine with cores to spare)")


def buffer_arg(p: argparse.ArgumentParser) -> None:
    """``--packets-per-buffer``: k packets of a path per kernel buffer."""
    p.add_argument("--packets-per-buffer", type=bounded(int, 0, 8), default=1, metavar="K",
                   help="send new data K packets of one path per kernel buffer (UDP_SEGMENT; 0: as many as fit in "
                        "64 KiB; default 1, one each through the raw socket). Needs the egress program mrc fabric "
                        "puts on every host port and a fabric without switch queues (docs/engine.md)")


def packets_per_buffer(a: argparse.Namespace, resolver) -> int:
    """``--packets-per-buffer`` once checked: anything but 1 needs the running fabric of the resolver's
    topology to allow it on this host (mrc.fabric.apply.packets_per_buffer), else a UsageError."""
    want = getattr(a, "packets_per_buffer", 1)
    if want == 1:
        return 1
    from mrc.fabric import apply

    name, host = getattr(resolver, "name", None), getattr(resolver, "host", None)
    if not name or not host or name not in apply.list_fabrics():
        raise UsageError(f"--packets-per-buffer {want} needs a host of a running mrc fabric (its ports carry the "
                         "egress program buffers need)")
    if apply.packets_per_buffer(apply.load_topology(name), [host], want) == 1:
        raise UsageError(f"--packets-per-buffer {want}: fabric {name} does not allow it (its switch queues must "
                         "see packets, or its host ports have no host_gso program: clang was missing)")
    return want


def where_args(p: argparse.ArgumentParser, ports: bool = True) -> None:
    """Options that say which host this is and where its ports and peers are."""
    p.add_argument("--topology", metavar="FILE", help="a topology file naming hosts, ports and paths "
                                                      "(docs/topology.md; default: $MRC_TOPOLOGY, which "
                                                      "`mrc fabric exec` sets)")
    p.add_argument("--host", help="this host's name in the topology (default: $MRC_HOST, else the host whose "
                                  "port addresses this machine has)")
    p.add_argument("--fabric", metavar="NAME", help="use running fabric NAME's topology "
                                                    "(/run/mrc/fabrics/NAME.topology; default, when neither "
                                                    "--topology nor $MRC_TOPOLOGY gives one: the only fabric "
                                                    "running)")
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


def resolver(a: argparse.Namespace, prog: str, several_ok: bool = False):
    """The path resolver ``--topology`` and ``--host`` (or the environment) give; without either topology,
    ``--fabric``'s or the only running fabric's, said on stderr (several running: an error that names them,
    or with ``several_ok`` a note and no topology)."""
    from mrc.paths import ENV_TOPOLOGY, from_environment

    topology = a.topology or os.environ.get(ENV_TOPOLOGY)
    if not topology and (getattr(a, "fabric", None) or not getattr(a, "ports", None)):
        topology = running_topology(getattr(a, "fabric", None), prog, several_ok)
    return from_environment(a.host, topology)


def running_topology(fabric: str | None, prog: str, several_ok: bool = False) -> str | None:
    """The topology file of fabric ``fabric``, or of the only fabric running (None: none runs)."""
    from mrc.fabric import apply

    running = [n for n in apply.list_fabrics() if os.path.exists(apply.topology_path(n))]
    if fabric is not None:
        if fabric not in running:
            raise UsageError(f"--fabric {fabric}: no such fabric is up ("
                             + (f"running: {', '.join(running)}" if running else "none is: `mrc fabric up`") + ")")
        name = fabric
    elif len(running) == 1:
        name = running[0]
    elif running:
        what = (f"{len(running)} fabrics are up ({', '.join(running)}): say which with --fabric NAME (or "
                f"--topology /run/mrc/fabrics/NAME.topology; `mrc fabric exec --name NAME HOST -- ...` sets it)")
        if not several_ok:
            raise UsageError(what)
        print(f"{prog}: {what}; without it, hosts are shown as addresses", file=sys.stderr)
        return None
    else:
        return None
    path = apply.topology_path(name)
    print(f"{prog}: using fabric {name}'s topology ({path})", file=sys.stderr)
    return path


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
