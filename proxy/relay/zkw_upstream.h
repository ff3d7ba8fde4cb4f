/* zkw_upstream.h: connecting a session to one server of ZKWARDEN_UPSTREAM
 * (the order servers are tried in, each attempt bounded; see zkw_upstream.c),
 * and what zkwarden knows of each server: suspect, lost, back. */
#ifndef ZKW_UPSTREAM_H
#define ZKW_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "zkw_relay.h"

/* A server back from a loss is preferred by a move for this long after (a
 * rolling restart's own span); after that it is one of the others. */
#define ZKW_UPSTREAM_BACK_WINDOW_MS (10 * 60 * 1000)

/* Tries the servers in turn, each bounded by ZKWARDEN_CONNECT_TIMEOUT_MS,
 * and calls ready when one accepts (TCP, and TLS when on). If none does:
 * exhausted, or without it the session is closed. The order: a new
 * connection starts from a rotating index; a session that moves (s->moving)
 * tries first the servers that came back from a loss, the one back most
 * recently first (a rolling restart has restarted it already), then the
 * others at random, as the ZooKeeper client picks; either way servers that
 * are suspect, or lost and not seen back, come last. */
void zkw_upstream_connect(struct zkw_session *s, void (*ready)(struct zkw_session *s),
                          void (*exhausted)(struct zkw_session *s));
/* The current upstream went silent: later connections try it after the others
 * for for_ms (or until it answers a handshake again). */
void zkw_upstream_suspect(struct zkw_session *s, uint64_t for_ms);
/* The current upstream answered a handshake: no longer suspect (and back,
 * if it was lost). */
void zkw_upstream_answered(struct zkw_session *s);
/* The current upstream was lost: it closed, reset or went silent, or a
 * connection to it failed. */
void zkw_upstream_lost(struct zkw_session *s);
/* Upstream i (index in ZKWARDEN_UPSTREAM) was lost and has not been seen
 * serving since (the health probe watches for its return). */
bool zkw_upstream_down(const struct zkw_server *srv, int i);
/* uv_now() when upstream i was last lost (0: never). */
uint64_t zkw_upstream_lost_ms(const struct zkw_server *srv, int i);
/* Upstream i answered the health probe as serving: back (if it was lost),
 * no longer suspect. */
void zkw_upstream_back(struct zkw_server *srv, int i);

#endif
