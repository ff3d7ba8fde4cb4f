/* zkw_replies.c: a matched frame from the server on its way to the client:
 * the relay's bookkeeping, the policy's verdict, kept requests and the
 * barrier's withheld reply (see zkw_replies.h). */
#include "zkw_fault.h"
#include "zkw_replies.h"

#include <string.h>

#include "zkw_codec.h"
#include "zkw_inband.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_journal.h"

/* Copies a frame into a session buffer (a kept request, the withheld
 * reply). */
static int keep_frame(struct zkw_buf *b, const uint8_t *frame, size_t len) {
  b->len = 0;
  return zkw_buf_append(b, frame, len) ? ZKW_E_NOSPACE : 0;
}

int zkw_replies_keep_request(struct zkw_session *s, const uint8_t *frame, size_t len) {
  if (zkw_buf_append(&s->kept_frames, frame, len)) return ZKW_E_NOSPACE;
  s->kept++;
  return 0;
}

/* The oldest kept request: its reply has come. Into s->kept_frame. */
static int next_kept_request(struct zkw_session *s) {
  struct zkw_buf *q = &s->kept_frames;
  if (q->len < 4 || !s->kept) return ZKW_E_VALUE; /* not reached: one kept per kept entry */
  size_t n = 4 + (size_t)zkw_load_be32(q->data);
  int rc = keep_frame(&s->kept_frame, q->data, n);
  zkw_buf_consume(q, n);
  if (!q->len) zkw_buf_release(q);
  s->kept--;
  return rc;
}

static int decode(struct zkw_session *s, const uint8_t *frame, size_t dlen, int32_t op,
                  struct zkw_reply *rep) {
  int rc = zkw_decode_reply(frame + 4, dlen, op, rep);
  if (rc) {
    int32_t xid = dlen >= 4 ? (int32_t)zkw_load_be32(frame + 4) : 0;
    zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: %s (xid %d, %s)", zkw_strerror(rc), xid,
             zkw_op_name(op));
  }
  return rc;
}

/* The relay's bookkeeping, as the frame comes from the server: the watches
 * it arms or fires, the last zxid the client has seen (a session move
 * reconnects with both), the policy's in-band requests waiting for the
 * client's reply. Returns ZKW_DROP for a notification of a watch of the
 * policy's own (not the client's), else 0. */
static int note(struct zkw_session *s, const struct zkw_reply *rep, int32_t op) {
  const struct zkw_hooks *hooks = s->srv->hooks;
  if (op == ZKW_OP_NOTIFICATION && hooks && hooks->on_notification &&
      hooks->on_notification(s, &rep->event) == ZKW_DROP)
    return ZKW_DROP;
  zkw_metrics_reply(op);
  if (op == ZKW_OP_NOTIFICATION) {
    zkw_watches_event(&s->watches, &rep->event);
    return 0;
  }
  if (op != ZKW_OP_PING && op != ZKW_OP_AUTH && rep->zxid > s->last_zxid) s->last_zxid = rep->zxid;
  if (s->watches.armed_head) zkw_watches_reply(&s->watches, rep->xid, rep->err);
  zkw_inband_client_reply(s, op);
  return 0;
}

/* The barrier is answered (its reply, its replay's or its delivery): the
 * client's requests behind it go on. */
static void barrier_done(struct zkw_session *s) {
  s->jr.hold = UINT64_MAX; /* its answer is the client's now (zkw_journal.h) */
  s->barrier = false;
  s->barrier_replayed = false;
  s->barrier_wait = false;
  zkw_buf_release(&s->kept_frame);
  zkw_buf_release(&s->held_reply);
  s->resume(s); /* inside the frame loop: once the current run is out */
}

/* The policy's verdict on the reply to a client request. Returns the
 * verdict (ZKW_DROP when withheld: the reply is kept in s->held_reply) or a
 * negative status. */
static int verdict(struct zkw_session *s, const struct zkw_reply *rep, const uint8_t *frame, size_t flen,
                   int32_t op, uint8_t pflags) {
  bool at_barrier = (pflags & ZKW_PENDING_BARRIER) != 0;
  int rc;
  if ((pflags & ZKW_PENDING_KEPT) && (rc = next_kept_request(s)) != 0) return rc;
  if (at_barrier) { /* the policy sees the barrier it may withhold (zkw_session_barrier) */
    s->barrier = true;
    if (++s->barrier_gen == 0) s->barrier_gen = 1; /* 0 means none */
    s->barrier_xid = rep->xid;
    s->barrier_op = op;
  }
  const struct zkw_hooks *hooks = s->srv->hooks;
  unsigned flags = (at_barrier ? ZKW_REPLY_AT_BARRIER : 0u) |
                   (pflags & ZKW_PENDING_MARK ? ZKW_REPLY_MARKED : 0u) |
                   (pflags & ZKW_PENDING_KEPT ? ZKW_REPLY_KEPT : 0u);
  rc = hooks && hooks->on_reply ? hooks->on_reply(s, rep, op, flags, &s->scratch) : ZKW_FORWARD;
  if (at_barrier && rc == ZKW_WITHHOLD) {
    if (!keep_frame(&s->held_reply, frame, flen)) {
      s->jr.hold = s->jr.popped - 1; /* not answered yet (zkw_journal.h) */
      return ZKW_DROP;               /* the client waits for it */
    }
    /* It cannot be kept: the client gets it as it came, as when the
     * policy's work fails (its late replay or delivery does nothing). */
    zkw_slog(s, ZKW_LOG_WARN,
             "out of memory withholding a reply for a reclaim: the client gets it as it came");
    rc = ZKW_FORWARD;
  }
  if (at_barrier || (pflags & ZKW_PENDING_REPLAY))
    barrier_done(s);
  else
    zkw_buf_release(&s->kept_frame);
  if (rc < 0) return rc;
  return rc == ZKW_WITHHOLD ? ZKW_FORWARD : rc;
}

