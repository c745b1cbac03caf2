"""The scapy layers against the C wire format, both ways, for every packet type;
`mrc decode` on a pcap with known contents; the Lua dissector on the same
bytes (when tshark is installed); scapy stays out of the core package."""
import os
import shutil
import subprocess
import sys

import pytest

scapy = pytest.importorskip("scapy")
from scapy.layers.inet import UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.utils import wrpcap  # noqa: E402

from mrc import dissect as d  # noqa: E402
from mrc import paths, wire  # noqa: E402
from mrc.fabric.resolver import resolver  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402
from mrc.tools import decode  # noqa: E402

SMALL = Topology(planes=2, spines=2, leaves=2, hosts=2)

LUA = "tools/mrc.lua"

DATA = [wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE, wire.OP_WRITE_LAST, wire.OP_WRITE_LAST_IMM, wire.OP_WRITE_ONLY,
        wire.OP_WRITE_ONLY_IMM]


def c_packets():
    """(name, C fields, payload) for every opcode, with distinctive values."""
    out = []
    for i, op in enumerate(DATA):
        for ts in (0, wire.BTH_TS):
            f = dict(opcode=op, dqpn=0x123456 - i, psn=0xFFFFF0 + i, flags=wire.BTH_ACKREQ | wire.BTH_RTX | ts,
                     msn_rq=7 + i, msn=0xBEEF - i, va=0x7F00DEADBEEF0000 + i, rkey=0x1001 + i,
                     dma_len=3 * (i + 1), pkey=0xFFFF)
            if ts:
                f["ts"] = 0x01020304
            if op in (wire.OP_WRITE_LAST_IMM, wire.OP_WRITE_ONLY_IMM):
                f["imm"] = 0xCAFE0000 + i
            out.append((f"{wire.OPCODE_NAMES[op]}{'+TS' if ts else ''}", f, bytes(range(i, i + 3 * (i + 1)))))
    out.append(("SACK", dict(opcode=wire.OP_SACK, dqpn=9, sack_flags=wire.SETH_PR | 2 << wire.SETH_M_SHIFT | 1,
                             ack_psn_offset=-5, ev=0x3000C, scid=17, dcid=18, cack_psn=0xABCDEF, cc_type=3, mpr=8,
                             sack_base_off=2, bitmap=0x8000000000000005, ts_echo=0x1234, ooo_cnt=77,
                             cc_flags=0x85, rcv_bytes=0x123456), b""))
    for r in wire.NACK_REASONS:
        out.append((f"NACK_{wire.NACK_REASONS[r]}", dict(opcode=wire.OP_NACK, dqpn=10, sack_flags=0x0101,
                                                         nack_reason=r, ev=0x20003, scid=1, dcid=2,
                                                         nack_psn=0x000102, cc_flags=0x42, ts_echo=99), b""))
    out.append(("PROBE", dict(opcode=wire.OP_RELIABILITY_PROBE, dqpn=11, psn=5, probe_id=0xDEADBEEF, ev=0x70001,
                              t1=0x0102030405060708), b""))
    out.append(("EP_REQUEST", dict(opcode=wire.OP_ENDPOINT_REQUEST, dqpn=12, probe_id=44, ep_op=wire.EP_PORT_STATUS,
                                   rx_port=3, port_bitmap=0xFD, t1=0x11223344), b""))
    out.append(("EP_RESPONSE", dict(opcode=wire.OP_ENDPOINT_RESPONSE, dqpn=13, probe_id=45, ep_op=wire.EP_EV_PROBE,
                                    rx_port=6, port_bitmap=0xFF, ev=0x60002, t1=1 << 40, t2=(1 << 40) + 999), b""))
    return out


