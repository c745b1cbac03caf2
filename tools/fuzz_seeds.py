"""Seed corpus for the libFuzzer harnesses (csrc/fuzz), recorded from the
in-memory link: the same four writes the requester harness posts, sent
from one context to another over a clean link, a lossy reordering one that
trims and duplicates, a link where a plane goes down, and a WRITE_IMM that
finds no receive. The packets each side received become records in the
harnesses' format (csrc/fuzz/fuzz.h). The setup harness starts from the
messages of the connection-setup exchange (mrc.cm) and a topology file.

    python tools/fuzz_seeds.py OUT_DIR     # writes OUT_DIR/{parse,responder,requester,setup,secured,buffers}/*
"""
from __future__ import annotations

import json
import os
import struct
import sys

from mrc import wire
from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim

PLANES = 4
LENS = [8192, 8192, 1, 15000]          # as csrc/fuzz/fuzz_requester.c posts them
IMM = [False, True, False, False]
FIX_ICRC, PATCH_QP, PATCH_KEY, PATCH_VA, CE, TRIM = 1, 2, 4, 8, 16, 32
C = wire.CONSTANTS


def scenario(name: str, recv: bool = True, **link) -> list[dict]:
    """Run the four writes from a (endpoint 0) to b (endpoint 1); return what
    the link delivered, with each data packet's address made relative to b's
    region (the harness adds its own region's address back)."""
    sim = Sim(planes=PLANES, per_plane=2, seed=7)
    a, b = ManualContext(planes=PLANES, seed=3), ManualContext(planes=PLANES, seed=4)
    ia, ib = sim.index(a), sim.index(b)
    attr = QPAttr(planes=PLANES, ev_count=8, timeout=6, linear_cnt=2, exp_cnt=3)
    qa, qb = a.create_qp(attr), b.create_qp(QPAttr(planes=PLANES, ev_count=8, rq_depth=64))
    qa.connect(qb.qpn, ib, rq_psn=0, sq_psn=0)
    qb.connect(qa.qpn, ia, rq_psn=0, sq_psn=0)
    src = bytearray(os.urandom(32 << 10))
    dst = bytearray(64 << 10)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    if recv:
        qb.post_recv(list(range(16)))
    if link:
        sim.set_all(**{k: v for k, v in link.items() if k != "down_plane"})
    if "down_plane" in link:
        for i in range(sim.per_plane):
            sim.set_path(sim.path(link["down_plane"], i), down_from_ns=0, down_until_ns=2_000_000)
    sim.record()
    off = 0
    for i, n in enumerate(LENS):
        qa.post_write(ms, off % len(src), n, md.addr + off, md.rkey, wr_id=i, imm=i if IMM[i] else None)
        off += n
    done: list = []
    try:
        sim.run_until(lambda: b.poll_cq() and False or done.extend(a.poll_cq()) or len(done) >= len(LENS),
                      budget_ns=200_000_000)
    except TimeoutError:
        pass  # what was delivered until then is still a good seed
    if not recv:  # the receive arrives late: the NACKed WRITE_IMM goes through on a retry
        qb.post_recv([0])
        sim.run(sim.now + 5_000_000)
    out = []
    for r in sim.recorded():
        pkt = bytearray(r["packet"])
        if r["dst"] == ib and wire.OPCODE_NAMES.get(pkt[0], "").startswith("WRITE") and not r["trimmed"]:
            at = C["BTH_LEN"] + C["METH_LEN"] + (C["TSETH_LEN"] if pkt[8] & C["BTH_TS"] else 0)
            va = struct.unpack_from(">Q", pkt, at)[0]
            struct.pack_into(">Q", pkt, at, (va - md.addr) & (2**64 - 1))
        out.append({**r, "packet": bytes(pkt), "to_responder": r["dst"] == ib})
    sim.close()
    print(f"  {name}: {sum(x['to_responder'] for x in out)} packets to the responder, "
          f"{sum(not x['to_responder'] for x in out)} to the requester, {len(done)} writes completed",
          file=sys.stderr)
    return out


def records(pkts: list[dict], flags: int, aux: int = 0) -> bytes:
    out = bytearray()
    for p in pkts[:512]:
        f = flags | (CE if p["ecn_ce"] else 0) | (TRIM if p["trimmed"] else 0)
        out += struct.pack("<BBIH", f, p["port"] | aux << 4, p["ev"], len(p["packet"])) + p["packet"]
    return bytes(out)


def setup_messages() -> dict[str, str]:
    """The exchange's messages as mrc.cm writes them, and a topology file."""
    from mrc import cm
    from mrc.paths import TopologyResolver
    from mrc.verbs import RemoteInfo

    info = RemoteInfo(qpn=0x123456, ports={0: "fc00:0:b000::", 3: "fc00:0:b300::"}, psn=77,
                      paths={0: ["fc00:0:1000:2000:1001:b001::"]}, addr=1 << 40, rkey=0xDEADBEEF, length=4096,
                      topology="lab", host="h0")
    hello = {"info": cm.info_to_json(info), "params": {"max_size": 1 << 20, "imm": True,
                                                       "echo": {"addr": 4096, "rkey": 9}}}
    topo = {"name": "lab", "hosts": {"h0": {"mgmt": "fd00::1", "ports": [{"plane": 0, "ifname": "p0",
                                                                          "address": "fc00:0:b000::"}]}},
            "paths": [{"src": "h0", "dst": "h0", "plane": 0, "addresses": ["fc00::1"]}]}
    assert TopologyResolver(topo).hosts() == ["h0"]
    return {"greeting": json.dumps({"mrc": cm.PROTOCOL, "challenge": "ab" * 32, "auth": True}),
            "hello": json.dumps({**hello, "auth": "00" * 32}), "answer": json.dumps({"info": hello["info"]}),
            "refusal": json.dumps({"error": "no \u00e9 \ud83d\ude00", "errno": 13}), "topology": json.dumps(topo)}


