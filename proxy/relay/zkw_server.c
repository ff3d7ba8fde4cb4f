/* zkw_server.c: listener, signal handling, orderly shutdown, and the
 * internal relay for zkwarden's own ZooKeeper sessions under TLS. */
#include "zkw_server.h"

#include <string.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_keeperlink.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_session.h"
#include "zkw_text.h"
#include "zkw_tls.h"

/* ---- accepting ----
 *
 * libuv stops polling a listener whose connection callback returns without
 * uv_accept, so every pending connection is taken: served, or accepted and
 * reset at once (refused). A newcomer beyond ZKWARDEN_MAX_CLIENTS first
 * displaces the oldest connection that has not sent its handshake (an idle
 * flood cannot lock the JobManager out); with none, it is refused. */

static void refused_closed(uv_handle_t *h) {
  free(h);
}

/* Accepts the pending connection into a throwaway handle and resets it.
 * Returns 0, or UV_ENOMEM (still pending). */
static int refuse_pending(struct zkw_server *srv) {
  uv_tcp_t *t = zkw_malloc(sizeof *t);
  if (!t) return UV_ENOMEM;
  uv_tcp_init(srv->loop, t);
  if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)t) != 0 ||
      uv_tcp_close_reset(t, refused_closed) != 0)
    uv_close((uv_handle_t *)t, refused_closed);
  return 0;
}

/* One line per burst of refusals (at most one every 10 s), every refusal counted. */
static void note_refused(struct zkw_server *srv, const char *why) {
  ZKW_METRIC_INC(connections_refused);
  srv->refused_since_line++;
  uint64_t now = uv_now(srv->loop);
  if (srv->refused_line_ms && now - srv->refused_line_ms < 10000) return;
  zkw_log_warn("refusing client connections: %s (%llu refused since the last such line; "
               "zkwarden_connections_refused_total counts them all)",
               why, (unsigned long long)srv->refused_since_line);
  srv->refused_line_ms = now;
  srv->refused_since_line = 0;
}

/* At the limit: closes the oldest session still waiting for its handshake
 * (not one whose ConnectRequest the policy holds: it has sent it). */
static bool displace_idle(struct zkw_server *srv) {
  struct zkw_session *oldest = NULL;
  for (struct zkw_session *s = zkw_session_first(srv); s; s = zkw_session_next(s))
    if (s->phase == ZKW_PHASE_HANDSHAKE && !s->upstream_started && !s->held) oldest = s;
  if (!oldest) return false;
  oldest->close_class = ZKW_CLOSE_LIMIT;
  zkw_session_close(oldest, ZKW_LOG_DEBUG,
                    "ZKWARDEN_MAX_CLIENTS (%u) reached: the oldest connection without a "
                    "handshake makes room for a new one",
                    srv->cfg->max_clients);
  return true;
}

static void accept_retry_cb(uv_timer_t *t);

static void accept_pending(struct zkw_server *srv) {
  char why[96];
  int rc = UV_ECANCELED;
  if (!srv->stopping) {
    bool full = !srv->internal && srv->sessions_open >= srv->cfg->max_clients && !displace_idle(srv);
    rc = full ? UV_EBUSY : zkw_session_accept(srv);
    if (rc == 0) return;
    if (rc != UV_EBUSY && rc != UV_ENOMEM) {
      /* uv_accept failed: libuv polls the listener again only after a
       * successful accept, or a new listen. */
      int lrc =
          uv_listen((uv_stream_t *)&srv->listener, srv->internal ? 128 : 1024, srv->listener.connection_cb);
      if (lrc) zkw_log_error("accept: cannot listen again: %s", uv_strerror(lrc));
      return;
    }
    snprintf(why, sizeof why, rc == UV_EBUSY ? "ZKWARDEN_MAX_CLIENTS (%u) reached" : "out of memory",
             srv->cfg->max_clients);
    note_refused(srv, why);
  }
  if (refuse_pending(srv) != 0) uv_timer_start(&srv->accept_retry, accept_retry_cb, 100, 0);
}

static void accept_retry_cb(uv_timer_t *t) {
  accept_pending(t->data);
}

static void on_connection(uv_stream_t *listener, int status) {
  struct zkw_server *srv = listener->data;
  if (status < 0) {
    zkw_log_warn("accept: %s", uv_strerror(status));
    return;
  }
  accept_pending(srv);
}

/* The listener's handle and its retry timer. */
static int listener_init(struct zkw_server *srv) {
  int rc = uv_tcp_init(srv->loop, &srv->listener);
  if (rc) return rc;
  srv->listener.data = srv;
  uv_timer_init(srv->loop, &srv->accept_retry);
  srv->accept_retry.data = srv;
  uv_unref((uv_handle_t *)&srv->accept_retry);
  if (!srv->cap_timer.loop) { /* the server's: it outlives a pause in accepting */
    uv_timer_init(srv->loop, &srv->cap_timer);
    srv->cap_timer.data = srv;
    uv_unref((uv_handle_t *)&srv->cap_timer);
  }
  return 0;
}

