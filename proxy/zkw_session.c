/* zkw_session.c: relaying and parsing one client connection's frames.
 *
 * Reading: each side reads into its `in` buffer; complete frames are parsed
 * and validated, then the run of complete frames is handed to the peer in one
 * write (uv_try_write straight from `in` when the peer has nothing queued,
 * else a copy into the peer's `out`). The partial tail stays in `in`.
 * Backpressure: a side stops reading while its peer has more than
 * ZKW_HIGH_WATER bytes unsent, and resumes below ZKW_LOW_WATER. */
#include "zkw_session.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_identity.h"
#include "zkw_inband.h"
#include "zkw_reclaim.h"
#include "zkw_rewrite.h"
#include "zkw_health.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_tls.h"

#define ZKW_HIGH_WATER (1024 * 1024)
#define ZKW_LOW_WATER  (256 * 1024)
/* Bound on flushing queued bytes to a side once the session is closing. */
#define ZKW_CLOSE_FLUSH_MS 2000
/* Smallest free space offered to a read. */
#define ZKW_READ_MIN 4096

static void side_close(struct zkw_side *side);
static void side_flush(struct zkw_side *side);

static struct zkw_side *peer_of(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  return side == &s->client ? &s->upstream : &s->client;
}

static size_t unsent(const struct zkw_side *side) {
  return side->out.len + side->flight.len;
}

void zkw_session_maybe_free(struct zkw_session *s) {
  if (s->phase != ZKW_PHASE_CLOSING || s->handles > 0) return;
  struct zkw_server *srv = s->srv;
  if (s->prev)
    s->prev->next = s->next;
  else
    srv->sessions = s->next;
  if (s->next) s->next->prev = s->prev;
  srv->session_count--;
  struct zkw_side *sides[2] = {&s->client, &s->upstream};
  for (int i = 0; i < 2; i++) {
    zkw_buf_release(&sides[i]->in);
    zkw_buf_release(&sides[i]->out);
    zkw_buf_release(&sides[i]->flight);
  }
  zkw_tls_conn_free(s->upstream.tls);
  zkw_buf_release(&s->barrier_frame);
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->scratch);
  zkw_pending_free(&s->pending);
  memset(s->passwd, 0, sizeof s->passwd);
  free(s);
  if (srv->stopping && srv->session_count == 0) zkw_server_stop(srv);
}

static void handle_closed_cb(uv_handle_t *h) {
  struct zkw_session *s = h->type == UV_TIMER ? h->data : ((struct zkw_side *)h->data)->s;
  s->handles--;
  zkw_session_maybe_free(s);
}

static void side_close(struct zkw_side *side) {
  if (!side->open) return;
  side->open = false;
  side->reading = false;
  uv_close((uv_handle_t *)&side->tcp, handle_closed_cb);
}

/* Closes a side whose output has drained (or failed) during close, and the
 * timer once both sides are closed. */
static void closing_side_done(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  side_close(side);
  if (!s->client.open && !s->upstream.open && !uv_is_closing((uv_handle_t *)&s->timer))
    uv_close((uv_handle_t *)&s->timer, handle_closed_cb);
}

static void close_flush_timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  side_close(&s->client);
  closing_side_done(&s->upstream);
}

void zkw_session_close(struct zkw_session *s, enum zkw_log_level level, const char *fmt, ...) {
  if (s->phase == ZKW_PHASE_CLOSING) return;
  level = zkw_session_level(s, level);
  if (level <= zkw_log_level) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    struct zkw_log_ctx ctx = zkw_session_log_ctx(s);
    zkw_log_at(level, &ctx, "closed: %s", reason);
  }
  zkw_identity_on_session_closed(s); /* orphan detection; leaves the identity's lists */
  s->phase = ZKW_PHASE_CLOSING;
  zkw_inband_session_closed(s); /* zkwarden's own requests get a connection loss */
  if (!s->srv->internal) zkw_metrics_closed(s->srv->stopping ? ZKW_CLOSE_SHUTDOWN : s->close_class);
  if (s->resolving) uv_cancel((uv_req_t *)&s->resolve_req);
  uv_timer_stop(&s->timer);
  bool flushing = false;
  struct zkw_side *up = &s->upstream;
  if (up->tls && up->open && up->connected && zkw_tls_close_notify(up->tls, &up->out) == 0)
    side_flush(up); /* the TLS close_notify goes out with the rest */
  struct zkw_side *sides[2] = {&s->client, &s->upstream};
  for (int i = 0; i < 2; i++) {
    struct zkw_side *side = sides[i];
    if (side->open && side->reading) uv_read_stop((uv_stream_t *)&side->tcp);
    side->reading = false;
    if (side->open && side->connected && unsent(side) > 0)
      flushing = true; /* closed by write_cb */
    else
      side_close(side);
  }
  if (flushing)
    uv_timer_start(&s->timer, close_flush_timeout_cb, ZKW_CLOSE_FLUSH_MS, 0);
  else if (!uv_is_closing((uv_handle_t *)&s->timer))
    uv_close((uv_handle_t *)&s->timer, handle_closed_cb);
}

