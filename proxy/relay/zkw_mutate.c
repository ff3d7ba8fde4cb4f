/* zkw_mutate.c: the test build's mutations (zkw_mutate.h), each breaking
 * one guarantee so that tests/consistency shows its checker catching it.
 * Compiled to nothing unless ZKW_FAULT_INJECTION is defined. One mutation
 * at a time follows one session (the loop thread only): the reply it
 * holds, the create it replays, the zxid it lowers. */
#include "zkw_mutate.h"

#ifdef ZKW_FAULT_INJECTION
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_hooks.h"
#include "zkw_inband.h"
#include "zkw_relay.h"

/* X(name, enum, default every) */
#define MUTATIONS(X)                                                                                         \
  X("swap_replies", SWAP, 400)                                                                               \
  X("drop_watch_event", DROP_EVENT, 3)                                                                       \
  X("lower_zxid", LOWER_ZXID, 300)                                                                           \
  X("replay_create", REPLAY_CREATE, 25)

enum mutation {
  M_NONE,
#define M_ENUM(name, e, every) M_##e,
  MUTATIONS(M_ENUM)
#undef M_ENUM
};

/* Frames of a followed session seen without it coming back: then it is
 * taken for gone (closed, or its request answered by a move). */
#define STALE_AFTER 20000

static struct {
  bool read;
  enum mutation m;
  unsigned long every;
  unsigned long count; /* eligible frames since the last mutation */
  bool armed;          /* due: acts at the next chance */
} mu;

static struct {
  const struct zkw_session *s; /* the session followed (compared with conn: it may be gone) */
  uint64_t conn;
  struct zkw_buf frame; /* swap: the held reply; replay: the create request */
  int32_t xid;          /* replay: the create's xid */
  int64_t zxid;         /* lower: the last zxid the client got on s */
  unsigned long stale;
} cur;

static void read_env(void) {
  mu.read = true;
  const char *v = getenv("ZKW_TEST_MUTATION");
  if (!v || !*v) return;
  static const struct {
    const char *name;
    enum mutation m;
    unsigned long every;
  } known[] = {
#define M_ROW(name, e, every) {name, M_##e, every},
      MUTATIONS(M_ROW)
#undef M_ROW
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    size_t n = strlen(known[i].name);
    if (strncmp(v, known[i].name, n) != 0 || (v[n] && v[n] != ':')) continue;
    mu.m = known[i].m;
    mu.every = v[n] == ':' ? strtoul(v + n + 1, NULL, 10) : known[i].every;
    if (!mu.every) mu.every = 1;
    zkw_log_warn("test mutation %s every %lu: this process breaks a guarantee on purpose", known[i].name,
                 mu.every);
    return;
  }
  zkw_log_error("ZKW_TEST_MUTATION=\"%s\": no such mutation (swap_replies, drop_watch_event, lower_zxid, "
                "replay_create): none done",
                v);
}

static bool active(enum mutation m) {
  if (!mu.read) read_env();
  return mu.m == m;
}

static bool due(void) {
  if (++mu.count >= mu.every) mu.armed = true;
  return mu.armed;
}

static void done(void) {
  mu.armed = false;
  mu.count = 0;
}

static bool followed(const struct zkw_session *s) {
  return cur.s == s && cur.conn == s->conn;
}

static void follow(const struct zkw_session *s) {
  cur.s = s;
  cur.conn = s->conn;
  cur.stale = 0;
}

/* Forgets a followed session that stopped coming back. */
static void age(const struct zkw_session *s) {
  if (cur.frame.len && !followed(s) && ++cur.stale > STALE_AFTER) {
    zkw_buf_release(&cur.frame);
    cur.s = NULL;
  }
}

/* s->scratch = the frame as it goes to the client (copied unless the
 * relay's verdict already put it there). Returns 0 or -1 (no memory). */
static int to_scratch(struct zkw_session *s, const uint8_t *frame, size_t flen, int verdict) {
  if (verdict == ZKW_REPLACE) return 0;
  s->scratch.len = 0;
  return zkw_buf_append(&s->scratch, frame, flen) ? -1 : 0;
}

