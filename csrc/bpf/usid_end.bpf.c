/* A switch's SRv6 End with next-CSID (protocol.md section 4), for a kernel
 * built without SRv6 (no CONFIG_IPV6_SEG6_LWTUNNEL: seg6local routes are
 * refused). tc clsact ingress, one instance per switch port; mrc.fabric.apply
 * attaches it only when the kernel refuses the End route.
 *
 * What the kernel's `seg6local action End flavors next-csid lblen 32 nflen
 * 16` does for a destination in the switch's own uSID prefix
 * (block:uSID::/48), done here before the kernel's routing: the uSIDs after
 * the active one shift up by one (16 bits), zeros fill the end, and the
 * packet goes on to IPv6 input, which looks the new active uSID up in the
 * switch's static routes and forwards it (hop limit and all) as any packet.
 * Any other packet passes untouched. No upper-layer checksum changes: MRC
 * senders compute it over the final destination (the one left after the
 * last shift), as for SRv6.
 *
 * `cfg` (written by mrc.fabric.apply): the 32-bit locator block and the
 * switch's own uSID; `st`: packets shifted. */
#include "tc.h"

struct end_cfg {
    __u32 block;   /* the locator block, network order (fc00:0000) */
    __u16 usid;    /* this switch's uSID, network order; 0: nothing is shifted */
    __u16 pad;
};

ARRAY_MAP(cfg, struct end_cfg, 1);

ARRAY_MAP(st, __u64, 1);

enum { ETH = 14, DA = ETH + 24 };

SEC("tc")
int usid_end(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct end_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
    __u16 proto;
    __u8 da[16], shifted[12];
    if (!c || !c->usid || bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_IPV6) ||
        bpf_skb_load_bytes(skb, DA, da, 16))
        return TC_ACT_OK;
    if (__builtin_memcmp(da, &c->block, 4) || __builtin_memcmp(da + 4, &c->usid, 2))
        return TC_ACT_OK; /* not this switch's uSID: routed as it is */
    __builtin_memcpy(shifted, da + 6, 10);
    shifted[10] = shifted[11] = 0;
    if (bpf_skb_store_bytes(skb, DA + 4, shifted, 12, BPF_F_RECOMPUTE_CSUM))
        return TC_ACT_SHOT;
    __u64 *n = bpf_map_lookup_elem(&st, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Apache-2.0";
