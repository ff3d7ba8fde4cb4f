/* test_relay.c: the relay core driven by a recording hooks table.
 *
 * The relay (zkw_server + zkw_session) runs on its own libuv loop in a
 * thread, with a hooks table that records every call and answers with the
 * verdict the test set for each xid. The test owns both ends, on loopback:
 * a listening socket that plays the upstream server (ZKWARDEN_UPSTREAM
 * points at it) and a client socket. It checks that the hooks see the
 * connect request, the connect response, the requests, the replies and the
 * close in order; that HOLD holds until zkw_session_resume; that DROP and
 * REPLACE work both ways; that a ZKW_BARRIER request keeps the client's
 * next request back until its reply, which WITHHOLD keeps until
 * zkw_session_deliver; that a ZKW_MARK request's reply comes marked; and
 * that a session whose server goes away with a barrier's reply withheld
 * moves: the server (the test's socket) closes, the relay re-attaches the
 * session on a new connection, the barrier request gets CONNECTIONLOSS, the
 * request behind it goes on, and the policy's late delivery of the old
 * barrier does nothing. Waits are on conditions (a frame arriving, an event
 * recorded), each bounded by WAIT_MS. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_encode.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_ops.h"
#include "zkw_server.h"
#include "zkw_replies.h"
#include "zkw_session.h"
#include "zkw_wire.h"
#include "zkw_test.h"

#define WAIT_MS 5000

/* ---- the recording hooks ---- */

enum { EV_CONNECT_REQ = 1, EV_CONNECT_RESP, EV_REQUEST, EV_REPLY, EV_CLOSE, EV_DELIVERED };

