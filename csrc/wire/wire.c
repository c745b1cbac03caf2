/* Wire format v1: builders, parsers, the PSN compare (protocol.md section 2).
 * Every field is big-endian and read through the accessors below. */
#include <errno.h>
#include <string.h>

#include "wire/wire.h"

/* Serial-number compare over 24-bit PSNs: <0 if a is before b, 0 if equal,
 * >0 if after. Every PSN comparison in the engine goes through this. Two
 * PSNs exactly half the space apart are ordered by value, so that
 * cmp(a, b) == -cmp(b, a) always holds. */
int mrc_psn_cmp(uint32_t a, uint32_t b)
{
    uint32_t d = (a - b) & MRC_PSN_MASK;
    if (d == 0)
        return 0;
    if (d == 1u << (MRC_PSN_BITS - 1))
        return (a & MRC_PSN_MASK) > (b & MRC_PSN_MASK) ? 1 : -1;
    return d < (1u << (MRC_PSN_BITS - 1)) ? 1 : -1;
}

int mrc_opcode_is_data(uint8_t op) { return op >= MRC_OP_WRITE_FIRST && op <= MRC_OP_WRITE_ONLY_IMM; }
int mrc_opcode_has_imm(uint8_t op) { return op == MRC_OP_WRITE_LAST_IMM || op == MRC_OP_WRITE_ONLY_IMM; }

const char *mrc_opcode_name(uint8_t op)
{
    switch (op) {
    case MRC_OP_WRITE_FIRST: return "WRITE_FIRST";
    case MRC_OP_WRITE_MIDDLE: return "WRITE_MIDDLE";
    case MRC_OP_WRITE_LAST: return "WRITE_LAST";
    case MRC_OP_WRITE_LAST_IMM: return "WRITE_LAST_IMM";
    case MRC_OP_WRITE_ONLY: return "WRITE_ONLY";
    case MRC_OP_WRITE_ONLY_IMM: return "WRITE_ONLY_IMM";
    case MRC_OP_ENDPOINT_REQUEST: return "ENDPOINT_REQUEST";
    case MRC_OP_ENDPOINT_RESPONSE: return "ENDPOINT_RESPONSE";
    case MRC_OP_SACK: return "SACK";
    case MRC_OP_NACK: return "NACK";
    case MRC_OP_RELIABILITY_PROBE: return "RELIABILITY_PROBE";
    default: return NULL;
    }
}

const char *mrc_nack_reason_name(uint8_t r)
{
    switch (r) {
    case MRC_NACK_TRIMMED: return "TRIMMED";
    case MRC_NACK_TRIMMED_LASTHOP: return "TRIMMED_LASTHOP";
    case MRC_NACK_NO_BITMAP: return "NO_BITMAP";
    case MRC_NACK_NO_RESOURCE: return "NO_RESOURCE";
    case MRC_NACK_PSN_OUT_OF_WINDOW: return "PSN_OUT_OF_WINDOW";
    case MRC_NACK_UNEXPECTED: return "UNEXPECTED";
    case MRC_NACK_REMOTE_ACCESS: return "REMOTE_ACCESS";
    case MRC_NACK_ICRC: return "ICRC";
    default: return NULL;
    }
}

/* Length of the headers after BTH for an opcode (data: with/without TSETH). */
static int ext_len(uint8_t op, uint8_t flags)
{
    if (mrc_opcode_is_data(op))
        return MRC_METH_LEN + ((flags & MRC_BTH_TS) ? MRC_TSETH_LEN : 0) + MRC_RETH_LEN +
               (mrc_opcode_has_imm(op) ? MRC_IMMDT_LEN : 0);
    switch (op) {
    case MRC_OP_SACK: return MRC_SETH_LEN + MRC_CCSTATE_LEN;
    case MRC_OP_NACK: return MRC_NETH_LEN;
    case MRC_OP_RELIABILITY_PROBE: return MRC_PETH_LEN;
    case MRC_OP_ENDPOINT_REQUEST: return MRC_ERTH_LEN;
    case MRC_OP_ENDPOINT_RESPONSE: return MRC_EETH_LEN;
    default: return -1;
    }
}

