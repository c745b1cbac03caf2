"""``mrc perf``: RDMA WRITE bandwidth and latency over MRC."""

from __future__ import annotations

import argparse
import sys

from mrc.tools import args
from mrc.units import PORT, bounded, size_list_type


def add_parser(sub) -> None:
    """``mrc perf``'s options."""
    perf = sub.add_parser("perf", help="RDMA WRITE bandwidth and latency over MRC (like ib_write_bw)",
                          description="Run `mrc perf server` on one host and `mrc perf client SERVER` on another, "
                                      "e.g. inside a fabric: `mrc fabric exec h2 -- mrc perf server` and "
                                      "`mrc fabric exec h0 -- mrc perf client h2 --verify`; between any hosts a "
                                      "topology file describes: `mrc perf server --topology lab.json` and "
                                      "`mrc perf client b --topology lab.json --verify` (docs/topology.md).")
    psub = perf.add_subparsers(dest="pcmd")
    ps = psub.add_parser("server", help="wait for a client and receive its writes")
    ps.add_argument("--port", type=PORT, default=18515, help="connection-setup TCP port (default 18515)")
    ps.add_argument("--forever", action="store_true", help="serve one client after another (default: exit after "
                                                           "the first client that gets through setup)")
    ps.add_argument("--bind", metavar="ADDR", help="listen on this address (default: this host's management address "
                                                   "from the topology, else all addresses)")
    ps.add_argument("--max-size", type=args.SIZE, default="1G", metavar="SIZE",
                    help="the most remote-writable memory one client may ask for (default 1G)")
    ps.add_argument("--max-qps", type=bounded(int, 1, 4096),
                    default=64, metavar="N", help="the most QPs one client may ask for "
                                                  "(default 64)")
    ps.add_argument("--idle-timeout", type=bounded(float, 0, 86_400, above=True), default=60.0, metavar="S",
                    help="drop a connected client silent this long (default 60 s; clients tick every 10 s)")
    args.psk_arg(ps, "only clients that prove they hold this key (challenge-response, HMAC-SHA256) get a QP")
    args.security_arg(ps)
    args.spin_arg(ps)
    args.buffer_arg(ps)
    args.where_args(ps)
    ps.set_defaults(run=_server)
    pc = psub.add_parser("client", help="write to a server and measure")
    pc.add_argument("server", help="the server: a host of the topology (h2) or its management address")
    pc.add_argument("--port", type=PORT, default=18515, help="connection-setup TCP port (default 18515)")
    pc.add_argument("--sizes", type=size_list_type(1, 1 << 30),
                    default="4K,64K,1M", help="message sizes, comma separated (default 4K,64K,1M)")
    pc.add_argument("--iters", type=bounded(int, 1, 10**9), default=100, help="messages per size (default 100)")
    pc.add_argument("--depth", type=bounded(int, 1, 4096), default=16, help="messages in flight (default 16)")
    pc.add_argument("--imm", action="store_true", help="RDMA WRITE with immediate instead of WRITE")
    pc.add_argument("--verify", action="store_true", help="check the received data by hash")
    pc.add_argument("--qps", type=bounded(int, 1, 4096),
                    default=1, help="queue pairs, messages spread round robin (default 1)")
    pc.add_argument("--latency", action="store_true",
                    help="round trips instead of bandwidth: a WRITE_IMM of each size, which the server writes straight "
                         "back; one at a time, p50/p99 (try --sizes 64 --iters 2000)")
    args.psk_arg(pc, "prove to the server that we hold this key (and check that it does)")
    args.security_arg(pc)
    args.spin_arg(pc)
    args.buffer_arg(pc)
    args.where_args(pc)
    args.json_arg(pc)
    pc.set_defaults(run=_client)
    perf.set_defaults(run=run, parser=perf)


#: ``mrc perf`` without a subcommand prints its help (each subcommand runs its own function)
run = args.show_help


def _server(a: argparse.Namespace) -> int:
    from mrc.tools import perf

    psk, ports = args.read_psk(a), args.ports_spec(a.ports)   # what the user gave is checked first
    resolver = args.resolver(a, "mrc perf")
    return perf.server(a.port, once=not a.forever, resolver=resolver,
                       ports=ports, bind=a.bind, max_size=a.max_size, max_qps=a.max_qps,
                       psk=psk, idle_timeout=a.idle_timeout, spin_us=a.spin_us, security=a.security,
                       packets_per_buffer=args.packets_per_buffer(a, resolver))


def _client(a: argparse.Namespace) -> int:
    from mrc.tools import perf

    sizes = a.sizes   # parsed and bounded by size_list_type
    psk, ports = args.read_psk(a), args.ports_spec(a.ports)   # what the user gave is checked first
    resolver = args.resolver(a, "mrc perf")
    k = args.packets_per_buffer(a, resolver)
    if a.latency:
        res = perf.latency(a.server, sizes, a.iters, a.port, progress=not a.json, resolver=resolver, ports=ports,
                           psk=psk, spin_us=a.spin_us, security=a.security, packets_per_buffer=k)
        perf.main_json(res) if a.json else perf.print_latency(res)
        return 0 if all(r["verified"] for r in res) else 1
    res = perf.client(a.server, sizes, a.iters, a.imm, a.verify, a.depth, a.port,
                      progress=sys.stderr.isatty() or not a.json, qps=a.qps, resolver=resolver,
                      ports=ports, psk=psk, spin_us=a.spin_us, security=a.security, packets_per_buffer=k)
    perf.main_json(res) if a.json else perf.print_table(res)
    return 0 if all(r["verified"] is not False for r in res) else 1
