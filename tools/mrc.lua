-- Wireshark / tshark dissector for mrc wire v1 (MRC over UDP 4791).
-- Headers: BTH, METH, TSETH, RETH, ImmDt, SETH, CCSTATE, NETH, PETH, ERTH,
-- EETH, ICRC (docs/protocol.md section 2), plus the path a packet
-- took: its EV (IPv6 flow label + UDP source port) and the plane, switches
-- and host named by the uSID container in the IPv6 destination.
--
-- Load it for one run:   tshark -X lua_script:tools/mrc.lua -r capture.pcap -Y mrc
-- Install it:            cp tools/mrc.lua ~/.local/lib/wireshark/plugins/   (docs/dissector.md)
--
-- Licensed under the Apache License 2.0, like the rest of mrc.

local mrc = Proto("mrc", "MRC (Multipath Reliable Connection)")

local OPCODES = {
    [0xC6] = "WRITE_FIRST", [0xC7] = "WRITE_MIDDLE", [0xC8] = "WRITE_LAST", [0xC9] = "WRITE_LAST_IMM",
    [0xCA] = "WRITE_ONLY", [0xCB] = "WRITE_ONLY_IMM", [0xD8] = "ENDPOINT_REQUEST",
    [0xD9] = "ENDPOINT_RESPONSE", [0xDC] = "SACK", [0xDD] = "NACK", [0xDE] = "RELIABILITY_PROBE",
}
local NACK_REASONS = {
    [0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x06] = "NO_BITMAP", [0x0A] = "NO_RESOURCE",
    [0x0B] = "PSN_OUT_OF_WINDOW", [0x19] = "UNEXPECTED", [0x30] = "REMOTE_ACCESS", [0x31] = "ICRC",
}
local EP_OPS = { [1] = "EV_PROBE", [2] = "PORT_STATUS" }
local DSCP_TRIMMED = 46

