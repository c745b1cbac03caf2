"""Hostile peer: what a process on the peer host, and a forger on the path,
can do to an MRC connection in each security mode, on a small fabric.

The peer-host attacker has nothing but the peer's source address: a plain
UDP socket to port 4791, no raw socket, no privilege on the wire beyond the
kernel's own routing (a UDP socket may set its traffic class, so it can mark
a packet as trimmed). It is given what it could learn at best: QP numbers,
the PSN the receiver expects, the region's address and rkey. The on-path
forger sits on the leaf port that faces the receiver (a raw AF_PACKET
socket in the switch's namespace): it sees every frame of the connection
there and sends frames of its own.

For each mode (off, auth, encrypt) and each attack, a fresh QP pair h0 -> h1:
  write   peer host: a WRITE_ONLY of 64 bytes into the receiver's region at
          the PSN it expects, with the real rkey (from h0's address)
  sack    peer host: a SACK to the sender for writes whose receiver is gone,
          so that nothing of them arrived (from h1's address)
  nack    peer host: a NACK REMOTE_ACCESS to the sender for its outstanding PSN
  port    peer host: a port status saying the receiver has no plane up
  trim    peer host: a data packet marked trimmed (DSCP 46, headers only) to
          the receiver, which answers a trim with a NACK that makes the
          sender resend and cut its window
  probe   peer host: answers to the sender's probes of a path that is down
          (a leaf-spine link failed), which would put the path back in use
  replay  on path: a captured data frame of the connection, sent again
          after the application reused that part of the region
  tamper  on path: a captured data frame with its payload changed and its
          PSN moved to the one the receiver expects (ICRC and UDP checksum
          made good again, which is all an unsecured packet asks)
Each reports `effects` (completions that changed, QP errors, bytes the
forgery wrote, peer port changes, NACKs it caused, EVs it brought back) and `counted` (packets
the target dropped, by reason, while the forgery arrived).

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
from mrc._dp import lib
from mrc.fabric import apply, ns
from mrc.fabric.pair import qp_pair
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm

MODES = ("off", "auth", "encrypt")
ATTACKS = ("write", "sack", "nack", "port", "trim", "probe", "replay", "tamper")
PROBE_ANSWERS = 3000  # forged probe answers back to back: one arrives soon after each probe goes
ON_PATH = ("replay", "tamper")
WAIT = 0.3  # seconds the target has to act on a forgery
ETH_P_ALL, PACKET_OUTGOING = 0x0003, 4
HDRS = 14 + 40 + 8  # Ethernet, IPv6, UDP: where MRC starts in a frame


def udp_from(t: Topology, host: int, to: int, tclass: int | None = None, spine: int = 0) -> tuple[socket.socket, tuple]:
    """A plain UDP socket in ``host``'s namespace with its plane-0 port
    address as source (and traffic class ``tclass``), and where to send to
    reach host ``to`` on plane 0 (through ``spine``)."""
    def make():
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind((t.port_address(host, 0), 0))
        if tclass is not None:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
        return s

    return ns.run_in(t.ns(t.host(host)), make), (t.path_address(host, to, 0, spine), wire.UDP_PORT)


def tap(t: Topology, host: int) -> socket.socket:
    """A raw socket on the plane-0 leaf port that faces ``host``: every frame
    to and from the host passes it, and what it sends goes to the host."""
    link = t.link(f"{t.host(host)}-{t.leaf(0, t.host_leaf(host))}")

    def make():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((link.b_if, 0))
        s.settimeout(0.05)
        return s

    return ns.run_in(t.ns(link.b_node), make)


def capture_data(sock: socket.socket, dqpn: int, deadline: float) -> bytes:
    """The first data frame to QP ``dqpn`` the switch sends out of this port."""
    while time.monotonic() < deadline:
        try:
            frame, addr = sock.recvfrom(1 << 16)
        except socket.timeout:
            continue
        if (addr[2] == PACKET_OUTGOING and frame[12:14] == b"\x86\xdd" and frame[20] == 17 and len(frame) > HDRS + 12
                and int.from_bytes(frame[56:58], "big") == wire.UDP_PORT
                and lib.mrc_opcode_is_data(frame[HDRS]) and int.from_bytes(frame[HDRS + 5:HDRS + 8], "big") == dqpn):
            return frame
    raise RuntimeError("the on-path tap saw no data frame of the connection")


def reforge(frame: bytes, psn: int, secured: bool) -> bytes:
    """``frame`` with the last 64 bytes of its payload inverted and its PSN
    moved to ``psn``; an unsecured packet gets a good ICRC, a secured one a
    packet number never used (the tag cannot be made good again), and every
    frame a good UDP checksum."""
    f = bytearray(frame)
    f[HDRS + 9:HDRS + 12] = psn.to_bytes(3, "big")
    if secured:  # SECH after the BTH: mode, key id, 2 reserved, packet number (8)
        pn = HDRS + 12 + 4
        f[pn:pn + 8] = (int.from_bytes(f[pn:pn + 8], "big") + (1 << 20)).to_bytes(8, "big")
    end = len(f) - (wire.TAG_LEN if secured else wire.ICRC_LEN)
    f[end - 64:end] = bytes(b ^ 0xFF for b in f[end - 64:end])
    if not secured:
        f[-4:] = wire.crc32c(bytes(f[HDRS:-4])).to_bytes(4, "big")
    src, dst = (socket.inet_ntop(socket.AF_INET6, bytes(f[a:a + 16])) for a in (22, 38))
    f[60:62] = wire.udp6_checksum(src, dst, bytes(f[54:])).to_bytes(2, "big")
    return bytes(f)


def drops(ctx) -> dict:
    return dict(ctx.drops())


def counted(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def no_effects() -> dict:
    return {"completions_changed": 0, "qp_errors": 0, "bytes_written": 0, "peer_port_changes": 0, "nacks_caused": 0,
            "evs_revived": 0}


def to_receiver(t: Topology, p, kind: str, mode: str, frame: bytes | None) -> tuple[dict, dict]:
    """write, trim, replay, tamper: forgeries that reach the receiver's QP."""
    effects = no_effects()
    before, nacks = drops(p.cb), p.qb.stats()["nacks_tx"]
    epsn = p.qb.stats()["epsn"]
    if kind in ON_PATH:
        p.dst[:] = bytes(len(p.dst))  # the application reuses the region: what lands again shows
    region = bytes(p.dst)
    if kind == "write":
        sock, to = udp_from(t, 0, 1)
        sock.sendto(wire.build(bytes([0xEE]) * 64, opcode=wire.OP_WRITE_ONLY, dqpn=p.qb.qpn, psn=epsn,
                               va=p.md.addr + 8192, rkey=p.md.rkey, dma_len=64, flags=wire.BTH_ACKREQ), to)
    elif kind == "trim":  # headers only, as a switch leaves a trimmed packet
        sock, to = udp_from(t, 0, 1, tclass=wire.DSCP_TRIMMED << 2)
        sock.sendto(wire.build(bytes(4096), opcode=wire.OP_WRITE_MIDDLE, dqpn=p.qb.qpn, psn=epsn, va=p.md.addr,
                               rkey=p.md.rkey, dma_len=1 << 20)[:-4 - 4096], to)
    else:
        sock = tap(t, 1)
        sock.send(frame if kind == "replay" else reforge(frame, epsn, mode != "off"))
    time.sleep(WAIT)
    sock.close()
    effects["bytes_written"] = sum(a != b for a, b in zip(region, bytes(p.dst)))
    effects["qp_errors"] = int(p.qb.stats()["state"] == 4)
    effects["nacks_caused"] = p.qb.stats()["nacks_tx"] - nacks
    return effects, counted(before, drops(p.cb))