static int swap(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t xid, int verdict) {
  if (cur.frame.len && followed(s)) { /* the reply after the held one: this one goes first */
    if (verdict != ZKW_FORWARD && verdict != ZKW_REPLACE) return verdict; /* held by the relay: not yet */
    if (to_scratch(s, frame, flen, verdict) || zkw_buf_append(&s->scratch, cur.frame.data, cur.frame.len))
      return verdict; /* no memory: the held reply is lost, which the client sees too */
    zkw_slog(s, ZKW_LOG_WARN, "test mutation swap_replies: xid %d sent before xid %d", xid,
             (int32_t)zkw_load_be32(cur.frame.data + 4));
    zkw_buf_release(&cur.frame);
    done();
    return ZKW_REPLACE;
  }
  age(s);
  if (cur.frame.len || verdict != ZKW_FORWARD || !s->pending.count || !due()) return verdict;
  if (zkw_buf_append(&cur.frame, frame, flen)) return verdict;
  follow(s);
  return ZKW_DROP; /* held until the next reply of s */
}

static int lower(struct zkw_session *s, const uint8_t *frame, size_t flen, int verdict) {
  int64_t zxid = (int64_t)zkw_load_be64(frame + 8);
  if (zxid <= 0 || (verdict != ZKW_FORWARD && verdict != ZKW_REPLACE)) return verdict;
  if (due() && followed(s) && cur.zxid > 1) {
    if (to_scratch(s, frame, flen, verdict)) return verdict;
    zkw_store_be64(s->scratch.data + 8, (uint64_t)(cur.zxid - 1));
    zkw_slog(s, ZKW_LOG_WARN,
             "test mutation lower_zxid: xid %d sent with zxid 0x%llx for 0x%llx (an earlier "
             "reply had 0x%llx)",
             (int32_t)zkw_load_be32(frame + 4), (unsigned long long)(cur.zxid - 1), (unsigned long long)zxid,
             (unsigned long long)cur.zxid);
    done();
    return ZKW_REPLACE;
  }
  follow(s);
  cur.zxid = zxid;
  return verdict;
}

static void replayed(void *arg, const struct zkw_zk_result *r) {
  (void)arg;
  zkw_log_warn("test mutation replay_create: the second create got %d", r->rc);
}

static void replay(struct zkw_session *s, const uint8_t *frame, int32_t xid) {
  if (!cur.frame.len || !followed(s) || xid != cur.xid) {
    age(s);
    return;
  }
  int32_t err = (int32_t)zkw_load_be32(frame + 16);
  struct zkw_request req;
  if (!err && zkw_decode_request(cur.frame.data + 4, cur.frame.len - 4, &req) == ZKW_OK) {
    if (zkw_inband_request(s, &req, replayed, NULL) == 0) {
      zkw_slog(s, ZKW_LOG_WARN, "test mutation replay_create: create of xid %d sent again", xid);
      done();
    }
  }
  zkw_buf_release(&cur.frame);
  cur.s = NULL;
}

void zkw_mutate_request(struct zkw_session *s, const struct zkw_request *req, const uint8_t *frame,
                        size_t flen) {
  if (!active(M_REPLAY_CREATE) || s->internal) return;
  if (req->type != ZKW_OP_CREATE && req->type != ZKW_OP_CREATE2) return;
  if (!(req->op.flags & 2) || cur.frame.len || !due()) return; /* sequential creates */
  if (zkw_buf_append(&cur.frame, frame, flen)) return;
  follow(s);
  cur.xid = req->xid;
}

int zkw_mutate_reply(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t op, int verdict) {
  if (!mu.read) read_env();
  if (mu.m == M_NONE || s->internal || verdict < 0 || flen < 20) return verdict;
  if (op == ZKW_OP_NOTIFICATION) {
    if (mu.m == M_DROP_EVENT && verdict == ZKW_FORWARD && due()) {
      zkw_slog(s, ZKW_LOG_WARN, "test mutation drop_watch_event: a notification dropped");
      done();
      return ZKW_DROP;
    }
    return verdict;
  }
  int32_t xid = (int32_t)zkw_load_be32(frame + 4);
  if (xid <= 0) return verdict; /* pings, auth, setWatches */
  switch (mu.m) {
  case M_SWAP:
    return swap(s, frame, flen, xid, verdict);
  case M_LOWER_ZXID:
    return lower(s, frame, flen, verdict);
  case M_REPLAY_CREATE:
    if (verdict == ZKW_FORWARD || verdict == ZKW_REPLACE) replay(s, frame, xid);
    return verdict;
  default:
    return verdict;
  }
}
#endif
