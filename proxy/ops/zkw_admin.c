/* zkw_admin.c: the admin HTTP endpoint (llhttp on the proxy's libuv loop).
 *
 * Two layers. The HTTP side (zkw_admin_http_*, no socket: the fuzz target
 * drives it too) parses a connection's bytes with llhttp as they arrive,
 * keeping only the URL, renders every response body into one reused scratch
 * buffer and appends the response to the connection's out buffer. The socket
 * side (admin_conn) reads into one static buffer (the loop handles one read
 * at a time), feeds the HTTP side, and after each response writes out
 * straight to the socket when it takes it, else hands it to uv_write.
 * Requests on a keep-alive connection are answered in order. What the
 * endpoints render (the session list, the status page, the computed
 * gauges) is zkw_views.c. */
#include "zkw_admin.h"

#include <errno.h>
#include <llhttp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_health.h"
#include "zkw_history.h"
#include "zkw_keeperlink.h"
#include "zkw_locks.h"
#include "zkw_lockwalks.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_session.h"
#include "zkw_sidecar.h"
#include "zkw_text.h"
#include "zkw_tls.h"
#include "zkw_views.h"

/* Bound on flushing a response before closing the connection. */
#define ADMIN_FLUSH_MS 2000
/* Scratch buffers larger than this are given back after use. */
#define ADMIN_SCRATCH_KEEP (1024 * 1024)

struct admin_conn {
  struct admin_conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer; /* request deadline, keep-alive idle bound, then the flush bound */
  uv_write_t wreq;
  struct zkw_admin_http http; /* its out: responses waiting to be written */
  struct zkw_buf flight;      /* handed to uv_write */
  int handles;                /* open handles; freed at 0 */
  bool writing;
  bool closing; /* no more requests: close once the output is flushed */
};

static struct {
  struct zkw_server *srv;
  bool started, stopping;
  uv_tcp_t listener;
  uv_signal_t sig_hup;
  struct admin_conn *conns;
  unsigned nconns;
  struct zkw_buf scratch; /* response bodies */
  llhttp_settings_t settings;
  char readbuf[64 * 1024];
  char where[80];
} endpoint;

/* ---- closing ---- */

static void conn_closed_cb(uv_handle_t *hd) {
  struct admin_conn *c = hd->data;
  if (--c->handles > 0) return;
  if (c->prev)
    c->prev->next = c->next;
  else
    endpoint.conns = c->next;
  if (c->next) c->next->prev = c->prev;
  endpoint.nconns--;
  zkw_admin_http_release(&c->http);
  zkw_buf_release(&c->flight);
  free(c);
}

static void conn_close_now(struct admin_conn *c) {
  c->closing = true;
  zkw_lockwalks_cancel(&c->http.walk);
  if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, conn_closed_cb);
  if (!uv_is_closing((uv_handle_t *)&c->timer)) uv_close((uv_handle_t *)&c->timer, conn_closed_cb);
}

static void flush_timeout_cb(uv_timer_t *t) {
  conn_close_now(t->data);
}

/* No more requests on c: closes it once what is queued is written, or after
 * ADMIN_FLUSH_MS. */
static void conn_finish(struct admin_conn *c) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  if (!c->writing && !c->http.out.len) {
    conn_close_now(c);
    return;
  }
  if (c->closing) return; /* the flush bound runs already */
  c->closing = true;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_timer_start(&c->timer, flush_timeout_cb, ADMIN_FLUSH_MS, 0);
}

/* ---- writing ---- */

static int conn_pump(struct admin_conn *c);

static void write_cb(uv_write_t *req, int status) {
  struct admin_conn *c = req->data;
  c->writing = false;
  c->http.held = 0;
  zkw_buf_release(&c->flight);
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  if (status < 0) {
    conn_close_now(c);
    return;
  }
  (void)conn_pump(c); /* closes c itself on error */
}

/* Writes the queued responses: straight to the socket as far as it takes
 * them, the rest handed to uv_write (one write at a time; more responses wait
 * in out). Closes c once the last response is written. Returns 0, or -1 when
 * c is closing at once. */
