/* zkw_server.c: listener, signal handling and orderly shutdown. */
#include "zkw_server.h"

#include <string.h>

#include "zkw_admin.h"
#include "zkw_log.h"
#include "zkw_session.h"

static void on_connection(uv_stream_t *listener, int status) {
  struct zkw_server *srv = listener->data;
  if (status < 0) {
    zkw_log_warn("accept: %s", uv_strerror(status));
    return;
  }
  if (srv->stopping) return;
  zkw_session_accept(srv);
}

static void on_signal(uv_signal_t *h, int signum) {
  struct zkw_server *srv = h->data;
  zkw_log_info("received %s: closing %llu connection(s) and exiting",
               signum == SIGTERM ? "SIGTERM" : "SIGINT", (unsigned long long)srv->session_count);
  zkw_server_stop(srv);
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss->ss_family == AF_INET) {
    uv_ip4_name((const struct sockaddr_in *)ss, ip, sizeof ip);
    port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
    snprintf(out, len, "%s:%d", ip, port);
  } else {
    uv_ip6_name((const struct sockaddr_in6 *)ss, ip, sizeof ip);
    port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    snprintf(out, len, "[%s]:%d", ip, port);
  }
}

int zkw_server_start(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg) {
  char where[80];
  memset(srv, 0, sizeof *srv);
  srv->loop = loop;
  srv->cfg = cfg;
  format_addr(&cfg->listen, where, sizeof where);

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
  uv_signal_init(loop, &srv->sig_term);
  uv_signal_init(loop, &srv->sig_int);
  srv->sig_term.data = srv->sig_int.data = srv;
  uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
  uv_signal_start(&srv->sig_int, on_signal, SIGINT);

  char ups[1024];
  zkw_config_upstream_list(cfg, ups, sizeof ups);
  snprintf(srv->listen_name, sizeof srv->listen_name, "%s", where);
  zkw_log_info("zkwarden %s listening on %s, upstream %s", ZKW_VERSION, where, ups);
  /* Without a usable registry the proxy still relays: the error is logged. */
  if (zkw_identity_start(&srv->identity, srv) != 0) zkw_log_warn("relaying without identity features");
  return 0;
}

void zkw_server_stop(struct zkw_server *srv) {
  if (!srv->stopping) {
    srv->stopping = true;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    zkw_admin_stop();
    zkw_identity_stop(&srv->identity);
    struct zkw_session *s = srv->sessions;
    while (s) {
      struct zkw_session *next = s->next;
      zkw_session_close(s, ZKW_LOG_INFO, "zkwarden is shutting down");
      s = next;
    }
  }
  /* Signal handles go last, once every session is gone, so the loop ends. */
  if (srv->session_count == 0 && !uv_is_closing((uv_handle_t *)&srv->sig_term)) {
    uv_close((uv_handle_t *)&srv->sig_term, NULL);
    uv_close((uv_handle_t *)&srv->sig_int, NULL);
  }
}
