/* zkw_pair.c: a session's two sockets: writes (straight to the socket when
 * nothing is queued, else queued and written by libuv), read on and off for
 * backpressure, the close sequence (a brief flush of what is queued, then
 * every handle closed) and the reference count that frees the session. */
#include "zkw_pair.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_fault.h"
#include "zkw_metrics.h"
#include "zkw_tls.h"
#include "zkw_journal.h"

/* Bound on flushing queued bytes to a side once the session is closing. */
#define ZKW_CLOSE_FLUSH_MS 2000
/* Smallest free space offered to a read. */
#define ZKW_READ_MIN 4096

static void side_close(struct zkw_side *side);

/* What one session buffers (the capacity of its socket buffers). */
static size_t session_held(const struct zkw_session *s) {
  const struct zkw_side *sides[2] = {&s->client, &s->upstream};
  size_t n = 0;
  for (int i = 0; i < 2; i++)
    n += sides[i]->in.cap + sides[i]->out.cap + sides[i]->flight.cap;
  return n;
}

/* A session's share of ZKWARDEN_MAX_BUFFERED_BYTES: once all buffers
 * together pass it, only sessions over their share stop reading, so that a
 * client that reads its replies is never stopped by others that do not. */
static size_t fair_share(const struct zkw_server *srv) {
  return srv->cfg->max_buffered / (srv->sessions_open ? srv->sessions_open : 1);
}

/* The buffers drained (all together under three quarters of the bound), or
 * a capped session's own under half its share: those sides read again. */
static void uncap(struct zkw_server *srv) {
  if (!srv->capped) return;
  bool drained = zkw_buf_held() < (size_t)srv->cfg->max_buffered / 4 * 3;
  size_t low = fair_share(srv) / 2;
  for (struct zkw_session *s = srv->sessions; s && srv->capped; s = s->next) {
    if (!s->client.capped && !s->upstream.capped) continue;
    if (!drained && session_held(s) >= low) continue;
    struct zkw_side *sides[2] = {&s->client, &s->upstream};
    for (int i = 0; i < 2; i++)
      if (sides[i]->capped) {
        sides[i]->capped = false;
        sides[i]->resumed_ms = uv_now(srv->loop); /* its silence counts from now (zkw_move.c) */
        srv->capped--;
        zkw_side_start_reading(sides[i]);
      }
  }
  if (!srv->capped) uv_timer_stop(&srv->cap_timer);
}

static void cap_timer_cb(uv_timer_t *t) {
  uncap(t->data);
}

void zkw_side_check_cap(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  struct zkw_server *srv = s->srv;
  if (side->capped || side->in.len || zkw_buf_held() <= (size_t)srv->cfg->max_buffered ||
      session_held(s) <= fair_share(srv))
    return;
  if (!srv->capped)
    zkw_log_warn("buffers hold %zu bytes, over ZKWARDEN_MAX_BUFFERED_BYTES (%u): connections over their "
                 "share are read again once they drain",
                 zkw_buf_held(), srv->cfg->max_buffered);
  side->capped = true;
  if (!srv->capped++ && srv->cap_timer.loop) uv_timer_start(&srv->cap_timer, cap_timer_cb, 50, 50);
  ZKW_METRIC_INC(buffer_cap_pauses);
  zkw_side_stop_reading(side);
}

static void maybe_free(struct zkw_session *s) {
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
  zkw_buf_release(&s->kept_frames);
  zkw_buf_release(&s->kept_frame);
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->scratch);
  zkw_pending_free(&s->pending);
  memset(s->passwd, 0, sizeof s->passwd);
  srv->capped -= (uint32_t)s->client.capped + (uint32_t)s->upstream.capped;
  free(s);
  uncap(srv);
}

void zkw_session_ref(struct zkw_session *s) {
  s->handles++;
}

void zkw_session_unref(struct zkw_session *s) {
  s->handles--;
  maybe_free(s);
}

