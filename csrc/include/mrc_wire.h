/*
 * mrc_wire.h - MRC's wire format (docs/protocol.md section 2, mrc wire v1,
 * all big-endian): header sizes, opcodes, flags, NACK reasons, the EV's bit
 * fields, traffic classes, and the parsed packet with its builder, parser
 * and ICRC. For the dissector, the fuzzers and tests; read by the cffi
 * build (between CDEF BEGIN and CDEF END: plain C, enums for constants).
 */
#ifndef MRC_WIRE_H
#define MRC_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* CDEF BEGIN */
enum {
    MRC_WIRE_VERSION = 1,
    MRC_WIRE_SECURED = 2,     /* BTH TVer of a secured packet: SECH after BTH, a tag instead of the ICRC */
    MRC_UDP_PORT = 4791,
    MRC_ETH_HLEN = 14,
    MRC_IPV6_HLEN = 40,
    MRC_UDP_HLEN = 8,
    MRC_BTH_LEN = 12,
    MRC_METH_LEN = 4,
    MRC_TSETH_LEN = 4,
    MRC_RETH_LEN = 16,
    MRC_IMMDT_LEN = 4,
    MRC_SETH_LEN = 28,
    MRC_CCSTATE_LEN = 8,
    MRC_NETH_LEN = 20,
    MRC_PETH_LEN = 16,
    MRC_ERTH_LEN = 16,
    MRC_EETH_LEN = 36,
    MRC_ICRC_LEN = 4,
    MRC_SECH_LEN = 20,        /* mode (1) | key id (1) | port (1) | reserved (1) | packet number (8) | header tag (8) */
    MRC_TAG_LEN = 16,         /* AES-GCM's tag */
    MRC_PSN_BITS = 24,
    MRC_PSN_MASK = 0xFFFFFF,
};

/* Opcodes (manufacturer-specific range, protocol.md section 2). */
enum mrc_opcode {
    MRC_OP_WRITE_FIRST = 0xC6,
    MRC_OP_WRITE_MIDDLE = 0xC7,
    MRC_OP_WRITE_LAST = 0xC8,
    MRC_OP_WRITE_LAST_IMM = 0xC9,
    MRC_OP_WRITE_ONLY = 0xCA,
    MRC_OP_WRITE_ONLY_IMM = 0xCB,
    MRC_OP_ENDPOINT_REQUEST = 0xD8,
    MRC_OP_ENDPOINT_RESPONSE = 0xD9,
    MRC_OP_SACK = 0xDC,
    MRC_OP_NACK = 0xDD,
    MRC_OP_RELIABILITY_PROBE = 0xDE,
};

/* BTH flag bits (byte 8). */
enum {
    MRC_BTH_ACKREQ = 0x80,
    MRC_BTH_RTX = 0x40,
    MRC_BTH_TS = 0x20,
};

/* NACK reasons. */
enum mrc_nack_reason {
    MRC_NACK_TRIMMED = 0x01,
    MRC_NACK_TRIMMED_LASTHOP = 0x02,
    MRC_NACK_NO_BITMAP = 0x06,
    MRC_NACK_NO_RESOURCE = 0x0A,
    MRC_NACK_PSN_OUT_OF_WINDOW = 0x0B,
    MRC_NACK_UNEXPECTED = 0x19,
    MRC_NACK_REMOTE_ACCESS = 0x30,
    MRC_NACK_ICRC = 0x31,
};

/* SETH flags and skip modes. */
enum {
    MRC_SETH_PR = 0x8000,       /* probe response */
    MRC_SETH_M_SHIFT = 12,      /* 2-bit m field: 0 none, 1 skip once, 2 always */
    MRC_SETH_ECN = 0x0001,      /* echoed ECN CE */
};

/* Endpoint request ops (ERTH). */
enum {
    MRC_EP_EV_PROBE = 1,
    MRC_EP_PORT_STATUS = 2,
};