struct event {
  int kind;
  int32_t xid; /* requests and replies */
  int32_t err; /* replies */
  bool at_barrier;
  bool marked;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct event events[128];
static int nevents;
static int request_verdict[16]; /* by xid */
static int reply_verdict[16];
static bool held_once[16]; /* a HOLD answers the first call only */
static struct zkw_session *last_session;
static uint32_t barrier_seen; /* the barrier whose reply was withheld last (zkw_session_barrier) */
static uint32_t deliver_gen;  /* the barrier DO_DELIVER names */
static int policy_block_ok = -1;
static int in_barrier_after_deliver = -1; /* zkw_session_in_barrier once a delivery has run */

static void record(struct event e) {
  pthread_mutex_lock(&mu);
  if (nevents < 128) events[nevents++] = e;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

struct block {
  uint64_t magic;
  int requests;
};

static int rec_connect_request(struct zkw_session *s, const struct zkw_connect_req *req) {
  (void)req;
  struct block *b = zkw_session_policy(s);
  pthread_mutex_lock(&mu);
  policy_block_ok = b && b->magic == 0 && b->requests == 0; /* zeroed */
  pthread_mutex_unlock(&mu);
  if (b) b->magic = 0x5eed;
  last_session = s;
  record((struct event){.kind = EV_CONNECT_REQ});
  return ZKW_FORWARD;
}

static void rec_connect_response(struct zkw_session *s, const struct zkw_connect_resp *resp) {
  (void)s, (void)resp;
  record((struct event){.kind = EV_CONNECT_RESP});
}

/* Writes a request of type op (getData, exists) on path with xid into out. */
static int write_request(struct zkw_buf *out, int32_t xid, int32_t op, const char *path, bool watch) {
  struct zkw_request req = {.xid = xid, .type = op};
  req.op.type = op;
  req.op.watch = watch;
  req.op.path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  if (zkw_buf_reserve(out, 256)) return ZKW_E_NOSPACE;
  size_t n;
  int rc = zkw_encode_request(out->data, out->cap, &req, &n);
  out->len = n;
  return rc;
}

static int rec_request(struct zkw_session *s, const struct zkw_request *req, const uint8_t *frame, size_t len,
                       struct zkw_buf *out) {
  (void)frame, (void)len;
  struct block *b = zkw_session_policy(s);
  if (b->magic != 0x5eed) return ZKW_E_VALUE; /* the block is the session's own */
  b->requests++;
  record((struct event){.kind = EV_REQUEST, .xid = req->xid});
  int v = req->xid >= 0 && req->xid < 16 ? request_verdict[req->xid] : ZKW_FORWARD;
  if ((v & ZKW_VERDICT_MASK) == ZKW_HOLD) {
    if (held_once[req->xid]) return ZKW_FORWARD;
    held_once[req->xid] = true;
  }
  if ((v & ZKW_VERDICT_MASK) == ZKW_REPLACE &&
      write_request(out, req->xid, ZKW_OP_GET_DATA, "/replaced", false))
    return ZKW_E_NOSPACE;
  return v;
}

static int rec_reply(struct zkw_session *s, const struct zkw_reply *rep, int32_t op, unsigned flags,
                     struct zkw_buf *out) {
  (void)op;
  bool at_barrier = (flags & ZKW_REPLY_AT_BARRIER) != 0;
  int v = rep->xid >= 0 && rep->xid < 16 ? reply_verdict[rep->xid] : ZKW_FORWARD;
  if (at_barrier && v == ZKW_WITHHOLD) {
    pthread_mutex_lock(&mu);
    barrier_seen = zkw_session_barrier(s);
    pthread_mutex_unlock(&mu);
  }
  record((struct event){.kind = EV_REPLY,
                        .xid = rep->xid,
                        .err = rep->err,
                        .at_barrier = at_barrier,
                        .marked = (flags & ZKW_REPLY_MARKED) != 0});
  if (v == ZKW_REPLACE) {
    /* The same reply with another error. */
    struct zkw_reply r = {.xid = rep->xid, .zxid = rep->zxid, .err = ZKW_ZERR_NOAUTH};
    size_t n;
    if (zkw_buf_reserve(out, 64) || zkw_encode_reply(out->data, out->cap, &r, op, &n)) return ZKW_E_NOSPACE;
    out->len = n;
  }
  return v;
}

static void rec_close(struct zkw_session *s) {
  (void)s;
  record((struct event){.kind = EV_CLOSE});
}

static const struct zkw_hooks recording = {
    .session_size = sizeof(struct block),
    .on_connect_request = rec_connect_request,
    .on_connect_response = rec_connect_response,
    .on_request = rec_request,
    .on_reply = rec_reply,
    .on_close = rec_close,
};

static int find_locked(int kind, int32_t xid) {
  for (int i = 0; i < nevents; i++)
    if (events[i].kind == kind &&
        (kind == EV_REQUEST || kind == EV_REPLY || kind == EV_DELIVERED ? events[i].xid == xid : true))
      return i;
  return -1;
}

/* The index of the first event of kind (and xid, for requests and replies). */
static int event_index(int kind, int32_t xid) {
  pthread_mutex_lock(&mu);
  int found = find_locked(kind, xid);
  pthread_mutex_unlock(&mu);
  return found;
}

/* Waits for that event; its index, or -1 after WAIT_MS. */
static int wait_event(int kind, int32_t xid) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&mu);
  int found, rc = 0;
  while ((found = find_locked(kind, xid)) < 0 && rc == 0)
    rc = pthread_cond_timedwait(&cv, &mu, &until);
  pthread_mutex_unlock(&mu);
  return found;
}

/* ---- the relay's loop, and calls into it from the test thread ---- */

static uv_loop_t loop;
static struct zkw_server srv;
static struct zkw_config cfg;
static uv_async_t wake;
static enum { DO_NOTHING, DO_RESUME, DO_DELIVER, DO_REPLAY, DO_STOP } todo;

static void wake_cb(uv_async_t *h) {
  pthread_mutex_lock(&mu);
  int what = todo;
  uint32_t barrier = deliver_gen;
  todo = DO_NOTHING;
  pthread_mutex_unlock(&mu);
  if (what == DO_RESUME) zkw_session_resume(last_session);
  if (what == DO_DELIVER) {
    zkw_session_deliver(last_session, barrier);
    pthread_mutex_lock(&mu);
    in_barrier_after_deliver = zkw_session_in_barrier(last_session);
    pthread_mutex_unlock(&mu);
    record((struct event){.kind = EV_DELIVERED, .xid = (int32_t)barrier});
  }
  if (what == DO_REPLAY && zkw_session_replay(last_session, barrier) != 0)
    record((struct event){.kind = EV_CLOSE});
  if (what == DO_STOP) {
    uv_close((uv_handle_t *)h, NULL);
    zkw_server_stop(&srv);
  }
}