static int conn_pump(struct admin_conn *c) {
  struct zkw_buf *out = &c->http.out;
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return -1;
  if (!c->writing && out->len) {
    uv_buf_t b = uv_buf_init((char *)out->data, (unsigned)out->len);
    int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (w < 0 && w != UV_EAGAIN) {
      conn_close_now(c);
      return -1;
    }
    size_t done = w > 0 ? (size_t)w : 0;
    if (done >= out->len) {
      zkw_buf_release(out);
    } else {
      c->flight = *out;
      *out = (struct zkw_buf){0};
      b = uv_buf_init((char *)c->flight.data + done, (unsigned)(c->flight.len - done));
      c->wreq.data = c;
      if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb) != 0) {
        zkw_buf_release(&c->flight);
        conn_close_now(c);
        return -1;
      }
      c->writing = true;
      c->http.held = c->flight.len - done;
    }
  }
  if (c->http.done || c->closing) conn_finish(c);
  return 0;
}

/* The HTTP side's flush hook. */
static int conn_flush_hook(struct zkw_admin_http *h) {
  return conn_pump(h->data);
}

static const char *status_text(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 503:
    return "Service Unavailable";
  default:
    return "Internal Server Error";
  }
}

/* Queues a response whose body is in endpoint.scratch, then empties the scratch. If
 * last, the connection is closed once it is written. */
static void respond(struct zkw_admin_http *h, int status, const char *ctype, const char *extra, bool last) {
  char head[512];
  int hl = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                    "%s%s\r\n",
                    status, status_text(status), ctype, endpoint.scratch.len, extra ? extra : "",
                    last ? "Connection: close\r\n" : "");
  ZKW_METRIC_INC(admin_requests);
  /* A HEAD request (answered 405) gets the head only, as HTTP requires. */
  bool head_only = h->parser.method == HTTP_HEAD;
  size_t blen = head_only ? 0 : endpoint.scratch.len;
  int rc = zkw_buf_append(&h->out, head, (size_t)hl);
  if (!rc && blen) rc = zkw_buf_append(&h->out, endpoint.scratch.data, blen);
  endpoint.scratch.len = 0;
  if (endpoint.scratch.cap > ADMIN_SCRATCH_KEEP) zkw_buf_release(&endpoint.scratch);
  if (rc) {
    h->failed = true;
    return;
  }
  if (last) h->done = true;
  if (h->flush && h->flush(h) != 0) h->failed = true;
}

/* A text/plain response of one line. */
static void respond_line(struct zkw_admin_http *h, int status, const char *extra, bool last,
                         const char *line) {
  endpoint.scratch.len = 0;
  if (zkw_text_printf(&endpoint.scratch, "%s\n", line) != 0) {
    h->failed = true;
    return;
  }
  respond(h, status, "text/plain; charset=utf-8", extra, last);
}

/* ---- the endpoints (what they render: zkw_views.c) ---- */

/* Answers a request waiting for a lock walk with its report (or why there
 * is none); the connection closes after it. */
static void walk_answer(struct zkw_lockwalk_waiter *w, const struct zkw_locks_report *rep, const char *why) {
  struct zkw_admin_http *h = (struct zkw_admin_http *)((char *)w - offsetof(struct zkw_admin_http, walk));
  endpoint.scratch.len = 0;
  if (!rep && !w->page) {
    char line[200];
    snprintf(line, sizeof line, "lock report unavailable: %s", why ? why : "no report");
    return respond_line(h, 503, NULL, true, line);
  }
  int rc = w->page ? zkw_views_status_page(endpoint.srv, &endpoint.scratch, rep, why)
                   : zkw_locks_render_json(rep, &endpoint.scratch);
  if (rc) return respond_line(h, 500, NULL, true, "out of memory");
  respond(h, 200, w->page ? "text/html; charset=utf-8" : "application/json", NULL, true);
}

/* /v1/locks?all=1 (or all, all=true): every lock root. */
static bool query_all(const char *q) {
  if (*q != '?') return false;
  for (const char *p = q + 1; *p && *p != '#';) {
    size_t n = strcspn(p, "&#");
    if ((n == 3 && memcmp(p, "all", 3) == 0) || (n == 5 && memcmp(p, "all=1", 5) == 0) ||
        (n == 8 && memcmp(p, "all=true", 8) == 0))
      return true;
    p += n;
    if (*p == '&') p++;
  }
  return false;
}

