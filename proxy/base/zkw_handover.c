/* zkw_handover.c: the handover transport (zkw_handover.h): the abstract
 * SOCK_SEQPACKET socket, one message per packet, descriptors by SCM_RIGHTS.
 * libc only: the keeper links this file with zkw_log.c and zkw_fault.c. */
#include "zkw_handover.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "zkw_fault.h"

static const char *const type_names[ZKW_HO_TYPE_END] = {
    [ZKW_HO_HELLO] = "HELLO",     [ZKW_HO_STATE] = "STATE", [ZKW_HO_CLIENT] = "CLIENT",
    [ZKW_HO_READY] = "READY",     [ZKW_HO_ADOPT] = "ADOPT", [ZKW_HO_FORGET] = "FORGET",
    [ZKW_HO_QUIESCE] = "QUIESCE", [ZKW_HO_DONE] = "DONE",   [ZKW_HO_STOP] = "STOP",
    [ZKW_HO_RESULT] = "RESULT",
};

const char *zkw_handover_type_name(unsigned type) {
  return type > 0 && type < ZKW_HO_TYPE_END ? type_names[type] : "?";
}

/* A failure point of this file: true (errno set to the kind's code) when
 * the test build's ZKW_TEST_FAULT names this call. */
#define FAIL_HERE(kind, detail, code)                                                                        \
  (ZKW_FAULT_AT(kind, ZKW_FAULT_WHERE, detail) ? (errno = zkw_fault_code(code), true) : false)

int zkw_handover_addr(struct zkw_handover_addr *a, const char *socket_name, const char *listen) {
  char name[ZKW_HANDOVER_NAME_MAX + 16];
  int n;
  memset(a, 0, sizeof *a);
  if (socket_name && *socket_name)
    n = snprintf(name, sizeof name, "%s", socket_name);
  else
    n = snprintf(name, sizeof name, "zkwarden/%s", listen && *listen ? listen : ZKW_DEFAULT_LISTEN);
  if (n < 0 || (size_t)n > ZKW_HANDOVER_NAME_MAX) return -ENAMETOOLONG;
  a->sun.sun_family = AF_UNIX;
  a->sun.sun_path[0] = 0; /* the abstract namespace */
  memcpy(a->sun.sun_path + 1, name, (size_t)n);
  a->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
  a->name[0] = '@';
  memcpy(a->name + 1, name, (size_t)n + 1);
  return 0;
}

static int new_socket(void) {
  if (FAIL_HERE(socket, "socket", EMFILE)) return -errno;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return fd < 0 ? -errno : fd;
}

int zkw_handover_listen(const struct zkw_handover_addr *a) {
  int fd = new_socket();
  if (fd < 0) return fd;
  if (FAIL_HERE(bind, "handover", EADDRINUSE) || bind(fd, (const struct sockaddr *)&a->sun, a->len) != 0 ||
      listen(fd, 16) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

/* Our user or root: anyone else in the network namespace could reach an
 * abstract name. */
static int check_peer(int fd, pid_t *pid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
  if (pid) *pid = cred.pid;
  if (cred.uid != geteuid() && cred.uid != 0) return -EPERM;
  return 0;
}

int zkw_handover_accept(int lfd, pid_t *pid) {
  int fd;
  if (pid) *pid = 0;
  if (FAIL_HERE(accept, "accept", ECONNABORTED)) return -errno;
  do
    fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  int rc = check_peer(fd, pid);
  if (rc) {
    close(fd);
    return rc;
  }
  return fd;
}

int zkw_handover_connect(const struct zkw_handover_addr *a) {
  int fd = new_socket();
  if (fd < 0) return fd;
  int rc;
  if (FAIL_HERE(socket, "connect", ECONNREFUSED)) {
    rc = -errno;
    close(fd);
    return rc;
  }
  /* A unix connect completes at once, or fails with EAGAIN while the
   * listener's backlog is full: tried again for up to a second. */
  for (int tries = 0;; tries++) {
    do
      rc = connect(fd, (const struct sockaddr *)&a->sun, a->len);
    while (rc != 0 && errno == EINTR);
    if (rc == 0 || errno != EAGAIN || tries == 50) break;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  rc = rc == 0 ? check_peer(fd, NULL) : -errno;
  if (rc) {
    close(fd);
    return rc;
  }
  return fd;
}

int zkw_handover_send(int fd, const struct zkw_handover_msg *m) {
  if (m->len > ZKW_HANDOVER_PAYLOAD_MAX || m->nfds < 0 || m->nfds > ZKW_HANDOVER_FDS_MAX) return -EINVAL;
  struct zkw_handover_header h = {ZKW_HANDOVER_MAGIC, ZKW_HANDOVER_VERSION, m->type, m->slot, m->len};
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)m->payload, m->len}};
  union {
    char buf[CMSG_SPACE(sizeof(int) * ZKW_HANDOVER_FDS_MAX)];
    struct cmsghdr align;
  } ctl;
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = m->len ? 2 : 1};
  if (m->nfds > 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)m->nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)m->nfds);
    memcpy(CMSG_DATA(c), m->fds, sizeof(int) * (size_t)m->nfds);
  }
  if (FAIL_HERE(sendmsg, zkw_handover_type_name(m->type), EIO)) return -errno;
  ssize_t n;
  do
    n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  /* A seqpacket message goes whole or not at all. */
  return (size_t)n == sizeof h + m->len ? 0 : -EPROTO;
}

