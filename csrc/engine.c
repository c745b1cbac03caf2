/* The engine thread ("the NIC") and the raw-socket I/O of a context.
 * This file and no other makes system calls (architecture.md).
 *
 * Locking contract. Two locks, always taken in this order:
 *   - ulock serialises the application's threads (the engine never takes it);
 *   - lock protects the endpoint and the peer table. The engine thread holds
 *     it while it runs the core (input, poll_tx, timers) and drops it around
 *     waits, and whenever an application thread is waiting for it (waiters).
 * The fast path takes only ulock: mrc_ctx_post_write, mrc_ctx_post_recv and
 * mrc_ctx_poll_cq work on the lock-free send, receive and completion rings
 * (csrc/core.h), so posting and polling never wait for the engine and the
 * engine never waits for Python. Everything else (create, modify, register,
 * query) goes through mrc_ctx_lock/unlock, which take both.
 * Doorbell: a producer bumps post_seq and writes wake_fd only if the engine
 * said it is going to sleep. comp_fd (an eventfd) is written when completions
 * were added to the CQ: select/epoll/asyncio can wait on it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

enum { LINK_CHECK_NS = 200000, RX_ROUND = 4, RX_FRAME = 10240, RX_BLOCK = 4 * RX_FRAME, RX_FRAMES = 512, SPIN_NS = 200000, BATCH = 64, MAX_PORTS = 16, MAX_PEERS = 256, FRAME = 9216, HDRS = MRC_ETH_HLEN + MRC_IPV6_HLEN + MRC_UDP_HLEN };

struct port {
    struct mrc_port_cfg cfg;
    int fd;
    struct mrc_port_stats st;
    struct sockaddr_ll sll; /* where tx frames for this port go */
    /* rx: a PACKET_RX_RING (TPACKET_V2) shared with the kernel, so that
     * receiving costs no system call: frames are read where they landed */
    uint8_t *ring;
    size_t ring_len;
    uint32_t rhead;
    /* the port is up for MRC when the controller enables it (admin) and the
     * link has carrier (the kernel's IFF_UP and IFF_RUNNING) */
    uint8_t admin_down, carrier_down;
};

/* One tx batch for all ports, in the order the engine built the packets (so
 * that no plane waits behind another's burst): one unbound AF_PACKET socket,
 * each message addressed to its port; the headers live here, the MRC packet
 * stays where the core built it (two iovecs, no copy). */
struct txq {
    int fd;
    uint32_t n;
    struct mmsghdr msg[BATCH];
    struct iovec iov[BATCH][2];
    uint8_t hdr[BATCH][HDRS];
    uint8_t port[BATCH];
};

struct mrc_ctx {
    struct mrc_ep *ep;
    struct txq tx;
    struct port ports[MAX_PORTS];
    uint32_t nports;
    int plane_port[MRC_MAX_PLANES]; /* plane -> index into ports, -1 if none */
    struct mrc_peer_cfg *peers;
    uint32_t npeers;
    pthread_mutex_t lock, ulock;
    uint32_t waiters;   /* application threads waiting for lock */
    uint32_t sleeping;  /* the engine is (about to be) blocked in ppoll */
    uint64_t post_seq;  /* bumped by every post: the engine's doorbell */
    uint64_t spin_ns;   /* how long the idle engine polls before it sleeps */
    pthread_t thread;
    int running, started;
    int wake_fd, comp_fd, async_fd;
    int nl_fd;            /* rtnetlink link events of this namespace: carrier changes */
    uint64_t nl_next_ns;  /* when the engine next reads nl_fd */
    uint32_t aeq_signalled; /* aeq_tail when async_fd was last written */
    uint8_t *txbuf;
    struct mrc_txdesc txd[BATCH];
};

uint64_t mrc_ctx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Take the endpoint lock from an application thread: the engine sees
 * waiters and hands the lock over at the end of its current batch. */
static void lock_endpoint(struct mrc_ctx *c)
{
    __atomic_add_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&c->lock);
    __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
}

static void wake(struct mrc_ctx *c)
{
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof(one)) < 0) { /* counter saturated: the thread is awake anyway */ }
}

/* Classic BPF: IPv6, next header UDP, destination port 4791. */
static int attach_filter(int fd)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, 5),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, MRC_ETH_HLEN + 6),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 0, 3),
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, MRC_ETH_HLEN + MRC_IPV6_HLEN + 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MRC_UDP_PORT, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 0xFFFF),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
}

