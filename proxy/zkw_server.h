/* zkw_server.h: the listener, the set of live sessions and shutdown.
 *
 * One zkw_server per process, on one libuv loop. It accepts JobManager
 * connections on ZKWARDEN_LISTEN, hands each to a new zkw_session, and on
 * SIGTERM/SIGINT stops accepting, closes every session and lets the loop end.
 * With TLS to the ensemble it also runs the internal relay (see below). */
#ifndef ZKW_SERVER_H
#define ZKW_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_identity.h"

struct zkw_session;

struct zkw_server {
  uv_loop_t *loop;
  const struct zkw_config *cfg;
  uv_tcp_t listener;
  uv_signal_t sig_term, sig_int;
  struct zkw_session *sessions; /* doubly linked, newest first */
  uint64_t session_count;
  uint64_t next_conn;     /* connection numbers for logs, from 1 */
  uint32_t next_upstream; /* round-robin start for the next connection */
  /* uv_now() until which each upstream is tried after the others: it took a
   * connection (or a handshake) and went silent (zkw_upstream_suspect). */
  uint64_t up_suspect_until[ZKW_MAX_UPSTREAMS];
  bool stopping;
  /* The internal relay (ZKWARDEN_UPSTREAM_TLS=on, sidecar mode): a second
   * zkw_server on 127.0.0.1:<ephemeral port> in relay mode, whose sessions
   * are zkwarden's own libzookeeper sessions (registry, fences) on their way
   * to the TLS ensemble. They get no identity, tag or reclaim hooks and do
   * not keep the loop alive; the relay stops after the registry session is
   * closed (zkw_server_finish). */
  bool internal;                /* this is the internal relay */
  struct zkw_server *relay;     /* the main server's internal relay, or NULL */
  char listen_name[80];         /* ZKWARDEN_LISTEN as ip:port, for the config rewrite */
  struct zkw_identity identity; /* this sidecar's JobManager identity */
};

/* Binds the listener and installs signal handlers. Returns 0 or a negative
 * libuv error (logged). */
int zkw_server_start(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg)
    __attribute__((warn_unused_result));
/* Stops accepting and closes every session; the loop ends once all are gone. */
void zkw_server_stop(struct zkw_server *srv);
/* After the loop ended: closes the registry session (its owner node goes at
 * once), through the internal relay when there is one (the loop runs again
 * until it is done), then stops the relay and TLS. */
void zkw_server_finish(struct zkw_server *srv);

#endif
