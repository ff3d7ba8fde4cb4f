/* zkw_fenceconn.c: closing a superseded session on a connection of zkwarden's
 * own, on the loop thread: ConnectRequest with the session's id and
 * password, then (unless cancelled meanwhile) the digest auth if any and
 * closeSession, and the server's reply to it. A server that refuses, closes
 * or does not answer within attempt_ms is left for the next one; after a
 * round without an answer the next begins 100 ms later, until timeout_ms. */
#include "zkw_fenceconn.h"

#include <stdio.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_encode.h"
#include "zkw_fault.h"
#include "zkw_ops.h"
#include "zkw_tls.h"
#include "zkw_wire.h"

#define ROUND_PAUSE_MS 100
#define CLOSE_XID      1

static void next_server(struct zkw_fenceconn *f);
static void pause_cb(uv_timer_t *t);

/* Once the outcome is known and every callback has come: the report. */
static void maybe_report(struct zkw_fenceconn *f) {
  if (!f->ending || f->open) return;
  f->cb(f, f->result, f->arg); /* the password was wiped by end() */
}

static void closed_cb(uv_handle_t *h) {
  struct zkw_fenceconn *f = h->data;
  if (h == (uv_handle_t *)&f->tcp) f->tcp_open = false;
  f->open--;
  if (f->ending) {
    maybe_report(f);
    return;
  }
  next_server(f); /* only the connection of a failed attempt closes before the end */
}

static void close_tcp(struct zkw_fenceconn *f) {
  if (f->tcp_open && !uv_is_closing((uv_handle_t *)&f->tcp)) uv_close((uv_handle_t *)&f->tcp, closed_cb);
}

/* The outcome: everything open is closed, then cb. The connection goes
 * without closeSession unless one was sent. */
static void end(struct zkw_fenceconn *f, enum zkw_fenceconn_result result, const char *detail) {
  if (f->ending) return;
  f->ending = true;
  f->result = result;
  if (detail) snprintf(f->detail, sizeof f->detail, "%s", detail);
  memset(f->passwd, 0, sizeof f->passwd);
  uv_close((uv_handle_t *)&f->deadline, closed_cb);
  uv_close((uv_handle_t *)&f->attempt, closed_cb);
  if (f->resolving) uv_cancel((uv_req_t *)&f->resolve); /* its callback comes with UV_EAI_CANCELED */
  close_tcp(f);
}

/* This server did not do: the next one, once its connection is closed. */
static void attempt_failed(struct zkw_fenceconn *f, const char *what) {
  if (f->ending) return;
  snprintf(f->detail, sizeof f->detail, "%.100s: %.50s", f->server, what);
  if (f->closing_sent) {
    /* Whether the server applied it is unknown: the caller decides. */
    end(f, ZKW_FENCE_FAILED, NULL);
    return;
  }
  uv_timer_stop(&f->attempt);
  if (f->resolving) { /* resolve_cb goes on */
    f->abandoned = true;
    uv_cancel((uv_req_t *)&f->resolve);
  } else if (f->tcp_open) {
    close_tcp(f); /* closed_cb goes on */
  } else {
    next_server(f);
  }
}

static void attempt_timeout_cb(uv_timer_t *t) {
  struct zkw_fenceconn *f = t->data;
  char what[64];
  snprintf(what, sizeof what, "no answer within %u ms", f->attempt_ms);
  attempt_failed(f, what);
}

static void deadline_cb(uv_timer_t *t) {
  struct zkw_fenceconn *f = t->data;
  char detail[sizeof f->detail];
  snprintf(detail, sizeof detail, "no server closed the session within %d ms (last: %.100s)", f->timeout_ms,
           f->detail[0] ? f->detail : "none tried");
  end(f, ZKW_FENCE_FAILED, detail);
}

static void write_cb(uv_write_t *req, int status) {
  struct zkw_fenceconn *f = req->data;
  f->open--;
  if (f->ending) return maybe_report(f);
  if (status < 0 && status != UV_ECANCELED) attempt_failed(f, uv_strerror(status));
}

static int send_frames(struct zkw_fenceconn *f, uv_write_t *req, uint8_t *p, size_t len) {
  if (ZKW_FAULT_AT(write, ZKW_FAULT_WHERE, req == &f->write_attach ? "fence-attach" : "fence-close"))
    return UV_EPIPE;
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
  req->data = f;
  int rc = uv_write(req, (uv_stream_t *)&f->tcp, &b, 1, write_cb);
  if (rc == 0) f->open++;
  return rc;
}

/* The session is confirmed: closeSession (after the digest auth, if any),
 * unless the session was attached again meanwhile. */