def scapy_values(p) -> dict:
    """The C struct mrc_pkt fields, read from the scapy layers."""
    b = p[d.BTH]
    v = {"opcode": b.opcode, "dqpn": b.dest_qp, "psn": b.psn, "pkey": b.pkey, "tver": b.tver,
         "flags": b.ack_req << 7 | b.rtx << 6 | b.ts << 5}
    if d.METH in p:
        v.update(msn_rq=p[d.METH].rq_msn, msn=p[d.METH].msn, va=p[d.RETH].va, rkey=p[d.RETH].rkey,
                 dma_len=p[d.RETH].dma_len)
        if d.TSETH in p:
            v["ts"] = p[d.TSETH].timestamp
        if d.ImmDt in p:
            v["imm"] = p[d.ImmDt].imm
    if d.SETH in p:
        s, c = p[d.SETH], p[d.CCSTATE]
        v.update(sack_flags=s.pr << 15 | s.m << 12 | s.ecn, ack_psn_offset=s.ack_psn_offset, ev=s.ev, scid=s.scid,
                 dcid=s.dcid, cack_psn=s.cack_psn, cc_type=s.cc_type, mpr=s.mpr, sack_base_off=s.sack_base_off,
                 bitmap=s.bitmap, ts_echo=c.ts_echo, ooo_cnt=c.ooo_cnt, cc_flags=c.restore_cwnd << 7 | c.penalty,
                 rcv_bytes=c.rcv_bytes)
    if d.NETH in p:
        n = p[d.NETH]
        v.update(sack_flags=n.flags, nack_reason=n.reason, ev=n.ev, scid=n.scid, dcid=n.dcid, nack_psn=n.nack_psn,
                 cc_flags=n.cc, ts_echo=n.ts_echo)
    if d.PETH in p:
        v.update(probe_id=p[d.PETH].probe_id, ev=p[d.PETH].ev, t1=p[d.PETH].t1)
    if d.ERTH in p:
        e = p[d.ERTH]
        v.update(probe_id=e.probe_id, ep_op=e.op, rx_port=e.port, port_bitmap=e.port_bitmap, t1=e.t1)
    if d.EETH in p:
        e = p[d.EETH]
        v.update(probe_id=e.probe_id, ep_op=e.op, rx_port=e.port, port_bitmap=e.port_bitmap, ev=e.ev, t1=e.t1,
                 t2=e.t2)
    return v


@pytest.mark.parametrize("name,fields,payload", c_packets(), ids=[c[0] for c in c_packets()])
def test_c_built_packets_decode_in_scapy(name, fields, payload):
    raw = wire.build(payload, **fields)
    p = d.BTH(raw)
    got = scapy_values(p)
    for k, v in fields.items():
        assert got[k] == v, (name, k, got[k], v)
    assert got["tver"] == wire.WIRE_VERSION
    assert d.icrc_ok(p) is True
    assert p[d.ICRC].icrc == int.from_bytes(raw[-4:], "big")
    if payload:
        assert bytes(p[d.BTH].getlayer("Raw").load) == payload
    assert bytes(p) == raw  # and scapy rebuilds the same bytes


@pytest.mark.parametrize("name,fields,payload", c_packets(), ids=[c[0] for c in c_packets()])
def test_scapy_built_packets_parse_in_c(name, fields, payload):
    p = d.BTH(wire.build(payload, **fields))
    want = scapy_values(p)
    # rebuild from the layers' field values only, with the ICRC left to scapy
    layers = []
    layer = p
    while layer and not isinstance(layer, d.ICRC):
        cls = type(layer)
        layers.append(cls(**{f.name: layer.getfieldval(f.name) for f in cls.fields_desc}) if cls.fields_desc
                      else layer.copy())
        layer = layer.payload
    pkt = layers[0]
    for x in layers[1:]:
        pkt = pkt / x
    raw = bytes(pkt / d.ICRC())
    parsed = wire.parse(raw)
    assert parsed["icrc_ok"] is True
    for k, v in want.items():
        assert parsed[k] == v, (name, k, parsed[k], v)
    assert parsed["payload"] == payload


def test_trimmed_packet_has_no_icrc_and_parses_in_c():
    full = wire.build(b"x" * 100, opcode=wire.OP_WRITE_ONLY, dqpn=3, psn=9, va=0x1000, rkey=0x100, dma_len=100)
    hdrs = full[: wire.BTH_LEN + wire.METH_LEN + wire.RETH_LEN]
    pkt = IPv6(tc=wire.DSCP_TRIMMED << 2) / UDP(sport=0xC000, dport=wire.UDP_PORT) / hdrs
    p = IPv6(bytes(pkt))
    assert p[d.BTH].trimmed() and d.ICRC not in p and d.icrc_ok(p) is None
    assert p[d.RETH].dma_len == 100
    assert wire.parse(hdrs, trimmed=True)["psn"] == 9


def test_corrupted_byte_fails_the_icrc():
    raw = bytearray(wire.build(b"hello", opcode=wire.OP_WRITE_ONLY, dqpn=1, psn=1, rkey=0x100, dma_len=5))
    raw[-6] ^= 0x01
    assert d.icrc_ok(d.BTH(bytes(raw))) is False


