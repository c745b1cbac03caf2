"""Root tests: the stack on a network that `mrc fabric` did not build. Two
hosts, two planes, each plane an ordinary IPv6 router (no SRv6), ports
named eth1 and eth2, a management link between the hosts: all made with
plain `ip` commands and described by a topology file (docs/topology.md).
`mrc perf`, `mrc ctl` and `mrc decode` run over it with that file."""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from tests.integration.conftest import wait_for_line

pytestmark = pytest.mark.root
MRC = [sys.executable, "-m", "mrc"]
PLANES = 2


def ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "-n", ns] if ns else ["ip"]) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"


def sysctl(ns: str, **values) -> None:
    for k, v in values.items():
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{k.replace('__', '.')}={v}"], check=True)


def port_address(host: str, plane: int) -> str:
    return f"fd10:{plane}:{1 if host == 'a' else 2}::{host}"


@pytest.fixture
def plain(tmp_path):
    """Namespaces <p>a and <p>b (hosts) and <p>r0, <p>r1 (one router per
    plane), uniquely named, always removed; yields (ns of a, ns of b, topology file)."""
    p = f"mrcplain{secrets.token_hex(3)}-"
    names = {n: p + n for n in ("a", "b", "r0", "r1")}
    try:
        for n in names.values():
            ip("netns", "add", n)
            sysctl(n, net__ipv6__conf__all__accept_dad=0, net__ipv6__conf__default__accept_dad=0)
            ip("link", "set", "lo", "up", ns=n)
        for plane in range(PLANES):
            r = names[f"r{plane}"]
            sysctl(r, net__ipv6__conf__all__forwarding=1)
            for h, side in (("a", 1), ("b", 2)):
                host_if, router_if = f"eth{plane + 1}", f"to{h}"
                ip("link", "add", host_if, "netns", names[h], "type", "veth", "peer", router_if, "netns", r)
                for ns_, ifn in ((names[h], host_if), (r, router_if)):
                    ip("link", "set", ifn, "mtu", "9000", "up", ns=ns_)
                ip("addr", "add", f"{port_address(h, plane)}/64", "dev", host_if, "nodad", ns=names[h])
                ip("addr", "add", f"fd10:{plane}:{side}::1/64", "dev", router_if, "nodad", ns=r)
                # every other host is reached through the plane's router
                ip("-6", "route", "add", f"fd10:{plane}::/32", "via", f"fd10:{plane}:{side}::1", "dev", host_if,
                   ns=names[h])
        ip("link", "add", "mgmt", "netns", names["a"], "type", "veth", "peer", "mgmt", "netns", names["b"])
        for h in ("a", "b"):
            ip("link", "set", "mgmt", "up", ns=names[h])
            ip("addr", "add", f"fd11::{h}/64", "dev", "mgmt", "nodad", ns=names[h])
        topo = {"name": "plain", "hosts": {
            h: {"mgmt": f"fd11::{h}", "ports": [{"plane": pl, "ifname": f"eth{pl + 1}",
                                                 "address": port_address(h, pl)} for pl in range(PLANES)]}
            for h in ("a", "b")}}
        path = tmp_path / "plain.json"
        path.write_text(json.dumps(topo, indent=1))
        yield names["a"], names["b"], str(path)
    finally:
        for n in names.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert p not in left


def in_ns(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns] + argv


