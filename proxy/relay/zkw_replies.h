/* zkw_replies.h: what happens to a frame from the server on its way to the
 * client once it is matched to its request (zkw_session.c): the relay's
 * bookkeeping (watches, the last zxid, the policy's in-band requests), the
 * policy's verdict (zkw_hooks.h), and the lock request barrier.
 *
 * The barrier. A request the policy marks ZKW_BARRIER (the sidecar: a lock
 * create or delete) goes on like any other, and later requests go on behind
 * it; the relay keeps a copy of it. When its reply comes, the policy may
 * withhold it (ZKW_WITHHOLD: a reclaim will replay the request, or deliver
 * the reply after all). From then on the replies and notifications that
 * come after it are held too, in order, so that the client gets its replies
 * in the order it sent its requests: first the withheld request's answer
 * (the replay's reply, or the reply itself), then the held ones, each then
 * given to the policy as it would have been. The relay's own bookkeeping
 * (watches, the last zxid, in-band waits) runs as each frame comes, held or
 * not: a session move reconnects with what the client is going to see.
 * Pings' and auth replies pass (clients match them by their fixed xid). A
 * client whose held replies pass ZKW_HIGH_WATER is not read until they go
 * below ZKW_LOW_WATER (zkw_session_read_client). The policy's replay or delivery
 * names the barrier it means (zkw_session_barrier), so that one a session
 * move has answered with CONNECTIONLOSS is not touched again. */
#ifndef ZKW_REPLIES_H
#define ZKW_REPLIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_relay.h"

/* A client request the policy marked ZKW_BARRIER (frame: what went to the
 * server): kept until its reply. Returns 0 or a negative codec status (out
 * of memory). */
int zkw_replies_barrier_request(struct zkw_session *s, const uint8_t *frame, size_t len)
    __attribute__((warn_unused_result));
/* A frame from the server for the client, matched: a notification, a ping's
 * or auth reply, or the reply to a client request with the flags of its
 * pending entry (ZKW_PENDING_*). dlen: the body length to decode (the fault
 * point may cut it). Returns ZKW_FORWARD (in the caller's run of frames),
 * ZKW_REPLACE (s->scratch instead), ZKW_DROP (taken: withheld, held, or
 * dropped), or a negative codec status. After it, s->flush_due asks the
 * caller to send its run and then call zkw_replies_flush. */
int zkw_replies_take(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                     uint8_t pflags);
/* Sends the held replies that may go now, in order (stops at a reply the
 * policy withholds). Returns 0, or -1 when the session closed. */
int zkw_replies_flush(struct zkw_session *s);

/* Session moves (zkw_move.c). The connection is lost: a withheld barrier is
 * answered first at the restore. */
void zkw_replies_connection_lost(struct zkw_session *s);
/* Answers one client request with CONNECTIONLOSS (zkw_move.c); pflags: its
 * pending entry's ZKW_PENDING_* flags. Returns 0, or -1 when the session
 * closed. */
typedef int zkw_replies_answer_fn(struct zkw_session *s, int32_t xid, int32_t op, uint8_t pflags);
/* The restore, before the pending ring's CONNECTIONLOSS: the lost barrier's
 * CONNECTIONLOSS, then the held replies in their order: a barrier's with
 * CONNECTIONLOSS too (the policy may not act on it now: the client retries,
 * and the retry meets the policy), the others as they came. Returns 0, or
 * -1 when the session closed. */
int zkw_replies_restore(struct zkw_session *s, zkw_replies_answer_fn *answer);

/* ---- the back-channel: what a policy calls ---- */

/* The withheld barrier's number (0: none). The policy keeps it when it
 * withholds a barrier request's reply (ZKW_WITHHOLD), and ends that with
 * one of these: replay the request (same xid, same bytes; the client gets
 * the replay's reply), or deliver the withheld reply; either way the
 * replies held behind it go next. Both do nothing for a barrier that is no
 * longer current: a session move answered its request with CONNECTIONLOSS
 * (zkw_move.h). zkw_session_replay returns 0, or -1 when it did not replay
 * (no such barrier, the session is closing, or closed by the failure). */
uint32_t zkw_session_barrier(const struct zkw_session *s);
int zkw_session_replay(struct zkw_session *s, uint32_t barrier) __attribute__((warn_unused_result));
void zkw_session_deliver(struct zkw_session *s, uint32_t barrier);
/* The request whose reply is withheld, or is given to the policy with
 * ZKW_REPLY_AT_BARRIER: its body (after the length), or NULL. */
const uint8_t *zkw_session_barrier_request(const struct zkw_session *s, size_t *len);
/* True while a barrier request of the session is in flight or its reply
 * withheld. */
bool zkw_session_in_barrier(const struct zkw_session *s);

#endif
