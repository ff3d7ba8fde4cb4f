/* zkw_upstream.c: connecting a session to one server of ZKWARDEN_UPSTREAM.
 *
 * Servers are tried in turn, starting from a per-connection rotating index so
 * that a client reconnecting after a failure lands on the next server. A
 * server that recently took a connection and went silent (a paused or
 * partitioned server still completes TCP handshakes from its kernel) is
 * "suspect": it is tried after the others for a while, as a client connected
 * direct would move on to the next server rather than wait on it again. A
 * server that was lost (closed, reset, silent, refused) and not seen serving
 * since comes last too; a session that moves prefers the server that came
 * back most recently (zkw_upstream.h), so that a rolling restart moves it as
 * few times as it can: not to the next server, which is the next to stop. Names
 * are resolved asynchronously at each attempt (a StatefulSet's addresses may
 * change); each TCP connect is bounded by ZKWARDEN_CONNECT_TIMEOUT_MS, and
 * with ZKWARDEN_UPSTREAM_TLS=on so is the TLS handshake after it: a server
 * whose certificate fails verification is skipped like an unreachable one. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_upstream.h"

#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_tls.h"

_Static_assert(ZKW_MAX_UPSTREAMS <= 32, "zkw_session.up_suspects is a 32-bit mask");

static void connect_next(struct zkw_session *s);
static void connected(struct zkw_session *s);
static void tls_start(struct zkw_session *s);

static void retry_close_cb(uv_handle_t *h) {
  struct zkw_session *s = ((struct zkw_side *)h->data)->s;
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing) return;
  connect_next(s);
}

/* Abandons the current attempt and moves on once the handle is closed. */
static void attempt_failed(struct zkw_session *s, const char *what, const char *detail) {
  zkw_slog(s, ZKW_LOG_WARN, "upstream %s: %s (%s)", s->up_name, what, detail);
  ZKW_METRIC_INC(upstream_connect_failures);
  if (s->upstream.tls) {
    /* Never on to plaintext: the next server, with a new TLS connection. */
    ZKW_METRIC_INC(tls_handshake_failures);
    zkw_tls_conn_free(s->upstream.tls);
    s->upstream.tls = NULL;
  }
  zkw_upstream_suspect(s, s->srv->cfg->connect_timeout_ms);
  zkw_upstream_lost(s);
  uv_timer_stop(&s->timer);
  s->upstream.open = false;
  uv_close((uv_handle_t *)&s->upstream.tcp, retry_close_cb);
}

static void connect_cb(uv_connect_t *req, int status) {
  struct zkw_session *s = req->data;
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing) return;
  if (status == UV_ECANCELED) return; /* closed by attempt_failed; retry_close_cb goes on */
  if (status < 0) {
    attempt_failed(s, "connect failed", uv_strerror(status));
    return;
  }
  if (zkw_tls_enabled()) {
    tls_start(s);
    return;
  }
  connected(s);
}

/* The connection is usable (TCP, and TLS when on): the session goes on. */
static void connected(struct zkw_session *s) {
  uv_timer_stop(&s->timer);
  s->upstream.connected = true;
  s->up_last_read_ms = uv_now(s->srv->loop);
  if (s->up_tried > 1) ZKW_METRIC_INC(upstream_failovers);
  zkw_slog(s, ZKW_LOG_DEBUG, "connected to upstream %s", s->up_name);
  s->up_ready(s);
}

/* ---- TLS handshake (ZKWARDEN_UPSTREAM_TLS=on), bounded by the connect
 * timer; the session's own read callbacks take over once it is done. ---- */

static void tls_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h, (void)suggested;
  *buf = zkw_tls_read_buf();
}

static void tls_step(struct zkw_session *s) {
  int rc = zkw_tls_handshake(s->upstream.tls);
  int wrc = zkw_tls_flush(s->upstream.tls, (uv_stream_t *)&s->upstream.tcp);
  if (rc == ZKW_TLS_ERROR) {
    zkw_tls_note(s->up_name, zkw_tls_conn_error(s->upstream.tls));
    attempt_failed(s, "TLS handshake failed", zkw_tls_conn_error(s->upstream.tls));
  } else if (wrc) {
    attempt_failed(s, "TLS handshake failed", uv_strerror(wrc));
  } else if (rc == ZKW_TLS_DONE) {
    uv_read_stop((uv_stream_t *)&s->upstream.tcp);
    if (zkw_log_level >= ZKW_LOG_DEBUG) {
      char how[128];
      zkw_tls_conn_describe(s->upstream.tls, how, sizeof how);
      zkw_slog(s, ZKW_LOG_DEBUG, "upstream %s: TLS verified (%s)", s->up_name, how);
    }
    connected(s);
  }
}

