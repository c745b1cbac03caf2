/* A port as the kernel knows it (mrc.ports' job, for C programs): its
 * index, MAC and MTU (ioctl), its global IPv6 address (getifaddrs), and
 * the MAC of the next hop every packet goes to: the gateway of its routes
 * (rtnetlink RTM_GETROUTE) in the neighbour table (RTM_GETNEIGH), which a
 * datagram toward the gateway fills when the kernel does not know it yet. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"

#define MAX_GW 8

int parse_addr(const char *text, struct in6_addr *out)
{
    return text && inet_pton(AF_INET6, text, out) == 1 ? 0 : -EINVAL;
}

static int is_link_local(const struct in6_addr *a)
{
    return a->s6_addr[0] == 0xfe && (a->s6_addr[1] & 0xc0) == 0x80;
}

int ports_local_addrs(struct in6_addr *out, int max)
{
    struct ifaddrs *all, *i;
    int n = 0;
    if (getifaddrs(&all) < 0)
        return -errno;
    for (i = all; i && n < max; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6)
            out[n++] = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    freeifaddrs(all);
    return n;
}

/* Send one dump request and hand every answer to cb. */
static int nl_dump(uint16_t type, const void *body, size_t blen, void (*cb)(struct nlmsghdr *, void *), void *arg)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return -errno;
    struct { struct nlmsghdr h; char body[64]; } req = {0};
    req.h.nlmsg_len = (uint32_t)NLMSG_LENGTH(blen);
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = 1;
    memcpy(req.body, body, blen);
    if (send(fd, &req, req.h.nlmsg_len, 0) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    static __thread char buf[32768];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) {
            int err = -errno;
            close(fd);
            return err;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
                close(fd);
                return h->nlmsg_type == NLMSG_DONE ? 0 : -EIO;
            }
            cb(h, arg);
        }
    }
}

struct gws { uint32_t ifindex; struct in6_addr gw[MAX_GW]; int n; uint8_t mac[6]; int found; };

static void on_route(struct nlmsghdr *h, void *arg)
{
    struct gws *g = arg;
    struct rtmsg *rt = NLMSG_DATA(h);
    int len = (int)RTM_PAYLOAD(h), oif = -1;
    struct in6_addr gw;
    int have_gw = 0;
    for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) == 4)
            memcpy(&oif, RTA_DATA(a), 4);
        else if (a->rta_type == RTA_GATEWAY && RTA_PAYLOAD(a) == 16) {
            memcpy(&gw, RTA_DATA(a), 16);
            have_gw = 1;
        }
    }
    if (have_gw && oif == (int)g->ifindex && g->n < MAX_GW) {
        for (int i = 0; i < g->n; i++)
            if (!memcmp(&g->gw[i], &gw, 16))
                return;
        g->gw[g->n++] = gw;
    }
}

static void on_neigh(struct nlmsghdr *h, void *arg)
{
    struct gws *g = arg;
    struct ndmsg *nd = NLMSG_DATA(h);
    if (g->found || nd->ndm_ifindex != (int)g->ifindex)
        return;
    int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*nd)));
    const void *dst = NULL, *ll = NULL;
    for (struct rtattr *a = (struct rtattr *)((char *)nd + NLMSG_ALIGN(sizeof(*nd))); RTA_OK(a, len);
         a = RTA_NEXT(a, len)) {
        if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == 16)
            dst = RTA_DATA(a);
        else if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == 6)
            ll = RTA_DATA(a);
    }
    if (!dst || !ll)
        return;
    for (int i = 0; i < g->n; i++)
        if (!memcmp(&g->gw[i], dst, 16)) {
            memcpy(g->mac, ll, 6);
            g->found = 1;
        }
}

/* Any datagram toward a gateway makes the kernel resolve it. */
static void ask_neighbour(const struct app_port *p, const struct in6_addr *gw)
{
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct sockaddr_in6 to = {.sin6_family = AF_INET6, .sin6_port = htons(9), .sin6_addr = *gw,
                              .sin6_scope_id = is_link_local(gw) ? p->ifindex : 0};
    if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, p->ifname, (socklen_t)strlen(p->ifname)) == 0)
        (void)sendto(fd, "", 0, 0, (struct sockaddr *)&to, sizeof(to));
    close(fd);
}

static int next_hop(struct app_port *p)
{
    struct gws g = {.ifindex = p->ifindex};
    struct rtmsg rt = {.rtm_family = AF_INET6};
    int rc = nl_dump(RTM_GETROUTE, &rt, sizeof(rt), on_route, &g);
    if (rc < 0)
        return app_fail(-rc, "cannot read the routes of %s (rtnetlink): %s", p->ifname, strerror(-rc));
    if (!g.n)
        return app_fail(ENETUNREACH, "port %s has no route through a gateway: MRC sends every packet to the next "
                        "hop of its port (add a route via the switch, e.g. `ip -6 route add 2001:db8::/32 via "
                        "fe80::1 dev %s`)", p->ifname, p->ifname);
    struct ndmsg nd = {.ndm_family = AF_INET6};
    for (int tries = 0; tries < 100; tries++) { /* about 1 s */
        if ((rc = nl_dump(RTM_GETNEIGH, &nd, sizeof(nd), on_neigh, &g)) < 0)
            return app_fail(-rc, "cannot read the neighbour table (rtnetlink): %s", strerror(-rc));
        if (g.found) {
            memcpy(p->next_hop_mac, g.mac, 6);
            return 0;
        }
        if (!tries)
            for (int i = 0; i < g.n; i++)
                ask_neighbour(p, &g.gw[i]);
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    char gw[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &g.gw[0], gw, sizeof(gw));
    return app_fail(EHOSTUNREACH, "no neighbour entry for the next hop of %s (gateway %s): is the gateway up? "
                    "(`ping -c1 -I %s %s` shows it)", p->ifname, gw, p->ifname, gw);
}

static int one_port(struct app_port *p, int fd, struct ifaddrs *addrs)
{
    struct ifreq ifr = {0};
    if (!(p->ifindex = if_nametoindex(p->ifname)))
        return app_fail(ENODEV, "no interface named '%s' in this network namespace (`ip link` lists them)",
                        p->ifname);
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", p->ifname);
    if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0)
        return app_fail(errno, "cannot read the MAC of %s: %s", p->ifname, strerror(errno));
    memcpy(p->mac, ifr.ifr_hwaddr.sa_data, 6);
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0)
        return app_fail(errno, "cannot read the MTU of %s: %s", p->ifname, strerror(errno));
    p->mtu = (uint32_t)ifr.ifr_mtu;
    int found = 0;
    for (struct ifaddrs *i = addrs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 && !strcmp(i->ifa_name, p->ifname)
            && !is_link_local(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr)) {
            p->addr = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
            found = 1;
        }
    if (!found)
        return app_fail(EADDRNOTAVAIL, "port %s has no global IPv6 address", p->ifname);
    return next_hop(p);
}

int ports_discover(struct app_port *ports, uint32_t n)
{
    struct ifaddrs *addrs;
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = 0;
    if (fd < 0)
        return app_fail(errno, "cannot open a socket to read the ports: %s", strerror(errno));
    if (getifaddrs(&addrs) < 0) {
        rc = app_fail(errno, "cannot read the interfaces' addresses: %s", strerror(errno));
        close(fd);
        return rc;
    }
    for (uint32_t i = 0; i < n && !rc; i++)
        rc = one_port(&ports[i], fd, addrs);
    freeifaddrs(addrs);
    close(fd);
    return rc;
}
