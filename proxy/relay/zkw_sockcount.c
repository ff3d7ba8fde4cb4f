/* zkw_sockcount.c: the kernel's byte counts of a TCP socket (see
 * zkw_sockcount.h). */
#include "zkw_sockcount.h"

#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

int zkw_sockcount(int fd, uint64_t *consumed, uint64_t *written) {
  for (int tries = 0; tries < 100; tries++) {
    struct tcp_info a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    int inq, outq;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &a, &la) || ioctl(fd, SIOCINQ, &inq) ||
        ioctl(fd, SIOCOUTQ, &outq) || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &b, &lb))
      return -errno;
    if (lb < sizeof b) return -ENOTSUP; /* a kernel older than 4.19: no byte counts */
    if (a.tcpi_bytes_received == b.tcpi_bytes_received && a.tcpi_bytes_acked == b.tcpi_bytes_acked) {
      *consumed = b.tcpi_bytes_received - (uint64_t)inq;
      *written = b.tcpi_bytes_acked + (uint64_t)outq;
      return 0;
    }
  }
  return -EAGAIN;
}
