/* zkw_move.h: moving a session to another server while its client stays
 * connected (ZKWARDEN_SESSION_MOVE).
 *
 * When the upstream connection of an established session ends (close, reset,
 * TLS error) or goes silent (a request or ping outstanding and nothing read
 * for a third of the session timeout), the relay does not drop the client:
 * it re-attaches the same session to the next server with a ConnectRequest
 * carrying the session id, its password and the last zxid the client has
 * seen (a server behind the client's view refuses it), then restores what
 * the connection carried, in the order the ZooKeeper client itself does at
 * a reconnect: every request that was in flight is answered with
 * CONNECTIONLOSS in its order (its outcome is unknown; nothing is re-sent),
 * the client's auth packets are replayed, its watches re-armed with
 * setWatches at that zxid, and its outstanding pings sent again. Only then
 * do the client's frames (its pings too) flow again.
 *
 * Nothing is answered by zkwarden while the session is not confirmed alive on
 * a server: the client hears nothing during a move, so its own read timeout
 * (two thirds of the session timeout since it last heard from the server)
 * keeps running; the move must end before it, less a margin, or the client's
 * connection is dropped as before. A session the ensemble reports expired is
 * dropped too, and the client learns it at its reconnect.
 *
 * Not moved (dropped as before): SASL sessions (the exchange cannot be
 * replayed), read-only sessions, sessions in their handshake or after
 * closeSession, sessions the policy fences, with an auth reply outstanding,
 * or whose auth packets or watches were not all kept (each counted by
 * reason), and when the client's read timeout leaves no time. A busy session
 * moves: requests in flight (a barrier too, whose withheld reply is answered
 * first) get CONNECTIONLOSS; a request the policy holds stays held. The
 * target: zkw_upstream.h. The policy may refuse a move (on_move: observe
 * mode). */
#ifndef ZKW_MOVE_H
#define ZKW_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_relay.h"

/* The session's upstream connection ended, or went silent (why: for the
 * log line; silent: no pause before the first attempt). Returns
 * true if the session is moving: the caller must not close it (during a
 * move: the next server is tried); false: the caller closes it as before. */
bool zkw_move_start(struct zkw_session *s, const char *why, bool silent) __attribute__((warn_unused_result));
/* A session a predecessor process left (zkw_recover.h), with no upstream
 * connection yet: re-attached as after a loss, its requests in flight
 * answered with CONNECTIONLOSS. Returns false if it cannot move (the
 * caller closes it; the reason is logged). */
bool zkw_move_recover(struct zkw_session *s) __attribute__((warn_unused_result));
/* An upstream frame (body after the length) while moving: ZKW_DROP (taken
 * by the move), ZKW_FORWARD (for the client: a notification, its own ping or
 * auth reply), or a negative codec status. */
int zkw_move_frame(struct zkw_session *s, const uint8_t *body, size_t len);
/* After a batch of frames: watches for silence while requests are outstanding. */
void zkw_move_watch_silence(struct zkw_session *s);
/* The client's auth packet (the whole frame), kept for a replay. */
void zkw_move_keep_auth(struct zkw_session *s, const uint8_t *frame, size_t len);
/* The session closes: a move in progress ends as failed; what was kept for
 * a move (auth packets wiped first) is freed. */
void zkw_move_session_closed(struct zkw_session *s);

#endif
