/* A host's `seg6 mode encap.red` for kernel traffic over the fabric (TCP,
 * MPTCP, ping between the hosts' inner addresses), for a kernel built without
 * SRv6 (no CONFIG_IPV6_SEG6_LWTUNNEL: seg6 routes are refused). tc clsact
 * egress of every host port; mrc.fabric.srv6bpf attaches it only when the
 * kernel refuses the encap route, and routes the inner destinations out of
 * the port to its leaf as plain routes with an MTU 40 bytes under the link's.
 *
 * What the kernel's encap.red with one segment does: an IPv6 packet whose
 * destination is another host's inner address (fd6d:<host>:<plane>::1, or
 * anything under fd6d:<host>::/32) gets an outer IPv6 header, no SRH: source
 * the port's address, destination the uSID container of the path to that
 * host through this port's plane (segs[host], written by mrc.fabric.srv6bpf),
 * next header 41, traffic class and flow label copied from the inner header
 * (RFC 6040 normal mode: the switches' ECN marks land on the outer header).
 * A GSO packet stays one (its segments keep their size: the route's MTU left
 * the room), and the kernel segments it with the outer header if it must.
 * Anything else passes on to the next filter (the port's queue). The switches
 * forward on the outer destination (End next-CSID); the last one hands the
 * packet to the peer's port, where host_decap.bpf.c takes the header off.
 *
 * `cfg`: the outer source; `segs`: per host index, the outer destination
 * (all zero: no path, the packet passes as it is); `st`: packets
 * encapsulated, and packets dropped because they could not be (too long for
 * the header's payload length, or the kernel refused the room). */
#include "tc.h"

#define MAX_HOSTS 256 /* mrc.fabric.topology.MAX_INDEX */

struct addr16 {
    __u8 a[16];
};

ARRAY_MAP(cfg, struct addr16, 1);

ARRAY_MAP(segs, struct addr16, MAX_HOSTS);

struct counts {
    __u64 done;
    __u64 dropped;
};

ARRAY_MAP(st, struct counts, 1);

SEC("tc")
int host_encap(struct __sk_buff *skb)
{
    __u32 zero = 0, host;
    __u16 proto;
    __u8 d[16];
    struct ipv6hdr out;
    /* every packet the port sends comes here, MRC's too: the destination alone decides, the rest
     * of the header is read only for a packet that is ours */
    if (bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_IPV6) ||
        bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, daddr), d, 16))
        return TC_ACT_UNSPEC;
    if (d[0] != 0xfd || d[1] != 0x6d || d[2] != 0)
        return TC_ACT_UNSPEC; /* not an inner address: not ours */
    host = d[3];
    struct addr16 *seg = bpf_map_lookup_elem(&segs, &host);
    struct addr16 *src = bpf_map_lookup_elem(&cfg, &zero);
    struct counts *n = bpf_map_lookup_elem(&st, &zero);
    /* version, traffic class (ECN with it), flow label: copied to the outer header */
    if (!seg || !src || !n || !seg->a[0] || bpf_skb_load_bytes(skb, ETH_HLEN, &out, 4))
        return TC_ACT_UNSPEC;
    __u32 len = skb->len - ETH_HLEN; /* the inner packet: the outer header's payload */
    if (len > 0xffff) {
        __sync_fetch_and_add(&n->dropped, 1);
        return TC_ACT_SHOT;
    }
    out.payload_len = bpf_htons(len);
    out.nexthdr = IPPROTO_IPV6;
    out.hop_limit = 64;
    __builtin_memcpy(&out.saddr, src->a, 16);
    __builtin_memcpy(&out.daddr, seg->a, 16);
    if (bpf_skb_adjust_room(skb, sizeof(out), BPF_ADJ_ROOM_MAC,
                            BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV6) ||
        bpf_skb_store_bytes(skb, ETH_HLEN, &out, sizeof(out), BPF_F_INVALIDATE_HASH)) {
        __sync_fetch_and_add(&n->dropped, 1);
        return TC_ACT_SHOT;
    }
    __sync_fetch_and_add(&n->done, 1);
    return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Apache-2.0";
