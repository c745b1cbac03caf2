/* Benchmark support: the kernel's own UDP round trip (bench/latency_bench.py),
 * in C so that the baseline carries no interpreter: one side sends a
 * datagram and waits for it to come back, the other sends back whatever it
 * receives. Blocking sockets, as a kernel application would use them. Not
 * part of the data path. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "mrc_bench.h"

int64_t mrc_bench_udp_pingpong(int fd, uint32_t size, uint32_t n, uint64_t *rtt_ns)
{
    uint8_t buf[2048];
    if (size > sizeof(buf))
        return -EINVAL;
    memset(buf, 0xA5, size);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t t0 = mrc_ctx_now_ns();
        memcpy(buf, &i, sizeof(i));
        if (send(fd, buf, size, 0) != (ssize_t)size)
            return -errno;
        for (;;) { /* a late answer to an earlier ping is skipped */
            uint32_t got;
            ssize_t k = recv(fd, buf, sizeof(buf), 0);
            if (k < 0)
                return -errno;
            memcpy(&got, buf, sizeof(got));
            if (k >= (ssize_t)sizeof(got) && got == i)
                break;
        }
        rtt_ns[i] = mrc_ctx_now_ns() - t0;
    }
    return n;
}

int64_t mrc_bench_udp_echo(int fd, uint32_t n)
{
    uint8_t buf[2048];
    struct sockaddr_storage from;
    for (uint32_t i = 0; i < n; i++) {
        socklen_t fl = sizeof(from);
        ssize_t k = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
        if (k < 0)
            return errno == EAGAIN ? (int64_t)i : -errno;
        if (sendto(fd, buf, (size_t)k, 0, (struct sockaddr *)&from, fl) != k)
            return -errno;
    }
    return n;
}