static int open_port(struct port *p)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_IPV6));
    if (fd < 0)
        return -errno;
    int one = 1, big = 8 << 20;
    if (attach_filter(fd) < 0 || setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    /* the receive ring: RX_FRAMES frames of RX_FRAME bytes (a 9216-byte frame
     * plus the tpacket header), RX_BLOCK (a whole number of pages) per block */
    int v = TPACKET_V2;
    struct tpacket_req req = {.tp_block_size = RX_BLOCK, .tp_block_nr = RX_FRAMES * RX_FRAME / RX_BLOCK,
                              .tp_frame_size = RX_FRAME, .tp_frame_nr = RX_FRAMES};
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    p->ring_len = (size_t)RX_FRAMES * RX_FRAME;
    p->ring = mmap(NULL, p->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0); /* no faults later */
    if (p->ring == MAP_FAILED) {
        int e = errno;
        p->ring = NULL;
        close(fd);
        return -e;
    }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                              .sll_ifindex = (int)p->cfg.ifindex};
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    p->fd = fd;
    p->sll = (struct sockaddr_ll){.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                                  .sll_ifindex = (int)p->cfg.ifindex, .sll_halen = 6};
    memcpy(p->sll.sll_addr, p->cfg.dst_mac, 6);
    return 0;
}

/* The tx socket: protocol 0, so it receives nothing. */
static int open_tx(struct txq *t)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int big = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    t->fd = fd;
    for (int i = 0; i < BATCH; i++) {
        t->iov[i][0] = (struct iovec){t->hdr[i], HDRS};
        t->msg[i].msg_hdr = (struct msghdr){.msg_iov = t->iov[i], .msg_iovlen = 2,
                                            .msg_namelen = sizeof(struct sockaddr_ll)};
    }
    return 0;
}

/* ------------------------------------------------------------ link state */
/* Tell the core when a port's effective state (admin and carrier) changes:
 * it stops using the plane at once and tells the peers (PORT_ERR). */
static void port_apply(struct mrc_ctx *c, struct port *p, uint64_t now)
{
    int up = !p->admin_down && !p->carrier_down;
    p->st.admin_up = !p->admin_down;
    p->st.carrier = !p->carrier_down;
    if (!!(c->ep->port_up & (1u << p->cfg.plane)) != up)
        mrc_ep_set_port(c->ep, p->cfg.plane, up, now);
}

static void set_carrier(struct mrc_ctx *c, struct port *p, int carrier, uint64_t now)
{
    if (!p->carrier_down == !!carrier)
        return;
    p->carrier_down = !carrier;
    if (!carrier)
        p->st.carrier_downs++;
    port_apply(c, p, now);
}

/* Each port's state as the kernel has it now (at start, and after the
 * event socket overflowed and events were lost). */
static void read_port_flags(struct mrc_ctx *c, uint64_t now)
{
    int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    for (uint32_t i = 0; i < c->nports; i++) {
        struct port *p = &c->ports[i];
        struct ifreq ifr = {0};
        if (if_indextoname(p->cfg.ifindex, ifr.ifr_name) && ioctl(s, SIOCGIFFLAGS, &ifr) == 0)
            set_carrier(c, p, (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING), now);
    }
    close(s);
}

/* Subscribe to link events (a NIC learns of carrier loss from its PHY; here
 * the kernel's RTM_NEWLINK says it) and read each port's current state.
 * Without netlink the ports simply count as having carrier. */
static void open_link_watch(struct mrc_ctx *c)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK};
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        fd = -1;
    }
    c->nl_fd = fd;
    for (uint32_t i = 0; i < c->nports; i++)
        c->ports[i].st.admin_up = c->ports[i].st.carrier = 1;
    read_port_flags(c, mrc_ctx_now_ns());
}

/* Drain the link events that arrived since the last look. */
static void read_link_events(struct mrc_ctx *c, uint64_t now)
{
    uint8_t buf[8192] __attribute__((aligned(4)));
    for (;;) {
        ssize_t n = recv(c->nl_fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno == ENOBUFS) {
            read_port_flags(c, now); /* events were lost: ask for the state itself */
            continue;
        }
        if (n <= 0)
            return;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if ((h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) ||
                h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
                continue;
            const struct ifinfomsg *ifi = NLMSG_DATA(h);
            for (uint32_t i = 0; i < c->nports; i++)
                if (c->ports[i].cfg.ifindex == (uint32_t)ifi->ifi_index)
                    set_carrier(c, &c->ports[i], h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                                                     (ifi->ifi_flags & IFF_RUNNING), now);
        }
    }
}