def test_ev_and_usid_path():
    t = SMALL
    dst = t.path_address(0, 1, 1, 0)
    ev = 0x7ABC1005  # any 32-bit EV: bits 0..19 in the flow label, 20..31 from the UDP source port
    pkt = IPv6(dst=dst, fl=ev & 0xFFFFF) / UDP(sport=0xC000 | (ev >> 18) & 0x3FFF, dport=wire.UDP_PORT)
    assert d.ev_of(IPv6(bytes(pkt))) == ev
    assert (wire.ev_flow_label(ev), wire.ev_udp_sport(ev)) == (pkt.fl, pkt[UDP].sport)
    # the container's uSIDs, generically; named by the fabric's topology
    assert paths.usids(dst, 32) == [0x1100, 0x2100, 0x1101, 0xB101]
    r = resolver(t)
    assert r.describe(dst) == {"hops": ["p1l0", "p1s0", "p1l1"], "host": "h1"}
    assert r.describe("2001:db8::1") == {"hops": [], "host": None}


def frame(t, src, dst, plane, spine, ev, mrc_bytes):
    return (Ether(src="02:6d:00:00:00:01", dst="02:6d:00:00:00:02")
            / IPv6(src=t.port_address(src, plane), dst=t.path_address(src, dst, plane, spine),
                   fl=ev & 0xFFFFF, tc=wire.DSCP_DATA << 2 | wire.ECN_ECT0)
            / UDP(sport=0xC000 | (ev >> 18) & 0x3FFF, dport=wire.UDP_PORT) / mrc_bytes)


@pytest.fixture
def sample_pcap(tmp_path):
    """A known conversation: 8 data packets on 2 planes (PSN 3 arriving late,
    one retransmission), 2 SACKs, a NACK, a corrupted packet and a cut one."""
    t = SMALL
    pkts, order = [], [0, 1, 2, 4, 5, 3, 6, 7]
    for psn in order:
        ev = wire.ev_make(psn % 2, psn)
        raw = wire.build(bytes([psn]) * 64, opcode=wire.OP_WRITE_MIDDLE, dqpn=5, psn=psn, va=0x1000 + 64 * psn,
                         rkey=0x100, dma_len=512)
        pkts.append(frame(t, 0, 1, psn % 2, 0, ev, raw))
    pkts.append(frame(t, 0, 1, 1, 1, 0x10009, wire.build(b"r" * 64, opcode=wire.OP_WRITE_MIDDLE, dqpn=5, psn=3,
                                                           flags=wire.BTH_RTX, rkey=0x100, dma_len=512)))
    for cack in (2, 7):
        pkts.append(frame(t, 1, 0, 0, 1, 0x0000A, wire.build(opcode=wire.OP_SACK, dqpn=6, cack_psn=cack, ev=0xA)))
    pkts.append(frame(t, 1, 0, 1, 0, 0x1000B, wire.build(opcode=wire.OP_NACK, dqpn=6, nack_reason=wire.NACK_TRIMMED,
                                                           nack_psn=4, ev=0x1000B)))
    bad = bytearray(wire.build(b"z" * 64, opcode=wire.OP_WRITE_MIDDLE, dqpn=5, psn=8, rkey=0x100, dma_len=512))
    bad[40] ^= 0xFF
    pkts.append(frame(t, 0, 1, 0, 0, 0x8, bytes(bad)))
    pkts.append(frame(t, 0, 1, 0, 0, 0x8, wire.build(opcode=wire.OP_SACK, dqpn=5)[:20]))  # cut short: malformed
    path = tmp_path / "sample.pcap"
    wrpcap(str(path), pkts)
    return str(path), pkts


def test_decode_summarises_a_known_capture(sample_pcap):
    path, _ = sample_pcap
    r = decode.decode(path, resolver(SMALL))
    assert r["packets"] == 14 and r["malformed"] == 1 and r["icrc_failures"] == 1
    qps = {q["qp"]: q for q in r["qps"]}
    data, acks = qps["h0->h1 qp 5"], qps["h1->h0 qp 6"]
    assert data["data_packets"] == 10 and data["retransmissions"] == 1 and data["icrc_failures"] == 1
    # PSN 3 arrived after 4 and 5: two PSNs behind the highest seen; everything else in order
    assert data["reorder_histogram"]["2-3"] == 1 and data["reorder_histogram"]["0"] == 8
    assert data["planes"] == {"0": 5, "1": 5}
    assert acks["sacks"] == 2 and acks["nacks"] == {"TRIMMED": 1}
    assert r["planes"] == {"0": 7, "1": 6}