static void call_relay(int what) {
  pthread_mutex_lock(&mu);
  todo = what;
  pthread_mutex_unlock(&mu);
  uv_async_send(&wake);
}

/* The barrier whose reply was withheld last; DO_DELIVER then names g. */
static uint32_t withheld(void) {
  pthread_mutex_lock(&mu);
  uint32_t g = barrier_seen;
  pthread_mutex_unlock(&mu);
  return g;
}

static void deliver(uint32_t g) {
  pthread_mutex_lock(&mu);
  deliver_gen = g;
  pthread_mutex_unlock(&mu);
  call_relay(DO_DELIVER);
}

static void replay(uint32_t g) {
  pthread_mutex_lock(&mu);
  deliver_gen = g;
  pthread_mutex_unlock(&mu);
  call_relay(DO_REPLAY);
}

/* True if fd has something to read within ms. */
static bool readable_within(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, ms) == 1;
}

static void *loop_thread(void *arg) {
  (void)arg;
  uv_run(&loop, UV_RUN_DEFAULT);
  return NULL;
}

static char upstream_env[64], listen_env[] = "127.0.0.1:1";
static const char *env(const char *name) {
  if (strcmp(name, "ZKWARDEN_UPSTREAM") == 0) return upstream_env;
  if (strcmp(name, "ZKWARDEN_LISTEN") == 0) return listen_env;
  if (strcmp(name, "ZKWARDEN_MODE") == 0) return "relay";
  if (strcmp(name, "ZKWARDEN_IDENTITY") == 0) return "unit";
  return NULL;
}

/* ---- blocking socket helpers (the test thread) ---- */

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4) ||
      getsockname(fd, (struct sockaddr *)&a, &al))
    return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

static int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) return -1;
  return fd;
}

static bool readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, WAIT_MS) == 1;
}

/* Reads one whole frame (length prefix included) into buf; its length, or -1. */
static long read_frame(int fd, uint8_t *buf, size_t cap) {
  size_t have = 0, want = 4;
  while (have < want) {
    if (!readable(fd)) return -1;
    ssize_t n = read(fd, buf + have, want - have);
    if (n <= 0) return -1;
    have += (size_t)n;
    if (have == 4) {
      want = 4 + zkw_load_be32(buf);
      if (want > cap) return -1;
    }
  }
  return (long)have;
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w, n -= (size_t)w;
  }
  return true;
}

static size_t request_frame(uint8_t *buf, int32_t xid, int32_t op, const char *path, bool watch) {
  struct zkw_buf b = {0};
  size_t n = write_request(&b, xid, op, path, watch) == ZKW_OK ? b.len : 0;
  memcpy(buf, b.data, n);
  zkw_buf_release(&b);
  return n;
}

static size_t get_data_frame(uint8_t *buf, int32_t xid, const char *path) {
  return request_frame(buf, xid, ZKW_OP_GET_DATA, path, false);
}

/* The xid of a request frame, and whether its path is path. */
static int32_t frame_xid(const uint8_t *f) {
  return (int32_t)zkw_load_be32(f + 4);
}

static bool frame_path_is(const uint8_t *f, size_t n, const char *path) {
  struct zkw_request req;
  if (zkw_decode_request(f + 4, n - 4, &req) != ZKW_OK) return false;
  return req.op.path.len == (int32_t)strlen(path) && memcmp(req.op.path.p, path, strlen(path)) == 0;
}

/* The upstream's answer to xid: a reply header with err (no body). */
static bool reply(int fd, int32_t xid, int32_t err) {
  uint8_t f[20];
  zkw_store_be32(f, 16);
  zkw_store_be32(f + 4, (uint32_t)xid);
  memset(f + 8, 0, 8);
  f[15] = (uint8_t)xid; /* zxid */
  zkw_store_be32(f + 16, (uint32_t)err);
  return write_all(fd, f, sizeof f);
}