int mrc_ctx_create(const struct mrc_ep_attr *attr, const struct mrc_port_cfg *ports, uint32_t nports,
                   struct mrc_ctx **out)
{
    if (nports == 0 || nports > MAX_PORTS)
        return -EINVAL;
    struct mrc_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    for (int i = 0; i < MRC_MAX_PLANES; i++)
        c->plane_port[i] = -1;
    for (uint32_t i = 0; i < MAX_PORTS; i++)
        c->ports[i].fd = -1;
    c->tx.fd = -1;
    c->wake_fd = c->comp_fd = c->async_fd = c->nl_fd = -1;
    c->spin_ns = SPIN_NS;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->ulock, NULL);
    int rc = mrc_ep_create(attr, &c->ep);
    if (rc < 0)
        goto fail;
    c->peers = calloc(MAX_PEERS, sizeof(*c->peers));
    c->txbuf = malloc((size_t)BATCH * FRAME);
    if (!c->peers || !c->txbuf) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < nports; i++) {
        if (ports[i].plane >= MRC_MAX_PLANES) {
            rc = -EINVAL;
            goto fail;
        }
        c->ports[i].cfg = ports[i];
        c->plane_port[ports[i].plane] = (int)i;
        c->nports = i + 1;
        if ((rc = open_port(&c->ports[i])) < 0)
            goto fail;
    }
    if ((rc = open_tx(&c->tx)) < 0)
        goto fail;
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->comp_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->async_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd < 0 || c->comp_fd < 0 || c->async_fd < 0) {
        rc = -errno;
        goto fail;
    }
    open_link_watch(c);
    *out = c;
    return 0;
fail:
    mrc_ctx_destroy(c);
    return rc;
}

void mrc_ctx_destroy(struct mrc_ctx *c)
{
    if (!c)
        return;
    if (c->started) {
        lock_endpoint(c);
        c->running = 0;
        pthread_mutex_unlock(&c->lock);
        wake(c);
        pthread_join(c->thread, NULL);
    }
    for (uint32_t i = 0; i < MAX_PORTS; i++) {
        if (c->ports[i].fd >= 0)
            close(c->ports[i].fd);
        if (c->ports[i].ring)
            munmap(c->ports[i].ring, c->ports[i].ring_len);
    }
    if (c->tx.fd >= 0)
        close(c->tx.fd);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    if (c->comp_fd >= 0)
        close(c->comp_fd);
    if (c->async_fd >= 0)
        close(c->async_fd);
    if (c->nl_fd >= 0)
        close(c->nl_fd);
    mrc_ep_destroy(c->ep);
    free(c->peers);
    free(c->txbuf);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->ulock);
    free(c);
}

struct mrc_ep *mrc_ctx_ep(struct mrc_ctx *c) { return c->ep; }
int mrc_ctx_comp_fd(struct mrc_ctx *c) { return c->comp_fd; }
int mrc_ctx_async_fd(struct mrc_ctx *c) { return c->async_fd; }

/* With the endpoint lock held: tell async_fd's readers about new events. */
static void signal_async(struct mrc_ctx *c)
{
    if (c->ep->aeq_tail == c->aeq_signalled)
        return;
    c->aeq_signalled = c->ep->aeq_tail;
    uint64_t one = 1;
    if (write(c->async_fd, &one, sizeof(one)) < 0) { /* saturated: the reader is behind, it will see them */ }
}

/* Ring the doorbell after a post: a syscall only if the engine sleeps. */
static void doorbell(struct mrc_ctx *c)
{
    __atomic_add_fetch(&c->post_seq, 1, __ATOMIC_SEQ_CST);
    if (LOAD_SC(c->sleeping))
        wake(c);
}

int mrc_ctx_add_peer(struct mrc_ctx *c, const struct mrc_peer_cfg *peer)
{
    mrc_ctx_lock(c);
    int rc = -ENOSPC;
    if (c->npeers < MAX_PEERS && peer->nplanes <= MRC_MAX_PLANES) {
        c->peers[c->npeers] = *peer;
        rc = (int)c->npeers++;
    }
    mrc_ctx_unlock(c);
    return rc;
}