/* ---- writing ---- */

static void start_reading(struct zkw_side *side);

static void write_cb(uv_write_t *req, int status) {
  struct zkw_side *side = req->data;
  struct zkw_session *s = side->s;
  side->writing = false;
  zkw_buf_release(&side->flight);
  if (status < 0) {
    if (s->phase == ZKW_PHASE_CLOSING)
      closing_side_done(side);
    else {
      s->close_class = ZKW_CLOSE_IO_ERROR;
      zkw_session_close(s, ZKW_LOG_INFO, "write to %s failed: %s", side->name, uv_strerror(status));
    }
    return;
  }
  if (side->out.len) side_flush(side);
  if (s->phase == ZKW_PHASE_CLOSING) {
    if (!side->writing) closing_side_done(side);
    return;
  }
  struct zkw_side *src = peer_of(side);
  if (src->paused && unsent(side) < ZKW_LOW_WATER) {
    src->paused = false;
    start_reading(src);
  }
}

/* Starts writing side->out if no write is in flight. */
static void side_flush(struct zkw_side *side) {
  if (side->writing || !side->out.len || !side->open) return;
  side->flight = side->out;
  side->out = (struct zkw_buf){0};
  uv_buf_t b = uv_buf_init((char *)side->flight.data, (unsigned)side->flight.len);
  side->wreq.data = side;
  int rc = uv_write(&side->wreq, (uv_stream_t *)&side->tcp, &b, 1, write_cb);
  if (rc) {
    zkw_buf_release(&side->flight);
    side->s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(side->s, ZKW_LOG_INFO, "write to %s failed: %s", side->name, uv_strerror(rc));
    return;
  }
  side->writing = true;
}

/* Sends n bytes to side: straight to the socket if nothing is queued, the
 * rest (or all) copied to side->out. Returns 0 or a negative error. */
static int side_send(struct zkw_side *side, const uint8_t *p, size_t n) {
  if (!n) return 0;
  if (side->tls) {
    /* Encrypted into out: uv_write then tries the socket at once. */
    if (zkw_tls_encrypt(side->tls, p, n) != 0) return UV_EPROTO;
    if (zkw_tls_take_output(side->tls, &side->out) != 0) return UV_ENOMEM;
    side_flush(side);
    return 0;
  }
  if (!side->writing && !side->out.len) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int w = uv_try_write((uv_stream_t *)&side->tcp, &b, 1);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w != UV_EAGAIN) {
      return w;
    }
    if (!n) return 0;
  }
  int rc = zkw_buf_append(&side->out, p, n);
  if (rc) return rc;
  side_flush(side);
  return 0;
}

/* ---- reading ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct zkw_side *side = h->data;
  (void)suggested;
  if (side->tls) {
    *buf = zkw_tls_read_buf(); /* ciphertext, decrypted into in by read_cb */
    return;
  }
  if (zkw_buf_reserve(&side->in, ZKW_READ_MIN) != 0) {
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
    return;
  }
  *buf = uv_buf_init((char *)side->in.data + side->in.len, (unsigned)(side->in.cap - side->in.len));
}

static void process(struct zkw_side *side);

/* The client gave up on a session whose upstream had gone silent with a
 * request or ping outstanding for half the session timeout (a client's read
 * timeout is two thirds of it): the server is likely paused or cut off, so
 * the client's next connection should go to another server first, as it
 * would direct. */
static void suspect_silent_upstream(struct zkw_session *s) {
  if (s->phase != ZKW_PHASE_ACTIVE || s->close_sent || !s->upstream.connected || s->timeout <= 0) return;
  if (!s->pings && !s->pending.count) return;
  uint64_t silent = uv_now(s->srv->loop) - s->up_last_read_ms;
  if (silent < (uint64_t)s->timeout / 2) return;
  zkw_upstream_suspect(s, (uint64_t)s->timeout);
  zkw_slog(s, ZKW_LOG_INFO,
           "upstream %s silent for %llu ms with requests outstanding: tried after the others "
           "for %d ms",
           s->up_name, (unsigned long long)silent, s->timeout);
}

