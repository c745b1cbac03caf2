"""Hostile peer: what a process on the peer host can do to an MRC connection
with nothing but the peer's source address (a plain UDP socket to port
4791, no raw socket and no privilege on the wire beyond the kernel's own
routing), in each security mode, on a small fabric. The attacker is given
what it could learn at best: QP numbers, the PSN the receiver expects, the
region's address and rkey.

For each mode (off, auth, encrypt) and each attack, a fresh QP pair h0 -> h1:
  write   a WRITE_ONLY of 64 bytes into the receiver's region at the PSN it
          expects, with the real rkey (from h0's address)
  sack    a SACK to the sender for writes whose receiver is gone, so that
          nothing of them arrived (from h1's address)
  nack    a NACK REMOTE_ACCESS to the sender for its outstanding PSN
  port    a port status saying the receiver has no plane up
Each reports `effects` (completions that changed, QP errors, bytes the
forgery wrote, peer port changes) and `counted` (packets the target
dropped, by reason, while the forgery arrived). Changed or replayed
packets of an on-path attacker are tests/dp/test_security.py's.

    python bench/hostile_peer.py [--json] [--save bench/results]

Needs root.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from mrc import wire
from mrc.fabric import apply, ns
from mrc.fabric.pair import qp_pair
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm

MODES = ("off", "auth", "encrypt")
ATTACKS = ("write", "sack", "nack", "port")
WAIT = 0.3  # seconds the target has to act on a forgery


def udp_from(t: Topology, host: int, to: int) -> tuple[socket.socket, tuple]:
    """A plain UDP socket in ``host``'s namespace with its plane-0 port
    address as source, and where to send to reach host ``to`` on plane 0."""
    def make():
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind((t.port_address(host, 0), 0))
        return s

    return ns.run_in(t.ns(t.host(host)), make), (t.path_address(host, to, 0, 0), wire.UDP_PORT)


def drops(ctx) -> dict:
    return dict(ctx.drops())


def counted(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def attack(t: Topology, mode: str, kind: str) -> dict:
    with qp_pair(t, 0, 1, 1 << 20, security=mode) as p:
        p.qa.post_write(p.ms, 0, 4096, p.remote.addr, p.remote.rkey, wr_id=1)  # a live connection first
        assert p.cq.wait(1, timeout=5)[0].ok, "the pair did not connect"
        effects = {"completions_changed": 0, "qp_errors": 0, "bytes_written": 0, "peer_port_changes": 0}
        if kind == "write":
            sock, to = udp_from(t, 0, 1)
            before = drops(p.cb)
            mark = bytes([0xEE]) * 64
            epsn = p.qb.stats()["epsn"]
            sock.sendto(wire.build(mark, opcode=wire.OP_WRITE_ONLY, dqpn=p.qb.qpn, psn=epsn, va=p.md.addr + 8192,
                                   rkey=p.md.rkey, dma_len=64, flags=wire.BTH_ACKREQ), to)
            time.sleep(WAIT)
            effects["bytes_written"] = 64 if bytes(p.dst[8192:8192 + 64]) == mark else 0
            effects["qp_errors"] = int(p.qb.stats()["state"] == 4)
            got = counted(before, drops(p.cb))
        else:
            # the writes' receiver goes away: nothing of them arrives, nothing real acknowledges them
            qb_qpn = p.qb.qpn
            p.qb.destroy()
            for i in range(4):
                p.qa.post_write(p.ms, 0, 16384, p.remote.addr, p.remote.rkey, wr_id=10 + i)
            time.sleep(0.02)
            st = p.qa.stats()
            sock, to = udp_from(t, 1, 0)
            before = drops(p.ca)
            ids = dict(scid=qb_qpn & 0xFFFF, dcid=p.qa.qpn & 0xFFFF)
            if kind == "sack":
                pkt = wire.build(opcode=wire.OP_SACK, dqpn=p.qa.qpn, cack_psn=(st["next_psn"] - 1) & wire.PSN_MASK,
                                 sack_base_off=2, **ids)
            elif kind == "nack":
                pkt = wire.build(opcode=wire.OP_NACK, dqpn=p.qa.qpn, nack_reason=wire.NACK_REMOTE_ACCESS,
                                 nack_psn=st["una_psn"], **ids)
            else:
                pkt = wire.build(opcode=wire.OP_ENDPOINT_REQUEST, dqpn=p.qa.qpn, ep_op=wire.EP_PORT_STATUS,
                                 port_bitmap=0)
            sock.sendto(pkt, to)
            time.sleep(WAIT / 3)  # before the retransmit budget runs out by itself
            wcs = p.cq.poll()
            effects["completions_changed"] = sum(1 for w in wcs if w.ok) + sum(
                1 for w in wcs if w.status_name == "REM_ACCESS_ERR")
            effects["qp_errors"] = int(any(w.status_name == "REM_ACCESS_ERR" for w in wcs))
            effects["peer_port_changes"] = sum(1 for e in p.ca.async_events() if e.type == "PEER_PORTS")
            got = counted(before, drops(p.ca))
        sock.close()
        return {"effects": effects, "counted": got, "any_effect": any(effects.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("the hostile-peer bench builds a fabric of namespaces: run it as root", file=sys.stderr)
        return 2
    exit_cleanly_on_sigterm()
    t = Topology(planes=2, spines=2, leaves=2, hosts=2, name=f"hp{os.getpid() % 10000}")
    apply.up(t)
    out: dict = {"modes": {}}
    try:
        for mode in MODES:
            out["modes"][mode] = {}
            for kind in ATTACKS:
                r = attack(t, mode, kind)
                out["modes"][mode][kind] = r
                print(f"{mode:8} {kind:6} effects {r['effects']} counted {r['counted']}", file=sys.stderr,
                      flush=True)
    finally:
        apply.down(t.name)
    for mode in MODES:
        out[f"{mode}_attacks_with_effect"] = sum(r["any_effect"] for r in out["modes"][mode].values())
    out["targets"] = {"auth_attacks_with_effect": 0, "encrypt_attacks_with_effect": 0}
    if a.save:
        store.save("hostile_peer", out, a.save)
    print(json.dumps(out, indent=1) if a.json else "\n".join(
        f"{m:8} attacks with an effect: {out[f'{m}_attacks_with_effect']} of {len(ATTACKS)}" for m in MODES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