void mrc_ctx_lock(struct mrc_ctx *c)
{
    pthread_mutex_lock(&c->ulock);
    lock_endpoint(c);
}

void mrc_ctx_unlock(struct mrc_ctx *c)
{
    signal_async(c);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->ulock);
    wake(c); /* a modify or a port change may have made work: look now */
}

int mrc_ctx_port_admin(struct mrc_ctx *c, uint32_t plane, int up)
{
    if (plane >= MRC_MAX_PLANES || c->plane_port[plane] < 0)
        return -ENOENT;
    mrc_ctx_lock(c);
    struct port *p = &c->ports[c->plane_port[plane]];
    p->admin_down = !up;
    port_apply(c, p, mrc_ctx_now_ns());
    mrc_ctx_unlock(c); /* wakes the engine: the port status goes out now */
    return 0;
}

int mrc_ctx_post_write(struct mrc_ctx *c, uint32_t qpn, const struct mrc_wr *wr, uint32_t n)
{
    pthread_mutex_lock(&c->ulock);
    int rc = mrc_post_write(c->ep, qpn, wr, n);
    pthread_mutex_unlock(&c->ulock);
    if (rc > 0)
        doorbell(c);
    return rc;
}

int mrc_ctx_post_recv(struct mrc_ctx *c, uint32_t qpn, const uint64_t *wr_ids, uint32_t n)
{
    pthread_mutex_lock(&c->ulock);
    int rc = mrc_post_recv(c->ep, qpn, wr_ids, n);
    pthread_mutex_unlock(&c->ulock);
    if (rc > 0)
        doorbell(c);
    return rc;
}

int mrc_ctx_poll_cq(struct mrc_ctx *c, struct mrc_wc *wc, uint32_t max)
{
    pthread_mutex_lock(&c->ulock);
    int n = mrc_poll_cq(c->ep, wc, max);
    pthread_mutex_unlock(&c->ulock);
    return n;
}

/* ------------------------------------------------------------ locked calls
 * Each takes the endpoint lock for exactly one core call: the lock is never
 * held while the caller (Python) waits for its interpreter lock. */
#define LOCKED_CALL(name, params, args)      \
    int mrc_ctx_##name params                \
    {                                        \
        mrc_ctx_lock(c);                     \
        int rc = mrc_##name args;            \
        mrc_ctx_unlock(c);                   \
        return rc;                           \
    }
LOCKED_CALL(mr_reg, (struct mrc_ctx *c, void *addr, uint64_t length, uint32_t access, uint32_t *lkey, uint32_t *rkey), (c->ep, addr, length, access, lkey, rkey))
LOCKED_CALL(mr_dereg, (struct mrc_ctx *c, uint32_t lkey), (c->ep, lkey))
LOCKED_CALL(qp_create, (struct mrc_ctx *c, const struct mrc_qp_attr *attr, uint32_t *qpn), (c->ep, attr, qpn))
LOCKED_CALL(qp_destroy, (struct mrc_ctx *c, uint32_t qpn), (c->ep, qpn))
LOCKED_CALL(qp_modify, (struct mrc_ctx *c, uint32_t qpn, uint32_t state, uint32_t dest_qpn, uint16_t peer), (c->ep, qpn, state, dest_qpn, peer))
LOCKED_CALL(qp_query, (struct mrc_ctx *c, uint32_t qpn, struct mrc_qp_stats *st), (c->ep, qpn, st))
LOCKED_CALL(ep_drops, (struct mrc_ctx *c, uint64_t *counts, uint32_t n), (c->ep, counts, n))
LOCKED_CALL(ep_set_port, (struct mrc_ctx *c, uint32_t plane, int up, uint64_t now_ns), (c->ep, plane, up, now_ns))
LOCKED_CALL(ev_list, (struct mrc_ctx *c, uint32_t qpn, struct mrc_ev_info *out, uint32_t max), (c->ep, qpn, out, max))
LOCKED_CALL(ev_set_state, (struct mrc_ctx *c, uint32_t qpn, uint32_t ev, uint32_t state), (c->ep, qpn, ev, state))
LOCKED_CALL(ev_set_paths, (struct mrc_ctx *c, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes), (c->ep, qpn, npaths, nplanes))
LOCKED_CALL(ev_poll_events, (struct mrc_ctx *c, struct mrc_ev_event *out, uint32_t max), (c->ep, out, max))

