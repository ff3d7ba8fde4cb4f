/* zkw_inband.c: zkwarden's own requests on a session's upstream connection
 * (see zkw_inband.h): encoding, the wait for a sendable session, reply
 * decoding into a zkw_zk_result, timeouts and connection loss. */
#include "zkw_fault.h"
#include "zkw_inband.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_encode.h"
#include "zkw_pair.h"
#include "zkw_journal.h"

#define INBAND_FRAME_MAX      1200 /* header + a path of up to 1,024 bytes + flags */
#define INBAND_TIMEOUT_MIN_MS 1000

struct inband_req {
  struct inband_req *next;
  zkw_zk_cb cb; /* NULL once answered by a timeout: the late reply is dropped */
  void *arg;
  int32_t op;
  bool sent;
  uint64_t deadline_ms;
  size_t len;
  uint8_t frame[]; /* xid patched in when sent */
};

struct zkw_inband {
  struct zkw_session *s;
  uv_timer_t timer;
  struct inband_req *head, *tail; /* sent ones first, in order, then the waiting ones */
  struct inband_req *lost;        /* sent on a connection that went away: ZCONNECTIONLOSS on the next turn */
  int32_t next_xid;
  bool closed;
};

static void finish(struct inband_req *r, int rc, const struct zkw_zk_result *res) {
  zkw_zk_cb cb = r->cb;
  r->cb = NULL;
  if (!cb) return;
  struct zkw_zk_result fail = {.rc = rc, .data_len = -1, .failed_op = -1};
  cb(r->arg, res ? res : &fail);
}

static uint64_t timeout_ms(const struct zkw_session *s) {
  uint64_t t = s->timeout > 0 ? (uint64_t)s->timeout / 3 : 0;
  return t > INBAND_TIMEOUT_MIN_MS ? t : INBAND_TIMEOUT_MIN_MS;
}

static bool sendable(const struct zkw_session *s) {
  return s->phase == ZKW_PHASE_ACTIVE && !s->moving && s->upstream.connected && s->inband_ok &&
         s->auths == 0 && !zkw_pending_has(&s->pending, 0, ZKW_OP_SASL, true);
}

static void arm_timer(struct zkw_inband *ib);

/* Finishes the requests lost with their connection (a callback may close
 * the session). */
static void finish_lost(struct zkw_inband *ib) {
  while (ib->lost) {
    struct inband_req *r = ib->lost;
    ib->lost = r->next;
    finish(r, ZCONNECTIONLOSS, NULL);
    free(r);
  }
}

static void timer_cb(uv_timer_t *t) {
  struct zkw_inband *ib = t->data;
  finish_lost(ib);
  if (ib->closed) return;
  uint64_t now = uv_now(t->loop);
  for (struct inband_req *r = ib->head; r && r->sent; r = r->next)
    if (r->cb && r->deadline_ms <= now) {
      zkw_slog(ib->s, ZKW_LOG_WARN, "in-band %s: no reply within %llu ms", zkw_op_name(r->op),
               (unsigned long long)timeout_ms(ib->s));
      finish(r, ZOPERATIONTIMEOUT, NULL);
      if (ib->closed) return;
    }
  arm_timer(ib);
}

static void arm_timer(struct zkw_inband *ib) {
  if (ib->closed) return;
  uint64_t soonest = 0;
  for (struct inband_req *r = ib->head; r && r->sent; r = r->next)
    if (r->cb && (!soonest || r->deadline_ms < soonest)) soonest = r->deadline_ms;
  if (ib->lost) soonest = 1; /* due now */
  if (!soonest) {
    uv_timer_stop(&ib->timer);
    return;
  }
  uint64_t now = uv_now(ib->timer.loop);
  uv_timer_start(&ib->timer, timer_cb, soonest > now ? soonest - now : 0, 0);
}

static int32_t pick_xid(struct zkw_inband *ib) {
  for (;;) {
    int32_t x = ib->next_xid;
    ib->next_xid = x == INT32_MAX ? ZKW_INBAND_XID_BASE : x + 1;
    if (!zkw_pending_has(&ib->s->pending, x, 0, false)) return x;
  }
}