static void close_session(struct zkw_fenceconn *f) {
  if (f->cancel) return end(f, ZKW_FENCE_CANCELLED, NULL);
  size_t n = 0, len = 0;
  int rc = ZKW_OK;
  if (f->auth) {
    struct zkw_request auth = {.xid = ZKW_XID_AUTH, .type = ZKW_OP_AUTH};
    auth.op.type = ZKW_OP_AUTH;
    auth.op.scheme = (struct zkw_bytes){(const uint8_t *)"digest", 6};
    auth.op.data = (struct zkw_bytes){(const uint8_t *)f->auth, (int32_t)strlen(f->auth)};
    rc = zkw_encode_request(f->out_close, sizeof f->out_close, &auth, &n);
  }
  if (rc == ZKW_OK) rc = zkw_encode_close_session(f->out_close + n, sizeof f->out_close - n, CLOSE_XID, &len);
  if (rc != ZKW_OK) return end(f, ZKW_FENCE_FAILED, "the digest credentials do not fit a frame");
  uv_timer_stop(&f->attempt); /* the deadline bounds the reply */
  rc = send_frames(f, &f->write_close, f->out_close, n + len);
  if (rc < 0) return attempt_failed(f, uv_strerror(rc));
  f->closing_sent = true;
}

/* One whole frame from the server. Returns false when the attempt is over. */
static bool on_frame(struct zkw_fenceconn *f, const uint8_t *body, size_t len) {
  if (ZKW_FAULT_AT(reply, ZKW_FAULT_WHERE, f->closing_sent ? "fence-reply" : "fence-ConnectResponse") &&
      len > 8)
    len = 8; /* cut: it does not decode */
  if (!f->closing_sent) {
    struct zkw_connect_resp resp;
    if (zkw_decode_connect_resp(body, len, &resp) != ZKW_OK) {
      attempt_failed(f, "a ConnectResponse that does not decode");
      return false;
    }
    if (resp.timeout <= 0) {
      end(f, ZKW_FENCE_EXPIRED, NULL);
      return false;
    }
    close_session(f);
    return !f->ending;
  }
  struct zkw_reply rep; /* auth (xid -4) or closeSession: neither has a body */
  if (zkw_decode_reply(body, len, ZKW_OP_CLOSE_SESSION, &rep) != ZKW_OK) {
    attempt_failed(f, "a reply that does not decode");
    return false;
  }
  if (rep.xid == ZKW_XID_AUTH && rep.err != 0) {
    char detail[96];
    snprintf(detail, sizeof detail, "authentication failed (%s)", zkw_zk_error_name(rep.err));
    end(f, ZKW_FENCE_FAILED, detail);
    return false;
  }
  if (rep.xid != CLOSE_XID) return true;
  if (rep.err == 0) {
    end(f, ZKW_FENCE_CLOSED, NULL);
  } else {
    char detail[96];
    snprintf(detail, sizeof detail, "closeSession: %s", zkw_zk_error_name(rep.err));
    end(f, ZKW_FENCE_FAILED, detail);
  }
  return false;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  struct zkw_fenceconn *f = h->data;
  *buf = uv_buf_init((char *)f->in + f->in_len, (unsigned)(sizeof f->in - f->in_len));
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  struct zkw_fenceconn *f = st->data;
  if (f->ending || nread == 0) return;
  if (nread < 0) {
    uv_read_stop(st);
    return attempt_failed(f, nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
  }
  f->in_len += (size_t)nread;
  size_t at = 0, flen;
  for (;;) {
    int rc = zkw_frame_next(f->in + at, f->in_len - at, ZKW_MIN_REPLY, sizeof f->in - 4, &flen);
    if (rc == ZKW_AGAIN) break;
    if (rc != ZKW_OK) {
      uv_read_stop(st);
      return attempt_failed(f, "a frame of impossible length");
    }
    if (!on_frame(f, f->in + at + 4, flen - 4)) {
      uv_read_stop(st);
      return;
    }
    at += flen;
  }
  memmove(f->in, f->in + at, f->in_len - at);
  f->in_len -= at;
}

static void connect_cb(uv_connect_t *req, int status) {
  struct zkw_fenceconn *f = req->data;
  f->open--;
  if (f->ending) return maybe_report(f);
  if (status == UV_ECANCELED) return;
  if (status < 0) return attempt_failed(f, uv_strerror(status));
  struct zkw_connect_req cr = {.timeout = f->session_timeout_ms > 0 ? f->session_timeout_ms : f->timeout_ms,
                               .session_id = f->session_id,
                               .passwd = {f->passwd, sizeof f->passwd}};
  size_t len;
  if (zkw_encode_connect_req(f->out_attach, sizeof f->out_attach, &cr, &len) != ZKW_OK)
    return end(f, ZKW_FENCE_FAILED, "cannot encode the ConnectRequest");
  f->in_len = 0;
  int rc = send_frames(f, &f->write_attach, f->out_attach, len);
  if (rc == 0) rc = uv_read_start((uv_stream_t *)&f->tcp, alloc_cb, read_cb);
  if (rc < 0) attempt_failed(f, uv_strerror(rc));
}

static void resolve_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  struct zkw_fenceconn *f = req->data;
  f->open--;
  f->resolving = false;
  if (f->abandoned && !f->ending) { /* its attempt timed out meanwhile */
    f->abandoned = false;
    if (res) uv_freeaddrinfo(res);
    return next_server(f);
  }
  if (f->ending || status < 0 || !res) {
    if (res) uv_freeaddrinfo(res);
    if (f->ending) return maybe_report(f);
    return attempt_failed(f, "cannot resolve");
  }
  int rc = uv_tcp_init(f->loop, &f->tcp);
  if (rc == 0) {
    f->tcp.data = f;
    f->tcp_open = true;
    f->open++;
    f->connect.data = f;
    rc = uv_tcp_connect(&f->connect, &f->tcp, res->ai_addr, connect_cb);
    if (rc == 0) f->open++;
  }
  uv_freeaddrinfo(res);
  if (rc < 0) attempt_failed(f, uv_strerror(rc));
}

