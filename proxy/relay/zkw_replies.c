/* zkw_replies.c: a matched frame from the server on its way to the client:
 * the relay's bookkeeping, the policy's verdict, and replies held behind a
 * withheld barrier reply (see zkw_replies.h). */
#include "zkw_fault.h"
#include "zkw_replies.h"

#include <string.h>

#include "zkw_codec.h"
#include "zkw_inband.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"

#define HELD_HEADER 5 /* before each held frame: its opcode (4 bytes) and its pending flags (1) */

/* Copies a frame into a session buffer (the withheld barrier's request and
 * reply). */
static int keep_frame(struct zkw_buf *b, const uint8_t *frame, size_t len) {
  b->len = 0;
  return zkw_buf_append(b, frame, len) ? ZKW_E_NOSPACE : 0;
}

int zkw_replies_barrier_request(struct zkw_session *s, const uint8_t *frame, size_t len) {
  if (zkw_buf_append(&s->barrier_frames, frame, len)) return ZKW_E_NOSPACE;
  s->barriers++;
  return 0;
}

/* The oldest barrier request kept: its reply has come. Into s->barrier_frame
 * (keep) or gone. */
static int next_barrier_request(struct zkw_session *s, bool keep) {
  struct zkw_buf *q = &s->barrier_frames;
  if (q->len < 4) return ZKW_E_VALUE; /* not reached: one kept per barrier entry */
  size_t n = 4 + (size_t)zkw_load_be32(q->data);
  int rc = keep ? keep_frame(&s->barrier_frame, q->data, n) : 0;
  zkw_buf_consume(q, n);
  if (!q->len) zkw_buf_release(q);
  return rc;
}

/* The client gets this frame now (or as the policy rewrites it): the
 * relay's bookkeeping and the policy's verdict. at_barrier: the policy may
 * withhold a barrier's reply. Returns the verdict (ZKW_WITHHOLD: the reply
 * is kept in s->held_reply and the session holds what comes after it) or a
 * negative codec status. */
static int deliver(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                   uint8_t pflags, bool may_withhold) {
  const uint8_t *body = frame + 4;
  int32_t xid = dlen >= 4 ? (int32_t)zkw_load_be32(body) : 0;
  struct zkw_reply rep;
  int rc = zkw_decode_reply(body, dlen, op, &rep);
  if (rc) {
    zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: %s (xid %d, %s)", zkw_strerror(rc), xid,
             zkw_op_name(op));
    return rc;
  }
  const struct zkw_hooks *hooks = s->srv->hooks;
  if (op == ZKW_OP_NOTIFICATION && hooks && hooks->on_notification &&
      hooks->on_notification(s, &rep.event) == ZKW_DROP)
    return ZKW_DROP; /* a watch of the policy's own: not the client's */
  zkw_metrics_reply(op);
  if (op == ZKW_OP_NOTIFICATION) {
    zkw_watches_event(&s->watches, &rep.event);
  } else {
    if (xid != ZKW_XID_PING && xid != ZKW_XID_AUTH && rep.zxid > s->last_zxid) s->last_zxid = rep.zxid;
    if (s->watches.armed_head) zkw_watches_reply(&s->watches, xid, rep.err);
    zkw_inband_client_reply(s, op);
  }
  if (xid < 0) return ZKW_FORWARD;
  bool at_barrier = may_withhold && (pflags & ZKW_PENDING_BARRIER);
  if (pflags & ZKW_PENDING_BARRIER) {
    rc = next_barrier_request(s, at_barrier);
    if (rc) return rc;
  }
  if (at_barrier) { /* the policy sees the barrier it may withhold (zkw_session_barrier) */
    s->barrier = true;
    s->barrier_replayed = false;
    if (++s->barrier_gen == 0) s->barrier_gen = 1; /* 0 means none */
    s->barrier_xid = xid;
    s->barrier_op = op;
  }
  unsigned flags =
      (at_barrier ? ZKW_REPLY_AT_BARRIER : 0u) | (pflags & ZKW_PENDING_MARK ? ZKW_REPLY_MARKED : 0u);
  rc = hooks && hooks->on_reply ? hooks->on_reply(s, &rep, op, flags, &s->scratch) : ZKW_FORWARD;
  if (at_barrier && rc == ZKW_WITHHOLD) {
    if (!keep_frame(&s->held_reply, frame, flen)) return ZKW_DROP; /* later replies wait behind it */
    rc = ZKW_E_NOSPACE;
  }
  if (at_barrier) {
    s->barrier = false;
    zkw_buf_release(&s->barrier_frame);
  }
  if (rc < 0) return rc;
  if (pflags & ZKW_PENDING_REPLAY) { /* the withheld barrier is answered: what is held behind it goes next */
    s->barrier = false;
    zkw_buf_release(&s->barrier_frame);
    s->flush_due = true;
  }
  return rc == ZKW_WITHHOLD ? ZKW_FORWARD : rc;
}

/* Holds a frame behind the withheld barrier. */
static int hold(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t op, uint8_t pflags) {
  uint8_t head[HELD_HEADER];
  zkw_store_be32(head, (uint32_t)op);
  head[4] = pflags;
  if (zkw_buf_append(&s->held_replies, head, sizeof head) || zkw_buf_append(&s->held_replies, frame, flen))
    return ZKW_E_NOSPACE;
  if (s->held_replies.len > ZKW_HIGH_WATER) { /* the client's requests wait until these go */
    s->client.paused = true;
    zkw_side_stop_reading(&s->client);
  }
  return ZKW_DROP;
}

