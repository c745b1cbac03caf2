/* Carrier of the ports, as a NIC learns it from its PHY: here the kernel's
 * rtnetlink link events (RTM_NEWLINK/RTM_DELLINK) say when an interface
 * loses or regains carrier (IFF_UP and IFF_RUNNING). Reports each change
 * through a callback; knows nothing of the engine or the core. Without
 * netlink (fd -1) the ports simply count as having carrier.
 *
 * Lock: used by the engine thread alone once it runs (before that, by the
 * context's creator). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "drivers/link_watch.h"

void lw_open(struct link_watch *w)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK};
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        fd = -1;
    }
    w->fd = fd;
    w->next_ns = 0;
}

void lw_close(struct link_watch *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

/* Each interface's state as the kernel has it now (at start, and after the
 * event socket overflowed and events were lost). */
void lw_read_flags(const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg)
{
    int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        struct ifreq ifr = {0};
        if (if_indextoname(ifindex[i], ifr.ifr_name) && ioctl(s, SIOCGIFFLAGS, &ifr) == 0)
            fn(arg, ifindex[i], (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING));
    }
    close(s);
}

/* Drain the link events that arrived since the last look, in order. */
void lw_read_events(struct link_watch *w, const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg)
{
    uint8_t buf[8192] __attribute__((aligned(4)));
    for (;;) {
        ssize_t len = recv(w->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (len < 0 && errno == ENOBUFS) {
            lw_read_flags(ifindex, n, fn, arg); /* events were lost: ask for the state itself */
            continue;
        }
        if (len <= 0)
            return;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
            if ((h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) ||
                h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
                continue;
            const struct ifinfomsg *ifi = NLMSG_DATA(h);
            for (uint32_t i = 0; i < n; i++)
                if (ifindex[i] == (uint32_t)ifi->ifi_index)
                    fn(arg, ifindex[i], h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                                            (ifi->ifi_flags & IFF_RUNNING));
        }
    }
}