/* The next server of hosts, or after a whole round a pause. */
static void next_server(struct zkw_fenceconn *f) {
  if (f->ending) return;
  if (f->cancel) return end(f, ZKW_FENCE_CANCELLED, NULL);
  const char *p = f->hosts + f->next;
  if (!*p) {
    f->next = 0;
    uv_timer_start(&f->attempt, pause_cb, ROUND_PAUSE_MS, 0);
    return;
  }
  size_t n = strcspn(p, ",");
  f->next += n + (p[n] == ',');
  snprintf(f->server, sizeof f->server, "%.*s", (int)n, p);
  /* zkw_config_upstream_list writes hosts bare (an IPv6 one too): the port
   * follows the last colon. */
  char host[sizeof f->server], *port = strrchr(f->server, ':');
  if (!port) return attempt_failed(f, "no port");
  snprintf(host, sizeof host, "%.*s", (int)(port - f->server), f->server);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  f->resolve.data = f;
  f->closing_sent = false;
  uv_timer_start(&f->attempt, attempt_timeout_cb, f->attempt_ms, 0);
  int rc = uv_getaddrinfo(f->loop, &f->resolve, resolve_cb, host, port + 1, &hints);
  if (rc < 0) return attempt_failed(f, uv_strerror(rc));
  f->open++;
  f->resolving = true;
}

static void pause_cb(uv_timer_t *t) {
  next_server(t->data);
}

int zkw_fenceconn_start(uv_loop_t *loop, struct zkw_fenceconn *f, zkw_fenceconn_cb cb, void *arg) {
  const char *route = zkw_tls_route(f->hosts); /* the internal relay under TLS */
  if (route != f->hosts) snprintf(f->hosts, sizeof f->hosts, "%s", route);
  if (!f->hosts[0] || f->timeout_ms <= 0) return UV_EINVAL;
  f->cb = cb;
  f->arg = arg;
  f->loop = loop;
  f->detail[0] = 0;
  f->cancel = f->ending = f->closing_sent = f->tcp_open = f->resolving = f->abandoned = false;
  f->next = 0;
  if (f->attempt_ms < 100) f->attempt_ms = 100;
  uv_timer_init(loop, &f->deadline);
  uv_timer_init(loop, &f->attempt);
  f->deadline.data = f->attempt.data = f;
  f->open = 2;
  uv_timer_start(&f->deadline, deadline_cb, (uint64_t)f->timeout_ms, 0);
  next_server(f);
  return 0;
}

void zkw_fenceconn_cancel(struct zkw_fenceconn *f) {
  f->cancel = true;
  if (!f->closing_sent) end(f, ZKW_FENCE_CANCELLED, NULL);
}

const char *zkw_fenceconn_result_name(enum zkw_fenceconn_result r) {
  switch (r) {
  case ZKW_FENCE_CLOSED:
    return "closed";
  case ZKW_FENCE_EXPIRED:
    return "already expired";
  case ZKW_FENCE_CANCELLED:
    return "cancelled: the session was re-attached";
  default:
    return "failed";
  }
}