int zkw_replies_take(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                     uint8_t pflags) {
  int32_t xid = dlen >= 4 ? (int32_t)zkw_load_be32(frame + 4) : 0;
  bool ordered = op == ZKW_OP_NOTIFICATION || xid > 0; /* pings' and auth replies pass */
  if ((s->barrier || s->held_replies.len) && ordered && !(pflags & ZKW_PENDING_REPLAY))
    return hold(s, frame, flen, op, pflags);
  return deliver(s, frame, flen, dlen, op, pflags, true);
}

/* Sends one frame the client gets now (verdict from deliver). */
static int send_delivered(struct zkw_session *s, int verdict, const uint8_t *frame, size_t flen) {
  int rc = 0;
  if (verdict == ZKW_FORWARD) rc = zkw_side_send(&s->client, frame, flen);
  if (verdict == ZKW_REPLACE) {
    rc = zkw_side_send(&s->client, s->scratch.data, s->scratch.len);
    zkw_buf_release(&s->scratch);
  }
  if (rc) zkw_session_write_failed(s, &s->client, rc);
  return rc ? -1 : 0;
}

/* Delivers held frames in order, while nothing is withheld (may_withhold:
 * the policy may withhold a barrier's reply again). */
static int flush_held(struct zkw_session *s, bool may_withhold) {
  size_t off = 0;
  struct zkw_buf *q = &s->held_replies;
  int rc = 0;
  while (!s->barrier && off + HELD_HEADER + 4 <= q->len && s->phase != ZKW_PHASE_CLOSING) {
    int32_t op = (int32_t)zkw_load_be32(q->data + off);
    uint8_t pflags = q->data[off + 4];
    const uint8_t *frame = q->data + off + HELD_HEADER;
    size_t flen = 4 + (size_t)zkw_load_be32(frame);
    off += HELD_HEADER + flen;
    int v = deliver(s, frame, flen, flen - 4, op, pflags, may_withhold);
    if (v < 0) {
      zkw_metrics_decode_error(0);
      s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
      zkw_session_close(s, ZKW_LOG_WARN,
                        "protocol error from upstream: %s (a reply held behind a lock request)",
                        zkw_strerror(v));
      rc = -1;
      break;
    }
    if (v != ZKW_DROP && send_delivered(s, v, frame, flen)) {
      rc = -1;
      break;
    }
  }
  if (s->phase == ZKW_PHASE_CLOSING) return -1;
  zkw_buf_consume(q, off);
  if (!q->len) zkw_buf_release(q);
  if (s->client.paused && q->len < ZKW_LOW_WATER && zkw_side_unsent(&s->upstream) < ZKW_LOW_WATER &&
      !s->held) {
    s->client.paused = false;
    zkw_side_start_reading(&s->client);
  }
  return rc;
}

int zkw_replies_flush(struct zkw_session *s) {
  s->flush_due = false;
  return flush_held(s, true);
}

/* ---- the back-channel (zkw_session.h) ---- */

uint32_t zkw_session_barrier(const struct zkw_session *s) {
  return s->barrier ? s->barrier_gen : 0;
}

int zkw_session_replay(struct zkw_session *s, uint32_t barrier) {
  if (s->phase == ZKW_PHASE_CLOSING || !barrier || zkw_session_barrier(s) != barrier || !s->barrier_frame.len)
    return -1;
  /* The replay answers the client's request: same xid, same bytes. */
  s->barrier_replayed = true;
  zkw_buf_release(&s->held_reply);
  if (zkw_pending_push_flags(&s->pending, s->barrier_xid, s->barrier_op, ZKW_PENDING_REPLAY) ||
      zkw_side_send(&s->upstream, s->barrier_frame.data, s->barrier_frame.len)) {
    zkw_session_close(s, ZKW_LOG_WARN, "cannot replay the request after a reclaim");
    return -1;
  }
  return 0; /* its reply comes through zkw_replies_take */
}

void zkw_session_deliver(struct zkw_session *s, uint32_t barrier) {
  if (s->phase == ZKW_PHASE_CLOSING || !barrier || zkw_session_barrier(s) != barrier) return;
  int rc = zkw_side_send(&s->client, s->held_reply.data, s->held_reply.len);
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->barrier_frame);
  s->barrier = false;
  if (rc) {
    zkw_session_write_failed(s, &s->client, rc);
    return;
  }
  if (flush_held(s, true) == 0) s->resume(s);
}

const uint8_t *zkw_session_barrier_request(const struct zkw_session *s, size_t *len) {
  if (s->barrier_frame.len < 4) return NULL;
  *len = s->barrier_frame.len - 4;
  return s->barrier_frame.data + 4;
}

bool zkw_session_in_barrier(const struct zkw_session *s) {
  return s->barrier || s->barriers > 0;
}

/* ---- session moves ---- */

void zkw_replies_connection_lost(struct zkw_session *s) {
  if (!s->barrier) return;
  s->barrier_lost = true; /* the withheld reply, or its replay in flight: its answer is lost */
  s->barrier = false;
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->barrier_frame);
}

int zkw_replies_restore(struct zkw_session *s,
                        int (*answer)(struct zkw_session *s, int32_t xid, int32_t op)) {
  if (s->barrier_lost) {
    s->barrier_lost = false;
    if (answer(s, s->barrier_xid, s->barrier_op)) return -1;
  }
  if (flush_held(s, false)) return -1;
  /* The barrier requests still in flight get their CONNECTIONLOSS from the ring. */
  zkw_buf_release(&s->barrier_frames);
  s->barriers = 0;
  return 0;
}

void zkw_replies_free(struct zkw_session *s) {
  zkw_buf_release(&s->barrier_frames);
  zkw_buf_release(&s->barrier_frame);
  zkw_buf_release(&s->held_reply);
  zkw_buf_release(&s->held_replies);
}
