"""The kernel's transports over the same fabric, as baselines for MRC: one
TCP stream over one plane, or MPTCP with one subflow per plane, between two
fabric hosts' kernel addresses (encap.red + End.DT6 through the same uSID
switches; docs/fabric.md; on a kernel without SRv6 the same in tc BPF,
mrc.fabric.srv6bpf)."""

from __future__ import annotations

import os
import socket
import threading
import time

from mrc.fabric import ns
from mrc.fabric.topology import Topology

IPPROTO_MPTCP = 262
MPTCP_MAX_SUBFLOWS = 8  # the kernel's limit on subflows and accepted addresses


def mptcp_setup(t: Topology, h: int) -> None:
    """Let host ``h`` carry MPTCP over every plane, in both directions: it announces its other
    planes' kernel addresses (``signal`` endpoints), so whichever side connects opens one subflow
    to each address the other announces, from its own address on that plane (the plane's route
    names it as the source). Each subflow then stays on one plane both ways; with only ``subflow``
    endpoints on the connecting side, every subflow ended at the peer's plane-0 address and its
    return traffic all left through plane 0."""
    node = t.ns(t.host(h))
    n = min(t.planes, MPTCP_MAX_SUBFLOWS)
    ns.command(node, ["ip", "mptcp", "limits", "set", "subflow", str(n), "add_addr_accepted", str(n)], check=True)
    for p in range(1, t.planes):
        ns.command(node, ["ip", "mptcp", "endpoint", "add", t.inner_address(h, p), "signal"], check=True)


def plane_bytes(t: Topology, h: int) -> dict[int, tuple[int, int]]:
    """Host ``h``'s bytes sent and received on each plane's port: (tx, rx) by plane, to show which
    planes a transfer used (:func:`planes_used`)."""
    import json

    r = ns.command(t.ns(t.host(h)), ["ip", "-j", "-s", "link", "show"], capture_output=True, text=True, check=True)
    links = {x["ifname"]: x["stats64"] for x in json.loads(r.stdout)}
    return {p: (links[t.port_ifname(p)]["tx"]["bytes"], links[t.port_ifname(p)]["rx"]["bytes"])
            for p in range(t.planes)}


def stream_gbps(t: Topology, src: int, dst: int, seconds: float, plane: int = 0, proto: int = 0,
                port: int = 5201, clock=None, readings: dict | None = None, region: int = 0) -> float:
    """One stream from ``src`` to ``dst`` (TCP, or MPTCP with
    ``proto=IPPROTO_MPTCP``) to the receiver's kernel address on ``plane``,
    for ``seconds``; returns the receiver's goodput in Gb/s. The sender
    writes 1 MiB chunks and the receiver reads into a 1 MiB buffer, both
    the same one every time (in cache), or with ``region`` (bytes) walks a
    region of that size each, as an application moving a large buffer (and
    MRC's benches) does. With ``clock``
    (a function that reads the calling thread's CPU time), ``readings`` gets
    each side's, taken in its own thread as the stream starts and ends:
    ``readings["receiver"]`` and ``readings["sender"]`` = (start, end)."""
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", port))
    srv.listen(1)
    got = [0, 0.0]

    def serve():
        c, _ = srv.accept()
        t0 = time.perf_counter()
        c0 = clock() if clock else None
        n = 0
        buf = memoryview(bytearray(max(region, 1 << 20)))
        off = 0
        while True:
            k = c.recv_into(buf[off:off + (1 << 20)])
            if not k:
                break
            n += k
            off = off + k if off + k + (1 << 20) <= len(buf) else 0
        got[0], got[1] = n, time.perf_counter() - t0
        if clock:
            readings["receiver"], readings["bytes"] = (c0, clock()), n
        c.close()

    th = threading.Thread(target=serve)
    th.start()
    cli = ns.run_in(t.ns(t.host(src)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    try:
        cli.connect((t.inner_address(dst, plane), port))
        data = memoryview(bytearray(os.urandom(1 << 20)) * max(1, region >> 20))
        c0 = clock() if clock else None
        end, off = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            cli.sendall(data[off:off + (1 << 20)])
            off = off + (1 << 20) if off + (2 << 20) <= len(data) else 0
        if clock:
            readings["sender"] = (c0, clock())
    finally:
        cli.close()
        th.join(30)
        srv.close()
    return got[0] * 8 / got[1] / 1e9 if got[1] else 0.0


#: the interfaces that show OpenMPI a host's per-plane kernel addresses (MPI_PORT + plane)
MPI_PORT = "mpi"


def mpi_ports(t: Topology, up: bool = True) -> None:
    """Give (or, ``up=False``, take back from) every host one interface per plane
    carrying that plane's kernel address, so that OpenMPI's TCP BTL, which picks
    addresses by interface name (``btl_tcp_if_include mpi0`` for one plane,
    ``mpi0,...,mpi7`` for every plane), can use them; the kernel addresses stay on
    lo as well, and the routes and source rules that carry them across the
    fabric do not change. Each is one end of a veth pair inside the host (this
    machine's kernel may lack dummy interfaces)."""
    for h in range(t.hosts):
        node = t.ns(t.host(h))
        for p in range(t.planes):
            name = f"{MPI_PORT}{p}"
            if not up:
                ns.command(node, ["ip", "link", "del", name])
                continue
            ns.command(node, ["ip", "link", "add", name, "type", "veth", "peer", "name", f"{MPI_PORT}x{p}"],
                       check=True)
            for dev in (name, f"{MPI_PORT}x{p}"):
                ns.command(node, ["ip", "link", "set", dev, "up"], check=True)
            ns.command(node, ["ip", "addr", "add", f"{t.inner_address(h, p)}/128", "dev", name, "nodad"],
                       check=True)


def mptcp_teardown(t: Topology, h: int) -> None:
    """Undo :func:`mptcp_setup`."""
    node = t.ns(t.host(h))
    ns.command(node, ["ip", "mptcp", "endpoint", "flush"])
    ns.command(node, ["ip", "mptcp", "limits", "set", "subflow", "0", "add_addr_accepted", "0"])


def planes_used(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]],
                share: float = 0.02) -> list[int]:
    """The planes that sent at least ``share`` of the bytes between two :func:`plane_bytes` readings."""
    sent = {p: after[p][0] - before[p][0] for p in after}
    total = sum(sent.values()) or 1
    return [p for p, b in sorted(sent.items()) if b >= share * total]