void mrc_ctx_set_spin(struct mrc_ctx *c, uint64_t ns) { __atomic_store_n(&c->spin_ns, ns, __ATOMIC_RELAXED); }

int mrc_ctx_populate(void *addr, uint64_t len)
{
    /* fault the pages in for writing now, as ibv_reg_mr pins them, so the
     * engine does not take a page fault on the first packet to each page */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(pg - 1), e = ((uintptr_t)addr + len + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    if (len == 0)
        return 0;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0)
        return 0;
    return -errno;
#else
    return -EOPNOTSUPP;
#endif
}

LOCKED_CALL(ep_async_events, (struct mrc_ctx *c, struct mrc_async_event *out, uint32_t max), (c->ep, out, max))

int mrc_ctx_port_stats(struct mrc_ctx *c, uint32_t port, struct mrc_port_stats *st)
{
    if (port >= c->nports)
        return -EINVAL;
    struct port *p = &c->ports[port];
    struct tpacket_stats ks;
    socklen_t kl = sizeof(ks);
    mrc_ctx_lock(c);
    /* the kernel's counters reset on every read: add them up here */
    if (p->fd >= 0 && getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &ks, &kl) == 0)
        p->st.rx_ring_drops += ks.tp_drops;
    *st = p->st;
    mrc_ctx_unlock(c);
    return 0;
}

/* ------------------------------------------------------------------ tx */
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
    uint64_t s = sum;
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        s += (uint64_t)a + b;
        p += 8;
        n -= 8;
    }
    while (n >= 2) {
        uint16_t a;
        memcpy(&a, p, 2);
        s += a;
        p += 2;
        n -= 2;
    }
    if (n)
        s += *p; /* little-endian host: the odd byte is the high byte of a big-endian word */
    while (s >> 32)
        s = (s & 0xFFFFFFFFu) + (s >> 32);
    return (uint32_t)s;
}

static uint16_t csum_fold(uint32_t s)
{
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return (uint16_t)~s;
}

/* Send the batch. A message that fails (its interface went down, say) is
 * counted against its port and skipped; the engine retransmits what was lost. */
static void flush_tx(struct mrc_ctx *c)
{
    struct txq *t = &c->tx;
    uint32_t off = 0;
    while (off < t->n) {
        int n = sendmmsg(t->fd, t->msg + off, t->n - off, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == ENOBUFS) { /* the socket is full: drop the rest */
                for (; off < t->n; off++)
                    c->ports[t->port[off]].st.tx_errors++;
                break;
            }
            c->ports[t->port[off++]].st.tx_errors++;
            continue;
        }
        for (int i = 0; i < n; i++, off++) {
            struct port *p = &c->ports[t->port[off]];
            p->st.tx_packets++;
            p->st.tx_bytes += HDRS + t->iov[off][1].iov_len;
        }
        if (n == 0)
            break;
    }
    uint32_t seen = 0;
    for (uint32_t i = 0; i < t->n; i++)
        seen |= 1u << t->port[i];
    for (uint32_t i = 0; i < c->nports; i++)
        c->ports[i].st.tx_batches += (seen >> i) & 1;
    t->n = 0;
}

/* Wrap one engine packet in Ethernet/IPv6/UDP for its EV's plane and path.
 * pkt must stay valid until the next flush_tx (the batch points into it). */