static void tls_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct zkw_session *s = ((struct zkw_side *)st->data)->s;
  if (s->phase == ZKW_PHASE_CLOSING || !s->upstream.tls) return;
  if (nread > 0) {
    if (zkw_tls_feed(s->upstream.tls, buf->base, (size_t)nread) != 0)
      attempt_failed(s, "TLS handshake failed", uv_strerror(UV_ENOMEM));
    else
      tls_step(s);
  } else if (nread < 0) {
    attempt_failed(s, "TLS handshake failed: the server closed the connection", uv_strerror((int)nread));
  }
}

static void tls_start(struct zkw_session *s) {
  const char *host = s->srv->cfg->upstream[s->up_idx].host;
  if (zkw_tls_conn_new(&s->upstream.tls, host) != 0) {
    attempt_failed(s, "TLS handshake failed", uv_strerror(UV_ENOMEM));
    return;
  }
  int rc = uv_read_start((uv_stream_t *)&s->upstream.tcp, tls_alloc_cb, tls_read_cb);
  if (rc) {
    attempt_failed(s, "TLS handshake failed", uv_strerror(rc));
    return;
  }
  tls_step(s); /* the ClientHello */
}

static void timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->phase == ZKW_PHASE_CLOSING || !s->upstream.open || s->upstream.connected) return;
  attempt_failed(s, s->upstream.tls ? "TLS handshake timed out" : "connect timed out",
                 uv_strerror(UV_ETIMEDOUT));
}

static void connect_addr(struct zkw_session *s, const struct sockaddr *addr) {
  int rc = uv_tcp_init(s->srv->loop, &s->upstream.tcp);
  if (rc) {
    zkw_session_close(s, ZKW_LOG_ERROR, "cannot create upstream socket: %s", uv_strerror(rc));
    return;
  }
  zkw_session_ref(s);
  s->upstream.open = true;
  s->upstream.tcp.data = &s->upstream;
  if (s->srv->internal) uv_unref((uv_handle_t *)&s->upstream.tcp); /* see zkw_server.h */
  uv_tcp_nodelay(&s->upstream.tcp, 1);
  s->connect_req.data = s;
  rc = uv_tcp_connect(&s->connect_req, &s->upstream.tcp, addr, connect_cb);
  if (rc) {
    attempt_failed(s, "connect failed", uv_strerror(rc));
    return;
  }
  zkw_session_ref(s);
  uv_timer_start(&s->timer, timeout_cb, s->srv->cfg->connect_timeout_ms, 0);
}

static void resolve_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  struct zkw_session *s = req->data;
  s->resolving = false;
  if (s->phase == ZKW_PHASE_CLOSING) {
    if (res) uv_freeaddrinfo(res);
    zkw_session_unref(s);
    return;
  }
  zkw_session_unref(s); /* not closing: s stays */
  if (status < 0 || !res) {
    zkw_slog(s, ZKW_LOG_WARN, "upstream %s: cannot resolve (%s)", s->up_name, uv_strerror(status));
    ZKW_METRIC_INC(upstream_connect_failures);
    zkw_upstream_lost(s);
    if (res) uv_freeaddrinfo(res);
    connect_next(s);
    return;
  }
  connect_addr(s, res->ai_addr);
  uv_freeaddrinfo(res);
}

bool zkw_upstream_down(const struct zkw_server *srv, int i) {
  return srv->up_lost_ms[i] > srv->up_back_ms[i];
}

uint64_t zkw_upstream_lost_ms(const struct zkw_server *srv, int i) {
  return srv->up_lost_ms[i];
}

void zkw_upstream_back(struct zkw_server *srv, int i) {
  if (!zkw_upstream_down(srv, i)) return;
  srv->up_back_ms[i] = uv_now(srv->loop);
  srv->up_suspect_until[i] = 0; /* it answers: no longer suspect either */
}

static uint32_t random_below(struct zkw_server *srv, uint32_t n) {
  if (!srv->rng) srv->rng = uv_hrtime() | 1u;
  srv->rng ^= srv->rng << 13; /* xorshift64 */
  srv->rng ^= srv->rng >> 7;
  srv->rng ^= srv->rng << 17;
  return (uint32_t)(srv->rng % n);
}

/* The group a server is tried in: 0 first. A new connection: 0 usable, 1
 * suspect or down. A move: 0 came back from a loss lately, 1 usable, 2
 * suspect or down, 3 took a connection of this move and did not serve it. */
static int group(const struct zkw_session *s, uint32_t i, bool moving, uint64_t now) {
  const struct zkw_server *srv = s->srv;
  if (moving && ((s->move_failed >> i) & 1u)) return 3;
  if (((s->up_suspects >> i) & 1u) || zkw_upstream_down(srv, (int)i)) return moving ? 2 : 1;
  if (!moving) return 0;
  return srv->up_lost_ms[i] && now - srv->up_back_ms[i] < ZKW_UPSTREAM_BACK_WINDOW_MS ? 0 : 1;
}