static void serve(struct zkw_admin_http *c, bool last) {
  char path[ZKW_ADMIN_URL_MAX + 1];
  size_t n = strcspn(c->url, "?#");
  memcpy(path, c->url, n);
  path[n] = 0;

  enum { HEALTHZ, READYZ, METRICS, SESSIONS, RECLAIMS, LOCKS, PAGE, NONE } route = NONE;
  if (strcmp(path, "/") == 0)
    route = PAGE;
  else if (strcmp(path, "/v1/locks") == 0)
    route = LOCKS;
  else if (strcmp(path, "/healthz") == 0)
    route = HEALTHZ;
  else if (strcmp(path, "/readyz") == 0)
    route = READYZ;
  else if (strcmp(path, "/metrics") == 0)
    route = METRICS;
  else if (strcmp(path, "/v1/sessions") == 0)
    route = SESSIONS;
  else if (strcmp(path, "/v1/reclaims") == 0)
    route = RECLAIMS;

  if (route == NONE) {
    respond_line(c, 404, NULL, last,
                 "not found; paths: / /healthz /readyz /metrics /v1/sessions /v1/reclaims /v1/locks");
    return;
  }
  if (c->remote && !endpoint.srv->cfg->admin_remote_all && route != HEALTHZ && route != READYZ &&
      route != METRICS) {
    respond_line(c, 403, NULL, last,
                 "forbidden: this path answers on loopback only (kubectl port-forward, or "
                 "ZKWARDEN_ADMIN_REMOTE=all); from other hosts: /healthz /readyz /metrics");
    return;
  }
  if (llhttp_get_method(&c->parser) != HTTP_GET) {
    respond_line(c, 405, "Allow: GET\r\n", last, "method not allowed; use GET");
    return;
  }
  endpoint.scratch.len = 0;
  switch (route) {
  case HEALTHZ:
    respond_line(c, 200, NULL, last, "ok");
    return;
  case READYZ: {
    char why[600], line[640];
    bool ok = zkw_server_ready(endpoint.srv, why, sizeof why);
    snprintf(line, sizeof line, "%s%s", ok ? "" : "not ready: ", why);
    respond_line(c, ok ? 200 : 503, NULL, last, line);
    return;
  }
  case METRICS:
    zkw_views_refresh_gauges(endpoint.srv);
    if (zkw_metrics_render(&endpoint.scratch) != 0) break;
    respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, last);
    return;
  case SESSIONS:
    if (zkw_views_sessions_json(endpoint.srv, &endpoint.scratch) != 0) break;
    respond(c, 200, "application/json", NULL, last);
    return;
  case RECLAIMS:
    if (zkw_history_render_json(&endpoint.scratch, ZKW_HISTORY_SIZE) != 0) break;
    respond(c, 200, "application/json", NULL, last);
    return;
  case LOCKS:
  case PAGE: {
    const char *why = zkw_lockwalks_start(&c->walk, route == PAGE, route == LOCKS && query_all(c->url + n));
    if (!why) return; /* answered, or the walk's end answers */
    if (route == LOCKS) {
      char line[200];
      snprintf(line, sizeof line, "lock report unavailable: %s", why);
      respond_line(c, 503, NULL, last, line);
      return;
    }
    if (zkw_views_status_page(endpoint.srv, &endpoint.scratch, NULL, why) != 0) break;
    respond(c, 200, "text/html; charset=utf-8", NULL, last);
    return;
  }
  case NONE:
    break;
  }
  respond_line(c, 500, NULL, true, "out of memory");
}

/* ---- parsing ---- */

static struct zkw_admin_http *conn_of(llhttp_t *p) {
  return p->data;
}

static int refuse(struct zkw_admin_http *c, int status) {
  if (!c->err_status) c->err_status = status;
  return -1;
}

static int on_message_begin(llhttp_t *p) {
  struct zkw_admin_http *c = conn_of(p);
  c->in_request = true;
  c->begun++;
  c->head_bytes = c->body_bytes = c->url_len = 0;
  c->url[0] = 0;
  return 0;
}

static int count_head(struct zkw_admin_http *c, size_t n) {
  c->head_bytes += n;
  return c->head_bytes > ZKW_ADMIN_HEAD_MAX ? refuse(c, 431) : 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  struct zkw_admin_http *c = conn_of(p);
  if (c->url_len + n > ZKW_ADMIN_URL_MAX) return refuse(c, 414);
  memcpy(c->url + c->url_len, at, n);
  c->url_len += n;
  c->url[c->url_len] = 0;
  return count_head(c, n);
}

