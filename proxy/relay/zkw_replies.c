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
  if (q->len < 4 || !s->barriers) return ZKW_E_VALUE; /* not reached: one kept per barrier entry */
  size_t n = 4 + (size_t)zkw_load_be32(q->data);
  int rc = keep ? keep_frame(&s->barrier_frame, q->data, n) : 0;
  zkw_buf_consume(q, n);
  if (!q->len) zkw_buf_release(q);
  s->barriers--;
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

/* The relay's bookkeeping, as the frame comes from the server (held or
 * not): the watches it arms or fires, the last zxid the client will have
 * seen (a session move reconnects with both), the policy's in-band requests
 * waiting for the client's reply. Returns ZKW_DROP for a notification of a
 * watch of the policy's own (not the client's), else 0. */
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
  if (rep->xid != ZKW_XID_PING && rep->xid != ZKW_XID_AUTH && rep->zxid > s->last_zxid)
    s->last_zxid = rep->zxid;
  if (s->watches.armed_head) zkw_watches_reply(&s->watches, rep->xid, rep->err);
  zkw_inband_client_reply(s, op);
  return 0;
}

/* The policy's verdict on a frame the client gets now (or as the policy
 * rewrites it). may_withhold: the policy may withhold a barrier's reply.
 * Returns the verdict (ZKW_DROP when withheld: the reply is kept in
 * s->held_reply and later ones are held behind it) or a negative status. */