int mrc_pkt_build(const struct mrc_pkt *p, const uint8_t *payload, uint8_t *out, size_t cap)
{
    int hl = mrc_pkt_build_hdr(p, out, cap);
    if (hl < 0)
        return hl;
    uint32_t plen = mrc_opcode_is_data(p->opcode) ? p->payload_len : 0;
    if (plen)
        memcpy(out + hl, payload, plen);
    return mrc_pkt_finish(out, (uint32_t)hl + plen);
}

/* Append the ICRC over BTH..payload, or for a secured packet room for its
 * tag (zeros until it is sealed); returns the whole length. */
int mrc_pkt_finish(uint8_t *b, uint32_t len)
{
    if ((b[1] & 0x0F) == MRC_WIRE_SECURED) {
        memset(b + len, 0, MRC_TAG_LEN);
        return (int)(len + MRC_TAG_LEN);
    }
    put32(b + len, mrc_crc32c(0, b, len));
    return (int)(len + MRC_ICRC_LEN);
}

int mrc_pkt_hdr_len(const uint8_t *buf, size_t len)
{
    if (len < MRC_BTH_LEN)
        return -1;
    int sec = (buf[1] & 0x0F) == MRC_WIRE_SECURED, el = ext_len(buf[0], buf[8]);
    size_t hl = MRC_BTH_LEN + (sec ? MRC_SECH_LEN : 0) + (size_t)el;
    return el < 0 || hl + (sec ? MRC_TAG_LEN : MRC_ICRC_LEN) > len ? -1 : (int)hl;
}

/* METH, TSETH, RETH and IMMDT of a data packet at x; returns where they end. */
static uint8_t *put_data_hdrs(const struct mrc_pkt *p, uint8_t *x)
{
    put16(x, p->msn_rq);
    put16(x + 2, p->msn);
    x += MRC_METH_LEN;
    if (p->flags & MRC_BTH_TS) {
        put32(x, p->ts);
        x += MRC_TSETH_LEN;
    }
    put64(x, p->va);
    put32(x + 8, p->rkey);
    put32(x + 12, p->dma_len);
    x += MRC_RETH_LEN;
    if (mrc_opcode_has_imm(p->opcode)) {
        put32(x, p->imm);
        x += MRC_IMMDT_LEN;
    }
    return x;
}

/* The extension header of a control packet at x; returns where it ends. */
static uint8_t *put_control_hdr(const struct mrc_pkt *p, uint8_t *x)
{
    if (p->opcode == MRC_OP_SACK) {
        put16(x, p->sack_flags);
        put16(x + 2, (uint16_t)p->ack_psn_offset);
        put32(x + 4, p->ev);
        put16(x + 8, p->scid);
        put16(x + 10, p->dcid);
        x[12] = 0;
        put24(x + 13, p->cack_psn);
        x[16] = (uint8_t)((p->cc_type & 0xF) << 4);
        x[17] = p->mpr;
        put16(x + 18, (uint16_t)p->sack_base_off);
        put64(x + 20, p->bitmap);
        put16(x + 28, p->ts_echo);
        put16(x + 30, p->ooo_cnt);
        x[32] = p->cc_flags;
        put24(x + 33, p->rcv_bytes);
        x += MRC_SETH_LEN + MRC_CCSTATE_LEN;
    } else if (p->opcode == MRC_OP_NACK) {
        put16(x, p->sack_flags);
        x[2] = p->nack_reason;
        x[3] = 0;
        put32(x + 4, p->ev);
        put16(x + 8, p->scid);
        put16(x + 10, p->dcid);
        x[12] = 0;
        put24(x + 13, p->nack_psn);
        x[16] = p->cc_flags;
        x[17] = 0;
        put16(x + 18, p->ts_echo);
        x += MRC_NETH_LEN;
    } else if (p->opcode == MRC_OP_RELIABILITY_PROBE) {
        put32(x, p->probe_id);
        put32(x + 4, p->ev);
        put64(x + 8, p->t1);
        x += MRC_PETH_LEN;
    } else if (p->opcode == MRC_OP_ENDPOINT_REQUEST) {
        put32(x, p->probe_id);
        x[4] = p->ep_op;
        x[5] = 0;
        put16(x + 6, (uint16_t)p->rx_port);
        put32(x + 8, p->port_bitmap);
        put32(x + 12, (uint32_t)p->t1);
        x += MRC_ERTH_LEN;
    } else { /* ENDPOINT_RESPONSE */
        put32(x, p->probe_id);
        x[4] = p->ep_op;
        x[5] = 0;
        put16(x + 6, (uint16_t)p->rx_port);
        put32(x + 8, p->port_bitmap);
        put32(x + 12, p->ev);
        put64(x + 16, p->t1);
        put64(x + 24, p->t2);
        put32(x + 32, 0);
        x += MRC_EETH_LEN;
    }
    return x;
}

