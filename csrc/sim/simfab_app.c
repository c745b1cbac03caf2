/* The fabric simulator's application (docs/sim.md): flows of WRITEs, what
 * each flow posts next (its depth, a collective's dependencies), the WRITEs
 * done at its sender and a collective's arrivals at its receiver, whatever
 * transport the hosts run (simfab.c's MRC engine, simfab_roce.c's RoCE
 * model: each sets f->post_more).
 *
 * Lock: none (simfab.c). */
#include "sim/simfab_app.h"
#include "sim/simfab_heap.h"
#include "sim/simfab_port.h"

uint64_t fab_next_len(const struct mrc_fab *f, const struct fflow *fl)
{
    if (fl->posted >= fl->c.bytes || fl->seq - fl->msgs >= fl->c.depth)
        return 0;
    uint64_t len = fl->c.bytes - fl->posted < fl->c.msg ? fl->c.bytes - fl->posted : fl->c.msg;
    if (fl->lens) { /* a collective's WRITE: its own length, once the WRITE it waits for has arrived */
        int32_t g = fl->dep_flow[fl->seq];
        if (g >= 0 && f->flows[g].arrived <= fl->dep_msg[fl->seq])
            return 0;
        len = fl->lens[fl->seq];
    }
    return len;
}

/* A collective's WRITE of fl arrived (its receiver's completion): the flows that wait for it may send
 * (their hosts are woken). */
void fab_arrived(struct mrc_fab *f, struct fflow *fl)
{
    fl->arrived++;
    fl->arrived_at = f->now;
    for (uint32_t k = 0; k < fl->ndependents; k++) {
        struct fflow *g = &f->flows[fl->dependents[k]];
        uint64_t seq = g->seq;
        f->post_more(f, g);
        if (g->seq != seq)
            wake_at(f, g->c.src, f->now);
    }
}

/* n WRITEs of fl, bytes in all, completed at its sender now. */
void fab_wr_done(struct mrc_fab *f, struct fflow *fl, uint64_t n, uint64_t bytes)
{
    uint64_t gap = f->now - fl->last;
    if (fl->msgs && gap > fl->max_gap) {
        fl->max_gap = gap;
        fl->max_gap_end = f->now;
    }
    if (!fl->msgs)
        fl->first = f->now;
    fl->last = f->now;
    fl->msgs += n;
    fl->done += bytes;
    f->st.done_bytes += bytes;
    fab_bucket_add(f, 0, bytes);
    if (fl->done >= fl->c.bytes && !fl->end) {
        fl->end = f->now;
        f->st.flows_done++;
    }
}