/* Writes the waiting requests, in order, while the session can take them. */
static void flush(struct zkw_inband *ib) {
  struct zkw_session *s = ib->s;
  bool any = false;
  for (struct inband_req *r = ib->head; r && !ib->closed; r = r->next) {
    if (r->sent) continue;
    if (!sendable(s)) break;
    int32_t xid = pick_xid(ib);
    zkw_store_be32(r->frame + 4, (uint32_t)xid);
    if (zkw_pending_push_owned(&s->pending, xid, r->op, r) ||
        (zkw_journal_pushed(s, xid, r->op, 0, true, 0), zkw_side_send(&s->upstream, r->frame, r->len))) {
      zkw_session_close(s, ZKW_LOG_WARN, "cannot write an in-band request upstream");
      return;
    }
    r->sent = true;
    r->deadline_ms = uv_now(s->srv->loop) + timeout_ms(s);
    any = true;
  }
  if (any) arm_timer(ib);
}

static void timer_closed(uv_handle_t *h) {
  struct zkw_inband *ib = h->data;
  struct zkw_session *s = ib->s;
  free(ib);
  s->inband = NULL;
  zkw_session_unref(s);
}

static struct zkw_inband *inband_of(struct zkw_session *s) {
  if (s->inband) return s->inband;
  struct zkw_inband *ib = zkw_calloc(1, sizeof *ib);
  if (!ib) return NULL;
  ib->s = s;
  ib->next_xid = ZKW_INBAND_XID_BASE;
  uv_timer_init(s->srv->loop, &ib->timer);
  ib->timer.data = ib;
  zkw_session_ref(s);
  s->inband = ib;
  return ib;
}

/* A request of cap bytes of frame, not yet queued (NULL: out of memory). */
static struct inband_req *new_request(struct zkw_session *s, int32_t op, size_t cap, zkw_zk_cb cb,
                                      void *arg) {
  struct zkw_inband *ib = inband_of(s);
  struct inband_req *r = ib ? zkw_malloc(sizeof *r + cap) : NULL;
  if (r) *r = (struct inband_req){.cb = cb, .arg = arg, .op = op};
  return r;
}

static void queue(struct zkw_session *s, struct inband_req *r) {
  struct zkw_inband *ib = s->inband;
  if (ib->tail)
    ib->tail->next = r;
  else
    ib->head = r;
  ib->tail = r;
  flush(ib);
}

static int submit(struct zkw_session *s, const struct zkw_request *req, zkw_zk_cb cb, void *arg) {
  if (s->phase == ZKW_PHASE_CLOSING) return -ENOTCONN;
  if (req->op.path.len <= 0 || req->op.path.len > 1024) return -ENAMETOOLONG;
  /* A create's data and ACL come on top of the path and the fixed fields. */
  size_t cap = INBAND_FRAME_MAX + (size_t)(req->op.data.len > 0 ? req->op.data.len : 0) + req->op.acl.len;
  struct inband_req *r = new_request(s, req->type, cap, cb, arg);
  if (!r) return -ENOMEM;
  if (zkw_encode_request(r->frame, cap, req, &r->len) != ZKW_OK) {
    free(r);
    return -ENAMETOOLONG;
  }
  queue(s, r);
  return 0;
}

/* The client's create request (RequestHeader + CreateRequest), decoded. */
static int client_create(const uint8_t *request, size_t len, struct zkw_request *req) {
  if (zkw_decode_request(request, len, req) != ZKW_OK ||
      (req->type != ZKW_OP_CREATE && req->type != ZKW_OP_CREATE2))
    return -EINVAL;
  return 0;
}

int zkw_inband_create(struct zkw_session *s, const uint8_t *request, size_t len, zkw_zk_cb cb, void *arg) {
  struct zkw_request req;
  if (client_create(request, len, &req)) return -EINVAL;
  return submit(s, &req, cb, arg);
}

int zkw_inband_replace(struct zkw_session *s, const char *path, int version, const uint8_t *request,
                       size_t len, zkw_zk_cb cb, void *arg) {
  struct zkw_request req;
  if (s->phase == ZKW_PHASE_CLOSING) return -ENOTCONN;
  if (client_create(request, len, &req)) return -EINVAL;
  struct zkw_op_req ops[2] = {{.type = ZKW_OP_DELETE, .version = version}, req.op};
  ops[0].path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  ops[1].type = ZKW_OP_CREATE; /* the path it reports is enough: create2's Stat is not read */
  size_t cap = len + ops[0].path.len + 64;
  struct inband_req *r = new_request(s, ZKW_OP_MULTI, cap, cb, arg);
  if (!r) return -ENOMEM;
  if (zkw_encode_multi(r->frame, cap, 0, ops, 2, &r->len) != ZKW_OK) {
    free(r);
    return -EINVAL;
  }
  queue(s, r);
  return 0;
}