/* Write BTH and the extension headers; returns their length. The caller
 * places the payload after them and calls mrc_pkt_finish(). cap must also
 * hold the payload and the ICRC. */
int mrc_pkt_build_hdr(const struct mrc_pkt *p, uint8_t *out, size_t cap)
{
    int el = ext_len(p->opcode, p->flags);
    if (el < 0 || p->sec_mode > 2)
        return -EINVAL;
    uint32_t plen = mrc_opcode_is_data(p->opcode) ? p->payload_len : 0;
    size_t total = MRC_BTH_LEN + (size_t)el + plen + (p->sec_mode ? MRC_SECH_LEN + MRC_TAG_LEN : MRC_ICRC_LEN);
    if (total > cap)
        return -ENOSPC;
    uint8_t *b = out;
    b[0] = p->opcode;
    b[1] = (uint8_t)(p->sec_mode ? MRC_WIRE_SECURED : p->tver ? p->tver : MRC_WIRE_VERSION) & 0x0F;
    put16(b + 2, p->pkey);
    b[4] = 0;
    put24(b + 5, p->dqpn);
    b[8] = p->flags & (MRC_BTH_ACKREQ | MRC_BTH_RTX | MRC_BTH_TS);
    put24(b + 9, p->psn);
    uint8_t *x = b + MRC_BTH_LEN;
    if (p->sec_mode) { /* SECH: the sealer writes the packet number and the tag (sec.c) */
        x[0] = p->sec_mode;
        x[1] = p->key_id;
        x[2] = p->sec_port;
        x[3] = 0;
        put64(x + 4, p->pn);
        put64(x + 12, p->htag);
        x += MRC_SECH_LEN;
    }
    x = mrc_opcode_is_data(p->opcode) ? put_data_hdrs(p, x) : put_control_hdr(p, x);
    return (int)(x - b);
}

int mrc_pkt_icrc_ok(const uint8_t *buf, size_t len)
{
    if (len < MRC_BTH_LEN + MRC_ICRC_LEN)
        return 0;
    return mrc_crc32c(0, buf, len - MRC_ICRC_LEN) == get32(buf + len - MRC_ICRC_LEN);
}

/* A data packet's METH, TSETH, RETH and IMMDT from x, and its payload: 0, or -EBADMSG when the payload
 * and the RETH disagree. need: the packet's length without payload. */
static int get_data_hdrs(const uint8_t *buf, const uint8_t *x, size_t len, size_t need, int trimmed,
                         struct mrc_pkt *p)
{
    p->msn_rq = get16(x);
    p->msn = get16(x + 2);
    x += MRC_METH_LEN;
    if (p->flags & MRC_BTH_TS) {
        p->ts = get32(x);
        x += MRC_TSETH_LEN;
    }
    p->va = get64(x);
    p->rkey = get32(x + 8);
    p->dma_len = get32(x + 12);
    x += MRC_RETH_LEN;
    if (mrc_opcode_has_imm(p->opcode)) {
        p->imm = get32(x);
        x += MRC_IMMDT_LEN;
    }
    p->payload_off = (uint32_t)(x - buf);
    p->payload_len = trimmed ? 0 : (uint32_t)(len - need);
    /* RETH and payload agree (protocol.md 2): a packet writes exactly its
     * payload; an ONLY packet is its whole message; any other stays
     * inside its message. A trimmed packet has lost its payload. */
    if (!trimmed && ((p->opcode == MRC_OP_WRITE_ONLY || p->opcode == MRC_OP_WRITE_ONLY_IMM)
                         ? p->payload_len != p->dma_len
                         : p->payload_len > p->dma_len))
        return -EBADMSG;
    return 0;
}