def buffer_frame(pkts: list[bytes], flags: int = 3, gso_size: int | None = None) -> bytes:
    """A seed for fuzz_buffers: flags, gso_size, gso_type (UDP_L4), then a frame whose segments are the
    packets (all as long as the first but the last): Ethernet, IPv6 and UDP headers, as the buffer socket
    takes it (the harness writes the port's and the peer's addresses). ``gso_size``: a header that lies
    about where the segments end (default: the truth)."""
    seg = len(pkts[0])
    body = b"".join(pkts)
    ip = struct.pack("!IHBB16s16s", 6 << 28, 8 + len(body), 17, 64, bytes(16), bytes(16))
    udp = struct.pack("!HHHH", 49152, wire.UDP_PORT, 8 + seg, 0)
    eth = bytes(12) + b"\x86\xdd"
    return struct.pack("<BHB", flags, seg if gso_size is None else gso_size, 5) + eth + ip + udp + body


def empty_datagram(pad: int = 16) -> bytes:
    """A seed for fuzz_buffers: a frame that is no buffer (gso_type 0) whose UDP datagram is empty,
    padding after it: counted one packet and refused by the core, never uncounted."""
    ip = struct.pack("!IHBB16s16s", 6 << 28, 8, 17, 64, bytes(16), bytes(16))
    udp = struct.pack("!HHHH", 49152, wire.UDP_PORT, 8, 0)
    return struct.pack("<BHB", 1, 0, 0) + bytes(12) + b"\x86\xdd" + ip + udp + bytes(pad)


def main(out_dir: str) -> int:
    runs = {"clean": scenario("clean"),
            "lossy": scenario("lossy", loss_ppm=80_000, jitter_ns=20_000, dup_ppm=30_000, trim_ppm=40_000),
            "ecn": scenario("ecn", rate_bps=2_000_000_000, ecn_queue_bytes=8_000, trim_queue_bytes=30_000),
            "plane_down": scenario("plane_down", down_plane=1),
            "no_receive": scenario("no_receive", recv=False)}
    for h in ("parse", "responder", "requester", "setup", "secured", "buffers"):
        os.makedirs(os.path.join(out_dir, h), exist_ok=True)
    for name, msg in setup_messages().items():
        with open(os.path.join(out_dir, "setup", name), "w") as f:
            f.write(msg)
    with open(os.path.join(out_dir, "buffers", "empty-datagram"), "wb") as f:
        f.write(empty_datagram())
    n = 0
    for name, pkts in runs.items():
        resp = [p for p in pkts if p["to_responder"]]
        req = [p for p in pkts if not p["to_responder"]]
        with open(os.path.join(out_dir, "responder", name), "wb") as f:
            f.write(records(resp, FIX_ICRC | PATCH_QP | PATCH_KEY | PATCH_VA))
        for first in (0, 1):  # AUTH, ENCRYPT: every record sealed by the harness (aux bit 1)
            with open(os.path.join(out_dir, "secured", f"{name}-{first}"), "wb") as f:
                f.write(bytes([first]) + records(resp, FIX_ICRC | PATCH_QP | PATCH_KEY | PATCH_VA, aux=2))
        with open(os.path.join(out_dir, "requester", name), "wb") as f:
            f.write(records(req, FIX_ICRC | PATCH_QP))
        full = max((len(p["packet"]) for p in resp), default=0)
        data = [p["packet"] for p in resp if len(p["packet"]) == full]
        if data:  # a buffer of the full-size packets, and the same with a short last one
            with open(os.path.join(out_dir, "buffers", name), "wb") as f:
                f.write(buffer_frame(data[:7]))
            with open(os.path.join(out_dir, "buffers", f"{name}-short"), "wb") as f:
                f.write(buffer_frame(data[:3] + [min((p["packet"] for p in resp), key=len)]))
            # headers that lie: a size that does not divide the buffer, 0, more than the buffer
            for lie, size in (("odd", len(data[0]) - 1), ("zero", 0), ("huge", 0xFFFF)):
                with open(os.path.join(out_dir, "buffers", f"{name}-{lie}"), "wb") as f:
                    f.write(buffer_frame(data[:7], gso_size=size))
        seen = set()
        for p in pkts:
            key = (p["packet"][0], p["trimmed"])
            if key in seen:
                continue
            seen.add(key)
            with open(os.path.join(out_dir, "parse", f"{name}-{n}"), "wb") as f:
                f.write(bytes([int(p["trimmed"])]) + p["packet"])
            n += 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