local f = mrc.fields
-- path
f.ev = ProtoField.uint32("mrc.ev", "EV", base.HEX)
f.plane = ProtoField.uint8("mrc.plane", "Plane")
f.path = ProtoField.string("mrc.path", "uSID path")
-- BTH
f.opcode = ProtoField.uint8("mrc.opcode", "Opcode", base.HEX, OPCODES)
f.tver = ProtoField.uint8("mrc.tver", "Transport version", base.DEC, nil, 0x0F)
f.pkey = ProtoField.uint16("mrc.pkey", "P_Key", base.HEX)
f.dest_qp = ProtoField.uint24("mrc.dest_qp", "Destination QP")
f.ack_req = ProtoField.bool("mrc.ack_req", "ACK request", 8, nil, 0x80)
f.rtx = ProtoField.bool("mrc.rtx", "Retransmission", 8, nil, 0x40)
f.ts = ProtoField.bool("mrc.ts", "TSETH present", 8, nil, 0x20)
f.psn = ProtoField.uint24("mrc.psn", "PSN")
-- METH, TSETH, RETH, ImmDt
f.rq_msn = ProtoField.uint16("mrc.meth.rq_msn", "RQ message number")
f.msn = ProtoField.uint16("mrc.meth.msn", "Message sequence number")
f.timestamp = ProtoField.uint32("mrc.tseth.timestamp", "Sender timestamp")
f.va = ProtoField.uint64("mrc.reth.va", "Virtual address", base.HEX)
f.rkey = ProtoField.uint32("mrc.reth.rkey", "rkey", base.HEX)
f.dma_len = ProtoField.uint32("mrc.reth.dma_len", "DMA length")
f.imm = ProtoField.uint32("mrc.immdt.imm", "Immediate data", base.HEX)
f.payload = ProtoField.bytes("mrc.payload", "Payload")
-- SETH, CCSTATE
f.seth_flags = ProtoField.uint16("mrc.seth.flags", "Flags", base.HEX)
f.seth_pr = ProtoField.bool("mrc.seth.pr", "Probe response", 16, nil, 0x8000)
f.seth_m = ProtoField.uint16("mrc.seth.m", "m (skip)", base.DEC, { [0] = "none", [1] = "skip once", [2] = "always skip" }, 0x3000)
f.seth_ecn = ProtoField.bool("mrc.seth.ecn", "ECN echo", 16, nil, 0x0001)
f.ack_psn_offset = ProtoField.int16("mrc.seth.ack_psn_offset", "ACK PSN offset")
f.seth_ev = ProtoField.uint32("mrc.seth.ev", "Echoed EV", base.HEX)
f.scid = ProtoField.uint16("mrc.scid", "Source connection id")
f.dcid = ProtoField.uint16("mrc.dcid", "Destination connection id")
f.cack_psn = ProtoField.uint24("mrc.seth.cack_psn", "Cumulative ACK PSN")
f.cc_type = ProtoField.uint8("mrc.seth.cc_type", "CC type", base.DEC, nil, 0xF0)
f.mpr = ProtoField.uint8("mrc.seth.mpr", "Advertised MPR (x128 PSNs)")
f.sack_base_off = ProtoField.int16("mrc.seth.sack_base_off", "SACK base offset")
f.bitmap = ProtoField.uint64("mrc.seth.bitmap", "SACK bitmap", base.HEX)
f.ts_echo = ProtoField.uint16("mrc.ts_echo", "Echoed timestamp")
f.ooo_cnt = ProtoField.uint16("mrc.ccstate.ooo_cnt", "Out-of-order count")
f.restore_cwnd = ProtoField.bool("mrc.ccstate.restore_cwnd", "Restore cwnd", 8, nil, 0x80)
f.penalty = ProtoField.uint8("mrc.ccstate.penalty", "Receiver penalty", base.DEC, nil, 0x7F)
f.rcv_bytes = ProtoField.uint24("mrc.ccstate.rcv_bytes", "Bytes received (x256)")
-- NETH
f.neth_flags = ProtoField.uint16("mrc.neth.flags", "Flags", base.HEX)
f.reason = ProtoField.uint8("mrc.neth.reason", "NACK reason", base.HEX, NACK_REASONS)
f.vendor = ProtoField.uint8("mrc.neth.vendor", "Vendor")
f.neth_ev = ProtoField.uint32("mrc.neth.ev", "Echoed EV", base.HEX)
f.nack_psn = ProtoField.uint24("mrc.neth.nack_psn", "NACK PSN")
f.neth_cc = ProtoField.uint8("mrc.neth.cc", "CC", base.HEX)
-- PETH, ERTH, EETH
f.probe_id = ProtoField.uint32("mrc.probe_id", "Probe id")
f.probe_ev = ProtoField.uint32("mrc.probe.ev", "Probed EV", base.HEX)
f.t1 = ProtoField.uint64("mrc.t1", "Send time (ns)")
f.t2 = ProtoField.uint64("mrc.t2", "Responder time (ns)")
f.ep_op = ProtoField.uint8("mrc.ep.op", "Operation", base.DEC, EP_OPS)
f.ep_port = ProtoField.uint16("mrc.ep.port", "Port")
f.port_bitmap = ProtoField.uint32("mrc.ep.port_bitmap", "Port status bitmap", base.HEX)
f.service_time = ProtoField.uint32("mrc.eeth.service_time", "Service time")
-- ICRC
f.icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX)
-- SECH and the tag of a secured packet (TVer 2, protocol.md section 8)
f.sec_mode = ProtoField.uint8("mrc.sech.mode", "Security mode", base.DEC, { [1] = "AUTH", [2] = "ENCRYPT" })
f.key_id = ProtoField.uint8("mrc.sech.key_id", "Key id")
f.sec_port = ProtoField.uint8("mrc.sech.port", "Port (plane) sealed for")
f.pn = ProtoField.uint64("mrc.sech.pn", "Packet number")
f.htag = ProtoField.uint64("mrc.sech.htag", "Header tag", base.HEX)
f.tag = ProtoField.bytes("mrc.tag", "AES-GCM tag")
f.icrc_ok = ProtoField.bool("mrc.icrc_ok", "ICRC correct")

