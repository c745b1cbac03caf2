/* What makes an MRC buffer sent through a kernel UDP socket (k packets of
 * one path per send, UDP_SEGMENT: drivers/io_gso.c) leave the port as MRC's
 * wire says (protocol.md 2, "IPv6 and UDP"). tc clsact egress of every host
 * port, first of its filters; mrc.fabric.gsobpf attaches it.
 *
 * The engine hands each send its EV in the socket buffer's mark, with
 * MRC_GSO_MARK set (SO_MARK as a control message: needs CAP_NET_RAW, as the
 * raw ports do); anything without that bit passes untouched, the raw ports'
 * packets and the kernel's own traffic alike. For a marked buffer:
 * - the flow label gets EV bits 0-19, the UDP source port 0xC000 | EV bits
 *   18-31 (a UDP socket has one source port and no free flow label);
 * - the UDP checksum is moved from the pseudo-header over the destination the
 *   socket was given, the path's uSID container, to the one over the final
 *   destination, which the receiver sees after the last shift (F3216: the
 *   32-bit block, then the container's last non-zero uSID, then zeros). A
 *   GSO buffer's checksum is still partial here: its seed is corrected once
 *   and the kernel (or the NIC) sums each segment after it is cut;
 * - a buffer of segments gets the segments' UDP length (gso_size + 8), its
 *   partial checksum with it: what each segment will carry, and what tells a
 *   capture of the whole buffer where to cut it;
 * - the mark is cleared.
 * A buffer stays whole: every segment the kernel cuts from it copies these
 * headers. `st`: buffers fixed; buffers dropped (not IPv6/UDP, a header that
 * could not be read or written: the kernel could not have built it). */
#include "tc.h"

#define MRC_GSO_MARK 0x80000000u /* drivers/io_gso.h */

struct counts {
    __u64 fixed;
    __u64 dropped;
};

ARRAY_MAP(st, struct counts, 1);

#define IP6_OFF ETH_HLEN
#define UDP_OFF (ETH_HLEN + sizeof(struct ipv6hdr))

/* The final destination of container d: block, the last non-zero uSID, zeros. */
static __always_inline void final_of(const __u16 *d, __u16 *f)
{
    __u16 last = 0;
#pragma unroll
    for (int i = 2; i < 8; i++)
        if (d[i])
            last = d[i];
    f[0] = d[0];
    f[1] = d[1];
    f[2] = last;
#pragma unroll
    for (int i = 3; i < 8; i++)
        f[i] = 0;
}

SEC("tc")
int host_gso(struct __sk_buff *skb)
{
    __u32 zero = 0, mark = skb->mark;
    if (!(mark & MRC_GSO_MARK))
        return TC_ACT_UNSPEC;
    skb->mark = 0;
    struct counts *n = bpf_map_lookup_elem(&st, &zero);
    if (!n)
        return TC_ACT_SHOT;
    __u32 ev = mark & ~MRC_GSO_MARK, w0;
    __u8 nexthdr;
    __u16 d[8], f[8];
    __u16 sport_old, sport = bpf_htons((__u16)(0xC000 | ((ev >> 18) & 0x3FFF)));
    __u32 csum_off = UDP_OFF + 6;
    if (bpf_skb_load_bytes(skb, IP6_OFF, &w0, 4) ||
        bpf_skb_load_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, nexthdr), &nexthdr, 1) || nexthdr != IPPROTO_UDP ||
        bpf_skb_load_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, daddr), d, 16) ||
        bpf_skb_load_bytes(skb, UDP_OFF, &sport_old, 2))
        goto drop;
    /* a buffer of segments says their size in its UDP length, as each of them will: a capture of
     * the whole buffer can be cut (mrc decode), and the kernel's cutting, which moves the partial
     * checksum from this length to each segment's, finds the seed it expects */
    __u32 seg = skb->gso_size;
    __u16 ulen_old, ulen = bpf_htons((__u16)(seg + 8));
    if (seg && (bpf_skb_load_bytes(skb, UDP_OFF + 4, &ulen_old, 2) ||
                bpf_l4_csum_replace(skb, csum_off, ulen_old, ulen, BPF_F_PSEUDO_HDR | 2) ||
                bpf_skb_store_bytes(skb, UDP_OFF + 4, &ulen, 2, 0)))
        goto drop;
    final_of(d, f);
    w0 = bpf_htonl((bpf_ntohl(w0) & 0xFFF00000u) | (ev & 0xFFFFFu));
    __s64 diff = bpf_csum_diff((__be32 *)d, 16, (__be32 *)f, 16, 0);
    if (diff < 0 || bpf_skb_store_bytes(skb, IP6_OFF, &w0, 4, 0) ||
        bpf_l4_csum_replace(skb, csum_off, sport_old, sport, 2) ||
        bpf_skb_store_bytes(skb, UDP_OFF, &sport, 2, 0) ||
        bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR))
        goto drop;
    __sync_fetch_and_add(&n->fixed, 1);
    return TC_ACT_UNSPEC;
drop:
    __sync_fetch_and_add(&n->dropped, 1);
    return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Apache-2.0";
