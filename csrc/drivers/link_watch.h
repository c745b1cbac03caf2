/* link_watch.c: the ports' carrier from rtnetlink link events, reported
 * through a callback; it knows nothing of the engine or the core. Lock: the
 * engine thread (or the creator, before the thread starts). */
#ifndef MRC_DRIVERS_LINK_WATCH_H
#define MRC_DRIVERS_LINK_WATCH_H
#include <stdint.h>

struct link_watch {
    int fd;                  /* -1: no netlink here; ports count as having carrier */
    uint64_t next_ns;        /* when the engine next reads the events */
};
typedef void (*lw_fn)(void *arg, uint32_t ifindex, int carrier);
void lw_open(struct link_watch *w);
void lw_close(struct link_watch *w);
void lw_read_flags(const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg);
void lw_read_events(struct link_watch *w, const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg);
#endif
