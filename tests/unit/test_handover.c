/* test_handover.c: the handover transport (zkw_handover.h) on real
 * sockets of this process: the name, listen/connect/accept and the peer's
 * user, every message type with its descriptors (the same open file on the
 * other side, CLOEXEC), end of stream and a full socket, and every way a
 * message can be malformed (magic, version, type, length, descriptor
 * count, too many descriptors, an oversized packet), each checked to leave
 * no descriptor open (/proc/self/fd counted before and after). In the
 * fault-injection build also a received message lost (recvmsg), its
 * descriptors closed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_handover.h"
#include "zkw_test.h"

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own */
}

/* A connected pair through a real listener on a name of this test's own. */
static int pair_up(int *a, int *b) {
  struct zkw_handover_addr addr;
  char name[64];
  snprintf(name, sizeof name, "zkwarden-test/%d/%d", (int)getpid(), rand());
  if (zkw_handover_addr(&addr, name, NULL) != 0) return -1;
  int l = zkw_handover_listen(&addr);
  if (l < 0) return -1;
  *a = zkw_handover_connect(&addr);
  pid_t pid = 0;
  *b = zkw_handover_accept(l, &pid);
  close(l);
  if (*a < 0 || *b < 0 || pid != getpid()) return -1;
  return 0;
}

static bool same_file(int x, int y) {
  struct stat sx, sy;
  return fstat(x, &sx) == 0 && fstat(y, &sy) == 0 && sx.st_ino == sy.st_ino && sx.st_dev == sy.st_dev;
}

static void test_names(void) {
  struct zkw_handover_addr a;
  ASSERT_EQ(zkw_handover_addr(&a, NULL, NULL), 0);
  ASSERT_STREQ(a.name, "@zkwarden/" ZKW_DEFAULT_LISTEN);
  ASSERT_EQ(a.sun.sun_path[0], 0);
  ASSERT_EQ(a.len, offsetof(struct sockaddr_un, sun_path) + 1 + strlen("zkwarden/" ZKW_DEFAULT_LISTEN));
  ASSERT_EQ(zkw_handover_addr(&a, "", "[::1]:2181"), 0);
  ASSERT_STREQ(a.name, "@zkwarden/[::1]:2181");
  ASSERT_EQ(zkw_handover_addr(&a, "mine", "127.0.0.1:1"), 0);
  ASSERT_STREQ(a.name, "@mine");
  char longname[ZKW_HANDOVER_NAME_MAX + 2];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  ASSERT_EQ(zkw_handover_addr(&a, longname, NULL), -ENAMETOOLONG);
  longname[ZKW_HANDOVER_NAME_MAX] = 0;
  ASSERT_EQ(zkw_handover_addr(&a, longname, NULL), 0);
  /* Nobody there; a name held twice. */
  ASSERT_EQ(zkw_handover_addr(&a, "zkwarden-test/nobody-listens-here", NULL), 0);
  ASSERT_EQ(zkw_handover_connect(&a), -ECONNREFUSED);
  int l = zkw_handover_listen(&a);
  ASSERT_TRUE(l >= 0);
  ASSERT_EQ(zkw_handover_listen(&a), -EADDRINUSE);
  pid_t pid;
  ASSERT_EQ(zkw_handover_accept(l, &pid), -EAGAIN);
  ASSERT_TRUE(fcntl(l, F_GETFD) & FD_CLOEXEC);
  ASSERT_TRUE(fcntl(l, F_GETFL) & O_NONBLOCK);
  close(l);
  ASSERT_STREQ(zkw_handover_type_name(ZKW_HO_QUIESCE), "QUIESCE");
  ASSERT_STREQ(zkw_handover_type_name(0), "?");
  ASSERT_STREQ(zkw_handover_type_name(ZKW_HO_TYPE_END), "?");
}

