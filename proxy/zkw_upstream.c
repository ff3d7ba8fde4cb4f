/* zkw_upstream.c: connecting a session to one server of ZKWARDEN_UPSTREAM.
 *
 * Servers are tried in turn, starting from a per-connection rotating index so
 * that a client reconnecting after a failure lands on the next server. Names
 * are resolved asynchronously at each attempt (a StatefulSet's addresses may
 * change); each TCP connect is bounded by ZKWARDEN_CONNECT_TIMEOUT_MS. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_session.h"

static void connect_next(struct zkw_session *s);

static void retry_close_cb(uv_handle_t *h) {
  struct zkw_session *s = ((struct zkw_side *)h->data)->s;
  s->handles--;
  if (s->phase == ZKW_PHASE_CLOSING) {
    zkw_session_maybe_free(s);
    return;
  }
  connect_next(s);
}

/* Abandons the current attempt and moves on once the handle is closed. */
static void attempt_failed(struct zkw_session *s, const char *what, int status) {
  zkw_slog(s, ZKW_LOG_WARN, "upstream %s: %s (%s)", s->up_name, what, uv_strerror(status));
  ZKW_METRIC_INC(upstream_connect_failures);
  uv_timer_stop(&s->timer);
  s->upstream.open = false;
  uv_close((uv_handle_t *)&s->upstream.tcp, retry_close_cb);
}

static void connect_cb(uv_connect_t *req, int status) {
  struct zkw_session *s = req->data;
  s->handles--;
  if (s->phase == ZKW_PHASE_CLOSING) {
    zkw_session_maybe_free(s);
    return;
  }
  if (status == UV_ECANCELED) return; /* closed by attempt_failed; retry_close_cb goes on */
  if (status < 0) {
    attempt_failed(s, "connect failed", status);
    return;
  }
  uv_timer_stop(&s->timer);
  s->upstream.connected = true;
  if (s->up_tried > 1) ZKW_METRIC_INC(upstream_failovers);
  zkw_slog(s, ZKW_LOG_DEBUG, "connected to upstream %s", s->up_name);
  zkw_session_upstream_ready(s);
}

static void timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->phase == ZKW_PHASE_CLOSING || !s->upstream.open || s->upstream.connected) return;
  attempt_failed(s, "connect timed out", UV_ETIMEDOUT);
}

static void connect_addr(struct zkw_session *s, const struct sockaddr *addr) {
  int rc = uv_tcp_init(s->srv->loop, &s->upstream.tcp);
  if (rc) {
    zkw_session_close(s, ZKW_LOG_ERROR, "cannot create upstream socket: %s", uv_strerror(rc));
    return;
  }
  s->handles++;
  s->upstream.open = true;
  s->upstream.tcp.data = &s->upstream;
  uv_tcp_nodelay(&s->upstream.tcp, 1);
  s->connect_req.data = s;
  rc = uv_tcp_connect(&s->connect_req, &s->upstream.tcp, addr, connect_cb);
  if (rc) {
    attempt_failed(s, "connect failed", rc);
    return;
  }
  s->handles++;
  uv_timer_start(&s->timer, timeout_cb, s->srv->cfg->connect_timeout_ms, 0);
}

static void resolve_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  struct zkw_session *s = req->data;
  s->handles--;
  s->resolving = false;
  if (s->phase == ZKW_PHASE_CLOSING) {
    if (res) uv_freeaddrinfo(res);
    zkw_session_maybe_free(s);
    return;
  }
  if (status < 0 || !res) {
    zkw_slog(s, ZKW_LOG_WARN, "upstream %s: cannot resolve (%s)", s->up_name, uv_strerror(status));
    ZKW_METRIC_INC(upstream_connect_failures);
    if (res) uv_freeaddrinfo(res);
    connect_next(s);
    return;
  }
  connect_addr(s, res->ai_addr);
  uv_freeaddrinfo(res);
}

static void connect_next(struct zkw_session *s) {
  const struct zkw_config *cfg = s->srv->cfg;
  uint32_t n = (uint32_t)cfg->upstream_count;
  if (s->up_tried == n) {
    s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
    zkw_session_close(s, ZKW_LOG_ERROR, "no upstream server reachable (tried %u)", n);
    return;
  }
  const struct zkw_hostport *hp = &cfg->upstream[(s->up_first + s->up_tried) % n];
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
  s->handles++;
}

void zkw_upstream_connect(struct zkw_session *s) {
  s->up_first = s->srv->next_upstream++;
  s->up_tried = 0;
  connect_next(s);
}