#: OpenMPI 4.1's collective algorithms by number (``coll_tuned_<name>_algorithm``; 0: its own rules)
MPI_ALGORITHMS = {"all_reduce": {0: "OpenMPI's rules", 3: "recursive doubling", 4: "ring", 6: "Rabenseifner"},
                  "all_to_all": {0: "OpenMPI's rules", 1: "linear", 2: "pairwise", 3: "modified Bruck"}}
MPI_COLL_NAME = {"all_reduce": "allreduce", "all_to_all": "alltoall"}
#: ob1 for striping a message over every plane's interface: by default it splits a message over at
#: most 4 of them (max_rdma_per_request) with 4 fragments in flight (recv_pipeline_depth)
MPI_STRIPE_OB1 = {"pml_ob1_max_rdma_per_request": 8, "pml_ob1_recv_pipeline_depth": 16}


def mpi_tuning_mca(algorithms: dict[str, int], ob1: dict | None = None) -> list[str]:
    """mpirun's ``--mca`` options for a collective algorithm per collective (0 leaves it to OpenMPI)
    and ob1 parameters.

    >>> mpi_tuning_mca({"all_reduce": 4, "all_to_all": 0}, {"pml_ob1_max_rdma_per_request": 8})[:6]
    ['--mca', 'coll_tuned_use_dynamic_rules', '1', '--mca', 'coll_tuned_allreduce_algorithm', '4']
    """
    out: list[str] = []
    chosen = {c: a for c, a in algorithms.items() if a}
    if chosen:
        out += ["--mca", "coll_tuned_use_dynamic_rules", "1"]
        for coll, alg in chosen.items():
            if alg not in MPI_ALGORITHMS[coll]:
                raise ValueError(f"unknown {coll} algorithm {alg}: use one of {sorted(MPI_ALGORITHMS[coll])}")
            out += ["--mca", f"coll_tuned_{MPI_COLL_NAME[coll]}_algorithm", str(alg)]
    for k, v in (ob1 or {}).items():
        out += ["--mca", k, str(v)]
    return out


def mpirun_argv(t: Topology, agent: str, hostfile: str, planes: list[int], program: list[str],
                mptcp: bool = False, mca: list[str] | None = None) -> list[str]:
    """mpirun (run inside the first host's namespace) for one rank per host over
    OpenMPI's TCP BTL on the kernel addresses of ``planes``; its daemons start
    through ``agent`` (a script that runs a command in a host's namespace) and talk
    over the management network's IPv6 addresses, each straight to mpirun
    (``routed direct``: the default tree routing lost its way between daemons in
    namespaces; the network's IPv4 addresses, there for perftest's exchange, are
    left out). ``mptcp``:
    the ranks' sockets become MPTCP (Debian's mptcpize), whose subflows take the
    other planes. ``mca``: further options (:func:`mpi_tuning_mca`)."""
    wrap = ["mptcpize", "run"] if mptcp else []
    return ["mpirun", "--hostfile", hostfile, "-np", str(t.hosts), "--mca", "plm_rsh_agent", agent,
            "--mca", "oob_tcp_if_include", "mgmt", "--mca", "oob_tcp_disable_ipv4_family", "1",
            "--mca", "routed", "direct", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", ",".join(f"{MPI_PORT}{p}" for p in planes),
            "--mca", "orte_base_help_aggregate", "0", *(mca or []), *wrap, *program]
