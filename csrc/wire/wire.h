/* The wire format's internal builders (wire.c), for the core and the I/O
 * layer; the parsers and the PSN compare are in the contract (mrc_wire.h). */
#ifndef MRC_CSRC_WIRE_H
#define MRC_CSRC_WIRE_H
#include <stddef.h>

#include "wire/hdr.h"

/* Write BTH and the extension headers of p into out; returns their length
 * (the payload goes after them, then mrc_pkt_finish). */
int mrc_pkt_build_hdr(const struct mrc_pkt *p, uint8_t *out, size_t cap);
/* Append the ICRC over b[0..len); returns the whole length. */
int mrc_pkt_finish(uint8_t *b, uint32_t len);
#endif