/* ---- the test ---- */

static void test_relay_with_recording_hooks(void) {
  int up_port, up = listen_loopback(&up_port);
  ASSERT_TRUE(up >= 0);
  snprintf(upstream_env, sizeof upstream_env, "127.0.0.1:%d", up_port);
  char err[256];
  int crc = zkw_config_load(&cfg, env, err, sizeof err);
  if (crc) fprintf(stderr, "config: %s\n", err);
  ASSERT_EQ(crc, 0);
  ((struct sockaddr_in *)&cfg.listen)->sin_port = 0; /* any free port: read back below */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(zkw_server_start(&srv, &loop, &cfg, &recording, NULL), 0);
  ASSERT_EQ(uv_async_init(&loop, &wake, wake_cb), 0);
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  ASSERT_EQ(uv_tcp_getsockname(&srv.listener, (struct sockaddr *)&ss, &sl), 0);
  int proxy_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  /* DROP 3; REPLACE 4 (to getData /replaced) and its reply; HOLD 2 once;
   * 6 is the barrier, its reply withheld. */
  request_verdict[2] = ZKW_HOLD;
  request_verdict[3] = ZKW_DROP;
  request_verdict[4] = ZKW_REPLACE;
  reply_verdict[4] = ZKW_REPLACE;
  request_verdict[6] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[6] = ZKW_WITHHOLD;
  request_verdict[7] = ZKW_FORWARD | ZKW_MARK;
  request_verdict[8] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[8] = ZKW_WITHHOLD;
  request_verdict[10] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[10] = ZKW_WITHHOLD;
  request_verdict[12] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[12] = ZKW_WITHHOLD;
  request_verdict[14] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[14] = ZKW_WITHHOLD;
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, loop_thread, NULL), 0);

  uint8_t buf[4096];
  int c = connect_loopback(proxy_port);
  ASSERT_TRUE(c >= 0);
  struct zkw_connect_req creq = {.timeout = 30000, .passwd = {(const uint8_t *)"0123456789abcdef", 16}};
  size_t n;
  ASSERT_EQ(zkw_encode_connect_req(buf, sizeof buf, &creq, &n), ZKW_OK);
  ASSERT_TRUE(write_all(c, buf, n));
  ASSERT_TRUE(readable(up));
  int u = accept(up, NULL, NULL);
  ASSERT_TRUE(u >= 0);
  ASSERT_TRUE(read_frame(u, buf, sizeof buf) > 0);
  struct zkw_connect_resp cresp = {
      .timeout = 30000, .session_id = 0x1234, .passwd = {(const uint8_t *)"0123456789abcdef", 16}};
  ASSERT_EQ(zkw_encode_connect_resp(buf, sizeof buf, &cresp, &n), ZKW_OK);
  ASSERT_TRUE(write_all(u, buf, n));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) > 0);
  ASSERT_EQ(wait_event(EV_CONNECT_RESP, 0), 1);
  ASSERT_EQ(event_index(EV_CONNECT_REQ, 0), 0);
  ASSERT_EQ(policy_block_ok, 1);

  /* Requests 1..4 in one write. */
  size_t len = 0;
  for (int32_t x = 1; x <= 4; x++)
    len += get_data_frame(buf + len, x, "/a");
  ASSERT_TRUE(write_all(c, buf, len));
  /* 1 goes up; 2 is held (3 and 4 behind it): the hooks saw 1 and 2. */
  long fl = read_frame(u, buf, sizeof buf);
  ASSERT_TRUE(fl > 0);
  ASSERT_EQ(frame_xid(buf), 1);
  ASSERT_TRUE(wait_event(EV_REQUEST, 2) > event_index(EV_REQUEST, 1));
  ASSERT_EQ(event_index(EV_REQUEST, 3), -1);
  call_relay(DO_RESUME);
  /* 2 again (forwarded), 3 dropped, 4 replaced. */
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 2);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 4);
  ASSERT_TRUE(frame_path_is(buf, (size_t)fl, "/replaced"));
  ASSERT_TRUE(event_index(EV_REQUEST, 3) > 0);
  /* Replies 1, 2, 4: 4's is replaced (NOAUTH instead of NONODE). */
  ASSERT_TRUE(reply(u, 1, ZKW_ZERR_NONODE) && reply(u, 2, ZKW_ZERR_NONODE) && reply(u, 4, ZKW_ZERR_NONODE));
  for (int32_t x = 1; x <= 4; x += x == 2 ? 2 : 1) {
    ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
    ASSERT_EQ(frame_xid(buf), x);
    ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), x == 4 ? ZKW_ZERR_NOAUTH : ZKW_ZERR_NONODE);
  }

  /* The barrier: create 6 and getData 7 (marked) in one write; both go
   * on, 6's reply is withheld until zkw_session_deliver, 7's is held behind
   * it (and given to the hooks only then). */
  len = get_data_frame(buf, 6, "/lock");
  len += get_data_frame(buf + len, 7, "/b");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 6);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 7);
  ASSERT_TRUE(reply(u, 6, ZKW_ZERR_NODEEXISTS) && reply(u, 7, ZKW_ZERR_NONODE));
  int e6 = wait_event(EV_REPLY, 6);
  ASSERT_TRUE(e6 > 0);
  ASSERT_TRUE(events[e6].at_barrier && !events[e6].marked);
  ASSERT_TRUE(!readable_within(c, 100)); /* 6's reply withheld, 7's held behind it */
  ASSERT_EQ(event_index(EV_REPLY, 7), -1);
  uint32_t first_barrier = withheld();
  deliver(first_barrier);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 6);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_NODEEXISTS);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 7);
  int e7 = wait_event(EV_REPLY, 7);
  ASSERT_TRUE(e7 > e6 && events[e7].marked); /* given to the hooks once delivered (none before) */
  ASSERT_TRUE(wait_event(EV_DELIVERED, (int32_t)first_barrier) > 0);
  pthread_mutex_lock(&mu);
  ASSERT_EQ(in_barrier_after_deliver, 0); /* no barrier left in flight: the sweep may go on */
  pthread_mutex_unlock(&mu);

  /* A barrier (8) withheld and replayed, 9 behind it: the replay goes after
   * 9 (already with the server); the client gets the replay's reply, then
   * 9's. */
  len = get_data_frame(buf, 8, "/lock");
  len += get_data_frame(buf + len, 9, "/c");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 8);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 9);
  ASSERT_TRUE(reply(u, 8, ZKW_ZERR_NODEEXISTS) && reply(u, 9, ZKW_ZERR_NONODE));
  ASSERT_TRUE(wait_event(EV_REPLY, 8) > 0);
  replay(withheld());
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 8); /* the replay */
  ASSERT_TRUE(!readable_within(c, 100));
  ASSERT_TRUE(reply(u, 8, ZKW_ZERR_NOAUTH)); /* another answer than the first */
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 8);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_NOAUTH); /* the replay's reply */
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 9);

  /* A barrier (10) whose reply is withheld; behind it 11 (exists with a
   * watch, NONODE: the watch is set), 12 (a second barrier, NODEEXISTS) and
   * 13 (not yet answered); then the server goes away: the session moves to
   * a new connection (the same server, the only one). The ConnectRequest
   * names the last zxid the client gets (11's, held when the server went),
   * the watch 11 set is set again, 10 is answered with CONNECTIONLOSS, 11
   * as it came, 12 with CONNECTIONLOSS (the policy would have withheld it:
   * it must not reach the client as it is), 13 with CONNECTIONLOSS. */
  len = get_data_frame(buf, 10, "/lock");
  len += request_frame(buf + len, 11, ZKW_OP_EXISTS, "/w", true);
  len += get_data_frame(buf + len, 12, "/lock2");
  len += get_data_frame(buf + len, 13, "/e");
  ASSERT_TRUE(write_all(c, buf, len));
  for (int32_t x = 10; x <= 13; x++) {
    ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
    ASSERT_EQ(frame_xid(buf), x);
  }
  ASSERT_TRUE(reply(u, 10, ZKW_ZERR_NODEEXISTS) && reply(u, 11, ZKW_ZERR_NONODE) &&
              reply(u, 12, ZKW_ZERR_NODEEXISTS));
  ASSERT_TRUE(wait_event(EV_REPLY, 10) > 0);
  uint32_t old_barrier = withheld();
  ASSERT_TRUE(!readable_within(c, 100));
  close(u);
  ASSERT_TRUE(readable(up));
  u = accept(up, NULL, NULL);
  ASSERT_TRUE(u >= 0);
  ASSERT_TRUE(read_frame(u, buf, sizeof buf) > 0);
  struct zkw_connect_req again;
  ASSERT_EQ(zkw_decode_connect_req(buf + 4, (size_t)(zkw_load_be32(buf)), &again), ZKW_OK);
  ASSERT_EQ(again.session_id, 0x1234);
  ASSERT_EQ(again.last_zxid_seen, 12); /* the fake replies' zxid is their xid; 11's and 12's came */
  ASSERT_EQ(zkw_encode_connect_resp(buf, sizeof buf, &cresp, &n), ZKW_OK);
  ASSERT_TRUE(write_all(u, buf, n));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0); /* setWatches: the exist watch on /w */
  ASSERT_EQ(frame_xid(buf), ZKW_XID_SET_WATCHES);
  struct zkw_request sw;
  ASSERT_EQ(zkw_decode_request(buf + 4, (size_t)fl - 4, &sw), ZKW_OK);
  ASSERT_EQ(sw.op.watches[1].count, 1);
  ASSERT_TRUE(reply(u, ZKW_XID_SET_WATCHES, 0));
  int32_t want[][2] = {{10, ZKW_ZERR_CONNECTIONLOSS},
                       {11, ZKW_ZERR_NONODE},
                       {12, ZKW_ZERR_CONNECTIONLOSS},
                       {13, ZKW_ZERR_CONNECTIONLOSS}};
  for (int i = 0; i < 4; i++) {
    ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
    ASSERT_EQ(frame_xid(buf), want[i][0]);
    ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), want[i][1]);
  }
  /* A new barrier (14, its reply withheld, 15 behind it); then the policy's
   * delivery of the old one comes late: it does nothing, neither to 14's
   * reply nor to 15's. */
  len = get_data_frame(buf, 14, "/lock");
  len += get_data_frame(buf + len, 15, "/d");
  ASSERT_TRUE(write_all(c, buf, len));
  for (int32_t x = 14; x <= 15; x++) {
    ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
    ASSERT_EQ(frame_xid(buf), x);
  }
  ASSERT_TRUE(reply(u, 14, ZKW_ZERR_NODEEXISTS) && reply(u, 15, ZKW_ZERR_NONODE));
  ASSERT_TRUE(wait_event(EV_REPLY, 14) > 0);
  ASSERT_EQ(zkw_metrics.session_moves[ZKW_MOVE_MOVED], 1); /* the move ended before 14 went on */
  ASSERT_TRUE(withheld() != old_barrier);
  deliver(old_barrier);
  ASSERT_TRUE(wait_event(EV_DELIVERED, (int32_t)old_barrier) > 0);
  ASSERT_TRUE(!readable_within(c, 100)); /* 14's reply still withheld, 15's behind it */
  deliver(withheld());
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 14);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 15);

  /* The client goes: the hooks hear it last. */
  close(c);
  ASSERT_TRUE(wait_event(EV_CLOSE, 0) > event_index(EV_REQUEST, 15));
  int order[] = {EV_CONNECT_REQ, EV_CONNECT_RESP, EV_REQUEST};
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(events[i].kind, order[i]);
  ASSERT_EQ(event_index(EV_REPLY, 1) > event_index(EV_REQUEST, 4), 1);
  ASSERT_EQ(event_index(EV_REPLY, 3), -1); /* dropped: never answered */

  call_relay(DO_STOP);
  pthread_join(th, NULL);
  close(u);
  close(up);
  ASSERT_EQ(uv_loop_close(&loop), 0);
}

int main(void) {
  zkw_log_setup(ZKW_LOG_ERROR, ZKW_LOG_TEXT);
  zkw_metrics_init();
  RUN(test_relay_with_recording_hooks);
  return zkw_test_summary("relay");
}
