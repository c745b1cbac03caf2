/* What every tc-BPF program of the fabric (csrc/bpf/NAME.bpf.c, built by
 * mrc.fabric.tcbpf.build) includes: the headers, and its maps' one shape. */
#ifndef MRC_BPF_TC_H
#define MRC_BPF_TC_H
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* An array map of n values, keyed 0..n-1: its instance is the port's (each port loads its own
 * program); user space reads and writes it by the name (mrc.fabric.tcbpf.prog_maps). */
#define ARRAY_MAP(name, value_type, n)                                                             \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_ARRAY);                                                          \
        __uint(max_entries, n);                                                                    \
        __type(key, __u32);                                                                        \
        __type(value, value_type);                                                                 \
    } name SEC(".maps")

#endif