/* Ciphertext read from a TLS side: its plaintext goes to side->in, and what
 * OpenSSL has to answer (post-handshake records) to the socket. Returns 0,
 * UV_EOF on close_notify, or a negative error (the session is closed). */
static int tls_read(struct zkw_side *side, const uv_buf_t *buf, size_t n) {
  struct zkw_session *s = side->s;
  int rc = zkw_tls_feed(side->tls, buf->base, n);
  if (rc == 0) rc = zkw_tls_decrypt(side->tls, &side->in);
  if (rc == ZKW_TLS_CLOSED) return UV_EOF;
  if (rc == ZKW_TLS_ERROR) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    if (s->phase == ZKW_PHASE_CONNECTING && !s->response_seen) {
      /* TLS 1.3: a server refusing our certificate says so after its side
       * of the handshake; still a failed handshake, this server comes last. */
      ZKW_METRIC_INC(tls_handshake_failures);
      zkw_tls_note(s->up_name, zkw_tls_conn_error(side->tls));
      zkw_upstream_suspect(s, s->srv->cfg->connect_timeout_ms);
      s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
    }
    zkw_session_close(s, ZKW_LOG_WARN, "TLS error from %s: %s", side->name, zkw_tls_conn_error(side->tls));
    return UV_EPROTO;
  }
  if (rc == 0 && zkw_tls_take_output(side->tls, &side->out) != 0) rc = UV_ENOMEM;
  /* The server's first bytes: it took our certificate too (TLS 1.3 says so
   * only now). */
  if (rc == 0 && side->in.len && s->phase == ZKW_PHASE_CONNECTING && !s->response_seen)
    zkw_tls_note(s->up_name, NULL);
  if (rc < 0) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(s, ZKW_LOG_ERROR, "out of memory reading from %s", side->name);
    return rc;
  }
  side_flush(side);
  return 0;
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  struct zkw_side *side = stream->data;
  struct zkw_session *s = side->s;
  if (nread > 0 && side->tls) {
    nread = tls_read(side, buf, (size_t)nread);
    if (nread == UV_EPROTO || nread == UV_ENOMEM) return; /* closed */
    s->up_last_read_ms = uv_now(s->srv->loop);
    process(side); /* what came before a close_notify too */
  } else if (nread > 0) {
    if (side == &s->upstream) s->up_last_read_ms = uv_now(s->srv->loop);
    side->in.len += (size_t)nread;
    process(side);
  }
  if (nread < 0) {
    if (side == &s->client) suspect_silent_upstream(s);
    /* After closeSession the server closes first: still the client's doing. */
    s->close_class =
        side == &s->client || s->close_sent ? ZKW_CLOSE_CLIENT_CLOSED : ZKW_CLOSE_UPSTREAM_CLOSED;
    if (nread == UV_EOF)
      zkw_session_close(s, ZKW_LOG_INFO, "%s closed the connection%s", side->name,
                        side->in.len                ? " in the middle of a frame"
                        : s->close_sent             ? " after closeSession"
                        : s->phase == ZKW_PHASE_RAW ? " (four-letter word done)"
                                                    : "");
    else
      zkw_session_close(s, ZKW_LOG_INFO, "read from %s failed: %s", side->name, uv_strerror((int)nread));
  }
  if (side->in.len == 0) zkw_buf_release(&side->in);
}

static void start_reading(struct zkw_side *side) {
  if (side->reading || side->paused || !side->open || side->s->phase == ZKW_PHASE_CLOSING) return;
  int rc = uv_read_start((uv_stream_t *)&side->tcp, alloc_cb, read_cb);
  if (rc) {
    zkw_session_close(side->s, ZKW_LOG_ERROR, "cannot read from %s: %s", side->name, uv_strerror(rc));
    return;
  }
  side->reading = true;
}

static void stop_reading(struct zkw_side *side) {
  if (!side->reading) return;
  uv_read_stop((uv_stream_t *)&side->tcp);
  side->reading = false;
}

/* ---- frames ---- */

/* What happens to a frame once handled. Errors are negative codec statuses. */
enum frame_action {
  FRAME_FORWARD = 0, /* as it is */
  FRAME_REPLACED,    /* s->scratch holds the frame to send instead */
  FRAME_DROP,        /* consumed, not forwarded */
  FRAME_HOLD,        /* not consumed: processing of this side stops here */
};