static void queue_tx(struct mrc_ctx *c, const struct mrc_txdesc *d, const uint8_t *pkt)
{
    uint32_t plane = (d->ev >> 16) & 15, entropy = d->ev & 0xFFFF;
    int pi = c->plane_port[plane];
    if (pi < 0 || d->peer >= c->npeers || c->peers[d->peer].plane[plane].npaths == 0 || d->len + HDRS > FRAME) {
        if (pi >= 0)
            c->ports[pi].st.tx_no_path++;
        return;
    }
    struct port *p = &c->ports[pi];
    const struct mrc_peer_plane *pp = &c->peers[d->peer].plane[plane];
    struct txq *t = &c->tx;
    uint8_t *f = t->hdr[t->n];
    memcpy(f, p->cfg.dst_mac, 6);
    memcpy(f + 6, p->cfg.src_mac, 6);
    f[12] = 0x86;
    f[13] = 0xDD;
    uint8_t *ip = f + MRC_ETH_HLEN;
    uint32_t flow = d->ev & 0xFFFFF; /* flow label = low 20 bits of the EV (protocol.md 2) */
    uint32_t w0 = (6u << 28) | ((uint32_t)d->tclass << 20) | flow;
    put32(ip, w0);
    put16(ip + 4, (uint16_t)(MRC_UDP_HLEN + d->len));
    ip[6] = 17;
    ip[7] = 64;
    memcpy(ip + 8, p->cfg.src_addr, 16);
    memcpy(ip + 24, pp->paths[entropy % pp->npaths], 16);
    uint8_t *udp = ip + MRC_IPV6_HLEN;
    put16(udp, (uint16_t)(0xC000 | ((d->ev >> 18) & 0x3FFF)));
    put16(udp + 2, MRC_UDP_PORT);
    put16(udp + 4, (uint16_t)(MRC_UDP_HLEN + d->len));
    put16(udp + 6, 0);
    /* checksum over the *final* destination, the one left after every uSID shift */
    uint8_t ph[8] = {0};
    put32(ph, MRC_UDP_HLEN + d->len);
    ph[7] = 17;
    uint32_t s = csum_add(0, p->cfg.src_addr, 16);
    s = csum_add(s, pp->final_addr, 16);
    s = csum_add(s, ph, 8);
    s = csum_add(s, udp, MRC_UDP_HLEN); /* 8 bytes: the payload's words stay aligned */
    s = csum_add(s, pkt, d->len);
    uint16_t ck = csum_fold(s);
    if (ck == 0)
        ck = 0xFFFF;
    memcpy(udp + 6, &ck, 2); /* already in network order: summed as raw words */
    t->iov[t->n][1] = (struct iovec){(void *)pkt, d->len};
    t->msg[t->n].msg_hdr.msg_name = &p->sll;
    t->port[t->n] = (uint8_t)pi;
    if (++t->n == BATCH)
        flush_tx(c);
}

/* ------------------------------------------------------------------ rx */
static int peer_of(struct mrc_ctx *c, const uint8_t *src, uint32_t plane)
{
    for (uint32_t i = 0; i < c->npeers; i++)
        if (!memcmp(c->peers[i].plane[plane].final_addr, src, 16))
            return (int)i;
    return -1;
}

/* One received frame: unwrap Ethernet/IPv6/UDP and hand MRC to the core. */
static void rx_frame(struct mrc_ctx *c, struct port *p, const uint8_t *f, uint32_t len, uint64_t now)
{
    if (len < HDRS + MRC_BTH_LEN) {
        p->st.rx_foreign++;
        return;
    }
    const uint8_t *ip = f + MRC_ETH_HLEN, *udp = ip + MRC_IPV6_HLEN;
    uint32_t w0 = get32(ip);
    uint8_t tclass = (uint8_t)(w0 >> 20);
    uint32_t ulen = get16(udp + 4);
    if (ulen < MRC_UDP_HLEN || ulen > len - MRC_ETH_HLEN - MRC_IPV6_HLEN) {
        p->st.rx_foreign++;
        return;
    }
    int peer = peer_of(c, ip + 8, p->cfg.plane);
    if (peer < 0) {
        p->st.rx_foreign++;
        return;
    }
    struct mrc_meta m = {.ev = (w0 & 0xFFFFF) | ((uint32_t)(get16(udp) & 0x3FFF) << 18 & 0xFFF00000u),
                         .peer = (uint16_t)peer, .port = (uint8_t)p->cfg.plane,
                         .ecn_ce = (tclass & 3) == MRC_ECN_CE,
                         .trimmed = (tclass >> 2) == MRC_DSCP_TRIMMED};
    p->st.rx_packets++;
    p->st.rx_bytes += len;
    mrc_ep_input(c->ep, udp + MRC_UDP_HLEN, ulen - MRC_UDP_HLEN, &m, now);
}

/* Take up to max frames from the port's receive ring (no system call). */
static int rx_port(struct mrc_ctx *c, struct port *p, uint64_t now, int max)
{
    int n = 0;
    while (n < max) {
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)(p->ring + (size_t)p->rhead * RX_FRAME);
        uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
        if (!(st & TP_STATUS_USER))
            break;
        if (h->tp_snaplen < h->tp_len || h->tp_mac + h->tp_snaplen > RX_FRAME)
            p->st.rx_foreign++; /* truncated: larger than any MRC frame */
        else
            rx_frame(c, p, (const uint8_t *)h + h->tp_mac, h->tp_snaplen, now);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        p->rhead = p->rhead + 1 == RX_FRAMES ? 0 : p->rhead + 1;
        n++;
    }
    if (n)
        p->st.rx_batches++;
    return n;
}

