/* zkw_replies.h: what happens to a frame from the server on its way to the
 * client once it is matched to its request (zkw_session.c): the relay's
 * bookkeeping (watches, the last zxid, the policy's in-band requests), the
 * policy's verdict (zkw_hooks.h), kept requests and the barrier.
 *
 * Kept requests (ZKW_KEEP): the relay keeps a copy of the frame it sent, in
 * order, and gives it to the policy with the reply (ZKW_REPLY_KEPT,
 * zkw_session_kept_request). The sidecar keeps lock creates: a NODEEXISTS on
 * a stale lock reaches the client as the server sent it, and the policy
 * replaces the stale lock with the client's own in-band afterwards.
 *
 * The barrier (ZKW_BARRIER; the sidecar: a delete under the lock roots) is a
 * kept request after which the client's requests wait, unread, until the
 * client has the barrier's answer (zkw_session.c; pings go on). Its reply may
 * be withheld (ZKW_WITHHOLD: a reclaim deletes stale locks in-band, then
 * replays the request, or delivers the reply after all). Since nothing of
 * the client's goes to the server behind it, no reply to the client can come
 * behind it: notifications, pings' and auth replies pass as they come (the
 * server interleaves notifications anywhere, and the replay's reply, which
 * the client gets, comes after them). So the server executes a session's
 * requests in the order the client sent them, the client gets every reply in
 * xid order as the server gave it, and reply zxids never go down. The one
 * reply zkwarden holds is the withheld one (a delete's: a header). The
 * policy's replay or delivery names the barrier it means
 * (zkw_session_barrier), so that one a session move has answered is not
 * touched again. */
#ifndef ZKW_REPLIES_H
#define ZKW_REPLIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_relay.h"

/* A client request the policy marked ZKW_KEEP or ZKW_BARRIER (frame: what
 * went to the server): kept until its reply. Returns 0 or a negative codec
 * status (out of memory). */
int zkw_replies_keep_request(struct zkw_session *s, const uint8_t *frame, size_t len)
    __attribute__((warn_unused_result));
/* A frame from the server for the client, matched: a notification, a ping's
 * or auth reply (op ZKW_OP_NOTIFICATION, _PING, _AUTH), or the reply to a
 * client request with the flags of its pending entry (ZKW_PENDING_*). dlen:
 * the body length to decode (the fault point may cut it). Returns
 * ZKW_FORWARD (in the caller's run of frames), ZKW_REPLACE (s->scratch
 * instead), ZKW_DROP (taken: withheld or dropped), or a negative codec
 * status. */
int zkw_replies_take(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                     uint8_t pflags);

/* Session moves (zkw_move.c). The connection is lost: a withheld barrier is
 * answered first at the restore. */
void zkw_replies_connection_lost(struct zkw_session *s);
/* Answers one client request with CONNECTIONLOSS (zkw_move.c); pflags: its
 * pending entry's ZKW_PENDING_* flags. Returns 0, or -1 when the session
 * closed. */
typedef int zkw_replies_answer_fn(struct zkw_session *s, int32_t xid, int32_t op, uint8_t pflags);
/* The restore, before the pending ring's CONNECTIONLOSS: the withheld
 * barrier's reply as the server gave it (the policy's work on it failed as
 * on any connection loss: the client gets what it would have got direct),
 * or CONNECTIONLOSS when its request had been sent again (the replay's
 * outcome is unknown). Returns 0, or -1 when the session closed. */
int zkw_replies_restore(struct zkw_session *s, zkw_replies_answer_fn *answer);

/* ---- the back-channel: what a policy calls ---- */

/* The withheld barrier's number (0: none). The policy keeps it when it
 * withholds a barrier request's reply (ZKW_WITHHOLD), and ends that with
 * one of these: replay the request (same xid, same bytes; the client gets
 * the replay's reply), or deliver the withheld reply; either way the
 * client's next requests go on once the client has its answer. Both do
 * nothing for a barrier that is no longer current (a session move answered
 * it, zkw_move.h) or already replayed. zkw_session_replay returns 0, or -1
 * when it did not replay (no such barrier, the session is closing, or closed
 * by the failure). */
uint32_t zkw_session_barrier(const struct zkw_session *s);
int zkw_session_replay(struct zkw_session *s, uint32_t barrier) __attribute__((warn_unused_result));
void zkw_session_deliver(struct zkw_session *s, uint32_t barrier);
/* The kept request whose reply the policy is being given (ZKW_REPLY_KEPT),
 * or whose reply is withheld: its body (after the length), or NULL. */
const uint8_t *zkw_session_kept_request(const struct zkw_session *s, size_t *len);
/* True while a barrier request of the session is in flight or its reply
 * withheld. */
bool zkw_session_in_barrier(const struct zkw_session *s);

#endif