/* Copies a frame into a session buffer (barrier frame, withheld reply). */
static int keep_frame(struct zkw_buf *b, const uint8_t *frame, size_t len) {
  b->len = 0;
  return zkw_buf_append(b, frame, len) ? ZKW_E_NOSPACE : 0;
}

/* The server took the ConnectRequest and never answered (paused, or the
 * network went silent after the TCP connect): give up as the client would
 * have, so that it comes back at once and is sent to the next server. */
static void upstream_handshake_timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->phase != ZKW_PHASE_CONNECTING || s->response_seen) return;
  ZKW_METRIC_INC(upstream_connect_failures);
  zkw_upstream_suspect(s, (uint64_t)s->up_handshake_ms * (uint64_t)s->srv->cfg->upstream_count);
  s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
  zkw_session_close(s, ZKW_LOG_WARN, "upstream %s: no answer to the handshake within %u ms", s->up_name,
                    s->up_handshake_ms);
}

/* Bound on the wait for a ConnectResponse: what the client would give each
 * server direct (its session timeout over the number of servers), at least
 * ZKWARDEN_CONNECT_TIMEOUT_MS. Through zkwarden the client sees one address
 * and would wait its whole session timeout on a silent server. */
static uint32_t upstream_handshake_ms(const struct zkw_session *s, const uint8_t *body, size_t len) {
  struct zkw_connect_req req;
  int32_t requested = zkw_decode_connect_req(body, len, &req) == ZKW_OK ? req.timeout : 0;
  uint32_t n = (uint32_t)(s->srv->cfg->upstream_count > 0 ? s->srv->cfg->upstream_count : 1);
  uint32_t ms = requested > 0 ? (uint32_t)requested / n : 0;
  return ms > s->srv->cfg->connect_timeout_ms ? ms : s->srv->cfg->connect_timeout_ms;
}

/* Handles one client frame (the body starts at frame + 4). */
static int on_client_frame(struct zkw_session *s, const uint8_t *frame, size_t flen) {
  const uint8_t *body = frame + 4;
  size_t len = flen - 4;
  if (s->phase == ZKW_PHASE_HANDSHAKE) {
    s->phase = ZKW_PHASE_CONNECTING;
    s->up_handshake_ms = upstream_handshake_ms(s, body, len); /* checked by client_hello */
    uv_timer_start(&s->timer, upstream_handshake_timeout_cb, s->up_handshake_ms, 0);
    return FRAME_FORWARD;
  }
  struct zkw_request req;
  int rc = zkw_decode_request(body, len, &req);
  if (rc) {
    zkw_slog(s, ZKW_LOG_WARN, "bad request from client: %s (xid %d, %s)", zkw_strerror(rc),
             len >= 8 ? (int32_t)zkw_load_be32(body) : 0,
             len >= 8 ? zkw_op_name((int32_t)zkw_load_be32(body + 4)) : "-");
    return rc;
  }
  if (req.xid == ZKW_XID_PING || req.type == ZKW_OP_PING) {
    if (req.xid != ZKW_XID_PING || req.type != ZKW_OP_PING) goto reserved;
    zkw_metrics_request(req.type);
    s->pings++;
    return FRAME_FORWARD;
  }
  if (req.xid == ZKW_XID_NOTIFICATION) goto reserved;
  if (req.xid == ZKW_XID_AUTH) {
    if (req.type != ZKW_OP_AUTH) goto reserved;
    zkw_metrics_request(req.type);
    s->auths++;
    return FRAME_FORWARD;
  }
  /* The session's first request that acts as the JobManager begins its
   * incarnation: held until the previous one is fenced and this one recorded. */
  if (s->hold_jm) return FRAME_HOLD;
  if (!s->acts_as_jm && zkw_acts_as_jobmanager(&s->srv->cfg->lock_roots, &req) &&
      zkw_identity_on_jm_request(s))
    return FRAME_HOLD;
  int action = FRAME_FORWARD;
  bool lock_request = false;
  if (s->incarnation &&
      (req.type == ZKW_OP_CREATE || req.type == ZKW_OP_CREATE2 || req.type == ZKW_OP_MULTI)) {
    const struct zkw_config *cfg = s->srv->cfg;
    struct zkw_tagger t = {&cfg->lock_roots, cfg->identity, s->incarnation, s->session_id};
    int locks = 0;
    rc = zkw_rewrite_request(&req, &t, &s->scratch, &locks);
    if (rc < 0) return rc;
    if (rc == 1) action = FRAME_REPLACED;
    lock_request = locks > 0 && req.type != ZKW_OP_MULTI;
  } else if (s->incarnation && req.type == ZKW_OP_DELETE) {
    lock_request = zkw_under_lock_roots(&s->srv->cfg->lock_roots, req.op.path);
  }
  if (lock_request) {
    /* While a sweep decides which locks are stale, lock requests wait. */
    if (zkw_sweep_holding(&s->srv->identity)) {
      zkw_buf_release(&s->scratch);
      return FRAME_HOLD;
    }
    s->barrier = true;
    s->barrier_replayed = false;
    s->barrier_is_create = req.type != ZKW_OP_DELETE;
    s->barrier_xid = req.xid;
    s->barrier_op = req.type;
    rc = action == FRAME_REPLACED ? keep_frame(&s->barrier_frame, s->scratch.data, s->scratch.len)
                                  : keep_frame(&s->barrier_frame, frame, flen);
    if (rc) return rc;
  }
  zkw_metrics_request(req.type);
  if (req.type == ZKW_OP_GET_DATA && req.op.path.len == (int32_t)strlen(ZKW_CONFIG_NODE) &&
      memcmp(req.op.path.p, ZKW_CONFIG_NODE, strlen(ZKW_CONFIG_NODE)) == 0)
    s->config_xid = req.xid;
  if (req.type == ZKW_OP_CLOSE_SESSION) s->close_sent = true;
  if (zkw_pending_push(&s->pending, req.xid, req.type)) return ZKW_E_NOSPACE;
  return action;
reserved:
  zkw_slog(s, ZKW_LOG_WARN, "bad request from client: xid %d is reserved and cannot carry %s", req.xid,
           zkw_op_name(req.type));
  return ZKW_E_VALUE;
}

