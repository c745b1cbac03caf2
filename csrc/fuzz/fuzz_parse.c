/* libFuzzer: the wire parser on arbitrary bytes, and the builder against it.
 * The first byte picks trimmed or not; the rest is the packet (a trimmed
 * one is only parsed: its payload is gone, so it cannot be rebuilt).
 *
 * Invariants (abort on breach): parse never reads past len (ASan); what
 * parses builds; the built packet parses to the same fields with a good
 * ICRC (a secured packet, TVer 2: its SECH, and room for its tag) and its
 * payload where mrc_pkt_hdr_len says; building that again gives the same
 * bytes (the builder's output is a fixed point); a data packet's payload
 * lies inside the buffer. */
#include "fuzz/fuzz.h"

#define SAME(f) FZ_CHECK(a->f == b->f, "field " #f " changed in the round trip")

static void same(const struct mrc_pkt *a, const struct mrc_pkt *b)
{
    SAME(opcode); SAME(flags); SAME(pkey); SAME(dqpn); SAME(psn); SAME(msn_rq); SAME(msn); SAME(ts);
    SAME(va); SAME(rkey); SAME(dma_len); SAME(imm); SAME(payload_off); SAME(payload_len); SAME(sack_flags);
    SAME(ack_psn_offset); SAME(ev); SAME(scid); SAME(dcid); SAME(cack_psn); SAME(cc_type); SAME(mpr);
    SAME(sack_base_off); SAME(bitmap); SAME(ts_echo); SAME(ooo_cnt); SAME(cc_flags); SAME(rcv_bytes);
    SAME(nack_reason); SAME(nack_psn); SAME(probe_id); SAME(ep_op); SAME(port_bitmap); SAME(t1); SAME(t2);
    SAME(rx_port); SAME(sec_mode); SAME(key_id); SAME(sec_port); SAME(pn); SAME(htag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int trimmed = data[0] & 1;
    size_t len = size - 1;
    uint8_t *in = malloc(len ? len : 1); /* exactly len bytes: ASan sees any read past it */
    memcpy(in, data + 1, len);
    struct mrc_pkt p;
    int rc = mrc_pkt_parse(in, len, trimmed, &p);
    if (rc == 0 && mrc_opcode_is_data(p.opcode))
        FZ_CHECK((size_t)p.payload_off + p.payload_len <= len, "payload past the end");
    if (rc == 0 && !trimmed) { /* a trimmed packet has lost what a rebuild needs */
        static uint8_t out[70000], again[70000];
        int n = mrc_pkt_build(&p, in + p.payload_off, out, sizeof(out));
        FZ_CHECK(n > 0, "a parsed packet does not build: %d", n);
        /* a secured packet carries room for its tag (zeros until sealed) instead of an ICRC */
        FZ_CHECK(p.sec_mode || mrc_pkt_icrc_ok(out, (size_t)n), "built with a bad ICRC");
        FZ_CHECK(!mrc_opcode_is_data(p.opcode) || mrc_pkt_hdr_len(out, (size_t)n) == (int)p.payload_off,
                 "header length and payload offset differ");
        struct mrc_pkt q;
        FZ_CHECK(mrc_pkt_parse(out, (size_t)n, 0, &q) == 0, "a built packet does not parse");
        same(&p, &q);
        int m = mrc_pkt_build(&q, out + q.payload_off, again, sizeof(again));
        FZ_CHECK(m == n && !memcmp(out, again, (size_t)n), "building a built packet changed it");
    }
    mrc_pkt_icrc_ok(in, len);
    free(in);
    return 0;
}