/* The order the servers are tried in (s->up_order), each group in turn:
 * for a new connection the rotation from up_first; for a move, the servers
 * that came back latest first, the others shuffled. */
static void order(struct zkw_session *s) {
  struct zkw_server *srv = s->srv;
  uint32_t n = (uint32_t)srv->cfg->upstream_count, k = 0;
  bool moving = s->moving;
  uint64_t now = uv_now(srv->loop);
  /* Every server that could serve failed this move (an election): a new
   * round, in the order of preference. */
  uint32_t usable = 0;
  for (uint32_t i = 0; i < n; i++)
    if (!((s->up_suspects >> i) & 1u) && !zkw_upstream_down(srv, (int)i)) usable |= 1u << i;
  if (usable && (s->move_failed & usable) == usable) s->move_failed = 0;
  for (int g = 0; g < 4; g++) {
    uint32_t from = k;
    for (uint32_t j = 0; j < n; j++) {
      uint32_t i = (s->up_first + j) % n;
      if (group(s, i, moving, now) == g) s->up_order[k++] = (uint8_t)i;
    }
    if (!moving) continue;
    if (g == 0) { /* latest back first (insertion sort: a handful of servers) */
      for (uint32_t a = from + 1; a < k; a++)
        for (uint32_t b = a;
             b > from && srv->up_back_ms[s->up_order[b]] > srv->up_back_ms[s->up_order[b - 1]]; b--) {
          uint8_t t = s->up_order[b];
          s->up_order[b] = s->up_order[b - 1];
          s->up_order[b - 1] = t;
        }
    } else { /* shuffled */
      for (uint32_t a = k; a > from + 1; a--) {
        uint32_t b = from + random_below(srv, a - from);
        uint8_t t = s->up_order[a - 1];
        s->up_order[a - 1] = s->up_order[b];
        s->up_order[b] = t;
      }
    }
  }
}

static void connect_next(struct zkw_session *s) {
  const struct zkw_config *cfg = s->srv->cfg;
  uint32_t n = (uint32_t)cfg->upstream_count;
  if (s->up_tried == n && s->up_exhausted) {
    s->up_exhausted(s);
    return;
  }
  if (s->up_tried == n) {
    s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
    zkw_session_close(s, ZKW_LOG_ERROR, "no upstream server reachable (tried %u)", n);
    return;
  }
  s->up_idx = s->up_order[s->up_tried];
  const struct zkw_hostport *hp = &cfg->upstream[s->up_idx];
  s->up_tried++;
  snprintf(s->up_name, sizeof s->up_name, "%s:%s", hp->host, hp->port);

  struct sockaddr_storage addr;
  if (zkw_hostport_numeric(hp, &addr)) {
    connect_addr(s, (struct sockaddr *)&addr);
    return;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  s->resolve_req.data = s;
  int rc = uv_getaddrinfo(s->srv->loop, &s->resolve_req, resolve_cb, hp->host, hp->port, &hints);
  if (rc) {
    zkw_slog(s, ZKW_LOG_WARN, "upstream %s: cannot resolve (%s)", s->up_name, uv_strerror(rc));
    ZKW_METRIC_INC(upstream_connect_failures);
    connect_next(s);
    return;
  }
  s->resolving = true;
  zkw_session_ref(s);
}

void zkw_upstream_connect(struct zkw_session *s, void (*ready)(struct zkw_session *s),
                          void (*exhausted)(struct zkw_session *s)) {
  s->up_ready = ready;
  s->up_exhausted = exhausted;
  struct zkw_server *srv = s->srv;
  uint64_t now = uv_now(srv->loop);
  s->up_first = srv->next_upstream++;
  s->up_tried = 0;
  s->up_suspects = 0;
  for (int i = 0; i < srv->cfg->upstream_count; i++)
    if (srv->up_suspect_until[i] > now) s->up_suspects |= 1u << i;
  order(s);
  connect_next(s);
}

void zkw_upstream_suspect(struct zkw_session *s, uint64_t for_ms) {
  if (s->up_tried == 0) return; /* no upstream chosen yet */
  uint64_t until = uv_now(s->srv->loop) + for_ms;
  if (until > s->srv->up_suspect_until[s->up_idx]) s->srv->up_suspect_until[s->up_idx] = until;
}

void zkw_upstream_answered(struct zkw_session *s) {
  if (s->up_tried == 0) return;
  s->srv->up_suspect_until[s->up_idx] = 0;
  zkw_upstream_back(s->srv, (int)s->up_idx);
}

void zkw_upstream_lost(struct zkw_session *s) {
  if (s->up_tried == 0) return;
  uint64_t now = uv_now(s->srv->loop);
  s->srv->up_lost_ms[s->up_idx] =
      now > s->srv->up_back_ms[s->up_idx] ? now : s->srv->up_back_ms[s->up_idx] + 1;
}
