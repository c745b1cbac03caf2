/* Wire field accessors: every big-endian field and every EV bit field is read
 * and written here (the Python twins of the EV accessors are in mrc/wire.py). */
#ifndef MRC_HDR_H
#define MRC_HDR_H
#include <stdint.h>

#include "mrc_wire.h"

static inline uint16_t get16(const uint8_t *b) { return (uint16_t)(b[0] << 8 | b[1]); }
static inline uint32_t get24(const uint8_t *b) { return (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2]; }
static inline uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}
static inline uint64_t get64(const uint8_t *b) { return (uint64_t)get32(b) << 32 | get32(b + 4); }
static inline void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)(v >> 8); b[1] = (uint8_t)v; }
static inline void put24(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 16); b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)v;
}
static inline void put32(uint8_t *b, uint32_t v) { put16(b, (uint16_t)(v >> 16)); put16(b + 2, (uint16_t)v); }
static inline void put64(uint8_t *b, uint64_t v) { put32(b, (uint32_t)(v >> 32)); put32(b + 4, (uint32_t)v); }

/* EV = plane << 16 | entropy (this implementation's layout: mrc_wire.h). */
static inline uint32_t ev_make(uint32_t plane, uint32_t entropy)
{
    return plane << MRC_EV_PLANE_SHIFT | (entropy & MRC_EV_ENTROPY_MASK);
}
static inline uint32_t ev_plane(uint32_t ev) { return ev >> MRC_EV_PLANE_SHIFT; }
static inline uint32_t ev_entropy(uint32_t ev) { return ev & MRC_EV_ENTROPY_MASK; }
/* An EV on the wire: the flow label holds bits 0-19, the UDP source port
 * 0xC000 | bits 18-31 (a receiver takes bits 18-19 from the flow label). */
static inline uint32_t ev_flow_label(uint32_t ev) { return ev & MRC_EV_FLOW_MASK; }
static inline uint16_t ev_udp_sport(uint32_t ev)
{
    return (uint16_t)(MRC_EV_SPORT_BASE | ((ev >> MRC_EV_SPORT_SHIFT) & MRC_EV_SPORT_MASK));
}
static inline uint32_t ev_from_wire(uint32_t flow_label, uint16_t sport)
{
    return (flow_label & MRC_EV_FLOW_MASK) |
           (((uint32_t)(sport & MRC_EV_SPORT_MASK) << MRC_EV_SPORT_SHIFT) & ~(uint32_t)MRC_EV_FLOW_MASK);
}
#endif