def test_perf_is_verified_over_a_topology_file(plain):
    a, b, topo = plain
    env = {k: v for k, v in os.environ.items() if k not in ("MRC_TOPOLOGY", "MRC_HOST", "MRC_FABRIC")}
    # the server finds which host it is from its own addresses; the client is told
    server = subprocess.Popen(in_ns(b, MRC + ["perf", "server", "--topology", topo]), stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        wait_for_line(server, "waiting on")
        out = subprocess.run(in_ns(a, MRC + ["perf", "client", "b", "--topology", topo, "--host", "a", "--sizes",
                                             "4K,1M", "--iters", "20", "--verify", "--json"]),
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    res = json.loads(out.stdout)
    assert [r["size"] for r in res] == [4096, 1 << 20]
    for r in res:
        assert r["verified"] is True and r["gbps"] > 0
    share = res[-1]["plane_share"]
    assert len(share) == PLANES and all(abs(s - 1 / PLANES) < 0.1 / PLANES for s in share), share


def test_api_ctl_and_decode_over_a_topology_file(plain, monkeypatch):
    """In-process: contexts on both hosts from the file's resolver, set up
    through mrc.cm over the management link; `mrc ctl probe b` answers on
    both planes; a capture at b decodes with both hosts named."""
    from mrc import cm
    from mrc.ctl.endpoint import ControlServer
    from mrc.fabric import ns
    from mrc.paths import TopologyResolver
    from mrc.verbs import Context

    a, b, topo = plain
    ctl_dir = tempfile.mkdtemp(prefix="ctl-plain-", dir="/run/mrc" if os.path.isdir("/run/mrc") else None)
    monkeypatch.setenv("MRC_CTL_DIR", ctl_dir)
    ra, rb = TopologyResolver.from_file(topo, "a"), TopologyResolver.from_file(topo)
    assert rb.host is None  # this process's own namespace owns none of the file's addresses
    cb = ns.run_in(b, lambda: Context(resolver=TopologyResolver.from_file(topo, "b")))
    ca = ns.run_in(a, lambda: Context(resolver=ra))
    pcap = os.path.join(ctl_dir, "b.pcap")
    tcpdump = subprocess.Popen(in_ns(b, ["tcpdump", "-n", "-U", "-i", "any", "-w", pcap, "udp", "port", "4791"]),
                               stderr=subprocess.PIPE, text=True)
    srv = None
    try:
        wait_for_line(tcpdump, "listening on")
        assert [p.ifname for p in ca.ports] == ["eth1", "eth2"]
        lst = ns.run_in(b, lambda: cm.listen("fd11::b", 18600))
        dst = bytearray(1 << 20)
        md = cb.reg_mr(dst, remote_write=True)
        qb = cb.create_qp()
        src = bytearray(os.urandom(1 << 20))
        ms = ca.reg_mr(src)
        qa = ca.create_qp(cq=ca.create_cq())

        def serve():
            conn = lst.accept(timeout=20)
            qb.connect(conn.peer)
            conn.reply(cb.local_info(qb, md))
            conn.close()

        th = threading.Thread(target=serve)
        th.start()
        conn = ns.run_in(a, lambda: cm.connect(cm.setup_address("b", ra), 18600, ca.local_info(qa, ms)))
        th.join(20)
        lst.close()
        qa.connect(conn.peer)
        assert ca.peers()[qa.peer]["host"] == "b"
        assert ca.peers()[qa.peer]["paths"] == {pl: [port_address("b", pl)] for pl in range(PLANES)}
        qa.post_write(ms, 0, len(src), conn.peer.addr, conn.peer.rkey, wr_id=1)
        assert qa.send_cq.wait(1, timeout=30)[0].ok and dst == src
        srv = ControlServer(ca)
        r = subprocess.run(MRC + ["ctl", "--endpoint", srv.path, "--json", "probe", "b"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        probes = json.loads(r.stdout)["probes"]
        assert sorted(p["port"] for p in probes) == list(range(PLANES)) and all(p["status"] == "ok" for p in probes)
    finally:
        if srv:
            srv.close()
        tcpdump.terminate()
        tcpdump.wait(10)
        ca.close()
        cb.close()
    # decode (scapy, the test extra): both hosts named by the topology file
    out = subprocess.run(MRC + ["decode", pcap, "--topology", topo, "--json"], capture_output=True, text=True)
    shutil.rmtree(ctl_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    keys = {q["qp"].split(" qp ")[0] for q in d["qps"]}
    assert {"a->b", "b->a"} <= keys and d["malformed"] == 0 and d["icrc_failures"] == 0