static int on_connect_response(struct zkw_session *s, const uint8_t *body, size_t len) {
  struct zkw_connect_resp resp;
  int rc = zkw_decode_connect_resp(body, len, &resp);
  if (rc) return rc;
  if (!s->response_seen) {
    s->response_seen = true;
    uv_timer_stop(&s->timer); /* the handshake bound */
    zkw_upstream_answered(s);
    s->session_id = resp.session_id;
    s->timeout = resp.timeout;
    s->read_only = resp.read_only;
    s->passwd_len = resp.passwd.len > 0 ? (uint8_t)(resp.passwd.len < 16 ? resp.passwd.len : 16) : 0;
    if (s->passwd_len) memcpy(s->passwd, resp.passwd.p, s->passwd_len);
    zkw_metrics_session(resp.timeout > 0);
    if (resp.timeout <= 0)
      zkw_slog(s, ZKW_LOG_INFO, "session rejected by %s: expired or invalid", s->up_name);
    else
      zkw_slog(s, ZKW_LOG_INFO, "session established via %s, timeout %d ms%s", s->up_name, resp.timeout,
               resp.read_only ? ", read-only" : "");
    zkw_identity_on_connect_response(s, &resp); /* a re-attached incarnation */
  }
  s->phase = ZKW_PHASE_ACTIVE;
  return FRAME_FORWARD;
}

/* The reply to the barrier request: reclaim, or lift the barrier. */
static int on_barrier_reply(struct zkw_session *s, const struct zkw_reply *rep, const uint8_t *frame,
                            size_t flen) {
  int32_t want = s->barrier_is_create ? ZKW_ZERR_NODEEXISTS : ZKW_ZERR_NOTEMPTY;
  if (rep->err == want && !s->barrier_replayed) {
    struct zkw_request req;
    if (zkw_decode_request(s->barrier_frame.data + 4, s->barrier_frame.len - 4, &req) == ZKW_OK) {
      if (keep_frame(&s->held_reply, frame, flen)) return ZKW_E_NOSPACE;
      if (zkw_reclaim_start(s, s->barrier_is_create, req.op.path)) return FRAME_DROP;
      zkw_buf_release(&s->held_reply);
    }
  }
  s->barrier = false;
  zkw_buf_release(&s->barrier_frame);
  s->resume_pending = true; /* the client frames behind the barrier */
  return FRAME_FORWARD;
}