def test_decode_cli_json_and_exit_code(sample_pcap, tmp_path):
    import json

    from mrc.fabric.resolver import export

    path, _ = sample_pcap
    topo = tmp_path / "small.json"
    topo.write_text(json.dumps(export(SMALL)))
    out = subprocess.run([sys.executable, "-m", "mrc", "decode", path, "--json", "--topology", str(topo)],
                         capture_output=True, text=True)
    assert out.returncode == 1  # a malformed packet
    r = json.loads(out.stdout)
    assert {"packets", "malformed", "qps", "planes"} <= set(r)
    assert {q["qp"] for q in r["qps"]} == {"h0->h1 qp 5", "h1->h0 qp 6"}  # hosts named by the topology file
    # without a topology the hosts are their addresses
    # (and no running fabric to take names from: a state directory of none)
    alone = {**{k: v for k, v in os.environ.items() if k != "MRC_TOPOLOGY"}, "MRC_STATE_DIR": str(tmp_path)}
    plain = json.loads(subprocess.run([sys.executable, "-m", "mrc", "decode", path, "--json"], capture_output=True,
                                      text=True, env=alone).stdout)
    assert f"{SMALL.port_address(0, 0)}->" in " ".join(q["qp"] for q in plain["qps"])
    bad = subprocess.run([sys.executable, "-m", "mrc", "decode", "/nonexistent.pcap"], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr


def tshark_fields(path: str, *fields: str, display: str = "mrc") -> list[list[str]]:
    out = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", path, "-Y", display, "-T", "fields",
                          *sum((["-e", f] for f in fields), [])], capture_output=True, text=True, check=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed (.ci/run installs it)")
def test_lua_dissector_agrees_with_scapy(sample_pcap):
    path, pkts = sample_pcap
    rows = tshark_fields(path, "mrc.opcode", "mrc.psn", "mrc.ev", "mrc.dest_qp", "mrc.icrc_ok", "mrc.path")
    good = [Ether(bytes(p)) for p in pkts[:-1]]  # the cut one has no PSN to compare
    assert len(rows) == len(pkts)
    for row, p in zip(rows, good, strict=False):
        b = p[d.BTH]
        assert int(row[0], 16) == b.opcode and int(row[1]) == b.psn and int(row[2], 16) == d.ev_of(p)
        assert int(row[3]) == b.dest_qp
        info = resolver(SMALL).describe(p[IPv6].dst)
        assert row[5].split() == info["hops"] + ["->", info["host"]]
    assert [r[4] for r in rows[:-2]] == ["1"] * (len(rows) - 2)
    assert rows[-2][4] == "0"  # the corrupted one
    assert tshark_fields(path, "mrc.psn", display="mrc.icrc_bad") == [["8"]]  # flagged as an expert error
    assert len(tshark_fields(path, "frame.number", display="mrc.malformed")) == 1  # the cut one


def secured_packets():
    """Real sealed packets (authenticated MRC, protocol.md section 8): a data packet of each mode and a SACK."""
    from tests.dp.test_security import Hand

    out = []
    for mode in ("auth", "encrypt"):
        h = Hand(mode)
        (data,) = h.send(256)
        h.to_b(data)
        out += [(mode, data), (f"{mode} SACK", h.back()[0])]
    return out


def test_secured_packets_decode_with_their_sech_and_tag(tmp_path):
    t = SMALL
    pkts = secured_packets()
    for name, raw in pkts:
        p = d.BTH(raw)
        c = wire.parse(raw)
        assert p.tver == 2 and p[d.SECH].mode == c["sec_mode"] and p[d.SECH].pn == c["pn"], name
        assert p[d.TAG].tag == raw[-16:] and bytes(p) == raw, name
        assert (d.METH in p) == (c["opcode"] == wire.OP_WRITE_ONLY) and (d.SETH in p) == (c["opcode"] == wire.OP_SACK)
        assert decode.malformed_reason(Ether() / IPv6() / UDP(dport=wire.UDP_PORT) / p) is None, name
    path = tmp_path / "secured.pcap"
    wrpcap(str(path), [frame(t, 0, 1, 0, 0, 0x5, raw) for _, raw in pkts])
    r = decode.decode(str(path), resolver(SMALL))
    assert r["packets"] == 4 and r["malformed"] == 0 and r["icrc_failures"] == 0
    if shutil.which("tshark"):
        rows = tshark_fields(str(path), "mrc.sech.mode", "mrc.sech.pn", "mrc.psn", "mrc.tag")
        assert [(int(m), int(pn)) for m, pn, *_ in rows] == [(d.BTH(raw)[d.SECH].mode, d.BTH(raw)[d.SECH].pn)
                                                           for _, raw in pkts]
        assert [row[3].replace(":", "") for row in rows] == [raw[-16:].hex() for _, raw in pkts]


def test_core_package_imports_without_scapy():
    code = ("import sys, mrc, mrc.verbs, mrc.tools.cli, mrc.tools.perf, mrc.tools.decode, mrc.fabric.capture, "
            "mrc.fabric.apply; "
            "assert not [m for m in sys.modules if m.startswith('scapy')], 'scapy was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