static struct zkw_request path_request(int32_t type, const char *path) {
  struct zkw_request req = {.type = type};
  req.op.type = type;
  req.op.path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  return req; /* watch stays 0 */
}

int zkw_inband_request(struct zkw_session *s, const struct zkw_request *req, zkw_zk_cb cb, void *arg) {
  return submit(s, req, cb, arg);
}

int zkw_inband_get(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg) {
  struct zkw_request req = path_request(ZKW_OP_GET_DATA, path);
  return submit(s, &req, cb, arg);
}

int zkw_inband_children(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg) {
  struct zkw_request req = path_request(ZKW_OP_GET_CHILDREN, path);
  return submit(s, &req, cb, arg);
}

int zkw_inband_delete(struct zkw_session *s, const char *path, int version, zkw_zk_cb cb, void *arg) {
  struct zkw_request req = path_request(ZKW_OP_DELETE, path);
  req.op.version = version;
  return submit(s, &req, cb, arg);
}

int zkw_inband_children2(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg) {
  struct zkw_request req = path_request(ZKW_OP_GET_CHILDREN2, path);
  return submit(s, &req, cb, arg);
}

int zkw_inband_add_watch(struct zkw_session *s, const char *path, int32_t mode, zkw_zk_cb cb, void *arg) {
  struct zkw_request req = path_request(ZKW_OP_ADD_WATCH, path);
  req.op.mode = mode;
  return submit(s, &req, cb, arg);
}

int zkw_inband_remove_watches(struct zkw_session *s, const char *path, int32_t type, zkw_zk_cb cb,
                              void *arg) {
  struct zkw_request req = path_request(ZKW_OP_REMOVE_WATCHES, path);
  req.op.mode = type; /* {path, int type}: the same shape as addWatch */
  return submit(s, &req, cb, arg);
}

void zkw_inband_client_reply(struct zkw_session *s, int32_t op) {
  if (op != ZKW_OP_SASL) s->inband_ok = true;
  if (s->inband && s->inband->head) flush(s->inband);
}

static void to_stat(struct Stat *out, const struct zkw_stat *st) {
  *out = (struct Stat){.czxid = st->czxid,
                       .mzxid = st->mzxid,
                       .ctime = st->ctime,
                       .mtime = st->mtime,
                       .version = st->version,
                       .cversion = st->cversion,
                       .aversion = st->aversion,
                       .ephemeralOwner = st->ephemeral_owner,
                       .dataLength = st->data_length,
                       .numChildren = st->num_children,
                       .pzxid = st->pzxid};
}

/* Copies the children names into one block: the pointers, then the strings. */
static int copy_children(struct zkw_vec list, struct zkw_zk_result *res, char **block) {
  struct zkw_rd rd = zkw_vec_reader(list);
  size_t n = (size_t)(list.count > 0 ? list.count : 0);
  char **names = zkw_malloc(n * sizeof *names + list.len + n + 1);
  if (!names) return -ENOMEM;
  char *p = (char *)(names + n);
  for (size_t i = 0; i < n; i++) {
    struct zkw_bytes b = zkw_rd_bytes(&rd);
    if (rd.err || b.len < 0) {
      free(names);
      return ZKW_E_VALUE;
    }
    memcpy(p, b.p, (size_t)b.len);
    p[b.len] = 0;
    names[i] = p;
    p += b.len + 1;
  }
  res->children = names;
  res->child_count = (int)n;
  *block = (char *)names;
  return 0;
}