static void handle_closed_cb(uv_handle_t *h) {
  struct zkw_session *s = h->type == UV_TIMER ? h->data : ((struct zkw_side *)h->data)->s;
  zkw_session_unref(s);
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

void zkw_session_write_failed(struct zkw_session *s, const struct zkw_side *side, int rc) {
  s->close_class = ZKW_CLOSE_IO_ERROR;
  zkw_session_close(s, ZKW_LOG_INFO, "write to %s failed: %s", side->name, uv_strerror(rc));
}

void zkw_session_out_of_memory(struct zkw_session *s, const char *what) {
  s->close_class = ZKW_CLOSE_OTHER;
  zkw_session_close(s, ZKW_LOG_WARN, "out of memory: cannot keep %s", what);
}

void zkw_session_read_client(struct zkw_session *s) {
  struct zkw_side *c = &s->client;
  if (!c->paused || zkw_side_unsent(&s->upstream) >= ZKW_LOW_WATER) return;
  c->paused = false;
  c->resumed_ms = uv_now(s->srv->loop);
  zkw_side_start_reading(c);
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
  if (s->srv->hooks && s->srv->hooks->on_close) s->srv->hooks->on_close(s);
  s->phase = ZKW_PHASE_CLOSING;
  if (s->jr.slot) { /* the connection ends: no successor takes it */
    uint32_t slot = s->jr.idx;
    zkw_journal_release(s);
    if (s->srv->forget) s->srv->forget(s->srv, slot);
  }
  s->srv->sessions_open--;
  if (s->on_closing) s->on_closing(s); /* zkwarden's own requests get a connection loss; the move ends */
  if (!s->srv->internal) zkw_metrics_closed(s->srv->stopping ? ZKW_CLOSE_SHUTDOWN : s->close_class);
  if (s->resolving) uv_cancel((uv_req_t *)&s->resolve_req);
  uv_timer_stop(&s->timer);
  bool flushing = false;
  struct zkw_side *up = &s->upstream;
  if (up->tls && up->open && up->connected && !up->lost && zkw_tls_close_notify(up->tls, &up->out) == 0)
    zkw_side_flush(up); /* the TLS close_notify goes out with the rest */
  struct zkw_side *sides[2] = {&s->client, &s->upstream};
  for (int i = 0; i < 2; i++) {
    struct zkw_side *side = sides[i];
    if (side->open && side->reading) uv_read_stop((uv_stream_t *)&side->tcp);
    side->reading = false;
    if (side->open && side->connected && !side->lost && zkw_side_unsent(side) > 0)
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

/* ---- losing the upstream on a write ----
 *
 * One rule wherever a socket error on the upstream connection of an
 * established session is first seen (a read, uv_try_write, uv_write, its
 * callback, TLS): it is the server's loss, and the session's
 * on_upstream_lost decides (a move, zkw_move.h, or the close as before).
 * zkwarden's own failures (out of memory) are not a loss: they close the
 * session. A write is usually made in the middle of the frame loop, whose
 * requests are already on the pending ring: the write "succeeds" (its bytes
 * are dropped with the connection, the move answers their requests) and the
 * loss is handled on the next turn of the loop. */

static bool is_loss(const struct zkw_side *side, int rc) {
  const struct zkw_session *s = side->s;
  return side == &s->upstream && rc != UV_ENOMEM && rc != UV_ENOBUFS && s->phase == ZKW_PHASE_ACTIVE &&
         s->on_upstream_lost;
}

static void lost_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->phase == ZKW_PHASE_ACTIVE && s->upstream.lost) s->on_upstream_lost(s, s->upstream.lost);
}

/* The upstream connection is lost (rc): later writes to it are dropped, and
 * the loss handled on the next turn (the session's timer is free while it
 * is established; a move that takes it over stops it). */
static void side_lost(struct zkw_side *side, int rc) {
  if (side->lost) return;
  side->lost = rc;
  uv_timer_start(&side->s->timer, lost_cb, 0, 0);
}

static void write_cb(uv_write_t *req, int status) {
  struct zkw_side *side = req->data;
  struct zkw_session *s = side->s;
  side->writing = false;
  zkw_buf_release(&side->flight);
  if (status < 0) {
    if (s->phase == ZKW_PHASE_CLOSING)
      closing_side_done(side);
    else if (!side->open) /* a connection left by a session move (zkw_move.c) */
      ;
    else if (is_loss(side, status))
      side_lost(side, status);
    else
      zkw_session_write_failed(s, side, status);
    return;
  }
  if (side->out.len) zkw_side_flush(side);
  uncap(s->srv);
  if (s->phase == ZKW_PHASE_CLOSING) {
    if (!side->writing) closing_side_done(side);
    return;
  }
  struct zkw_side *src = zkw_side_peer(side);
  if (src == &s->client) {
    zkw_session_read_client(s);
  } else if (src->paused && zkw_side_unsent(side) < ZKW_LOW_WATER) {
    src->paused = false;
    src->resumed_ms = uv_now(s->srv->loop);
    zkw_side_start_reading(src);
  }
}

void zkw_side_flush(struct zkw_side *side) {
  if (side->writing || !side->out.len || !side->open || side->lost) return;
  side->flight = side->out;
  side->out = (struct zkw_buf){0};
  uv_buf_t b = uv_buf_init((char *)side->flight.data, (unsigned)side->flight.len);
  side->wreq.data = side;
  int rc = ZKW_FAULT_AT(write, ZKW_FAULT_WHERE, side->name)
               ? UV_EPIPE
               : uv_write(&side->wreq, (uv_stream_t *)&side->tcp, &b, 1, write_cb);
  if (rc) {
    zkw_buf_release(&side->flight);
    if (is_loss(side, rc))
      side_lost(side, rc);
    else
      zkw_session_write_failed(side->s, side, rc);
    return;
  }
  side->writing = true;
}

int zkw_side_send_at(struct zkw_side *side, const uint8_t *p, size_t n, const char *where) {
  if (!n || side->lost) return 0;
  if (ZKW_FAULT_AT(write, where, side->name)) {
    if (!is_loss(side, UV_EPIPE)) return UV_EPIPE;
    side_lost(side, UV_EPIPE);
    return 0;
  }
  if (side->tls) {
    /* Encrypted into out: uv_write then tries the socket at once. */
    if (zkw_tls_encrypt(side->tls, p, n) != 0) return UV_EPROTO;
    if (zkw_tls_take_output(side->tls, &side->out) != 0) return UV_ENOMEM;
    zkw_side_flush(side);
    return 0;
  }
  if (!side->writing && !side->out.len) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int w = uv_try_write((uv_stream_t *)&side->tcp, &b, 1);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w != UV_EAGAIN && is_loss(side, w)) {
      side_lost(side, w);
      return 0;
    } else if (w != UV_EAGAIN) {
      return w;
    }
    if (!n) return 0;
  }
  int rc = zkw_buf_append(&side->out, p, n);
  if (rc) return rc;
  zkw_side_flush(side);
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
  if (ZKW_FAULT_AT(alloc, ZKW_FAULT_WHERE, side == &side->s->upstream ? "upstream read" : "client read") ||
      zkw_buf_reserve(&side->in, ZKW_READ_MIN) != 0) {
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
    return;
  }
  size_t offer = side->in.cap - side->in.len;
  /* Over ZKWARDEN_MAX_BUFFERED_BYTES: read to the end of the current frame
   * and no further, so that the side stops at a frame boundary
   * (zkw_side_check_cap). */
  if (zkw_buf_held() > (size_t)side->s->srv->cfg->max_buffered) {
    size_t end = side->in.len < 4 ? 4 : 4 + (size_t)zkw_load_be32(side->in.data);
    if (end > side->in.len && end - side->in.len < offer) offer = end - side->in.len;
  }
  *buf = uv_buf_init((char *)side->in.data + side->in.len, (unsigned)offer);
}

void zkw_side_start_reading(struct zkw_side *side) {
  if (side->reading || side->paused || side->capped || !side->open || side->s->phase == ZKW_PHASE_CLOSING ||
      (side == &side->s->client && side->s->srv->quiescing))
    return;
  int rc = uv_read_start((uv_stream_t *)&side->tcp, alloc_cb, side->s->on_read);
  if (rc) {
    zkw_session_close(side->s, ZKW_LOG_ERROR, "cannot read from %s: %s", side->name, uv_strerror(rc));
    return;
  }
  side->reading = true;
}

void zkw_side_stop_reading(struct zkw_side *side) {
  if (!side->reading) return;
  uv_read_stop((uv_stream_t *)&side->tcp);
  side->reading = false;
}
