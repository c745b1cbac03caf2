/* A switch egress port's queue, as the fabric emulates it (tc clsact egress,
 * one instance per port; the port's rate itself is an htb class behind it).
 *
 * The program keeps a phantom queue: a byte count that grows by each packet
 * and drains at the port's configured rate, so it estimates the backlog of
 * the rate limiter behind it. Against that estimate, as a datacenter switch
 * does against its real queue (protocol.md sections 2 and 3):
 *   - above ecn_bytes, an ECN-capable packet gets CE (and the inner IPv6
 *     header of an IPv6-in-IPv6 packet too, when it is ECN-capable: the
 *     kernel's End.DT6 decapsulation does not copy the outer mark inward);
 *   - above trim_bytes, an MRC data packet is trimmed: its headers through
 *     ImmDt (a secured packet's SECH among them) are kept, its payload and ICRC cut, its DSCP set to TRIMMED (46),
 *     its IPv6 payload length, UDP length and UDP checksum fixed (the checksum
 *     over the final destination, the one left after the last uSID shift);
 *   - above buffer_bytes, the packet is dropped (a trimmed one only if even
 *     its headers do not fit).
 * Nothing but MRC data is ever trimmed, and a trimmed packet is never marked
 * (its NACK is the signal). A threshold of 0 turns its rule off. Network
 * control (DSCP CS6 and CS7: the routing daemons' BGP and BFD) is never
 * dropped or trimmed, as a switch's strict-priority control queue keeps it;
 * its bytes still count in the backlog.
 * Per port counters and the estimate's high-water mark are in `st`; the
 * control plane (mrc.fabric.qos) writes `cfg` and reads `st`. */
#include "tc.h"

struct port_cfg {
    __u64 rate_bytes_per_s; /* 0: no queue estimate, nothing marked, trimmed or dropped */
    __u32 ecn_bytes, trim_bytes, buffer_bytes, pad;
};

struct port_st {
    struct bpf_spin_lock lock;
    __u32 pad;
    __u64 last_ns, backlog, hwm;
    __u64 packets, bytes, marked, trimmed, dropped;
};

ARRAY_MAP(cfg, struct port_cfg, 1);

ARRAY_MAP(st, struct port_st, 1);

enum {
    ETH = 14, IP6 = 40, UDP = 8, BTH = 12, SECH = 20, METH = 4, TSETH = 4, RETH = 16, IMM = 4,
    TVER_SECURED = 2, /* a secured packet (protocol.md section 8): SECH after BTH */
    ROCE_PORT = 4791, DSCP_TRIMMED = 46, DSCP_CS6 = 48, NH_UDP = 17, NH_IPV6 = 41,
    OP_DATA_FIRST = 0xC6, OP_DATA_LAST = 0xCB, OP_LAST_IMM = 0xC9, OP_ONLY_IMM = 0xCB,
    BTH_TS = 0x20, /* in BTH byte 8: A, RTX, TS */
};

/* ECN of the IPv6 header at off: the low two bits of the traffic class,
 * bits 5-4 of its second byte. */
static __always_inline int ecn_capable(struct __sk_buff *skb, __u32 off)
{
    __u8 b;
    return bpf_skb_load_bytes(skb, off + 1, &b, 1) == 0 && (b & 0x30);
}

/* Network control (DSCP CS6 or CS7) in the IPv6 header at off. */
static __always_inline int network_control(struct __sk_buff *skb, __u32 off)
{
    __u8 b[2];
    return bpf_skb_load_bytes(skb, off, b, 2) == 0 && (((b[0] & 0x0f) << 2) | (b[1] >> 6)) >= DSCP_CS6;
}

static __always_inline void set_ce(struct __sk_buff *skb, __u32 off)
{
    __u8 b;
    if (bpf_skb_load_bytes(skb, off + 1, &b, 1) == 0) {
        b |= 0x30;
        bpf_skb_store_bytes(skb, off + 1, &b, 1, 0);
    }
}

/* Trimmed upstream (DSCP TRIMMED): the NACK it causes is the signal, no mark. */
static __always_inline int was_trimmed(struct __sk_buff *skb)
{
    __u8 b[2];
    return bpf_skb_load_bytes(skb, ETH, b, 2) == 0 && (((b[0] & 0xf) << 2) | (b[1] >> 6)) == DSCP_TRIMMED;
}

/* The UDP checksum of the trimmed segment (udp_len bytes from ETH + IP6,
 * checksum field zero) over src and the final destination, in network byte
 * order (the ones' complement sum of network-order words is). */
static __always_inline __u16 udp_csum(struct __sk_buff *skb, const __u8 *src, const __u8 *dst, __u32 udp_len)
{
    __u32 pseudo[10];
    __builtin_memcpy(pseudo, src, 16);
    __builtin_memcpy(&pseudo[4], dst, 16);
    pseudo[8] = bpf_htonl(udp_len);
    pseudo[9] = bpf_htonl(NH_UDP);
    __u32 seg[17] = {}; /* the longest trimmed segment: UDP, BTH, SECH, METH, TSETH, RETH, ImmDt */
    long rc = -1;
    if (udp_len == 40)
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 40);
    else if (udp_len == 44)
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 44);
    else if (udp_len == 48)
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 48);
    else if (udp_len == 60) /* a secured packet's (SECH) */
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 60);
    else if (udp_len == 64)
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 64);
    else if (udp_len == 68)
        rc = bpf_skb_load_bytes(skb, ETH + IP6, seg, 68);
    if (rc)
        return 0;
    ((__u16 *)seg)[3] = 0;
    __s64 s = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), 0);
    if (s < 0)
        return 0;
    s = bpf_csum_diff(0, 0, seg, sizeof(seg), (__u32)s); /* the zero tail adds nothing */
    if (s < 0)
        return 0;
    __u32 x = (__u32)s;
    x = (x & 0xffff) + (x >> 16);
    x = (x & 0xffff) + (x >> 16);
    __u16 ck = (__u16)~x;
    return ck ? ck : 0xffff;
}