local e_icrc = ProtoExpert.new("mrc.icrc_bad", "ICRC does not match", expert.group.CHECKSUM, expert.severity.ERROR)
local e_short = ProtoExpert.new("mrc.malformed", "Malformed MRC packet", expert.group.MALFORMED, expert.severity.ERROR)
mrc.experts = { e_icrc, e_short }

mrc.prefs.check_icrc = Pref.bool("Check the ICRC", true, "Compute CRC32C over BTH..payload (slower on big captures)")

local ip_dst = Field.new("ipv6.dst")
local ip_flow = Field.new("ipv6.flow")
local ip_tclass = Field.new("ipv6.tclass")
local udp_srcport = Field.new("udp.srcport")

-- CRC32C (Castagnoli, reflected 0x82F63B78), table driven
local CRC = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit32.band(c, 1) == 1 then c = bit32.bxor(bit32.rshift(c, 1), 0x82F63B78) else c = bit32.rshift(c, 1) end
    end
    CRC[i] = c
end
local function crc32c(tvb, off, len)
    local c = 0xFFFFFFFF
    local b = tvb:raw(off, len)
    for i = 1, #b do
        c = bit32.bxor(CRC[bit32.band(bit32.bxor(c, b:byte(i)), 0xFF)], bit32.rshift(c, 8))
    end
    return bit32.bxor(c, 0xFFFFFFFF)
end

