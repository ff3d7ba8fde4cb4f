/* zkw_session.h: one client connection and its upstream connection: the
 * frame loop, and the back-channel a policy uses.
 *
 * A session relays frames between the client (the JM's ZooKeeper client) and
 * one upstream ZooKeeper server. It parses every frame in both directions
 * with protocol/: the handshake (ConnectRequest/Response, or a four-letter
 * word relayed raw), then requests and replies, each reply matched to its
 * request (zkw_pending). It records the session id, negotiated timeout and
 * password (in memory only; never logged). Frames go on as they came unless
 * the policy (zkw_hooks.h) replaces, drops or holds them, in batches, without
 * copying when the peer socket takes them at once. Either side closing or
 * misbehaving closes both, with one log line (zkw_pair.h). */
#ifndef ZKW_SESSION_H
#define ZKW_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_relay.h"

/* Takes the listener's pending connection as a new session. Returns 0,
 * UV_ENOMEM (nothing was accepted: the caller must accept or refuse it), or
 * uv_accept's error (the listener's pending connection is gone). */
int zkw_session_accept(struct zkw_server *srv) __attribute__((warn_unused_result));
/* A new session on srv's list, its client handle initialised but not yet
 * connected (zkw_session_accept's first step; tests build sessions with it).
 * NULL when out of memory. */
struct zkw_session *zkw_session_new(struct zkw_server *srv);

/* ---- back-channel: what a policy calls ---- */

/* Re-runs the frame processing of both sides after a hold was lifted. */
void zkw_session_resume(struct zkw_session *s);

/* The policy is about to close this session on the ensemble from another
 * connection (a fence): when its connection to the server ends, the
 * session is not moved (zkw_move.h), and a move under way ends. */
void zkw_session_forbid_move(struct zkw_session *s);

/* The server's sessions, newest first. */
struct zkw_session *zkw_session_first(struct zkw_server *srv);
struct zkw_session *zkw_session_next(struct zkw_session *s);

/* Monotonic ns (uv_hrtime) of the last bytes read from any upstream server,
 * 0 if none yet (health's passive evidence). */
uint64_t zkw_session_upstream_seen_ns(void);

#endif