int zkw_replies_take(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                     uint8_t pflags) {
  struct zkw_reply rep;
  int rc = decode(s, frame, dlen, op, &rep);
  if (!rc) rc = note(s, &rep, op);
  if (rc) return rc;
  /* Notifications, pings' and auth replies: not a client request's reply
   * (whatever their xid: a client's own request with a negative xid has a
   * pending entry like any other). */
  if (op == ZKW_OP_NOTIFICATION || op == ZKW_OP_PING || op == ZKW_OP_AUTH) return ZKW_FORWARD;
  return verdict(s, &rep, frame, flen, op, pflags);
}

/* ---- the back-channel (zkw_session.h) ---- */

uint32_t zkw_session_barrier(const struct zkw_session *s) {
  return s->barrier ? s->barrier_gen : 0;
}

int zkw_session_replay(struct zkw_session *s, uint32_t barrier) {
  if (s->phase == ZKW_PHASE_CLOSING || !barrier || zkw_session_barrier(s) != barrier || s->barrier_replayed ||
      !s->kept_frame.len)
    return -1;
  /* The replay answers the client's request: same xid, same bytes. */
  zkw_buf_release(&s->held_reply);
  s->barrier_replayed = true;
  if (zkw_pending_push_flags(&s->pending, s->barrier_xid, s->barrier_op, ZKW_PENDING_REPLAY) ||
      (zkw_journal_pushed(s, s->barrier_xid, s->barrier_op, ZKW_PENDING_REPLAY, true, 0),
       zkw_side_send(&s->upstream, s->kept_frame.data, s->kept_frame.len))) {
    zkw_session_close(s, ZKW_LOG_WARN, "cannot replay the request after a reclaim");
    return -1;
  }
  return 0; /* its reply comes through zkw_replies_take */
}

void zkw_session_deliver(struct zkw_session *s, uint32_t barrier) {
  if (s->phase == ZKW_PHASE_CLOSING || !barrier || zkw_session_barrier(s) != barrier || s->barrier_replayed)
    return;
  s->jr.hold = UINT64_MAX;
  zkw_journal_to_client(s, s->held_reply.data, s->held_reply.len, s->jr.popped);
  int rc = zkw_side_send(&s->client, s->held_reply.data, s->held_reply.len);
  zkw_metrics_bytes(false, s->held_reply.len);
  if (rc) {
    zkw_session_write_failed(s, &s->client, rc);
    return;
  }
  barrier_done(s);
}

const uint8_t *zkw_session_kept_request(const struct zkw_session *s, size_t *len) {
  if (s->kept_frame.len < 4) return NULL;
  *len = s->kept_frame.len - 4;
  return s->kept_frame.data + 4;
}

bool zkw_session_in_barrier(const struct zkw_session *s) {
  return s->barrier_wait;
}

/* ---- session moves ---- */

void zkw_replies_connection_lost(struct zkw_session *s) {
  if (!s->barrier) return;
  /* The withheld reply is kept for the restore; a replay in flight is lost
   * with the connection. */
  s->barrier_lost = true;
  s->barrier = false;
  if (s->barrier_replayed) zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->kept_frame);
}

int zkw_replies_restore(struct zkw_session *s, zkw_replies_answer_fn *answer) {
  int rc = 0;
  if (s->barrier_lost) {
    s->barrier_lost = false;
    s->jr.hold = UINT64_MAX;
    if (s->held_reply.len) {
      zkw_journal_to_client(s, s->held_reply.data, s->held_reply.len, s->jr.popped);
      rc = zkw_side_send(&s->client, s->held_reply.data, s->held_reply.len);
      zkw_metrics_bytes(false, s->held_reply.len);
      if (rc) zkw_session_write_failed(s, &s->client, rc);
      rc = rc ? -1 : 0;
    } else {
      rc = answer(s, s->barrier_xid, s->barrier_op, 0);
    }
  }
  zkw_buf_release(&s->held_reply);
  /* The kept requests still in flight get their CONNECTIONLOSS from the ring. */
  zkw_buf_release(&s->kept_frames);
  s->kept = 0;
  s->barrier_replayed = false;
  s->barrier_wait = false;
  return rc;
}