int zkw_inband_reply(struct zkw_session *s, void *owned, const uint8_t *body, size_t len, int32_t op) {
  struct zkw_inband *ib = s->inband;
  struct inband_req *r = owned;
  /* Replies come in order: r is the oldest sent request. A reply that does
   * not decode leaves r in the list: the session closes as a protocol
   * error, and r gets its ZCONNECTIONLOSS with the rest. */
  if (ib->head != r) return ZKW_E_VALUE;
  struct zkw_reply rep;
  int rc = zkw_decode_reply(body, len, op, &rep);
  if (rc) return rc;
  struct zkw_zk_result res = {.rc = rep.err, .data_len = -1, .failed_op = -1};
  char *data = NULL, *block = NULL;
  if (rep.err == 0 && op == ZKW_OP_GET_DATA) {
    res.has_stat = true;
    to_stat(&res.stat, &rep.op.stat);
    if (rep.op.data.len >= 0) {
      data = zkw_malloc((size_t)rep.op.data.len + 1);
      if (!data) {
        res.rc = ZSYSTEMERROR;
      } else {
        memcpy(data, rep.op.data.p, (size_t)rep.op.data.len);
        data[rep.op.data.len] = 0;
        res.data = data;
        res.data_len = rep.op.data.len;
      }
    }
  } else if (rep.err == 0 && op == ZKW_OP_MULTI) {
    /* A failed multi says so in its results, not its header: the first
     * error other than the rollbacks' RUNTIMEINCONSISTENCY. */
    struct zkw_multi_iter it = zkw_multi_iter(rep.op.results);
    struct zkw_op_rep sub;
    for (int i = 0; zkw_multi_next_rep(&it, &sub) == ZKW_OK; i++)
      if (sub.err != 0 && sub.err != ZKW_ZERR_RUNTIMEINCONSISTENCY && res.failed_op < 0) {
        res.rc = sub.err;
        res.failed_op = i;
      }
  } else if (rep.err == 0 && (op == ZKW_OP_GET_CHILDREN || op == ZKW_OP_GET_CHILDREN2)) {
    if (op == ZKW_OP_GET_CHILDREN2) {
      res.has_stat = true;
      to_stat(&res.stat, &rep.op.stat);
    }
    int crc = copy_children(rep.op.list, &res, &block);
    if (crc == ZKW_E_VALUE) return crc;
    if (crc) res.rc = ZSYSTEMERROR;
  }
  ib->head = r->next;
  if (!ib->head) ib->tail = NULL;
  finish(r, 0, &res);
  free(data);
  free(block);
  free(r);
  if (s->inband == ib && !ib->closed) arm_timer(ib);
  return 0;
}

/* After the session closed: every outstanding request gets ZCONNECTIONLOSS,
 * on a later turn of the loop, never inside the call (a submit, a callback)
 * whose failure closed the session. */
static void fail_all_cb(uv_timer_t *t) {
  struct zkw_inband *ib = t->data;
  finish_lost(ib);
  while (ib->head) {
    struct inband_req *r = ib->head;
    ib->head = r->next;
    finish(r, ZCONNECTIONLOSS, NULL);
    free(r);
  }
  ib->tail = NULL;
  uv_close((uv_handle_t *)&ib->timer, timer_closed);
}

void zkw_inband_session_closed(struct zkw_session *s) {
  struct zkw_inband *ib = s->inband;
  if (!ib || ib->closed) return;
  ib->closed = true;
  uv_timer_start(&ib->timer, fail_all_cb, 0, 0);
}

void zkw_inband_connection_lost(struct zkw_session *s) {
  struct zkw_inband *ib = s->inband;
  if (!ib || ib->closed) return;
  struct inband_req **lost_tail = &ib->lost;
  while (*lost_tail)
    lost_tail = &(*lost_tail)->next;
  /* The sent ones, and the waiting ones meant for this connection alone: a
   * watch request (addWatch: the policy asked for it knowing this server
   * takes it; the next server may be older and close the connection). */
  for (struct inband_req **pp = &ib->head; *pp;) {
    struct inband_req *r = *pp;
    if (!r->sent && r->op != ZKW_OP_ADD_WATCH && r->op != ZKW_OP_REMOVE_WATCHES) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    r->next = NULL;
    *lost_tail = r;
    lost_tail = &r->next;
  }
  ib->tail = NULL;
  for (struct inband_req *r = ib->head; r; r = r->next)
    ib->tail = r;
  arm_timer(ib);
}

void zkw_inband_resume(struct zkw_session *s) {
  if (s->inband && s->inband->head && !s->inband->closed) flush(s->inband);
}
