/* test_relay.c: the relay core driven by a recording hooks table.
 *
 * The relay (zkw_server + zkw_session) runs on its own libuv loop in a
 * thread, with a hooks table that records every call and answers with the
 * verdict the test set for each xid. The test owns both ends, on loopback:
 * a listening socket that plays the upstream server (ZKWARDEN_UPSTREAM
 * points at it) and a client socket. It checks that the hooks see the
 * connect request, the connect response, the requests, the replies and the
 * close in order; that HOLD holds until zkw_session_resume; that DROP and
 * REPLACE work both ways; that a ZKW_KEEP request's reply comes with its
 * copy; that the requests after a ZKW_BARRIER request wait until the client
 * has its answer (pings and notifications go on), which WITHHOLD keeps until
 * zkw_session_deliver or the replay's reply; that a ZKW_MARK request's reply
 * comes marked; and that a session whose server goes away with a barrier's
 * reply withheld moves: the server (the test's socket) closes, the relay
 * re-attaches the session on a new connection, the withheld reply reaches
 * the client as the server gave it (a replayed one's as CONNECTIONLOSS), the
 * request behind it goes on, and the policy's late delivery of the old
 * barrier does nothing. "Not yet" is shown by order, not by time: a ping
 * sent after a waiting request reaches the server first, and the server's
 * ping reply sent after a withheld reply reaches the client first. Waits are
 * on conditions (a frame arriving, an event
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
  int32_t kept_xid; /* the kept request's xid given with the reply (0: none) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct event events[128];
static int nevents;
static int request_verdict[32]; /* by xid */
static int negative_verdict;    /* of the request with xid NEGATIVE_XID */
#define NEGATIVE_XID (-5)       /* a client xid below zero, not one of the protocol's reserved ones */
static int reply_verdict[32];
static bool held_once[32]; /* a HOLD answers the first call only */
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
  int v = req->xid >= 0 && req->xid < 32 ? request_verdict[req->xid]
          : req->xid == NEGATIVE_XID     ? negative_verdict
                                         : ZKW_FORWARD;
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
  int v = rep->xid >= 0 && rep->xid < 32 ? reply_verdict[rep->xid] : ZKW_FORWARD;
  int32_t kept_xid = 0;
  size_t kept_len;
  const uint8_t *kept = flags & ZKW_REPLY_KEPT ? zkw_session_kept_request(s, &kept_len) : NULL;
  if (kept && kept_len >= 8) kept_xid = (int32_t)zkw_load_be32(kept);
  if (at_barrier && v == ZKW_WITHHOLD) {
    pthread_mutex_lock(&mu);
    barrier_seen = zkw_session_barrier(s);
    pthread_mutex_unlock(&mu);
  }
  record((struct event){.kind = EV_REPLY,
                        .xid = rep->xid,
                        .err = rep->err,
                        .at_barrier = at_barrier,
                        .marked = (flags & ZKW_REPLY_MARKED) != 0,
                        .kept_xid = kept_xid});
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

static size_t ping_frame(uint8_t *buf) {
  size_t n = 0;
  return zkw_encode_ping(buf, 16, &n) == ZKW_OK ? n : 0;
}

/* The client's ping reaches the upstream as the next frame: nothing the
 * client sent before it went on. */
static bool ping_arrives(int c, int u, uint8_t *buf, size_t cap) {
  size_t n = ping_frame(buf);
  return n && write_all(c, buf, n) && read_frame(u, buf, cap) == 12 && frame_xid(buf) == ZKW_XID_PING;
}

/* The upstream answers a ping. */
static bool ping_reply(int u) {
  uint8_t f[20];
  zkw_store_be32(f, 16);
  zkw_store_be32(f + 4, (uint32_t)ZKW_XID_PING);
  memset(f + 8, 0, 12);
  return write_all(u, f, sizeof f);
}

/* The next frame the client gets is the ping's reply: nothing the upstream
 * sent before it went on to the client. */
static bool ping_reply_next(int c, uint8_t *buf, size_t cap) {
  return read_frame(c, buf, cap) == 20 && frame_xid(buf) == ZKW_XID_PING;
}

