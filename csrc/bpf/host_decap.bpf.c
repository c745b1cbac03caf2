/* A host's End.DT6 for kernel traffic over the fabric, for a kernel built
 * without SRv6 (no CONFIG_IPV6_SEG6_LWTUNNEL: seg6local routes are refused):
 * the other half of host_encap.bpf.c. tc clsact ingress of every host port;
 * mrc.fabric.srv6bpf attaches it only when the kernel refuses the End.DT6
 * route.
 *
 * A packet whose outer destination lies in this port's End.DT6 prefix
 * (block:<port uSID>:d6::/64, what the last switch's shift leaves of the
 * path's container) and whose next header is IPv6 loses its outer header;
 * the inner packet goes on to IPv6 input, which delivers it to the inner
 * address on lo (the kernel's End.DT6 looks it up in the local table; the
 * hosts do not forward, so anything else is dropped there too). A CE mark on
 * the outer header is copied onto an ECN-capable inner header (RFC 6040; the
 * kernel's End.DT6 does not, and the switch queues mark both headers for it);
 * a CE-marked packet whose inner header is not ECN-capable is dropped, as
 * RFC 6040 says. Anything else passes untouched.
 *
 * `cfg`: the first 8 bytes of the port's End.DT6 prefix; `st`: packets
 * decapsulated, CE copied inward, and dropped. */
#include "tc.h"

#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV6 /* Linux 6.3; older uapi headers lack it */
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif

ARRAY_MAP(cfg, __u64, 1);

struct counts {
    __u64 done;
    __u64 ce;
    __u64 dropped;
};

ARRAY_MAP(st, struct counts, 1);

enum { ECN_CE = 3 };
#define OUTER ((__s32)sizeof(struct ipv6hdr)) /* the header taken off */

SEC("tc")
int host_decap(struct __sk_buff *skb)
{
    __u32 zero = 0;
    __u16 proto;
    __u8 h[8];  /* the outer header's first 8 bytes: version, traffic class, ..., next header */
    __u8 inner[2];
    __u64 head; /* the outer destination's first 8 bytes */
    /* every packet the port takes in comes here, MRC's too: the next header decides first */
    if (bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_IPV6) ||
        bpf_skb_load_bytes(skb, ETH_HLEN, h, 8) || h[6] != IPPROTO_IPV6)
        return TC_ACT_OK;
    __u64 *prefix = bpf_map_lookup_elem(&cfg, &zero);
    struct counts *n = bpf_map_lookup_elem(&st, &zero);
    if (!prefix || !*prefix || !n ||
        bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, daddr), &head, 8) || head != *prefix ||
        bpf_skb_load_bytes(skb, ETH_HLEN + OUTER, inner, 2) || (inner[0] >> 4) != 6)
        return TC_ACT_OK;
    /* the ECN field: the low 2 bits of the traffic class, bits 5-4 of the header's second byte */
    if (((h[1] >> 4) & 3) == ECN_CE) {
        if (!((inner[1] >> 4) & 3)) {
            __sync_fetch_and_add(&n->dropped, 1);
            return TC_ACT_SHOT;
        }
        if ((inner[1] >> 4 & 3) != ECN_CE) {
            inner[1] |= ECN_CE << 4;
            if (bpf_skb_store_bytes(skb, ETH_HLEN + OUTER + 1, &inner[1], 1, BPF_F_RECOMPUTE_CSUM))
                goto drop;
            __sync_fetch_and_add(&n->ce, 1);
        }
    }
    if (bpf_skb_adjust_room(skb, -OUTER, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_DECAP_L3_IPV6) &&
        bpf_skb_adjust_room(skb, -OUTER, BPF_ADJ_ROOM_MAC, 0)) /* a kernel before 6.3 */
        goto drop;
    __sync_fetch_and_add(&n->done, 1);
    return TC_ACT_OK;
drop:
    __sync_fetch_and_add(&n->dropped, 1);
    return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Apache-2.0";