static int on_head_data(llhttp_t *p, const char *at, size_t n) {
  (void)at;
  return count_head(conn_of(p), n);
}

/* Each header line adds ": " and CRLF to the bytes its callbacks report. */
static int on_header_value_complete(llhttp_t *p) {
  return count_head(conn_of(p), 4);
}

static int on_headers_complete(llhttp_t *p) {
  struct zkw_admin_http *c = conn_of(p);
  if (p->http_major != 1 || p->http_minor > 1) return refuse(c, 400); /* HTTP/0.9 and others */
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > ZKW_ADMIN_BODY_MAX) return refuse(c, 413);
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  struct zkw_admin_http *c = conn_of(p);
  (void)at;
  c->body_bytes += n;
  return c->body_bytes > ZKW_ADMIN_BODY_MAX ? refuse(c, 413) : 0;
}

static int on_message_complete(llhttp_t *p) {
  struct zkw_admin_http *c = conn_of(p);
  c->in_request = false;
  c->completed++;
  /* A client that pipelines faster than it reads gets its answers so far,
   * then the connection closes. So does one that asks for an Upgrade or a
   * CONNECT tunnel: neither is offered, and what follows the request on the
   * connection is not HTTP/1.1 to parse (llhttp stops there). */
  bool last = !llhttp_should_keep_alive(p) || p->upgrade || c->out.len + c->held > ZKW_ADMIN_OUT_MAX ||
              endpoint.stopping;
  serve(c, last);
  return c->done || c->failed || c->walk.waiting ? HPE_PAUSED : 0;
}

void zkw_admin_http_init(struct zkw_admin_http *h) {
  memset(h, 0, sizeof *h);
  llhttp_init(&h->parser, HTTP_REQUEST, &endpoint.settings);
  h->parser.data = h;
}

void zkw_admin_http_release(struct zkw_admin_http *h) {
  zkw_lockwalks_cancel(&h->walk);
  zkw_buf_release(&h->out);
}

int zkw_admin_http_feed(struct zkw_admin_http *h, const char *data, size_t n) {
  if (h->failed) return -1;
  if (h->done || h->walk.waiting || n == 0) return 0;
  llhttp_errno_t err = llhttp_execute(&h->parser, data, n);
  if (h->failed) return -1;
  if (err == HPE_OK || err == HPE_PAUSED || h->done) return 0;
  int status = h->err_status ? h->err_status : 400;
  char line[200];
  if (status == 400 && err != HPE_CB_HEADERS_COMPLETE)
    snprintf(line, sizeof line, "bad request: %s", llhttp_get_error_reason(&h->parser));
  else if (status == 400)
    snprintf(line, sizeof line, "bad request: HTTP/1.0 and HTTP/1.1 only");
  else if (status == 431)
    snprintf(line, sizeof line, "request head larger than %d bytes", ZKW_ADMIN_HEAD_MAX);
  else if (status == 414)
    snprintf(line, sizeof line, "URL longer than %d bytes", ZKW_ADMIN_URL_MAX);
  else
    snprintf(line, sizeof line, "request body larger than %d bytes", ZKW_ADMIN_BODY_MAX);
  zkw_log_debug("admin: refused a request (%d): %s", status, line);
  respond_line(h, status, NULL, true, line);
  return h->failed ? -1 : 0;
}

int zkw_admin_http_timeout(struct zkw_admin_http *h) {
  if (h->failed) return -1;
  if (h->done) return 0;
  respond_line(h, 408, NULL, true, "request not received in time");
  return h->failed ? -1 : 0;
}

/* ---- the socket side ---- */

static void request_timeout_cb(uv_timer_t *t) {
  struct admin_conn *c = t->data;
  if (c->closing) return;
  if (c->http.in_request) {
    if (zkw_admin_http_timeout(&c->http) != 0) conn_close_now(c);
    return;
  }
  conn_close_now(c); /* idle keep-alive connection */
}