static int listen_on(struct zkw_server *srv, const struct sockaddr *addr, int backlog) {
  int rc = listener_init(srv);
  if (rc) return rc;
  rc = uv_tcp_bind(&srv->listener, addr, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&srv->listener, backlog, on_connection);
  return rc;
}

static int listen_inherited(struct zkw_server *srv, int fd);

/* Once both the listener and its retry timer are closed, the handles can be
 * used again (a hand-over that did not happen serves on the same socket). */
static void listener_closed(uv_handle_t *h) {
  struct zkw_server *srv = h->data;
  if (--srv->listener_closing > 0) return;
  int fd = srv->reopen_fd;
  srv->reopen_fd = -1;
  if (fd >= 0 && !srv->stopping && listen_inherited(srv, fd) != 0) {
    zkw_log_error("cannot listen on %s again: stopping", srv->listen_name);
    zkw_server_stop(srv);
  }
}

/* Closes the listener (all: and the server's cap timer, at its end). */
static void listen_close(struct zkw_server *srv, bool all) {
  if (all && srv->cap_timer.loop && !uv_is_closing((uv_handle_t *)&srv->cap_timer))
    uv_close((uv_handle_t *)&srv->cap_timer, NULL);
  if (srv->listener.loop && !uv_is_closing((uv_handle_t *)&srv->listener)) {
    srv->listener_closing++;
    uv_close((uv_handle_t *)&srv->listener, listener_closed);
  }
  if (srv->accept_retry.loop && !uv_is_closing((uv_handle_t *)&srv->accept_retry)) {
    srv->listener_closing++;
    uv_close((uv_handle_t *)&srv->accept_retry, listener_closed);
  }
}

/* The listening socket a keeper or a predecessor handed over (uv_listen
 * again takes its backlog); the name it really listens on is the one the
 * /zookeeper/config rewrite gives the client. Takes fd. */
static int listen_inherited(struct zkw_server *srv, int fd) {
  int rc = listener_init(srv);
  if (!rc) rc = uv_tcp_open(&srv->listener, fd);
  if (rc) {
    close(fd);
    return rc;
  }
  rc = uv_listen((uv_stream_t *)&srv->listener, 1024, on_connection);
  struct sockaddr_storage bound;
  int len = sizeof bound;
  char name[sizeof srv->listen_name];
  if (!rc && uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &len) == 0) {
    zkw_text_sockaddr((const struct sockaddr *)&bound, name, sizeof name);
    if (strcmp(name, srv->listen_name) != 0) {
      zkw_log_warn("ZKWARDEN_LISTEN is %s but the inherited listening socket is on %s: serving there (the "
                   "address changes when the keeper, or zkwarden without one, starts afresh)",
                   srv->listen_name, name);
      memcpy(srv->listen_name, name, sizeof name);
    }
  }
  return rc;
}

static struct zkw_server relay_srv;
static struct zkw_config relay_cfg;

/* Starts the internal relay: libzookeeper_mt (registry, fencing) has no TLS,
 * so its sessions connect here in plaintext, on loopback, and leave over the
 * one TLS stack. A plain relay (ZKWARDEN_MODE=relay semantics, no hooks): the
 * fences' re-attaches and closeSessions pass untouched, and the registry's
 * reads of tagged locks see the tags (the lock report needs them). */
static int relay_start(struct zkw_server *srv) {
  struct zkw_server *r = &relay_srv;
  relay_cfg = *srv->cfg;
  relay_cfg.relay_only = true;
  struct sockaddr_in any;
  uv_ip4_addr("127.0.0.1", 0, &any);
  memset(&relay_cfg.listen, 0, sizeof relay_cfg.listen);
  memcpy(&relay_cfg.listen, &any, sizeof any);
  memset(r, 0, sizeof *r);
  r->loop = srv->loop;
  r->cfg = &relay_cfg;
  r->internal = true;
  r->hooks = NULL; /* no policy: zkwarden's own sessions get the server's replies as sent (tags too) */
  int rc = listen_on(r, (const struct sockaddr *)&relay_cfg.listen, 128);
  struct sockaddr_storage bound;
  int len = sizeof bound;
  if (!rc) rc = uv_tcp_getsockname(&r->listener, (struct sockaddr *)&bound, &len);
  if (rc) {
    zkw_log_error("cannot start the internal relay on 127.0.0.1: %s", uv_strerror(rc));
    listen_close(r, true);
    return rc;
  }
  uv_unref((uv_handle_t *)&r->listener); /* zkw_server_finish closes it */
  zkw_text_sockaddr((const struct sockaddr *)&bound, r->listen_name, sizeof r->listen_name);
  memcpy(&relay_cfg.listen, &bound, sizeof bound);
  zkw_tls_set_route(r->listen_name);
  srv->relay = r;
  zkw_log_info("zkwarden's own ZooKeeper sessions go through the internal relay on %s, TLS upstream",
               r->listen_name);
  return 0;
}