/* Give the endpoint lock to a waiting application thread. */
static void hand_over(struct mrc_ctx *c)
{
    pthread_mutex_unlock(&c->lock);
    while (LOAD_SC(c->waiters))
        sched_yield();
    pthread_mutex_lock(&c->lock);
}

static void *engine_main(void *arg)
{
    struct mrc_ctx *c = arg;
    struct pollfd pf[MAX_PORTS + 2];
    for (uint32_t i = 0; i < c->nports; i++)
        pf[i] = (struct pollfd){.fd = c->ports[i].fd, .events = POLLIN};
    pf[c->nports] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    pf[c->nports + 1] = (struct pollfd){.fd = c->nl_fd, .events = POLLIN}; /* fd -1: ignored */
    uint64_t idle_since = 0;
    pthread_mutex_lock(&c->lock);
    while (c->running) {
        uint64_t seen = LOAD_SC(c->post_seq);
        uint64_t now = mrc_ctx_now_ns();
        uint32_t cq_before = c->ep->cq_tail;
        int work = 0;
        if (c->nl_fd >= 0 && now >= c->nl_next_ns) {
            c->nl_next_ns = now + LINK_CHECK_NS;
            read_link_events(c, now);
        }
        /* a few frames per port per round: draining one plane's backlog
         * before the next would look to the peer like reordering by plane */
        for (int round = 0, got = 1; got && round < BATCH / RX_ROUND; round++) {
            got = 0;
            for (uint32_t i = 0; i < c->nports; i++)
                got += rx_port(c, &c->ports[i], now, RX_ROUND);
            work += got;
        }
        int n;
        do {
            n = mrc_ep_poll_tx(c->ep, now, c->txbuf, (uint32_t)BATCH * FRAME, c->txd, BATCH);
            for (int k = 0; k < n; k++)
                queue_tx(c, &c->txd[k], c->txbuf + c->txd[k].off);
            flush_tx(c); /* before txbuf is reused */
            work += n;
        } while (n == BATCH);
        if (c->ep->cq_tail != cq_before) {
            uint64_t one = 1;
            if (write(c->comp_fd, &one, sizeof(one)) < 0) { /* saturated: the reader is behind, it will see them */ }
            /* let the woken application thread run now rather than behind this busy thread */
            sched_yield();
        }
        signal_async(c);
        if (LOAD_SC(c->waiters))
            hand_over(c);
        /* busy, or spinning a little before sleeping: the next SACK is
         * usually microseconds away */
        if (work) {
            idle_since = 0;
            continue;
        }
        if (!idle_since)
            idle_since = now;
        if (now - idle_since < c->spin_ns) {
            sched_yield(); /* spin politely: a runnable application or switch gets the core */
            continue;
        }
        uint64_t next = mrc_ep_next_timer(c->ep, now);
        STORE_SC(c->sleeping, 1);
        if (LOAD_SC(c->post_seq) != seen) { /* a post raced the decision to sleep */
            STORE_SC(c->sleeping, 0);
            continue;
        }
        pthread_mutex_unlock(&c->lock);
        uint64_t wait = next == UINT64_MAX ? 100000000ull : (next > now ? next - now : 0);
        if (wait > 100000000ull)
            wait = 100000000ull;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull), .tv_nsec = (long)(wait % 1000000000ull)};
        if (ppoll(pf, c->nports + 2, &ts, NULL) > 0 && (pf[c->nports].revents & POLLIN)) {
            uint64_t v;
            if (read(c->wake_fd, &v, sizeof(v)) < 0) { /* spurious wake */ }
        }
        STORE_SC(c->sleeping, 0);
        idle_since = 0;
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int mrc_ctx_start(struct mrc_ctx *c)
{
    if (c->started)
        return -EALREADY;
    c->running = 1;
    int rc = pthread_create(&c->thread, NULL, engine_main, c);
    if (rc)
        return -rc;
    c->started = 1;
    return 0;
}