/* Every type goes across with its payload and descriptors. */
static void test_every_message(void) {
  int before = open_fds();
  int a, b;
  ASSERT_EQ(pair_up(&a, &b), 0);
  int files[3];
  for (int i = 0; i < 3; i++) {
    files[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_TRUE(files[i] >= 0);
  }
  struct zkw_handover_hello h = {1234, ZKW_HANDOVER_VERSION, ZKW_HELLO_TAKEOVER};
  struct zkw_handover_state st = {ZKW_STATE_ADMIN | ZKW_STATE_PREVIOUS, 2, 5};
  struct zkw_handover_status res = {1, "no"};
  struct {
    unsigned type;
    uint32_t slot;
    const void *payload;
    size_t len;
    int nfds;
  } cases[] = {
      {ZKW_HO_HELLO, 0, &h, sizeof h, 0}, {ZKW_HO_STATE, 0, &st, sizeof st, 3},
      {ZKW_HO_CLIENT, 7, NULL, 0, 1},     {ZKW_HO_READY, 0, NULL, 0, 0},
      {ZKW_HO_ADOPT, 9, NULL, 0, 1},      {ZKW_HO_FORGET, 9, NULL, 0, 0},
      {ZKW_HO_QUIESCE, 0, NULL, 0, 0},    {ZKW_HO_DONE, 0, &res, 4, 0},
      {ZKW_HO_STOP, 0, NULL, 0, 0},       {ZKW_HO_RESULT, 0, &res, 4 + 3, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ASSERT_EQ(zkw_handover_send_msg(a, cases[i].type, cases[i].slot, cases[i].payload, cases[i].len, files,
                                    cases[i].nfds),
              0);
    struct zkw_handover_msg m;
    ASSERT_EQ(zkw_handover_recv(b, &m), 1);
    ASSERT_EQ(m.type, cases[i].type);
    ASSERT_EQ(m.slot, cases[i].slot);
    ASSERT_MEMEQ(m.payload, m.len, cases[i].payload, cases[i].len);
    ASSERT_EQ(m.nfds, cases[i].nfds);
    for (int j = 0; j < m.nfds; j++) {
      ASSERT_TRUE(same_file(m.fds[j], files[j]));
      ASSERT_NE(m.fds[j], files[j]);
      ASSERT_TRUE(fcntl(m.fds[j], F_GETFD) & FD_CLOEXEC);
    }
    zkw_handover_close_fds(&m);
    ASSERT_EQ(m.nfds, 0);
  }
  struct zkw_handover_hello back;
  struct zkw_handover_msg m = {.len = sizeof h};
  memcpy(m.payload, &h, sizeof h);
  zkw_handover_payload(&m, &back, sizeof back);
  ASSERT_EQ(back.pid, 1234);
  ASSERT_EQ(back.flags, ZKW_HELLO_TAKEOVER);
  /* Nothing more: EAGAIN, then a timeout, then the end of the stream. */
  ASSERT_EQ(zkw_handover_recv(b, &m), -EAGAIN);
  ASSERT_EQ(zkw_handover_recv_wait(b, &m, 50), -ETIMEDOUT);
  close(a);
  ASSERT_EQ(zkw_handover_recv(b, &m), 0);
  close(b);
  for (int i = 0; i < 3; i++)
    close(files[i]);
  ASSERT_EQ(open_fds(), before);
}

/* Sends raw bytes (and fds) as one packet, as a broken or hostile peer would. */
static int raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * 8)];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  return sendmsg(fd, &mh, 0) == (ssize_t)len ? 0 : -errno;
}

static void expect_rejected(int a, int b, const void *buf, size_t len, const int *fds, int nfds,
                            const char *what) {
  int before = open_fds();
  ASSERT_EQ(raw_send(a, buf, len, fds, nfds), 0);
  struct zkw_handover_msg m;
  int rc = zkw_handover_recv(b, &m);
  if (rc != -EPROTO) fprintf(stderr, "    case: %s\n", what);
  ASSERT_EQ(rc, -EPROTO);
  ASSERT_EQ(m.nfds, 0);
  ASSERT_EQ(open_fds(), before); /* what arrived is closed */
}

static void test_malformed(void) {
  int before = open_fds();
  int a, b;
  ASSERT_EQ(pair_up(&a, &b), 0);
  int files[6];
  for (int i = 0; i < 6; i++)
    files[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct {
    struct zkw_handover_header h;
    uint8_t payload[ZKW_HANDOVER_PAYLOAD_MAX + 64];
  } p;
  memset(&p, 0, sizeof p);
  const struct zkw_handover_header good = {ZKW_HANDOVER_MAGIC, ZKW_HANDOVER_VERSION, ZKW_HO_CLIENT, 3, 0};
  p.h = good;
  p.h.magic ^= 1;
  expect_rejected(a, b, &p, sizeof p.h, files, 1, "magic");
  ASSERT_OK_SO_FAR();
  p.h = good;
  p.h.version = ZKW_HANDOVER_VERSION + 1;
  expect_rejected(a, b, &p, sizeof p.h, files, 1, "version");
  ASSERT_OK_SO_FAR();
  p.h = good;
  p.h.type = ZKW_HO_TYPE_END;
  expect_rejected(a, b, &p, sizeof p.h, files, 1, "type");
  ASSERT_OK_SO_FAR();
  p.h = good;
  expect_rejected(a, b, &p, sizeof p.h, NULL, 0, "CLIENT without its fd");
  ASSERT_OK_SO_FAR();
  expect_rejected(a, b, &p, sizeof p.h, files, 2, "CLIENT with two fds");
  ASSERT_OK_SO_FAR();
  expect_rejected(a, b, &p, sizeof p.h, files, 6, "more fds than a message carries");
  ASSERT_OK_SO_FAR();
  p.h.slot = ZKW_HANDOVER_SLOT_MAX;
  expect_rejected(a, b, &p, sizeof p.h, files, 1, "a slot past the bound");
  ASSERT_OK_SO_FAR();
  p.h = good;
  p.h.len = 4;
  expect_rejected(a, b, &p, sizeof p.h, files, 1, "a length the packet does not have");
  ASSERT_OK_SO_FAR();
  expect_rejected(a, b, &p, sizeof p.h + 4, files, 1, "CLIENT with a payload");
  ASSERT_OK_SO_FAR();
  p.h = good;
  p.h.type = ZKW_HO_STATE;
  p.h.len = sizeof(struct zkw_handover_state);
  struct zkw_handover_state st = {ZKW_STATE_ADMIN, 0, 0};
  memcpy(p.payload, &st, sizeof st);
  expect_rejected(a, b, &p, sizeof p.h + sizeof st, files, 2, "STATE with ADMIN and two fds");
  ASSERT_OK_SO_FAR();
  p.h = good;
  p.h.type = ZKW_HO_HELLO;
  p.h.len = sizeof(struct zkw_handover_hello) - 1;
  expect_rejected(a, b, &p, sizeof p.h + p.h.len, NULL, 0, "a short HELLO");
  ASSERT_OK_SO_FAR();
  p.h.len = sizeof p.payload;
  expect_rejected(a, b, &p, sizeof p, files, 1, "a packet larger than any message (cut)");
  ASSERT_OK_SO_FAR();
  expect_rejected(a, b, &p, 7, files, 1, "shorter than the header");
  ASSERT_OK_SO_FAR();
  /* The sender refuses what it cannot send. */
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_CLIENT, 1, NULL, ZKW_HANDOVER_PAYLOAD_MAX + 1, files, 1),
            -EINVAL);
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_CLIENT, 1, NULL, 0, files, ZKW_HANDOVER_FDS_MAX + 1), -EINVAL);
  /* And a good one still goes through after all that. */
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_FORGET, 4, NULL, 0, NULL, 0), 0);
  struct zkw_handover_msg m;
  ASSERT_EQ(zkw_handover_recv(b, &m), 1);
  ASSERT_EQ(m.type, ZKW_HO_FORGET);
  close(a);
  close(b);
  for (int i = 0; i < 6; i++)
    close(files[i]);
  ASSERT_EQ(open_fds(), before);
}