static void alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  (void)hd, (void)suggested;
  *buf = uv_buf_init(endpoint.readbuf, sizeof endpoint.readbuf);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct admin_conn *c = st->data;
  if (nread < 0) {
    conn_close_now(c);
    return;
  }
  if (nread == 0 || c->closing) return;
  uint64_t begun = c->http.begun, completed = c->http.completed;
  if (zkw_admin_http_feed(&c->http, buf->base, (size_t)nread) != 0) {
    conn_close_now(c);
    return;
  }
  if (c->http.done || c->closing) {
    conn_finish(c); /* usually done already by the flush hook */
    return;
  }
  /* A request begun in these bytes must arrive whole in time; after a
   * complete one, an idle keep-alive connection is bounded. */
  if (c->http.in_request && c->http.begun != begun)
    uv_timer_start(&c->timer, request_timeout_cb, ZKW_ADMIN_REQUEST_MS, 0);
  else if (!c->http.in_request && c->http.completed != completed)
    uv_timer_start(&c->timer, request_timeout_cb, ZKW_ADMIN_IDLE_MS, 0);
}

/* ---- accepting ---- */

static void refused_closed_cb(uv_handle_t *hd) {
  free(hd);
}

/* Out of memory, a pending connection is still taken (libuv stops polling a
 * listener whose callback does not accept) into a handle kept for that,
 * and closed; while that handle closes, the next one waits for it. */
static uv_tcp_t spare;
static bool spare_busy, spare_wanted;
static void drop_with_spare(uv_stream_t *listener);

static void spare_closed_cb(uv_handle_t *hd) {
  (void)hd;
  spare_busy = false;
  if (spare_wanted && !endpoint.stopping) drop_with_spare((uv_stream_t *)&endpoint.listener);
}

static void drop_with_spare(uv_stream_t *listener) {
  spare_wanted = spare_busy;
  if (spare_busy || uv_tcp_init(endpoint.srv->loop, &spare) != 0) return;
  spare_busy = true;
  ZKW_METRIC_INC(admin_rejected);
  (void)uv_accept(listener, (uv_stream_t *)&spare);
  uv_close((uv_handle_t *)&spare, spare_closed_cb);
}

/* Over the limit: a 503 if the socket takes it at once, then close. */
static void refuse_connection(uv_stream_t *listener) {
  static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                             "Content-Length: 27\r\nConnection: close\r\n\r\ntoo many admin connections\n";
  uv_tcp_t *t = zkw_malloc(sizeof *t);
  if (!t) return drop_with_spare(listener);
  if (uv_tcp_init(endpoint.srv->loop, t) != 0) {
    free(t);
    return drop_with_spare(listener);
  }
  if (uv_accept(listener, (uv_stream_t *)t) == 0) {
    uv_buf_t b = uv_buf_init((char *)busy, sizeof busy - 1);
    (void)uv_try_write((uv_stream_t *)t, &b, 1);
  }
  ZKW_METRIC_INC(admin_rejected);
  uv_close((uv_handle_t *)t, refused_closed_cb);
}

/* An unknown peer counts as remote. */
static bool peer_on_loopback(const uv_tcp_t *t) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  return uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) == 0 &&
         zkw_text_is_loopback((struct sockaddr *)&ss);
}

