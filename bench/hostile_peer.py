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
  rekey   on path: the sender's frames across two reconnects that install
          the same keys again (conn.keys() gives them twice); a (key id,
          packet number) seen twice under one key is a reused GCM nonce,
          which gives away the hash key. Then a frame from before the last
          reconnect is sent again into the region the application reused
  relay   management network: a relay without the key between a client and
          a listener of connection setup (bench/setup_relay.py) reads what
          passes and flips, replays, drops, swaps or injects each message
          after the handshake, both ways (on loopback)
  moved   on path: with a leaf-spine link of plane 0 down, the sender's
          probes of the dead path are taken at its leaf port and delivered
          to the receiver on plane 1, which is alive, so that their answers
          would bring the dead EVs back
  ftrim   on path: a captured data frame cut to its headers, marked
          trimmed and moved to the PSN the receiver expects, so that its
          NACK would make the sender resend
Each reports `effects` (completions that changed, QP errors, bytes the
forgery wrote, peer port changes, NACKs it caused, EVs it brought back, nonces
reused, secrets read and changes taken on the setup channel) and `counted` (packets
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

from mrc._dp import lib

from mrc import wire
from mrc.fabric import apply, ns
from mrc.fabric.pair import qp_pair
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm

MODES = ("off", "auth", "encrypt")
ATTACKS = ("write", "sack", "nack", "port", "trim", "probe", "replay", "tamper", "rekey", "relay", "moved",
           "ftrim")
PROBE_ANSWERS = 3000  # forged probe answers back to back: one arrives soon after each probe goes
ON_PATH = ("replay", "tamper", "ftrim")
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


def tap(t: Topology, host: int, plane: int = 0) -> socket.socket:
    """A raw socket on the ``plane`` leaf port that faces ``host``: every frame
    to and from the host passes it, and what it sends goes to the host."""
    link = t.link(f"{t.host(host)}-{t.leaf(plane, t.host_leaf(host))}")

    def make():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((link.b_if, 0))
        s.settimeout(0.05)
        return s

    return ns.run_in(t.ns(link.b_node), make)


def _mrc_to(frame: bytes, dqpn: int) -> bool:
    return (frame[12:14] == b"\x86\xdd" and frame[20] == 17 and len(frame) > HDRS + 12
            and int.from_bytes(frame[56:58], "big") == wire.UDP_PORT
            and int.from_bytes(frame[HDRS + 5:HDRS + 8], "big") == dqpn)


def capture_all(sock: socket.socket, dqpn: int, seconds: float, out: bool = True, opcode=None) -> list[bytes]:
    """Frames to QP ``dqpn`` that this port sends out (``out``) or takes in,
    for ``seconds`` (of ``opcode`` only, when given: else data frames)."""
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            frame, addr = sock.recvfrom(1 << 16)
        except TimeoutError:
            continue
        if (addr[2] == PACKET_OUTGOING) == out and _mrc_to(frame, dqpn) and (
                frame[HDRS] == opcode if opcode is not None else lib.mrc_opcode_is_data(frame[HDRS])):
            got.append(frame)
    return got


def capture_data(sock: socket.socket, dqpn: int, deadline: float) -> bytes:
    """The first data frame to QP ``dqpn`` the switch sends out of this port."""
    while time.monotonic() < deadline:
        got = capture_all(sock, dqpn, 0.1)
        if got:
            return got[0]
    raise RuntimeError("the on-path tap saw no data frame of the connection")


def fix_udp(f: bytearray) -> bytes:
    """The IPv6 payload length and the UDP length and checksum of frame f made good again."""
    f[18:20] = (len(f) - 14 - 40).to_bytes(2, "big")
    f[58:60] = (len(f) - 14 - 40).to_bytes(2, "big")
    f[60:62] = b"\0\0"
    src, dst = (socket.inet_ntop(socket.AF_INET6, bytes(f[a:a + 16])) for a in (22, 38))
    f[60:62] = wire.udp6_checksum(src, dst, bytes(f[54:])).to_bytes(2, "big")
    return bytes(f)


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
    elif kind == "ftrim":  # headers only, marked trimmed (DSCP 46), at the PSN the receiver expects
        sock = tap(t, 1)
        f = bytearray(frame[:HDRS + lib.mrc_pkt_hdr_len(frame[HDRS:], len(frame) - HDRS)])
        f[HDRS + 9:HDRS + 12] = epsn.to_bytes(3, "big")
        if mode != "off":  # a packet number never used (a seen one is only a replay)
            pn = HDRS + 12 + 4
            f[pn:pn + 8] = (int.from_bytes(f[pn:pn + 8], "big") + (1 << 20)).to_bytes(8, "big")
        tc = wire.DSCP_TRIMMED << 2
        f[14] = (f[14] & 0xF0) | (tc >> 4)
        f[15] = (f[15] & 0x0F) | ((tc & 0x0F) << 4)
        sock.send(fix_udp(f))
    else:
        sock = tap(t, 1)
        sock.send(frame if kind == "replay" else reforge(frame, epsn, mode != "off"))
    time.sleep(WAIT)
    sock.close()
    effects["bytes_written"] = sum(a != b for a, b in zip(region, bytes(p.dst), strict=True))
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


def _copy(keys):
    """A copy of a ``struct mrc_qp_keys`` (installing one wipes it)."""
    from mrc._dp import ffi

    out = ffi.new("struct mrc_qp_keys *")
    ffi.memmove(out, keys, ffi.sizeof(out[0]))
    return out


def _reconnect(p, keys) -> None:
    """ERROR, RESET and connect again both ways (the receiver first), under ``keys`` (copies: connect wipes them)."""

    for qp in (p.qa, p.qb):
        qp.modify(lib.MRC_QPS_ERROR)
    time.sleep(0.05)
    p.cq.poll()
    for qp in (p.qa, p.qb):
        qp.modify(lib.MRC_QPS_RESET)
    ka, kb = (None, None) if keys is None else [_copy(k) for k in keys]
    p.qb.connect(p.ca.local_info(p.qa, p.ms), kb)
    p.qa.connect(p.cb.local_info(p.qb, p.md), ka)


def rekey(t: Topology, p, mode: str) -> tuple[dict, dict]:
    """rekey: two reconnects under the same keys, the sender's frames captured across both."""
    from mrc import secure

    effects = no_effects()
    effects["nonces_reused"] = 0
    keys = None
    if mode != "off":
        keys = secure.pair_keys(p.qa.qpn, p.qb.qpn, mode)
    sock = tap(t, 1)
    phases = []
    try:
        for _ in range(2):
            _reconnect(p, keys)
            p.qa.post_write(p.ms, 0, 65536, p.remote.addr, p.remote.rkey, wr_id=7)
            phases.append(capture_all(sock, p.qb.qpn, 0.5))
            assert p.cq.wait(1, timeout=5)[0].ok, "the pair did not reconnect"
        seen = [{(f[HDRS + 13], f[HDRS + 16:HDRS + 24]) for f in ph} for ph in phases] if mode != "off" else [set()]
        effects["nonces_reused"] = len(seen[0] & seen[-1])
        before = drops(p.cb)
        p.dst[:] = bytes(len(p.dst))
        sock.send(phases[0][0])  # from before the last reconnect
        time.sleep(WAIT)
        effects["bytes_written"] = sum(1 for b in bytes(p.dst) if b)
    finally:
        sock.close()
    return effects, counted(before, drops(p.cb))


def moved(t: Topology, p) -> tuple[dict, dict]:
    """moved: with a leaf-spine link of plane 0 down, the sender's probes of the dead EVs are taken at
    its plane-0 leaf port and delivered to the receiver on plane 1 (the Ethernet header, source and
    final destination of a real plane-1 frame of the connection, the UDP checksum made good)."""
    effects = no_effects()
    link = f"{t.leaf(0, t.host_leaf(0))}-{t.spine(0, 0)}"
    src, dst1 = tap(t, 0), tap(t, 1, plane=1)
    apply.fail(t.name, link)
    try:
        dead: list[int] = []
        template = None
        for i in range(20):  # traffic until a loss on the dead link retires its EVs
            p.qa.post_write(p.ms, 0, 1 << 20, p.remote.addr, p.remote.rkey, wr_id=100 + i)
            template = template or next(iter(capture_all(dst1, p.qb.qpn, 0.2)), None)
            assert p.cq.wait(1, timeout=10)[0].ok, "a write failed while one link was down"
            dead = [e["ev"] for e in p.qa.evs() if e["state"] == "ASSUMED_BAD" and e["plane"] == 0]
            if dead and template:
                break
        if not dead or template is None:
            raise RuntimeError(f"no EV was retired with {link} down, or no plane-1 frame was seen")
        before = drops(p.cb)
        p.ca.ev_events()  # what came before the forgery
        probes, deadline = 0, time.monotonic() + 1.0
        while time.monotonic() < deadline:  # each probe moved the moment it passes, as a forger on the path would
            try:
                pr, addr = src.recvfrom(1 << 16)
            except TimeoutError:
                continue
            if addr[2] == PACKET_OUTGOING or not _mrc_to(pr, p.qb.qpn) or pr[HDRS] != wire.OP_RELIABILITY_PROBE:
                continue
            f = bytearray(template[:14] + pr[14:])  # the sender's plane-1 address and the receiver's
            f[22:54] = template[22:54]
            dst1.send(fix_udp(f))
            probes += 1
        time.sleep(WAIT)
        # each time a dead EV came back while the link was down (it may be retired again by a loss since)
        effects["evs_revived"] = sum(1 for e in p.ca.ev_events() if e["ev"] in dead and e["new"] == "GOOD")
        got = counted(before, drops(p.cb))
        got["probes_moved"] = probes
    finally:
        apply.heal(t.name, link)
        src.close()
        dst1.close()
    return effects, got


def forgery_cost(rounds: int = 7, n: int = 3000) -> dict:
    """What a forged packet costs the receiver when it names the current key
    id and when it names the next one (which used to cost a key derivation
    and a new cipher context each time): ``n`` forgeries of each, in
    alternated rounds, in one process (no fabric); each round's ratio of
    the next id's time over the current id's, the median and range."""
    from mrc import secure
    from mrc.core import QPAttr
    from mrc.manual import ManualContext
    from mrc.units import median_spread

    a, b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
    qa, qb = a.create_qp(QPAttr(planes=2, ev_count=8)), b.create_qp(QPAttr(planes=2, ev_count=8))
    ka, kb = secure.pair_keys(qa.qpn, qb.qpn, "auth")
    qa.set_keys(ka)
    qb.set_keys(kb)
    qa.connect(qb.qpn, 0, rq_psn=qb.sq_psn)
    qb.connect(qa.qpn, 0, rq_psn=qa.sq_psn)
    src, dst = bytearray(1024), bytearray(1024)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    qa.post_write(ms, 0, 1024, md.addr, md.rkey, wr_id=1)
    ((pkt, meta),) = a.poll_tx(now_ns=1000)
    port = wire.ev_plane(meta["ev"])
    forged = {}
    for name, kid in (("current", pkt[13]), ("next", pkt[13] + 1)):
        f = bytearray(pkt)
        f[13], f[-1] = kid, f[-1] ^ 1
        forged[name] = bytes(f)
    times: dict[str, list[float]] = {"current": [], "next": []}
    for r in range(rounds):
        for name in (("current", "next") if r % 2 == 0 else ("next", "current")):
            f, t0 = forged[name], time.perf_counter()
            for _ in range(n):
                b.input(f, port=port, now_ns=2000)
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    ratio, spread = median_spread([x / y for x, y in zip(times["next"], times["current"], strict=True)])
    out = {"n": n, "rounds": rounds, "us_current": median_spread(times["current"])[0],
           "us_next": median_spread(times["next"])[0], "next_over_current": ratio,
           "next_over_current_spread": spread, "refused": b.drops()["auth"]}
    a.close()
    b.close()
    return out


def attack(t: Topology, mode: str, kind: str) -> dict:
    if kind == "relay":
        import setup_relay  # bench/, beside this file

        effects, got = setup_relay.attack(None if mode == "off" else b"k" * 32)
        return {"effects": effects, "counted": got, "any_effect": any(effects.values())}
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
        elif kind == "rekey":
            effects, got = rekey(t, p, mode)
        elif kind == "moved":
            effects, got = moved(t, p)
        else:
            effects, got = to_receiver(t, p, kind, mode, frame)
        return {"effects": effects, "counted": got, "any_effect": any(effects.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    ap.add_argument("--only", metavar="A,B", help=f"only these attacks (of {','.join(ATTACKS)})")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    attacks = ATTACKS if not a.only else tuple(x for x in ATTACKS if x in a.only.split(","))
    if a.only and len(attacks) != len(set(a.only.split(","))):
        ap.error(f"--only takes attacks of {','.join(ATTACKS)}")
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
            for kind in attacks:
                r = attack(t, mode, kind)
                out["modes"][mode][kind] = r
                print(f"{mode:8} {kind:6} effects {r['effects']} counted {r['counted']}", file=sys.stderr,
                      flush=True)
    finally:
        apply.down(t.name)
    for mode in MODES:
        out[f"{mode}_attacks_with_effect"] = sum(r["any_effect"] for r in out["modes"][mode].values())
    out["forgery_cost"] = forgery_cost()
    print(f"forgery cost, next key id over current: {out['forgery_cost']['next_over_current']}", file=sys.stderr)
    out["targets"] = {"auth_attacks_with_effect": 0, "encrypt_attacks_with_effect": 0,
                      "forgery_next_over_current": 1.1}
    if a.save:
        store.save("hostile_peer", out, a.save)
    print(json.dumps(out, indent=1) if a.json else "\n".join(
        f"{m:8} attacks with an effect: {out[f'{m}_attacks_with_effect']} of {len(attacks)}" for m in MODES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