/* A peer that does not read: the sender gets EAGAIN, never blocks; the
 * descriptors of what was queued are released when the reader closes. */
static void test_full_socket(void) {
  int before = open_fds();
  int a, b;
  ASSERT_EQ(pair_up(&a, &b), 0);
  int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int sent = 0, rc;
  while ((rc = zkw_handover_send_msg(a, ZKW_HO_ADOPT, (uint32_t)sent, NULL, 0, &f, 1)) == 0 && sent < 100000)
    sent++;
  ASSERT_EQ(rc, -EAGAIN);
  ASSERT_TRUE(sent > 0);
  struct zkw_handover_msg m = {.type = ZKW_HO_FORGET};
  ASSERT_EQ(zkw_handover_send_wait(a, &m, 50), -ETIMEDOUT);
  ASSERT_EQ(zkw_handover_wait(a, POLLOUT, 0), 0);
  /* Read them all, in order: room again. */
  for (int i = 0; i < sent; i++) {
    ASSERT_EQ(zkw_handover_recv(b, &m), 1);
    ASSERT_EQ(m.slot, i);
    zkw_handover_close_fds(&m);
  }
  ASSERT_EQ(zkw_handover_wait(a, POLLOUT, 1000), 1);
  /* Fill it again and close the reader: the queued descriptors go with it. */
  while (zkw_handover_send_msg(a, ZKW_HO_ADOPT, 0, NULL, 0, &f, 1) == 0)
    ;
  close(b);
  rc = zkw_handover_send_msg(a, ZKW_HO_FORGET, 1, NULL, 0, NULL, 0);
  ASSERT_TRUE(rc == -EPIPE || rc == -ECONNRESET);
  close(a);
  close(f);
  ASSERT_EQ(open_fds(), before);
}

#ifdef ZKW_FAULT_INJECTION
/* ZKW_TEST_FAULT=recvmsg:2@recvmsg (set by main): the second message received is
 * lost with its descriptors, the next one arrives. */
static void test_injected(void) {
  int before = open_fds();
  int a, b;
  ASSERT_EQ(pair_up(&a, &b), 0);
  int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct zkw_handover_msg m;
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_ADOPT, 1, NULL, 0, &f, 1), 0);
  ASSERT_EQ(zkw_handover_recv(b, &m), 1);
  zkw_handover_close_fds(&m);
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_ADOPT, 2, NULL, 0, &f, 1), 0);
  ASSERT_EQ(zkw_handover_recv(b, &m), -EIO);
  ASSERT_EQ(m.nfds, 0);
  ASSERT_EQ(zkw_handover_send_msg(a, ZKW_HO_ADOPT, 3, NULL, 0, &f, 1), 0);
  ASSERT_EQ(zkw_handover_recv(b, &m), 1);
  ASSERT_EQ(m.slot, 3);
  zkw_handover_close_fds(&m);
  close(a);
  close(b);
  close(f);
  ASSERT_EQ(open_fds(), before);
}
#endif

int main(void) {
  srand((unsigned)getpid());
  RUN(test_names);
  RUN(test_every_message);
  RUN(test_malformed);
  RUN(test_full_socket);
#ifdef ZKW_FAULT_INJECTION
  setenv("ZKW_TEST_FAULT", "recvmsg:2@recvmsg", 1); /* counted from here */
  if (zkw_fault_init() == 0) RUN(test_injected);
#endif
  return zkw_test_summary("handover");
}