/* Handles one upstream frame (the body starts at frame + 4). */
static int on_upstream_frame(struct zkw_session *s, const uint8_t *frame, size_t flen) {
  const uint8_t *body = frame + 4;
  size_t len = flen - 4;
  if (s->phase == ZKW_PHASE_CONNECTING) return on_connect_response(s, body, len);
  int32_t xid = (int32_t)zkw_load_be32(body);
  int32_t op = ZKW_OP_NOTIFICATION;
  int rc;
  if (xid == ZKW_XID_PING) {
    if (!s->pings) goto unmatched;
    s->pings--;
    op = ZKW_OP_PING;
  } else if (xid == ZKW_XID_AUTH) {
    if (!s->auths) goto unmatched;
    s->auths--;
    op = ZKW_OP_AUTH;
  } else if (xid != ZKW_XID_NOTIFICATION) {
    int32_t expected;
    if (zkw_pending_match(&s->pending, xid, &op, &expected) != 0) {
      if (s->pending.count)
        zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: xid %d out of order, expected xid %d (%s)", xid,
                 expected, zkw_op_name(zkw_pending_at(&s->pending, 0).op));
      else
        goto unmatched;
      return ZKW_E_VALUE;
    }
    if (s->pending.last_owned) { /* zkwarden's own request: consumed, never forwarded */
      rc = zkw_inband_reply(s, s->pending.last_owned, body, len, op);
      return rc < 0 ? rc : FRAME_DROP;
    }
    zkw_metrics_latency(op, s->pending.now - s->pending.last_t0);
  }
  struct zkw_reply rep;
  rc = zkw_decode_reply(body, len, op, &rep);
  if (rc) {
    zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: %s (xid %d, %s)", zkw_strerror(rc), xid,
             zkw_op_name(op));
    return rc;
  }
  zkw_metrics_reply(op);
  if (op != ZKW_OP_NOTIFICATION) zkw_inband_client_reply(s, op);
  if (xid < 0) return FRAME_FORWARD;
  if (s->barrier && xid == s->barrier_xid && op == s->barrier_op)
    return on_barrier_reply(s, &rep, frame, flen);
  if (op == ZKW_OP_GET_DATA && s->config_xid == xid) {
    s->config_xid = 0;
    rc = zkw_rewrite_config_reply(&rep, s->srv->listen_name, &s->scratch);
  } else {
    rc = zkw_rewrite_untag_reply(&rep, op, &s->scratch);
  }
  return rc < 0 ? rc : rc == 1 ? FRAME_REPLACED : FRAME_FORWARD;
unmatched:
  zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: xid %d answers no outstanding request", xid);
  return ZKW_E_VALUE;
}

/* Before any upstream connection: waits for a four-letter word or a whole,
 * valid ConnectRequest, then connects upstream. An idle or garbage connection
 * thus never takes a connection slot on the server (ZooKeeper limits them per
 * client address). The ConnectRequest stays in the buffer and is forwarded,
 * parsed again, once the upstream is up. */
static void client_hello(struct zkw_session *s) {
  struct zkw_side *side = &s->client;
  size_t flen;
  if (side->in.len < 4) return;
  const char *word = zkw_four_letter_word(side->in.data);
  if (word) {
    zkw_slog(s, ZKW_LOG_DEBUG, "four-letter word '%s': relaying raw", word);
    s->phase = ZKW_PHASE_RAW;
  } else {
    int rc = zkw_frame_next(side->in.data, side->in.len, ZKW_CONNECT_REQ_MIN, s->srv->cfg->max_frame, &flen);
    if (rc == ZKW_AGAIN) return;
    struct zkw_connect_req req;
    if (rc == ZKW_OK) rc = zkw_decode_connect_req(side->in.data + 4, flen - 4, &req);
    if (rc != ZKW_OK) {
      zkw_metrics_decode_error(1);
      s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
      zkw_session_close(s, ZKW_LOG_WARN, "protocol error from client: bad handshake: %s (frame length %d)",
                        zkw_strerror(rc), (int32_t)zkw_load_be32(side->in.data));
      return;
    }
    zkw_slog(s, ZKW_LOG_DEBUG, "connect request: session 0x%llx, timeout %d ms, read-only %d",
             (unsigned long long)req.session_id, req.timeout, req.read_only);
    /* A new incarnation may have to wait for the previous one's fence. */
    zkw_identity_on_connect_request(s, &req);
  }
  uv_timer_stop(&s->timer);
  s->upstream_started = true;
  stop_reading(side);
  zkw_upstream_connect(s);
}

static void handshake_timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  s->close_class = ZKW_CLOSE_HANDSHAKE_TIMEOUT;
  zkw_session_close(s, ZKW_LOG_WARN, "client sent no handshake within %u ms (%zu bytes received)",
                    s->srv->cfg->handshake_timeout_ms, s->client.in.len);
}

