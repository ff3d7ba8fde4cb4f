/* zkw_server.c: listener, signal handling, orderly shutdown, and the
 * internal relay for zkwarden's own ZooKeeper sessions under TLS. */
#include "zkw_server.h"

#include <string.h>

#include "zkw_log.h"
#include "zkw_pair.h"
#include "zkw_session.h"
#include "zkw_text.h"
#include "zkw_tls.h"

static void on_connection(uv_stream_t *listener, int status) {
  struct zkw_server *srv = listener->data;
  if (status < 0) {
    zkw_log_warn("accept: %s", uv_strerror(status));
    return;
  }
  if (srv->stopping) return;
  zkw_session_accept(srv);
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
  int rc = uv_tcp_init(r->loop, &r->listener);
  if (rc) return rc;
  r->listener.data = r;
  rc = uv_tcp_bind(&r->listener, (const struct sockaddr *)&relay_cfg.listen, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&r->listener, 128, on_connection);
  struct sockaddr_storage bound;
  int len = sizeof bound;
  if (!rc) rc = uv_tcp_getsockname(&r->listener, (struct sockaddr *)&bound, &len);
  if (rc) {
    zkw_log_error("cannot start the internal relay on 127.0.0.1: %s", uv_strerror(rc));
    uv_close((uv_handle_t *)&r->listener, NULL);
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

  int rc = uv_tcp_init(loop, &srv->listener);
  if (rc) return rc;
  srv->listener.data = srv;
  rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&cfg->listen, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&srv->listener, 1024, on_connection);
  if (rc) {
    zkw_log_error("cannot listen on %s: %s", where, uv_strerror(rc));
    uv_close((uv_handle_t *)&srv->listener, NULL);
    return rc;
  }
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

void zkw_server_stop(struct zkw_server *srv) {
  if (!srv->stopping) {
    srv->stopping = true;
    uv_close((uv_handle_t *)&srv->listener, NULL);
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