-- The nodes a uSID container names (fc00:0:<u1>:<u2>:...): kind << 12 | plane << 8 | index
local function usid_path(dst)
    local r = dst.range
    if r == nil or r:len() ~= 16 or r:range(0, 4):uint() ~= 0xFC000000 then return nil, nil end
    local names, plane = {}, nil
    for i = 2, 7 do
        local w = r:range(2 * i, 2):uint()
        if w == 0 then break end
        local kind, p, idx = bit32.rshift(w, 12), bit32.band(bit32.rshift(w, 8), 0xF), bit32.band(w, 0xFF)
        if kind == 1 then names[#names + 1] = string.format("p%dl%d", p, idx)
        elseif kind == 2 then names[#names + 1] = string.format("p%ds%d", p, idx)
        elseif kind == 0xB then names[#names + 1] = string.format("-> h%d", idx) end
        if kind == 1 or kind == 2 or kind == 0xB then plane = plane or p end
    end
    return plane, table.concat(names, " ")
end

local function ext_len(op, flags)
    if op >= 0xC6 and op <= 0xCB then
        local n = 4 + 16
        if bit32.band(flags, 0x20) ~= 0 then n = n + 4 end
        if op == 0xC9 or op == 0xCB then n = n + 4 end
        return n
    end
    return ({ [0xDC] = 36, [0xDD] = 20, [0xDE] = 16, [0xD8] = 16, [0xD9] = 36 })[op]
end

local function dissect_one(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 12 then return 0 end
    pinfo.cols.protocol = "MRC"
    local t = tree:add(mrc, tvb(), "MRC")
    local op, flags = tvb(0, 1):uint(), tvb(8, 1):uint()
    local tc = ip_tclass()
    local trimmed = tc ~= nil and bit32.rshift(tc.value, 2) == DSCP_TRIMMED
    -- the path
    local flow, sport = ip_flow(), udp_srcport()
    if flow ~= nil and sport ~= nil then
        local ev = bit32.bor(bit32.band(flow.value, 0xFFFFF),
                             bit32.band(bit32.lshift(bit32.band(sport.value, 0x3FFF), 18), 0xFFF00000))
        t:add(f.ev, ev):set_generated()
        t:add(f.plane, bit32.band(bit32.rshift(ev, 16), 0xF)):set_generated()
    end
    local dst = ip_dst()
    if dst ~= nil then
        local _, path = usid_path(dst)
        if path ~= nil then t:add(f.path, path):set_generated() end
    end
    -- BTH
    local bth = t:add(tvb(0, 12), "BTH")
    bth:add(f.opcode, tvb(0, 1))
    bth:add(f.tver, tvb(1, 1))
    bth:add(f.pkey, tvb(2, 2))
    bth:add(f.dest_qp, tvb(5, 3))
    bth:add(f.ack_req, tvb(8, 1))
    bth:add(f.rtx, tvb(8, 1))
    bth:add(f.ts, tvb(8, 1))
    bth:add(f.psn, tvb(9, 3))
    local el = ext_len(op, flags)
    local secured = bit32.band(tvb(1, 1):uint(), 0x0F) == 2
    local sech = secured and 20 or 0
    local icrc_len = trimmed and 0 or (secured and 16 or 4)
    if el == nil or len < 12 + sech + el + icrc_len then
        t:add_proto_expert_info(e_short, "too short for its opcode, or an unknown opcode")
        return len
    end
    local name = OPCODES[op] or string.format("0x%02x", op)
    pinfo.cols.info = string.format("%s QP %d PSN %d%s%s", name, tvb(5, 3):uint(), tvb(9, 3):uint(),
        bit32.band(flags, 0x40) ~= 0 and " RTX" or "", trimmed and " TRIMMED" or "")
    local x = 12
    if secured then
        local s = t:add(tvb(x, 20), "SECH")
        s:add(f.sec_mode, tvb(x, 1)); s:add(f.key_id, tvb(x + 1, 1)); s:add(f.sec_port, tvb(x + 2, 1))
        s:add(f.pn, tvb(x + 4, 8)); s:add(f.htag, tvb(x + 12, 8)); x = x + 20
    end
    if op >= 0xC6 and op <= 0xCB then
        local m = t:add(tvb(x, 4), "METH")
        m:add(f.rq_msn, tvb(x, 2)); m:add(f.msn, tvb(x + 2, 2)); x = x + 4
        if bit32.band(flags, 0x20) ~= 0 then t:add(tvb(x, 4), "TSETH"):add(f.timestamp, tvb(x, 4)); x = x + 4 end
        local r = t:add(tvb(x, 16), "RETH")
        r:add(f.va, tvb(x, 8)); r:add(f.rkey, tvb(x + 8, 4)); r:add(f.dma_len, tvb(x + 12, 4)); x = x + 16
        if op == 0xC9 or op == 0xCB then t:add(tvb(x, 4), "ImmDt"):add(f.imm, tvb(x, 4)); x = x + 4 end
        local plen = len - x - icrc_len
        if plen > 0 then t:add(f.payload, tvb(x, plen)); x = x + plen end
    elseif op == 0xDC then
        local s = t:add(tvb(x, 28), "SETH")
        s:add(f.seth_flags, tvb(x, 2)); s:add(f.seth_pr, tvb(x, 2)); s:add(f.seth_m, tvb(x, 2))
        s:add(f.seth_ecn, tvb(x, 2)); s:add(f.ack_psn_offset, tvb(x + 2, 2)); s:add(f.seth_ev, tvb(x + 4, 4))
        s:add(f.scid, tvb(x + 8, 2)); s:add(f.dcid, tvb(x + 10, 2)); s:add(f.cack_psn, tvb(x + 13, 3))
        s:add(f.cc_type, tvb(x + 16, 1)); s:add(f.mpr, tvb(x + 17, 1)); s:add(f.sack_base_off, tvb(x + 18, 2))
        s:add(f.bitmap, tvb(x + 20, 8)); x = x + 28
        local c = t:add(tvb(x, 8), "CCSTATE")
        c:add(f.ts_echo, tvb(x, 2)); c:add(f.ooo_cnt, tvb(x + 2, 2)); c:add(f.restore_cwnd, tvb(x + 4, 1))
        c:add(f.penalty, tvb(x + 4, 1)); c:add(f.rcv_bytes, tvb(x + 5, 3)); x = x + 8
        pinfo.cols.info = string.format("SACK QP %d cack %d bitmap 0x%s", tvb(5, 3):uint(), tvb(x - 36 + 13, 3):uint(),
            tvb(x - 36 + 20, 8):bytes():tohex())
    elseif op == 0xDD then
        local n = t:add(tvb(x, 20), "NETH")
        n:add(f.neth_flags, tvb(x, 2)); n:add(f.reason, tvb(x + 2, 1)); n:add(f.vendor, tvb(x + 3, 1))
        n:add(f.neth_ev, tvb(x + 4, 4)); n:add(f.scid, tvb(x + 8, 2)); n:add(f.dcid, tvb(x + 10, 2))
        n:add(f.nack_psn, tvb(x + 13, 3)); n:add(f.neth_cc, tvb(x + 16, 1)); n:add(f.ts_echo, tvb(x + 18, 2))
        pinfo.cols.info = string.format("NACK %s QP %d PSN %d", NACK_REASONS[tvb(x + 2, 1):uint()] or "?",
            tvb(5, 3):uint(), tvb(x + 13, 3):uint())
        x = x + 20
    elseif op == 0xDE then
        local p = t:add(tvb(x, 16), "PETH")
        p:add(f.probe_id, tvb(x, 4)); p:add(f.probe_ev, tvb(x + 4, 4)); p:add(f.t1, tvb(x + 8, 8)); x = x + 16
    elseif op == 0xD8 then
        local e = t:add(tvb(x, 16), "ERTH")
        e:add(f.probe_id, tvb(x, 4)); e:add(f.ep_op, tvb(x + 4, 1)); e:add(f.ep_port, tvb(x + 6, 2))
        e:add(f.port_bitmap, tvb(x + 8, 4)); x = x + 16
    else
        local e = t:add(tvb(x, 36), "EETH")
        e:add(f.probe_id, tvb(x, 4)); e:add(f.ep_op, tvb(x + 4, 1)); e:add(f.ep_port, tvb(x + 6, 2))
        e:add(f.port_bitmap, tvb(x + 8, 4)); e:add(f.probe_ev, tvb(x + 12, 4)); e:add(f.t1, tvb(x + 16, 8))
        e:add(f.t2, tvb(x + 24, 8)); e:add(f.service_time, tvb(x + 32, 4)); x = x + 36
    end
    if not trimmed then
        if x + icrc_len ~= len then
            t:add_proto_expert_info(e_short, "bytes after the headers of a control packet")
            return len
        end
        if secured then
            t:add(f.tag, tvb(x, 16))
            return len
        end
        local it = t:add(f.icrc, tvb(x, 4))
        if mrc.prefs.check_icrc then
            local ok = crc32c(tvb, 0, x) == tvb(x, 4):uint()
            t:add(f.icrc_ok, ok):set_generated()
            if not ok then it:add_proto_expert_info(e_icrc) end
        end
    end
    return len
end

mrc.dissector = dissect_one
DissectorTable.get("udp.port"):add(4791, mrc) -- takes the port from the RoCEv2 (InfiniBand) dissector

-- A buffer of k packets captured whole, before the kernel cut it (docs/engine.md, "Buffers of
-- k packets"): its UDP length is its segments' and shorter than its payload. UDP hands the MRC
-- dissector the first segment; this one dissects the others, each as the packet it becomes.
local mrc_buffer = Proto("mrc_buffer", "MRC buffer of k packets")
local udp_length = Field.new("udp.length")
local udp_dstport = Field.new("udp.dstport")
local ip_plen = Field.new("ipv6.plen")
function mrc_buffer.dissector(tvb, pinfo, tree)
    local ul, dp, pl = udp_length(), udp_dstport(), ip_plen()
    if ul == nil or dp == nil or pl == nil or dp.value ~= 4791 then return end
    local seg, total = ul.value - 8, pl.value - 8
    if seg <= 0 or seg >= total then return end
    local start, k = ul.offset + 4, 1 -- udp.length is 4 bytes before the UDP payload
    for off = seg, total - 1, seg do
        local n = math.min(seg, total - off)
        if start + off + n > tvb:len() then break end
        dissect_one(tvb:range(start + off, n):tvb("MRC packet " .. (k + 1)), pinfo, tree)
        k = k + 1
    end
    pinfo.cols.info = string.format("buffer of %d MRC packets of %d bytes", k, seg)
end
register_postdissector(mrc_buffer, true)