/* Length bounds for the next frame from a side. */
static void frame_bounds(const struct zkw_session *s, bool from_client, uint32_t *min, uint32_t *max) {
  const struct zkw_config *cfg = s->srv->cfg;
  if (from_client) {
    *min = s->phase == ZKW_PHASE_HANDSHAKE ? ZKW_CONNECT_REQ_MIN : ZKW_MIN_REQUEST;
    *max = cfg->max_frame;
  } else {
    *min = s->phase == ZKW_PHASE_CONNECTING ? ZKW_CONNECT_RESP_MIN : ZKW_MIN_REPLY;
    *max = cfg->max_reply_frame;
  }
}

/* Sends in[from, to) of a side to its peer. */
static int forward_run(struct zkw_side *side, size_t from, size_t to) {
  if (to <= from) return 0;
  struct zkw_session *s = side->s;
  struct zkw_side *peer = peer_of(side);
  int rc = side_send(peer, side->in.data + from, to - from);
  if (rc) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(s, ZKW_LOG_INFO, "write to %s failed: %s", peer->name, uv_strerror(rc));
    return rc;
  }
  zkw_metrics_bytes(side == &s->client, to - from);
  return 0;
}

/* Sends s->scratch (a rewritten frame) to the peer of side. */
static int forward_scratch(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  struct zkw_side *peer = peer_of(side);
  int rc = side_send(peer, s->scratch.data, s->scratch.len);
  zkw_metrics_bytes(side == &s->client, s->scratch.len);
  zkw_buf_release(&s->scratch);
  if (rc) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(s, ZKW_LOG_INFO, "write to %s failed: %s", peer->name, uv_strerror(rc));
  }
  return rc;
}

/* Parses every complete frame in side->in and forwards them to the peer:
 * runs of unchanged frames in one write, rewritten frames in between. */
static void process_side(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  struct zkw_side *peer = peer_of(side);
  bool from_client = side == &s->client;
  size_t off = 0, run = 0;

  if (s->phase == ZKW_PHASE_CLOSING || !side->in.len) return;
  /* One timestamp per read batch: request latency and upstream liveness. */
  s->pending.now = uv_hrtime();
  if (!from_client) zkw_health_upstream_seen(s->pending.now);
  /* The client's bytes wait until the upstream connection is up. */
  if (from_client && !peer->connected) {
    if (!s->upstream_started)
      client_hello(s);
    else if (side->in.len > (size_t)s->srv->cfg->max_frame + 4)
      stop_reading(side);
    return;
  }
  if (s->phase == ZKW_PHASE_RAW) {
    off = side->in.len;
  } else {
    while (s->phase != ZKW_PHASE_CLOSING) {
      if (from_client && s->barrier) break; /* frames behind a lock request wait */
      uint32_t min, max;
      size_t flen;
      frame_bounds(s, from_client, &min, &max);
      int rc = zkw_frame_next(side->in.data + off, side->in.len - off, min, max, &flen);
      if (rc == ZKW_AGAIN) break;
      if (rc == ZKW_OK)
        rc = from_client ? on_client_frame(s, side->in.data + off, flen)
                         : on_upstream_frame(s, side->in.data + off, flen);
      if (rc < 0) {
        /* The good frames before the bad one were matched and counted: they
         * go on (flushed before the close), whatever the TCP segmentation. */
        if (forward_run(side, run, off)) return;
        zkw_metrics_decode_error(from_client);
        s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
        int32_t n = side->in.len - off >= 4 ? (int32_t)zkw_load_be32(side->in.data + off) : 0;
        zkw_session_close(s, ZKW_LOG_WARN, "protocol error from %s: %s (frame length %d)", side->name,
                          rc == ZKW_E_FRAME_LONG && n < 0 ? "negative frame length" : zkw_strerror(rc), n);
        return;
      }
      if (rc == FRAME_HOLD) break;
      if (rc == FRAME_REPLACED || rc == FRAME_DROP) {
        if (forward_run(side, run, off)) return;
        if (rc == FRAME_REPLACED && forward_scratch(side)) return;
        run = off + flen;
      }
      off += flen;
    }
  }
  if (s->phase == ZKW_PHASE_CLOSING) return;
  if (forward_run(side, run, off)) return;
  if (off) zkw_buf_consume(&side->in, off);
  if (unsent(peer) > ZKW_HIGH_WATER || (from_client && s->barrier && side->in.len > ZKW_HIGH_WATER)) {
    side->paused = true;
    stop_reading(side);
  }
}

/* Processes a side, and both sides again whenever a hold was lifted
 * meanwhile (never recursively). */
