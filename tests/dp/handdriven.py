"""One context driven by hand with one QP connected to a peer that exists
only as the packets a test builds: responder and requester behaviour packet
by packet, exactly (protocol.md section 3)."""
from __future__ import annotations

from mrc import wire
from mrc.core import QPAttr
from mrc.manual import ManualContext

PLANES = 4
PEER, DEST_QPN = 0, 77
GUARD = 256


class HandDriven:
    """``ctx``, a QP connected to (PEER, DEST_QPN) with both initial PSNs
    ``psn``, and a remote-writable region ``mr`` of ``size`` bytes between
    guard bytes (``region`` is the whole buffer)."""

    def __init__(self, size: int = 64 * 1024, psn: int = 0, **attr) -> None:
        self.ctx = ManualContext(planes=PLANES)
        base = dict(planes=PLANES, ev_count=8, ack_bytes=1 << 30, timeout=6, linear_cnt=2, exp_cnt=2)
        self.qp = self.ctx.create_qp(QPAttr(**{**base, **attr}))
        self.qp.connect(DEST_QPN, PEER, rq_psn=psn, sq_psn=psn)
        self.psn = psn
        self.region = bytearray(size + 2 * GUARD)
        self.mr = self.ctx.reg_mr(memoryview(self.region)[GUARD:GUARD + size], remote_write=True)
        self.now = 0

    def data(self, psn_off: int, payload: bytes, off: int = 0, opcode: int = wire.OP_WRITE_ONLY,
             dma_len: int | None = None, flags: int = 0, imm: int = 0, rkey: int | None = None,
             msn_rq: int = 0) -> bytes:
        """A data packet for our QP at PSN initial + psn_off, writing ``payload`` at offset ``off``."""
        return wire.build(payload, opcode=opcode, dqpn=self.qp.qpn, psn=(self.psn + psn_off) & wire.PSN_MASK,
                          va=self.mr.addr + off, rkey=self.mr.rkey if rkey is None else rkey,
                          dma_len=len(payload) if dma_len is None else dma_len, flags=flags, imm=imm, msn_rq=msn_rq)

    def sack(self, cack_off: int, flags: int = 0, ev: int = 0, bitmap: int = 0, base_off: int = 2,
             scid: int | None = None, dcid: int | None = None) -> bytes:
        """A SACK from the peer, acknowledging up to initial PSN + cack_off."""
        return wire.build(opcode=wire.OP_SACK, dqpn=self.qp.qpn, cack_psn=(self.psn + cack_off) & wire.PSN_MASK,
                          sack_flags=flags, ev=ev, bitmap=bitmap, sack_base_off=base_off,
                          scid=DEST_QPN & 0xFFFF if scid is None else scid,
                          dcid=self.qp.qpn & 0xFFFF if dcid is None else dcid)

    def nack(self, psn_off: int, reason: int, ev: int = 0) -> bytes:
        return wire.build(opcode=wire.OP_NACK, dqpn=self.qp.qpn, nack_psn=(self.psn + psn_off) & wire.PSN_MASK,
                          nack_reason=reason, ev=ev, scid=DEST_QPN & 0xFFFF, dcid=self.qp.qpn & 0xFFFF)

    def deliver(self, pkt: bytes, ev: int = 0, peer: int = PEER, port: int = 0, **meta) -> int:
        self.now += 1000
        return self.ctx.input(pkt, ev=ev, peer=peer, port=port, now_ns=self.now, **meta)

    def out(self, at: int | None = None) -> list[tuple[dict, dict]]:
        """What the context sends now: (parsed packet, descriptor) pairs."""
        if at is not None:
            self.now = at
        return [(wire.parse(p), d) for p, d in self.ctx.poll_tx(now_ns=self.now)]

    def sacks(self) -> list[tuple[dict, dict]]:
        return [(p, d) for p, d in self.out() if p["opcode"] == wire.OP_SACK]

    def payload(self, off: int, n: int) -> bytes:
        return bytes(self.region[GUARD + off:GUARD + off + n])

    def guards_intact(self) -> bool:
        return self.region[:GUARD] == bytes(GUARD) and self.region[-GUARD:] == bytes(GUARD)