/* Trim an MRC data packet; returns its new length, 0 if it is not one (or
 * cannot be trimmed: then it is left as it was). */
static __always_inline __u32 trim(struct __sk_buff *skb)
{
    struct ipv6hdr ip;
    __u8 udp[UDP], bth[BTH];
    if (bpf_skb_load_bytes(skb, ETH, &ip, IP6) || ip.nexthdr != NH_UDP ||
        bpf_skb_load_bytes(skb, ETH + IP6, udp, UDP) || ((udp[2] << 8) | udp[3]) != ROCE_PORT ||
        bpf_skb_load_bytes(skb, ETH + IP6 + UDP, bth, BTH))
        return 0;
    __u8 op = bth[0];
    if (op < OP_DATA_FIRST || op > OP_DATA_LAST)
        return 0;
    __u8 dscp = (ip.priority << 2) | (ip.flow_lbl[0] >> 6);
    if (dscp == DSCP_TRIMMED)
        return 0; /* already trimmed upstream */
    __u32 seg = UDP + BTH + ((bth[1] & 0x0F) == TVER_SECURED ? SECH : 0) + METH + RETH +
                ((bth[8] & BTH_TS) ? TSETH : 0) + ((op == OP_LAST_IMM || op == OP_ONLY_IMM) ? IMM : 0);
    __u32 len = ETH + IP6 + seg;
    if (skb->len <= len)
        return 0; /* no payload to cut (or too short to be what it says) */
    /* the final destination: the uSID block and the last uSID the container
     * names (each switch shifts the list left by one uSID) */
    __u8 dst[16] = {};
    __builtin_memcpy(dst, &ip.daddr, 4);
    for (int w = 7; w >= 2; w--) {
        __u8 hi = ip.daddr.in6_u.u6_addr8[2 * w], lo = ip.daddr.in6_u.u6_addr8[2 * w + 1];
        if (hi | lo) {
            dst[4] = hi;
            dst[5] = lo;
            break;
        }
    }
    if (bpf_skb_change_tail(skb, len, 0))
        return 0;
    /* DSCP TRIMMED, ECN kept: priority holds DSCP bits 5-2, flow_lbl[0] bits 7-6 hold DSCP bits 1-0 */
    __u8 tc[2] = {(__u8)(0x60 | (DSCP_TRIMMED >> 2)), (__u8)(((DSCP_TRIMMED & 3) << 6) | (ip.flow_lbl[0] & 0x3f))};
    __be16 plen = bpf_htons((__u16)seg);
    bpf_skb_store_bytes(skb, ETH, tc, 2, 0);
    bpf_skb_store_bytes(skb, ETH + 4, &plen, 2, 0);
    bpf_skb_store_bytes(skb, ETH + IP6 + 4, &plen, 2, 0);
    __u16 ck = udp_csum(skb, (const __u8 *)&ip.saddr, dst, seg); /* summed in network order: stored as it is */
    bpf_skb_store_bytes(skb, ETH + IP6 + 6, &ck, 2, 0);
    return len;
}

SEC("tc")
int port_queue(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct port_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
    struct port_st *s = bpf_map_lookup_elem(&st, &zero);
    if (!c || !s)
        return TC_ACT_OK;
    __u64 now = bpf_ktime_get_ns(), rate = c->rate_bytes_per_s;
    __u32 len = skb->len;
    int ip6 = skb->protocol == bpf_htons(ETH_P_IPV6);
    bpf_spin_lock(&s->lock);
    __u64 q = s->backlog, dt = now - s->last_ns;
    if (dt > 1000000000ull)
        dt = 1000000000ull; /* dt x rate stays within 64 bits up to 100 Gb/s */
    __u64 drained = rate ? dt * rate / 1000000000ull : q;
    q = q > drained ? q - drained : 0;
    s->last_ns = now;
    s->backlog = q;
    bpf_spin_unlock(&s->lock);

    int act = TC_ACT_OK, mark = 0, trimmed = 0;
    if (rate && ip6 && !network_control(skb, ETH)) {
        if (c->trim_bytes && q > c->trim_bytes) {
            __u32 n = trim(skb);
            if (n) {
                len = n;
                trimmed = 1;
            }
        }
        if (c->buffer_bytes && q + len > c->buffer_bytes)
            act = TC_ACT_SHOT;
        else if (!trimmed && c->ecn_bytes && q > c->ecn_bytes && !was_trimmed(skb)) {
            __u8 nh;
            if (ecn_capable(skb, ETH)) {
                set_ce(skb, ETH);
                mark = 1;
            }
            if (bpf_skb_load_bytes(skb, ETH + 6, &nh, 1) == 0 && nh == NH_IPV6 && ecn_capable(skb, ETH + IP6)) {
                set_ce(skb, ETH + IP6);
                mark = 1;
            }
        }
    }

    bpf_spin_lock(&s->lock);
    if (act == TC_ACT_SHOT) {
        s->dropped++;
    } else {
        s->backlog += len;
        if (s->backlog > s->hwm)
            s->hwm = s->backlog;
        s->packets++;
        s->bytes += len;
        s->marked += mark;
        s->trimmed += trimmed;
    }
    bpf_spin_unlock(&s->lock);
    return act;
}

char LICENSE[] SEC("license") = "Apache-2.0";
