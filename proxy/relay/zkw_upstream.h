/* zkw_upstream.h: connecting a session to one server of ZKWARDEN_UPSTREAM
 * (rotating start, suspects last, each attempt bounded; see zkw_upstream.c). */
#ifndef ZKW_UPSTREAM_H
#define ZKW_UPSTREAM_H

#include <stdint.h>

#include "zkw_relay.h"

/* Tries the servers in turn from a rotating start, each bounded by
 * ZKWARDEN_CONNECT_TIMEOUT_MS, and calls ready when one accepts (TCP, and
 * TLS when on). If none does: exhausted, or without it the session is
 * closed. */
void zkw_upstream_connect(struct zkw_session *s, void (*ready)(struct zkw_session *s),
                          void (*exhausted)(struct zkw_session *s));
/* The current upstream went silent: later connections try it after the others
 * for for_ms (or until it answers a handshake again). */
void zkw_upstream_suspect(struct zkw_session *s, uint64_t for_ms);
/* The current upstream answered a handshake: no longer suspect. */
void zkw_upstream_answered(struct zkw_session *s);

#endif