/* ------------------------------------------------------------ EV probes */
int mrc_ctx_ep_batch_send_wait(struct mrc_ctx *c, const struct mrc_probe_req *req, uint32_t n, uint64_t timeout_ns,
                               struct mrc_probe_resp *out)
{
    if (n > MRC_PROBE_MAX || (n && (!req || !out)))
        return -EINVAL;
    if (!c->started)
        return -ENOTCONN; /* nothing would send them */
    uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    uint64_t deadline = mrc_ctx_now_ns() + timeout_ns;
    uint32_t queued = 0, left = 0, answered = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t plane = req[i].ev >> 16;
        out[i] = (struct mrc_probe_resp){.status = -ETIMEDOUT, .ev = req[i].ev, .peer = req[i].peer};
        if (plane >= MRC_MAX_PLANES || c->plane_port[plane] < 0)
            out[i].status = -ENETDOWN; /* no port on that plane */
        else if (req[i].peer >= c->npeers || !c->peers[req[i].peer].plane[plane].npaths)
            out[i].status = -EHOSTUNREACH;
        else
            left++;
    }
    /* queue them all (the control ring may fill: let the engine drain it), then wait */
    uint32_t seen = 0;
    while (left) {
        uint64_t now = mrc_ctx_now_ns();
        if (queued < n) {
            mrc_ctx_lock(c);
            for (; queued < n; queued++) {
                if (out[queued].status != -ETIMEDOUT)
                    continue;
                int rc = mrc_ep_probe_send(c->ep, req[queued].peer, req[queued].ev, mrc_ctx_now_ns(), &ids[queued]);
                if (rc == -ENOSPC || rc == -EBUSY)
                    break; /* try again after the engine sent some */
                if (rc < 0) {
                    out[queued].status = rc;
                    left--;
                }
            }
            mrc_ctx_unlock(c);
        }
        uint32_t got = __atomic_load_n(&c->ep->probe_answered, __ATOMIC_ACQUIRE);
        if (got != seen) {
            seen = got;
            mrc_ctx_lock(c);
            for (uint32_t i = 0; i < queued; i++) {
                struct mrc_probe_result r;
                if (!ids[i] || out[i].status != -ETIMEDOUT || mrc_ep_probe_result(c->ep, ids[i], &r) != 1)
                    continue;
                out[i].status = 0;
                out[i].port = r.port;
                out[i].rtt_ns = r.rtt_ns;
                ids[i] = 0;
                answered++;
                left--;
            }
            mrc_ctx_unlock(c);
            continue;
        }
        if (now >= deadline)
            break;
        struct timespec ts = {0, 20000}; /* 20 us: probes answer in tens of us */
        nanosleep(&ts, NULL);
    }
    mrc_ctx_lock(c);
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] && out[i].status == -ETIMEDOUT)
            mrc_ep_probe_cancel(c->ep, ids[i]); /* a late answer is now STALE_PROBE */
    mrc_ctx_unlock(c);
    free(ids);
    return (int)answered;
}

int64_t mrc_ctx_blast(struct mrc_ctx *c, uint16_t peer, uint32_t payload, uint64_t duration_ns)
{
    if (c->started)
        return -EBUSY;
    if (peer >= c->npeers || payload + 64 > FRAME - HDRS)
        return -EINVAL;
    /* one data packet (WRITE_ONLY to QP 0, which nobody owns), built once */
    uint8_t *pkt = calloc(1, FRAME), *zeros = calloc(1, FRAME);
    if (!pkt || !zeros) {
        free(pkt);
        free(zeros);
        return -ENOMEM;
    }
    struct mrc_pkt p = {.opcode = MRC_OP_WRITE_ONLY, .dqpn = 0, .payload_len = payload, .dma_len = payload};
    int len = mrc_pkt_build(&p, zeros, pkt, FRAME);
    free(zeros);
    if (len < 0) {
        free(pkt);
        return len;
    }
    int64_t sent = 0;
    uint64_t end = mrc_ctx_now_ns() + duration_ns;
    uint32_t ev = 0;
    while (mrc_ctx_now_ns() < end) {
        for (int k = 0; k < BATCH; k++) {
            uint32_t plane = ev % c->nports, entropy = ev / c->nports;
            struct mrc_txdesc d = {.len = (uint32_t)len, .ev = (c->ports[plane].cfg.plane << 16) | (entropy & 0xFF),
                                   .peer = peer, .tclass = MRC_DSCP_DATA << 2 | MRC_ECN_ECT0, .is_data = 1};
            queue_tx(c, &d, pkt);
            ev++;
        }
        flush_tx(c);
        sent += BATCH;
    }
    free(pkt);
    return sent;
}