def to_sender(t: Topology, p, kind: str) -> tuple[dict, dict]:
    """sack, nack, port: forgeries that reach the sender's QP while it has
    writes out that nothing real acknowledges (their receiver is gone)."""
    effects = no_effects()
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
        pkt = wire.build(opcode=wire.OP_ENDPOINT_REQUEST, dqpn=p.qa.qpn, ep_op=wire.EP_PORT_STATUS, port_bitmap=0)
    sock.sendto(pkt, to)
    time.sleep(WAIT / 3)  # before the retransmit budget runs out by itself
    sock.close()
    wcs = p.cq.poll()
    effects["completions_changed"] = sum(1 for w in wcs if w.ok) + sum(
        1 for w in wcs if w.status_name == "REM_ACCESS_ERR")
    effects["qp_errors"] = int(any(w.status_name == "REM_ACCESS_ERR" for w in wcs))
    effects["peer_port_changes"] = sum(1 for e in p.ca.async_events() if e.type == "PEER_PORTS")
    return effects, counted(before, drops(p.ca))


def revive(t: Topology, p) -> tuple[dict, dict]:
    """probe: with a leaf-spine link of plane 0 down, the sender retires the
    EVs through it and probes them (the probes die there); the peer host
    answers those probes as the receiver would (a SACK with the PR flag on
    one of the EVs), as fast as it can. Nothing real can bring the EV back
    while the link is down."""
    effects = no_effects()
    link = f"{t.leaf(0, t.host_leaf(0))}-{t.spine(0, 0)}"
    apply.fail(t.name, link)
    try:
        dead: list[int] = []
        for i in range(20):  # traffic until a loss on the dead link retires its EVs
            p.qa.post_write(p.ms, 0, 1 << 20, p.remote.addr, p.remote.rkey, wr_id=100 + i)
            assert p.cq.wait(1, timeout=10)[0].ok, "a write failed while one link was down"
            dead = [e["ev"] for e in p.qa.evs() if e["state"] == "ASSUMED_BAD" and e["plane"] == 0]
            if dead:
                break
        if not dead:
            raise RuntimeError(f"no EV was retired with {link} down")
        sock, to = udp_from(t, 1, 0, spine=1)  # around the dead link
        before = drops(p.ca)
        cack = (p.qa.stats()["next_psn"] - 1) & wire.PSN_MASK  # nothing out: a SACK that acknowledges no new PSN
        answer = wire.build(opcode=wire.OP_SACK, dqpn=p.qa.qpn, cack_psn=cack, ev=dead[0], sack_flags=wire.SETH_PR,
                            scid=p.qb.qpn & 0xFFFF, dcid=p.qa.qpn & 0xFFFF)
        for _ in range(PROBE_ANSWERS):
            sock.sendto(answer, to)
        time.sleep(WAIT / 3)
        sock.close()
        effects["evs_revived"] = sum(1 for e in p.qa.evs() if e["ev"] == dead[0] and e["state"] == "GOOD")
        got = counted(before, drops(p.ca))
    finally:
        apply.heal(t.name, link)
    return effects, got


def attack(t: Topology, mode: str, kind: str) -> dict:
    with qp_pair(t, 0, 1, 1 << 20, security=mode) as p:
        # a live connection first (long enough to cross the tap on plane 0, for the on-path forger)
        sock = tap(t, 1) if kind in ON_PATH else None
        try:
            p.qa.post_write(p.ms, 0, 65536 if sock else 4096, p.remote.addr, p.remote.rkey, wr_id=1)
            frame = capture_data(sock, p.qb.qpn, time.monotonic() + 5) if sock else None
        finally:
            if sock:
                sock.close()
        assert p.cq.wait(1, timeout=5)[0].ok, "the pair did not connect"
        if kind in ("sack", "nack", "port"):
            effects, got = to_sender(t, p, kind)
        elif kind == "probe":
            effects, got = revive(t, p)
        else:
            effects, got = to_receiver(t, p, kind, mode, frame)
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