static int verdict(struct zkw_session *s, const struct zkw_reply *rep, const uint8_t *frame, size_t flen,
                   int32_t op, uint8_t pflags, bool may_withhold) {
  if (rep->xid < 0) return ZKW_FORWARD; /* notifications, pings, auth, setWatches */
  bool at_barrier = may_withhold && (pflags & ZKW_PENDING_BARRIER);
  int rc;
  if (pflags & ZKW_PENDING_BARRIER) {
    rc = next_barrier_request(s, at_barrier);
    if (rc) return rc;
  }
  if (at_barrier) { /* the policy sees the barrier it may withhold (zkw_session_barrier) */
    s->barrier = true;
    if (++s->barrier_gen == 0) s->barrier_gen = 1; /* 0 means none */
    s->barrier_xid = rep->xid;
    s->barrier_op = op;
  }
  const struct zkw_hooks *hooks = s->srv->hooks;
  unsigned flags =
      (at_barrier ? ZKW_REPLY_AT_BARRIER : 0u) | (pflags & ZKW_PENDING_MARK ? ZKW_REPLY_MARKED : 0u);
  rc = hooks && hooks->on_reply ? hooks->on_reply(s, rep, op, flags, &s->scratch) : ZKW_FORWARD;
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

/* Holds a frame behind the withheld barrier; the client is not read while
 * more than ZKW_HIGH_WATER is held (zkw_session_read_client). */
static int hold(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t op, uint8_t pflags) {
  uint8_t head[HELD_HEADER];
  zkw_store_be32(head, (uint32_t)op);
  head[4] = pflags;
  if (zkw_buf_append(&s->held_replies, head, sizeof head) || zkw_buf_append(&s->held_replies, frame, flen))
    return ZKW_E_NOSPACE;
  if (s->held_replies.len > ZKW_HIGH_WATER) {
    s->client.paused = true;
    zkw_side_stop_reading(&s->client);
  }
  return ZKW_DROP;
}

int zkw_replies_take(struct zkw_session *s, const uint8_t *frame, size_t flen, size_t dlen, int32_t op,
                     uint8_t pflags) {
  struct zkw_reply rep;
  int rc = decode(s, frame, dlen, op, &rep);
  if (!rc) rc = note(s, &rep, op);
  if (rc) return rc;
  /* In order behind a withheld barrier: everything but pings' and auth
   * replies (clients match those by their fixed xid). */
  bool ordered = rep.xid != ZKW_XID_PING && rep.xid != ZKW_XID_AUTH;
  if ((s->barrier || s->held_replies.len) && ordered && !(pflags & ZKW_PENDING_REPLAY))
    return hold(s, frame, flen, op, pflags);
  return verdict(s, &rep, frame, flen, op, pflags, true);
}

/* Sends a held frame the client gets now, as the verdict says. */
static int send_delivered(struct zkw_session *s, int verdict, const uint8_t *frame, size_t flen) {
  if (verdict == ZKW_REPLACE) frame = s->scratch.data, flen = s->scratch.len;
  int rc = zkw_side_send(&s->client, frame, flen);
  zkw_metrics_bytes(false, flen);
  zkw_buf_release(&s->scratch);
  if (rc) zkw_session_write_failed(s, &s->client, rc);
  return rc ? -1 : 0;
}

/* Delivers held frames in order, while nothing is withheld (may_withhold:
 * the policy may withhold a barrier's reply again). lost: a session move's
 * restore, which answers each held barrier reply with CONNECTIONLOSS
 * instead (the policy cannot act on it any more: a reply it would have
 * withheld for a reclaim must not reach the client as it is; the client
 * retries, and the retry meets the policy). */
static int flush_held(struct zkw_session *s, bool may_withhold, zkw_replies_answer_fn *lost) {
  size_t off = 0;
  struct zkw_buf *q = &s->held_replies;
  int rc = 0;
  while (!s->barrier && off + HELD_HEADER + 4 <= q->len && s->phase != ZKW_PHASE_CLOSING) {
    int32_t op = (int32_t)zkw_load_be32(q->data + off);
    uint8_t pflags = q->data[off + 4];
    const uint8_t *frame = q->data + off + HELD_HEADER;
    size_t flen = 4 + (size_t)zkw_load_be32(frame);
    off += HELD_HEADER + flen;
    struct zkw_reply rep;
    int v = decode(s, frame, flen - 4, op, &rep); /* decoded as it came: not reached */
    if (!v && lost && (pflags & ZKW_PENDING_BARRIER)) {
      if (lost(s, rep.xid, op, pflags)) {
        rc = -1;
        break;
      }
      continue;
    }
    if (!v) v = verdict(s, &rep, frame, flen, op, pflags, may_withhold);
    if (v < 0) {
      if (v == ZKW_E_NOSPACE) {
        zkw_session_out_of_memory(s, "a reply held behind a lock request");
      } else {
        zkw_metrics_decode_error(0);
        s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
        zkw_session_close(s, ZKW_LOG_WARN,
                          "protocol error from upstream: %s (a reply held behind a lock request)",
                          zkw_strerror(v));
      }
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
  zkw_session_read_client(s);
  return rc;
}

int zkw_replies_flush(struct zkw_session *s) {
  s->flush_due = false;
  return flush_held(s, true, NULL);
}

/* ---- the back-channel (zkw_session.h) ---- */

uint32_t zkw_session_barrier(const struct zkw_session *s) {
  return s->barrier ? s->barrier_gen : 0;
}

int zkw_session_replay(struct zkw_session *s, uint32_t barrier) {
  if (s->phase == ZKW_PHASE_CLOSING || !barrier || zkw_session_barrier(s) != barrier || !s->barrier_frame.len)
    return -1;
  /* The replay answers the client's request: same xid, same bytes. */
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
  if (flush_held(s, true, NULL) == 0) s->resume(s);
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

int zkw_replies_restore(struct zkw_session *s, zkw_replies_answer_fn *answer) {
  if (s->barrier_lost) {
    s->barrier_lost = false;
    if (answer(s, s->barrier_xid, s->barrier_op, 0)) return -1;
  }
  if (flush_held(s, false, answer)) return -1;
  /* The barrier requests still in flight get their CONNECTIONLOSS from the ring. */
  zkw_buf_release(&s->barrier_frames);
  s->barriers = 0;
  return 0;
}