int zkw_handover_send_msg(int fd, unsigned type, uint32_t slot, const void *payload, size_t len,
                          const int *fds, int nfds) {
  struct zkw_handover_msg m = {.type = (uint16_t)type, .slot = slot, .len = (uint32_t)len, .nfds = nfds};
  if (len > sizeof m.payload || nfds < 0 || nfds > ZKW_HANDOVER_FDS_MAX) return -EINVAL;
  if (len) memcpy(m.payload, payload, len);
  if (nfds) memcpy(m.fds, fds, sizeof(int) * (size_t)nfds);
  return zkw_handover_send(fd, &m);
}

void zkw_handover_close_fds(struct zkw_handover_msg *m) {
  for (int i = 0; i < m->nfds; i++)
    if (m->fds[i] >= 0) close(m->fds[i]);
  m->nfds = 0;
}

/* Whether the payload length and descriptor count fit the type. */
static bool well_formed(const struct zkw_handover_msg *m) {
  switch (m->type) {
  case ZKW_HO_HELLO:
    return m->len == sizeof(struct zkw_handover_hello) && m->nfds == 0;
  case ZKW_HO_STATE: {
    struct zkw_handover_state st;
    if (m->len != sizeof st) return false;
    memcpy(&st, m->payload, sizeof st);
    return m->nfds == ((st.flags & ZKW_STATE_ADMIN) ? 3 : 2);
  }
  case ZKW_HO_CLIENT:
  case ZKW_HO_ADOPT:
    return m->len == 0 && m->nfds == 1 && m->slot < ZKW_HANDOVER_SLOT_MAX;
  case ZKW_HO_FORGET:
    return m->len == 0 && m->nfds == 0 && m->slot < ZKW_HANDOVER_SLOT_MAX;
  case ZKW_HO_READY:
  case ZKW_HO_QUIESCE:
  case ZKW_HO_STOP:
    return m->len == 0 && m->nfds == 0;
  case ZKW_HO_DONE:
  case ZKW_HO_RESULT:
    return m->len >= sizeof(int32_t) && m->len <= sizeof(struct zkw_handover_status) && m->nfds == 0;
  default:
    return false;
  }
}

int zkw_handover_recv(int fd, struct zkw_handover_msg *m) {
  struct zkw_handover_header h = {0};
  union {
    char buf[CMSG_SPACE(sizeof(int) * ZKW_HANDOVER_FDS_MAX)];
    struct cmsghdr align;
  } ctl;
  memset(m, 0, sizeof *m);
  struct iovec iov[2] = {{&h, sizeof h}, {m->payload, sizeof m->payload}};
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.buf, .msg_controllen = sizeof ctl};
  ssize_t n;
  do
    n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  /* Every descriptor that arrived is ours now, whatever the message is. */
  int rc = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
      rc = -EPROTO;
      continue;
    }
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (m->nfds < ZKW_HANDOVER_FDS_MAX)
        m->fds[m->nfds++] = got;
      else {
        close(got);
        rc = -EPROTO;
      }
    }
  }
  if (n == 0 && m->nfds == 0 && rc == 0) return 0; /* end of stream */
  if (FAIL_HERE(recvmsg, "recvmsg", EIO)) rc = -errno;
  if (!rc && ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < sizeof h)) rc = -EPROTO;
  if (!rc && (h.magic != ZKW_HANDOVER_MAGIC || h.version != ZKW_HANDOVER_VERSION)) rc = -EPROTO;
  if (!rc) {
    m->type = h.type;
    m->slot = h.slot;
    m->len = h.len;
    if (h.len != (size_t)n - sizeof h || !well_formed(m)) rc = -EPROTO;
  }
  if (rc) {
    zkw_handover_close_fds(m);
    memset(m, 0, sizeof *m);
  }
  return rc ? rc : 1;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int zkw_handover_wait(int fd, short events, int timeout_ms) {
  int64_t deadline = timeout_ms < 0 ? 0 : now_ms() + timeout_ms;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int left = timeout_ms < 0 ? -1 : (int)(deadline - now_ms());
    if (timeout_ms >= 0 && left < 0) left = 0;
    int rc = poll(&p, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -errno;
    return rc > 0 ? 1 : 0;
  }
}

int zkw_handover_recv_wait(int fd, struct zkw_handover_msg *m, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    int rc = zkw_handover_recv(fd, m);
    if (rc != -EAGAIN) return rc;
    int left = (int)(deadline - now_ms());
    if (left <= 0) return -ETIMEDOUT;
    rc = zkw_handover_wait(fd, POLLIN, left);
    if (rc < 0) return rc;
  }
}

int zkw_handover_send_wait(int fd, const struct zkw_handover_msg *m, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    int rc = zkw_handover_send(fd, m);
    if (rc != -EAGAIN) return rc;
    int left = (int)(deadline - now_ms());
    if (left <= 0) return -ETIMEDOUT;
    rc = zkw_handover_wait(fd, POLLOUT, left);
    if (rc < 0) return rc;
  }
}

int zkw_handover_dup(int fd) {
  if (FAIL_HERE(dup, "dup", EMFILE)) return -errno;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  return d < 0 ? -errno : d;
}

void zkw_handover_payload(const struct zkw_handover_msg *m, void *out, size_t size) {
  memset(out, 0, size);
  memcpy(out, m->payload, m->len < size ? m->len : size);
}