static void on_connection(uv_stream_t *listener, int status) {
  if (status < 0) {
    zkw_log_warn("admin accept: %s", uv_strerror(status));
    return;
  }
  if (endpoint.stopping) return;
  if (endpoint.nconns >= ZKW_ADMIN_MAX_CONNS) {
    refuse_connection(listener);
    return;
  }
  struct admin_conn *c = zkw_calloc(1, sizeof *c);
  if (!c) {
    zkw_log_error("admin: out of memory accepting a connection");
    return drop_with_spare(listener);
  }
  if (uv_tcp_init(endpoint.srv->loop, &c->tcp) != 0) {
    free(c);
    return drop_with_spare(listener);
  }
  c->tcp.data = c;
  uv_timer_init(endpoint.srv->loop, &c->timer);
  c->timer.data = c;
  c->handles = 2;
  c->next = endpoint.conns;
  if (endpoint.conns) endpoint.conns->prev = c;
  endpoint.conns = c;
  endpoint.nconns++;
  zkw_admin_http_init(&c->http);
  c->http.flush = conn_flush_hook;
  c->http.data = c;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0) {
    conn_close_now(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  c->http.remote = !peer_on_loopback(&c->tcp);
  uv_timer_start(&c->timer, request_timeout_cb, ZKW_ADMIN_REQUEST_MS, 0);
}

/* ---- SIGHUP ---- */

static void on_sighup(uv_signal_t *hd, int signum) {
  (void)hd, (void)signum;
  int rc = zkw_log_reopen();
  if (rc)
    zkw_log_error("SIGHUP: cannot reopen the log file: %s", strerror(-rc));
  else
    zkw_log_info("SIGHUP: log reopened");
  rc = zkw_history_audit_reopen();
  if (rc)
    zkw_log_error("SIGHUP: cannot reopen ZKWARDEN_AUDIT_FILE: %s (appending to the old file)", strerror(-rc));
  else if (endpoint.srv && endpoint.srv->cfg->audit_file)
    zkw_log_info("SIGHUP: audit file reopened");
  if (zkw_tls_enabled()) (void)zkw_tls_reload("SIGHUP"); /* logged either way */
}

/* ---- start and stop ---- */

void zkw_admin_http_setup(struct zkw_server *srv) {
  endpoint.srv = srv;
  zkw_lockwalks_setup(srv, walk_answer);
  llhttp_settings_init(&endpoint.settings);
  endpoint.settings.on_message_begin = on_message_begin;
  endpoint.settings.on_url = on_url;
  endpoint.settings.on_header_field = on_head_data;
  endpoint.settings.on_header_value = on_head_data;
  endpoint.settings.on_header_value_complete = on_header_value_complete;
  endpoint.settings.on_headers_complete = on_headers_complete;
  endpoint.settings.on_body = on_body;
  endpoint.settings.on_message_complete = on_message_complete;
}

int zkw_admin_start(struct zkw_server *srv) {
  memset(&endpoint, 0, sizeof endpoint);
  zkw_admin_http_setup(srv);
  zkw_text_sockaddr((const struct sockaddr *)&srv->cfg->admin_listen, endpoint.where, sizeof endpoint.where);

  int fd = zkw_keeperlink_take_listener(ZKW_LINK_ADMIN); /* a keeper's or a predecessor's, or -1 */
  int rc = uv_tcp_init(srv->loop, &endpoint.listener);
  if (rc) {
    if (fd >= 0) close(fd);
    return rc;
  }
  if (fd >= 0) {
    rc = uv_tcp_open(&endpoint.listener, fd);
    if (rc) close(fd);
  } else {
    rc = uv_tcp_bind(&endpoint.listener, (const struct sockaddr *)&srv->cfg->admin_listen, 0);
  }
  if (!rc) rc = uv_listen((uv_stream_t *)&endpoint.listener, 128, on_connection);
  uv_os_fd_t lfd;
  if (!rc && uv_fileno((uv_handle_t *)&endpoint.listener, &lfd) == 0)
    (void)zkw_keeperlink_note_listener(ZKW_LINK_ADMIN, lfd);
  if (rc) {
    zkw_log_error("cannot listen on %s (ZKWARDEN_ADMIN_LISTEN): %s", endpoint.where, uv_strerror(rc));
    uv_close((uv_handle_t *)&endpoint.listener, NULL);
    return rc;
  }
  rc = uv_signal_init(srv->loop, &endpoint.sig_hup);
  if (rc) {
    zkw_log_error("cannot start the admin endpoint: %s", uv_strerror(rc));
    uv_close((uv_handle_t *)&endpoint.listener, NULL);
    return rc;
  }
  rc = uv_signal_start(&endpoint.sig_hup, on_sighup, SIGHUP);
  if (!rc) rc = zkw_health_start(srv);
  if (rc) {
    zkw_log_error("cannot start the admin endpoint: %s", uv_strerror(rc));
    uv_close((uv_handle_t *)&endpoint.listener, NULL);
    uv_close((uv_handle_t *)&endpoint.sig_hup, NULL);
    return rc;
  }
  endpoint.started = true;
  zkw_log_info(
      "admin endpoint on http://%s (/ /healthz /readyz /metrics /v1/sessions /v1/reclaims /v1/locks)",
      endpoint.where);
  return 0;
}

void zkw_admin_stop(void) {
  if (!endpoint.started || endpoint.stopping) return;
  endpoint.stopping = true;
  uv_close((uv_handle_t *)&endpoint.listener, NULL);
  uv_close((uv_handle_t *)&endpoint.sig_hup, NULL);
  zkw_health_stop();
  for (struct admin_conn *c = endpoint.conns; c; c = c->next)
    conn_close_now(c);
  zkw_buf_release(&endpoint.scratch);
  zkw_lockwalks_stop();
}

void zkw_admin_finish(void) {
  zkw_lockwalks_finish();
}