/* EV bit fields. This implementation's senders lay an EV out as
 * plane << 16 | entropy (protocol.md 2 leaves the EV-to-path mapping to the
 * sender); on the wire the flow label carries EV bits 0-19 and the UDP source
 * port 0xC000 | EV bits 18-31. Every EV field is read and written through the
 * accessors in csrc/wire/hdr.h (C) and mrc/wire.py (Python), which use these. */
enum {
    MRC_EV_PLANE_SHIFT = 16,
    MRC_EV_ENTROPY_MASK = 0xFFFF,
    MRC_EV_FLOW_MASK = 0xFFFFF,
    MRC_EV_SPORT_SHIFT = 18,
    MRC_EV_SPORT_MASK = 0x3FFF,
    MRC_EV_SPORT_BASE = 0xC000,
};

/* IPv6 traffic classes (DSCP << 2 | ECN). */
enum {
    MRC_DSCP_DATA = 10,
    MRC_DSCP_RTX = 12,
    MRC_DSCP_CONTROL = 48,
    MRC_DSCP_TRIMMED = 46,
    MRC_ECN_ECT0 = 2,
    MRC_ECN_CE = 3,
};

/* A parsed packet (from BTH on). Offsets are relative to the BTH start. */
struct mrc_pkt {
    uint8_t opcode;
    uint8_t flags;          /* MRC_BTH_* */
    uint8_t tver;
    uint16_t pkey;
    /* SECH (a secured packet: tver MRC_WIRE_SECURED): MRC_SEC_AUTH or MRC_SEC_ENCRYPT (mrc/mrc.h),
     * the key's id, the port (plane) it was sealed for, the packet's number in its direction and a
     * data packet's header tag (what a trim leaves verifiable; 0 in other packets) */
    uint8_t sec_mode;
    uint8_t key_id;
    uint8_t sec_port;
    uint64_t pn;
    uint64_t htag;
    uint32_t dqpn;
    uint32_t psn;
    /* METH */
    uint16_t msn_rq;
    uint16_t msn;
    /* TSETH */
    uint32_t ts;
    /* RETH */
    uint64_t va;
    uint32_t rkey;
    uint32_t dma_len;
    /* ImmDt */
    uint32_t imm;
    /* payload */
    uint32_t payload_off;
    uint32_t payload_len;
    /* SETH + CCSTATE */
    uint16_t sack_flags;
    int16_t ack_psn_offset;
    uint32_t ev;
    uint16_t scid;
    uint16_t dcid;
    uint32_t cack_psn;
    uint8_t cc_type;
    uint8_t mpr;
    int16_t sack_base_off;
    uint64_t bitmap;
    uint16_t ts_echo;
    uint16_t ooo_cnt;
    uint8_t cc_flags;
    uint32_t rcv_bytes;
    /* NETH */
    uint8_t nack_reason;
    uint32_t nack_psn;
    /* PETH / ERTH / EETH */
    uint32_t probe_id;
    uint8_t ep_op;
    uint32_t port_bitmap;
    uint64_t t1;
    uint64_t t2;
    uint32_t rx_port;
    uint32_t icrc;
};

uint32_t mrc_crc32c(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t mrc_crc32c_copy(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t len);
uint32_t mrc_crc32c_copy_sum(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t len, uint64_t *sum);
int mrc_crc32c_hw(void);
uint32_t mrc_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t len);
int mrc_psn_cmp(uint32_t a, uint32_t b);
int mrc_opcode_is_data(uint8_t opcode);
int mrc_opcode_has_imm(uint8_t opcode);
const char *mrc_opcode_name(uint8_t opcode);
const char *mrc_nack_reason_name(uint8_t reason);
int mrc_pkt_build(const struct mrc_pkt *p, const uint8_t *payload, uint8_t *out, size_t cap);
int mrc_pkt_parse(const uint8_t *buf, size_t len, int trimmed, struct mrc_pkt *p);
int mrc_pkt_icrc_ok(const uint8_t *buf, size_t len);
/* BTH..the end of the extension headers (SECH included) of a whole packet:
 * where its payload starts; -1 when it is not one. */
int mrc_pkt_hdr_len(const uint8_t *buf, size_t len);

/* CDEF END */

#endif