/* The upstream sends a NodeDataChanged notification of path. */
static bool notify(int u, const char *path) {
  uint8_t f[128];
  struct zkw_reply ev = {.xid = ZKW_XID_NOTIFICATION, .zxid = -1};
  ev.event = (struct zkw_watcher_event){3, 3, {(const uint8_t *)path, (int32_t)strlen(path)}};
  size_t n;
  return zkw_encode_reply(f, sizeof f, &ev, 0, &n) == ZKW_OK && write_all(u, f, n);
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

/* The relay re-attaches the session (its upstream went away): accepts the
 * new connection, checks its ConnectRequest (the session, last_zxid),
 * answers it and the setWatches that follows. The new connection, or -1. */
static int reattach(int up, uint8_t *buf, size_t cap, int64_t last_zxid,
                    const struct zkw_connect_resp *resp) {
  if (!readable(up)) return -1;
  int u = accept(up, NULL, NULL);
  struct zkw_connect_req again;
  long fl;
  size_t n;
  if (u < 0 || read_frame(u, buf, cap) <= 0 ||
      zkw_decode_connect_req(buf + 4, (size_t)zkw_load_be32(buf), &again) != ZKW_OK ||
      again.session_id != 0x1234 || again.last_zxid_seen != last_zxid ||
      zkw_encode_connect_resp(buf, cap, resp, &n) != ZKW_OK || !write_all(u, buf, n))
    return -1;
  /* setWatches: the exist watch on /w, once. */
  struct zkw_request sw;
  if ((fl = read_frame(u, buf, cap)) <= 0 || frame_xid(buf) != ZKW_XID_SET_WATCHES ||
      zkw_decode_request(buf + 4, (size_t)fl - 4, &sw) != ZKW_OK || sw.op.watches[1].count != 1 ||
      !reply(u, ZKW_XID_SET_WATCHES, 0))
    return -1;
  return u;
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
  request_verdict[5] = ZKW_FORWARD | ZKW_KEEP;
  request_verdict[6] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[6] = ZKW_WITHHOLD;
  request_verdict[7] = ZKW_FORWARD | ZKW_MARK;
  request_verdict[8] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[8] = ZKW_WITHHOLD;
  request_verdict[11] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[11] = ZKW_WITHHOLD;
  request_verdict[14] = ZKW_FORWARD | ZKW_BARRIER;
  reply_verdict[14] = ZKW_WITHHOLD;
  negative_verdict = ZKW_FORWARD | ZKW_BARRIER;
  request_verdict[17] = ZKW_FORWARD | ZKW_KEEP;
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

  /* A kept request (5): its reply comes to the policy with its copy. */
  len = get_data_frame(buf, 5, "/kept");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 5);
  ASSERT_TRUE(reply(u, 5, ZKW_ZERR_NODEEXISTS));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 5);
  int e5 = wait_event(EV_REPLY, 5);
  ASSERT_TRUE(e5 > 0);
  ASSERT_TRUE(events[e5].kept_xid == 5 && !events[e5].at_barrier);

  /* The barrier (6) and a marked getData (7) in one write: 6 goes on, 7
   * waits for 6's answer (a ping sent after 7 reaches the server first).
   * 6's reply is withheld until zkw_session_deliver: a notification and the
   * ping's reply, sent after it, reach the client first. Then 7 goes on. */
  len = get_data_frame(buf, 6, "/lock");
  len += get_data_frame(buf + len, 7, "/b");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 6);
  ASSERT_TRUE(ping_arrives(c, u, buf, sizeof buf)); /* not 7 */
  ASSERT_TRUE(reply(u, 6, ZKW_ZERR_NODEEXISTS));
  int e6 = wait_event(EV_REPLY, 6);
  ASSERT_TRUE(e6 > 0);
  ASSERT_TRUE(events[e6].at_barrier && !events[e6].marked && events[e6].kept_xid == 6);
  ASSERT_TRUE(notify(u, "/n") && ping_reply(u));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) > 0);
  ASSERT_EQ(frame_xid(buf), ZKW_XID_NOTIFICATION);
  ASSERT_TRUE(ping_reply_next(c, buf, sizeof buf)); /* not 6's reply */
  uint32_t first_barrier = withheld();
  deliver(first_barrier);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 6);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_NODEEXISTS);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0); /* 7 goes on now */
  ASSERT_EQ(frame_xid(buf), 7);
  ASSERT_TRUE(reply(u, 7, ZKW_ZERR_NONODE));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 7);
  int e7 = wait_event(EV_REPLY, 7);
  ASSERT_TRUE(e7 > e6 && events[e7].marked);
  ASSERT_TRUE(wait_event(EV_DELIVERED, (int32_t)first_barrier) > 0);
  pthread_mutex_lock(&mu);
  ASSERT_EQ(in_barrier_after_deliver, 0); /* no barrier left in flight: the sweep may go on */
  pthread_mutex_unlock(&mu);

  /* A barrier (8) withheld and replayed, 9 behind it: 9 waits; the client
   * gets the replay's reply (another answer than the first), then 9 goes
   * on. */
  len = get_data_frame(buf, 8, "/lock");
  len += get_data_frame(buf + len, 9, "/c");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 8);
  ASSERT_TRUE(ping_arrives(c, u, buf, sizeof buf)); /* not 9 */
  ASSERT_TRUE(reply(u, 8, ZKW_ZERR_NODEEXISTS));
  ASSERT_TRUE(wait_event(EV_REPLY, 8) > 0);
  replay(withheld());
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 8); /* the replay */
  ASSERT_TRUE(ping_reply(u));
  ASSERT_TRUE(ping_reply_next(c, buf, sizeof buf)); /* not 8's first reply */
  ASSERT_TRUE(reply(u, 8, ZKW_ZERR_NOAUTH));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 8);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_NOAUTH); /* the replay's reply */
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 9);
  ASSERT_TRUE(reply(u, 9, ZKW_ZERR_NONODE));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 9);

  /* 10 (exists with a watch: NONODE sets it), 11 a barrier whose reply is
   * withheld, 12 waiting behind it; then the server goes away: the session
   * moves to a new connection (the same server, the only one). The
   * ConnectRequest names the last zxid the relay read (11's), the watch 10
   * set is set again, 11's reply reaches the client as the server gave it,
   * and 12 goes on. */
  len = request_frame(buf, 10, ZKW_OP_EXISTS, "/w", true);
  len += get_data_frame(buf + len, 11, "/lock");
  len += get_data_frame(buf + len, 12, "/e");
  ASSERT_TRUE(write_all(c, buf, len));
  for (int32_t x = 10; x <= 11; x++) {
    ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
    ASSERT_EQ(frame_xid(buf), x);
  }
  ASSERT_TRUE(ping_arrives(c, u, buf, sizeof buf)); /* not 12 */
  ASSERT_TRUE(reply(u, 10, ZKW_ZERR_NONODE) && reply(u, 11, ZKW_ZERR_NODEEXISTS) && ping_reply(u));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 10);
  ASSERT_TRUE(ping_reply_next(c, buf, sizeof buf)); /* not 11's */
  uint32_t old_barrier = withheld();
  close(u);
  u = reattach(up, buf, sizeof buf, 11, &cresp);
  ASSERT_TRUE(u >= 0);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 11);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_NODEEXISTS);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 12);
  ASSERT_TRUE(reply(u, 12, ZKW_ZERR_NONODE));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 12);
  ASSERT_EQ(zkw_metrics.session_moves[ZKW_MOVE_MOVED], 1);
  /* The policy's delivery of the old barrier comes late: it does nothing. */
  deliver(old_barrier);
  ASSERT_TRUE(wait_event(EV_DELIVERED, (int32_t)old_barrier) > 0);
  ASSERT_TRUE(ping_arrives(c, u, buf, sizeof buf) && ping_reply(u));
  ASSERT_TRUE(ping_reply_next(c, buf, sizeof buf));

  /* A barrier (14) replayed, 15 behind it; the server goes away before the
   * replay's reply: the replay's outcome is unknown, 14 gets CONNECTIONLOSS,
   * 15 goes on. */
  len = get_data_frame(buf, 14, "/lock");
  len += get_data_frame(buf + len, 15, "/d");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 14);
  ASSERT_TRUE(reply(u, 14, ZKW_ZERR_NODEEXISTS));
  ASSERT_TRUE(wait_event(EV_REPLY, 14) > 0);
  replay(withheld());
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 14); /* the replay */
  close(u);
  u = reattach(up, buf, sizeof buf, 14, &cresp);
  ASSERT_TRUE(u >= 0);
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 14);
  ASSERT_EQ((int32_t)zkw_load_be32(buf + 16), ZKW_ZERR_CONNECTIONLOSS);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 15);
  ASSERT_TRUE(reply(u, 15, ZKW_ZERR_NONODE));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), 15);
  ASSERT_EQ(zkw_metrics.session_moves[ZKW_MOVE_MOVED], 2);

  /* A barrier whose xid is below zero (not one of the protocol's reserved
   * ones), 16 behind it, then a kept request (17): 16 waits for the
   * barrier's reply, which reaches the policy as a barrier's with its own
   * copy; then 16 goes on, and 17's reply comes with 17's copy (at the end: the
   * replies' zxids here are above the moves' last_zxid checks). */
  len = get_data_frame(buf, NEGATIVE_XID, "/lock");
  len += get_data_frame(buf + len, 16, "/f");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), NEGATIVE_XID);
  ASSERT_TRUE(ping_arrives(c, u, buf, sizeof buf)); /* not 16 */
  ASSERT_TRUE(reply(u, NEGATIVE_XID, ZKW_ZERR_NOTEMPTY) && ping_reply(u));
  ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
  ASSERT_EQ(frame_xid(buf), NEGATIVE_XID);
  ASSERT_TRUE(ping_reply_next(c, buf, sizeof buf));
  int en = wait_event(EV_REPLY, NEGATIVE_XID);
  ASSERT_TRUE(en > 0);
  ASSERT_TRUE(events[en].at_barrier && events[en].kept_xid == NEGATIVE_XID);
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0); /* 16 goes on now */
  ASSERT_EQ(frame_xid(buf), 16);
  len = get_data_frame(buf, 17, "/kept2");
  ASSERT_TRUE(write_all(c, buf, len));
  ASSERT_TRUE((fl = read_frame(u, buf, sizeof buf)) > 0);
  ASSERT_EQ(frame_xid(buf), 17);
  ASSERT_TRUE(reply(u, 16, ZKW_ZERR_NONODE) && reply(u, 17, ZKW_ZERR_NODEEXISTS));
  for (int32_t x = 16; x <= 17; x++) {
    ASSERT_TRUE(read_frame(c, buf, sizeof buf) == 20);
    ASSERT_EQ(frame_xid(buf), x);
  }
  int e17 = wait_event(EV_REPLY, 17);
  ASSERT_TRUE(e17 > 0 && events[e17].kept_xid == 17);

  /* The client goes: the hooks hear it last. */
  close(c);
  ASSERT_TRUE(wait_event(EV_CLOSE, 0) > event_index(EV_REQUEST, 17));
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