void zkw_server_init(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg,
                     const struct zkw_hooks *hooks, void *policy) {
  memset(srv, 0, sizeof *srv);
  srv->loop = loop;
  srv->cfg = cfg;
  srv->hooks = hooks;
  srv->policy = policy;
  srv->reopen_fd = -1;
  zkw_text_sockaddr((const struct sockaddr *)&cfg->listen, srv->listen_name, sizeof srv->listen_name);
}

int zkw_server_start_relay_only(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg) {
  zkw_server_init(srv, loop, cfg, NULL, NULL);
  return relay_start(srv);
}

int zkw_server_start(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg,
                     const struct zkw_hooks *hooks, void *policy) {
  zkw_server_init(srv, loop, cfg, hooks, policy);
  const char *where = srv->listen_name;

  int fd = zkw_keeperlink_take_listener(ZKW_LINK_LISTEN);
  int rc = fd >= 0 ? listen_inherited(srv, fd) : listen_on(srv, (const struct sockaddr *)&cfg->listen, 1024);
  if (rc) {
    zkw_log_error("cannot listen on %s%s: %s", where, fd >= 0 ? " (the inherited socket)" : "",
                  uv_strerror(rc));
    listen_close(srv, true);
    return rc;
  }
  uv_os_fd_t lfd;
  if (uv_fileno((uv_handle_t *)&srv->listener, &lfd) == 0)
    (void)zkw_keeperlink_note_listener(ZKW_LINK_LISTEN, lfd);
  char ups[1024];
  zkw_config_upstream_list(cfg, ups, sizeof ups);
  zkw_log_info("zkwarden %s listening on %s, upstream %s%s", ZKW_VERSION, where, ups,
               cfg->upstream_tls ? " (TLS)" : "");
  if (cfg->upstream_tls && !cfg->relay_only) {
    rc = relay_start(srv);
    if (rc) {
      zkw_server_stop(srv);
      return rc;
    }
  }
  return 0;
}

void zkw_server_stop_accepting(struct zkw_server *srv) {
  listen_close(srv, false);
}

int zkw_server_resume_accepting(struct zkw_server *srv) {
  int fd = zkw_keeperlink_take_listener(ZKW_LINK_LISTEN);
  if (fd < 0 || srv->stopping) {
    if (fd >= 0) close(fd);
    return fd < 0 ? UV_EBADF : UV_ECANCELED;
  }
  zkw_log_info("accepting on %s again", srv->listen_name);
  if (srv->listener_closing) {
    if (srv->reopen_fd >= 0) close(srv->reopen_fd);
    srv->reopen_fd = fd; /* once the old handles are closed */
    return 0;
  }
  return listen_inherited(srv, fd);
}

void zkw_server_stop(struct zkw_server *srv) {
  if (!srv->stopping) {
    srv->stopping = true;
    listen_close(srv, true);
    if (!srv->internal) {
      zkw_tls_stop();
      if (srv->hooks && srv->hooks->on_stop) srv->hooks->on_stop(srv->policy);
    }
    struct zkw_session *s = srv->sessions;
    while (s) {
      struct zkw_session *next = s->next;
      zkw_session_close(s, ZKW_LOG_INFO, "zkwarden is shutting down");
      s = next;
    }
  }
}

static uv_async_t finish_async;
static struct {
  void (*fn)(void *arg);
  void *arg;
} finish_last;

static void finish_thread(void *unused) {
  (void)unused;
  finish_last.fn(finish_last.arg); /* blocks until the server answered */
  uv_async_send(&finish_async);
}

static void finish_done_cb(uv_async_t *h) {
  uv_close((uv_handle_t *)h, NULL);
  zkw_server_stop(&relay_srv);
}

void zkw_server_finish(struct zkw_server *srv, void (*last)(void *arg), void *arg) {
  uv_thread_t th;
  finish_last.fn = last;
  finish_last.arg = arg;
  if (!srv->relay || uv_async_init(srv->loop, &finish_async, finish_done_cb) != 0) {
    last(arg);
  } else if (uv_thread_create(&th, finish_thread, NULL) != 0) {
    uv_close((uv_handle_t *)&finish_async, NULL);
    zkw_server_stop(srv->relay);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    last(arg);
  } else {
    /* The loop serves the relay (the closeSession on its way) meanwhile. */
    uv_run(srv->loop, UV_RUN_DEFAULT);
    uv_thread_join(&th);
  }
  srv->relay = NULL;
  zkw_tls_set_route(NULL);
  zkw_tls_free();
}
