/* zkw_server.h: the listener, the set of live sessions and shutdown.
 *
 * One zkw_server per process, on one libuv loop. It accepts client
 * connections on ZKWARDEN_LISTEN, hands each to a new zkw_session under the
 * policy given at start (zkw_hooks.h), and on zkw_server_stop (main.c's
 * SIGTERM/SIGINT) stops accepting, closes every session and lets the loop
 * end. With TLS to the ensemble it also runs the internal relay (zkw_relay.h). */
#ifndef ZKW_SERVER_H
#define ZKW_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_hooks.h"
#include "zkw_relay.h"

/* Binds the listener, or takes the listening socket a keeper or a
 * predecessor handed over (zkw_keeperlink_take_listener). hooks (may be NULL) and policy (its context, may be
 * NULL) are the policy of every session; the internal relay gets none (its
 * sessions are zkwarden's own). Returns 0 or a negative libuv error (logged). */
int zkw_server_start(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg,
                     const struct zkw_hooks *hooks, void *policy) __attribute__((warn_unused_result));
/* Only the internal relay, for a process of zkwarden's own sessions alone
 * (`zkwarden locks` with TLS): srv gets no listener of its own; end it with
 * zkw_server_finish. cfg must have upstream_tls; zkw_tls_start came first.
 * Returns 0 or a negative libuv error (logged). */
int zkw_server_start_relay_only(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg)
    __attribute__((warn_unused_result));
/* zkw_server_start's first step, without the listener (tests use it). */
void zkw_server_init(struct zkw_server *srv, uv_loop_t *loop, const struct zkw_config *cfg,
                     const struct zkw_hooks *hooks, void *policy);
/* Stops accepting (closes this process's listening handle; a keeper or a
 * successor keeps the socket, whose backlog waits for it) and nothing else:
 * a hand-over's first step (zkw_keeperlink.h). */
void zkw_server_stop_accepting(struct zkw_server *srv);
/* Accepts again on the same socket after zkw_server_stop_accepting (a
 * hand-over that did not happen; zkw_keeperlink_take_listener gives it).
 * Returns 0 or a negative libuv error (logged). */
int zkw_server_resume_accepting(struct zkw_server *srv) __attribute__((warn_unused_result));
/* Stops accepting and closes every session; the loop ends once all are gone. */
void zkw_server_stop(struct zkw_server *srv);
/* After the loop ended: runs last(arg) (a blocking goodbye to the ensemble,
 * e.g. closing the registry session), on a thread while the loop serves the
 * internal relay when there is one, then stops the relay and TLS. */
void zkw_server_finish(struct zkw_server *srv, void (*last)(void *arg), void *arg);

#endif