/* A control packet's extension header from x. */
static void get_control_hdr(const uint8_t *x, struct mrc_pkt *p)
{
    if (p->opcode == MRC_OP_SACK) {
        p->sack_flags = get16(x);
        p->ack_psn_offset = (int16_t)get16(x + 2);
        p->ev = get32(x + 4);
        p->scid = get16(x + 8);
        p->dcid = get16(x + 10);
        p->cack_psn = get24(x + 13);
        p->cc_type = x[16] >> 4;
        p->mpr = x[17];
        p->sack_base_off = (int16_t)get16(x + 18);
        p->bitmap = get64(x + 20);
        p->ts_echo = get16(x + 28);
        p->ooo_cnt = get16(x + 30);
        p->cc_flags = x[32];
        p->rcv_bytes = get24(x + 33);
    } else if (p->opcode == MRC_OP_NACK) {
        p->sack_flags = get16(x);
        p->nack_reason = x[2];
        p->ev = get32(x + 4);
        p->scid = get16(x + 8);
        p->dcid = get16(x + 10);
        p->nack_psn = get24(x + 13);
        p->cc_flags = x[16];
        p->ts_echo = get16(x + 18);
    } else if (p->opcode == MRC_OP_RELIABILITY_PROBE) {
        p->probe_id = get32(x);
        p->ev = get32(x + 4);
        p->t1 = get64(x + 8);
    } else if (p->opcode == MRC_OP_ENDPOINT_REQUEST) {
        p->probe_id = get32(x);
        p->ep_op = x[4];
        p->rx_port = get16(x + 6);
        p->port_bitmap = get32(x + 8);
        p->t1 = get32(x + 12);
    } else {
        p->probe_id = get32(x);
        p->ep_op = x[4];
        p->rx_port = get16(x + 6);
        p->port_bitmap = get32(x + 8);
        p->ev = get32(x + 12);
        p->t1 = get64(x + 16);
        p->t2 = get64(x + 24);
    }
}

/* Parse BTH..end into *p. A trimmed packet (the switch cut its payload and
 * ICRC) carries headers only. Returns 0 or -EBADMSG (malformed: lengths, or
 * a payload that disagrees with its RETH), -EPROTO (unknown opcode or
 * version). The ICRC is checked separately. */
int mrc_pkt_parse(const uint8_t *buf, size_t len, int trimmed, struct mrc_pkt *p)
{
    memset(p, 0, sizeof(*p));
    if (len < MRC_BTH_LEN)
        return -EBADMSG;
    p->opcode = buf[0];
    p->tver = buf[1] & 0x0F;
    p->pkey = get16(buf + 2);
    p->dqpn = get24(buf + 5);
    p->flags = buf[8] & (MRC_BTH_ACKREQ | MRC_BTH_RTX | MRC_BTH_TS);
    p->psn = get24(buf + 9);
    if (p->tver != MRC_WIRE_VERSION && p->tver != MRC_WIRE_SECURED)
        return -EPROTO;
    int el = ext_len(p->opcode, p->flags);
    if (el < 0)
        return -EPROTO;
    size_t sech = p->tver == MRC_WIRE_SECURED ? MRC_SECH_LEN : 0;
    size_t need = MRC_BTH_LEN + sech + (size_t)el + (trimmed ? 0 : sech ? MRC_TAG_LEN : MRC_ICRC_LEN);
    if (len < need)
        return -EBADMSG;
    if (!mrc_opcode_is_data(p->opcode) && !trimmed && len != need)
        return -EBADMSG;
    const uint8_t *x = buf + MRC_BTH_LEN;
    if (sech) {
        p->sec_mode = x[0];
        p->key_id = x[1];
        p->sec_port = x[2];
        p->pn = get64(x + 4);
        p->htag = get64(x + 12);
        if (p->sec_mode < 1 || p->sec_mode > 2 || x[3])
            return -EPROTO;
        x += MRC_SECH_LEN;
    }
    if (mrc_opcode_is_data(p->opcode)) {
        int rc = get_data_hdrs(buf, x, len, need, trimmed, p);
        if (rc < 0)
            return rc;
    } else {
        get_control_hdr(x, p);
    }
    if (!trimmed && !sech)
        p->icrc = get32(buf + len - MRC_ICRC_LEN);
    return 0;
}