static void process(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  if (s->processing) {
    s->resume_pending = true;
    return;
  }
  s->processing = true;
  process_side(side);
  while (s->resume_pending && s->phase != ZKW_PHASE_CLOSING) {
    s->resume_pending = false;
    if (s->client.paused && !s->barrier && unsent(&s->upstream) < ZKW_LOW_WATER) {
      s->client.paused = false;
      start_reading(&s->client);
    }
    process_side(&s->client);
    if (s->upstream.connected) process_side(&s->upstream);
  }
  s->processing = false;
}

void zkw_session_resume(struct zkw_session *s) {
  if (s->phase == ZKW_PHASE_CLOSING) return;
  s->resume_pending = true;
  if (!s->processing) process(&s->client);
}

void zkw_session_reclaim_done(struct zkw_session *s, bool replay) {
  if (replay && s->barrier_frame.len) {
    /* The replay answers the JobManager's request: same xid, same bytes. */
    s->barrier_replayed = true;
    zkw_buf_release(&s->held_reply);
    if (zkw_pending_push(&s->pending, s->barrier_xid, s->barrier_op) ||
        side_send(&s->upstream, s->barrier_frame.data, s->barrier_frame.len)) {
      zkw_session_close(s, ZKW_LOG_WARN, "cannot replay the request after a reclaim");
      return;
    }
    return; /* its reply comes through on_barrier_reply */
  }
  /* Not reclaimed: the JobManager gets the reply it would have had anyway. */
  int rc = side_send(&s->client, s->held_reply.data, s->held_reply.len);
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->barrier_frame);
  s->barrier = false;
  if (rc) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(s, ZKW_LOG_INFO, "write to client failed: %s", uv_strerror(rc));
    return;
  }
  zkw_session_resume(s);
}

int zkw_session_send_upstream(struct zkw_session *s, const uint8_t *frame, size_t len) {
  return side_send(&s->upstream, frame, len);
}

void zkw_session_upstream_ready(struct zkw_session *s) {
  start_reading(&s->upstream);
  start_reading(&s->client);
  if (s->client.in.len) process(&s->client);
}

/* ---- accept ---- */

static void format_peer(uv_tcp_t *tcp, char *out, size_t len) {
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  snprintf(out, len, "?");
  if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sl) != 0) return;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, ip, sizeof ip);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  }
  snprintf(out, len, "%s:%d", ip, port);
}

void zkw_session_accept(struct zkw_server *srv) {
  struct zkw_session *s = calloc(1, sizeof *s);
  if (!s) {
    zkw_log_error("out of memory accepting a connection");
    return;
  }
  s->srv = srv;
  s->internal = srv->internal;
  s->conn = ++srv->next_conn;
  s->client = (struct zkw_side){.s = s, .name = "client"};
  s->upstream = (struct zkw_side){.s = s, .name = "upstream"};
  zkw_pending_init(&s->pending);
  uv_tcp_init(srv->loop, &s->client.tcp);
  s->client.tcp.data = &s->client;
  uv_timer_init(srv->loop, &s->timer);
  s->timer.data = s;
  s->handles = 2;
  s->client.open = true;
  s->next = srv->sessions;
  if (srv->sessions) srv->sessions->prev = s;
  srv->sessions = s;
  srv->session_count++;

  int rc = uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&s->client.tcp);
  if (rc) {
    zkw_session_close(s, ZKW_LOG_WARN, "accept failed: %s", uv_strerror(rc));
    return;
  }
  s->client.connected = true;
  if (srv->internal) {
    /* zkwarden's own session through the internal relay: not a client. */
    uv_unref((uv_handle_t *)&s->client.tcp);
    uv_unref((uv_handle_t *)&s->timer);
  } else {
    ZKW_METRIC_INC(connections_accepted);
  }
  uv_tcp_nodelay(&s->client.tcp, 1);
  format_peer(&s->client.tcp, s->peer, sizeof s->peer);
  if (srv->internal) {
    static const char tag[] = "internal/"; /* in its log lines */
    memmove(s->peer + sizeof tag - 1, s->peer, sizeof s->peer - sizeof tag);
    memcpy(s->peer, tag, sizeof tag - 1);
    s->peer[sizeof s->peer - 1] = 0;
  }
  zkw_slog(s, ZKW_LOG_DEBUG, "accepted");
  start_reading(&s->client);
  uv_timer_start(&s->timer, handshake_timeout_cb, srv->cfg->handshake_timeout_ms, 0);
}
