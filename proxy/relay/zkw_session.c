/* zkw_session.c: relaying and parsing one client connection's frames.
 *
 * Reading: each side reads into its `in` buffer; complete frames are parsed
 * and validated, then the run of complete frames is handed to the peer in one
 * write (uv_try_write straight from `in` when the peer has nothing queued,
 * else a copy into the peer's `out`). The partial tail stays in `in`.
 * Backpressure: a side stops reading while its peer has more than
 * ZKW_HIGH_WATER bytes unsent, and resumes below ZKW_LOW_WATER. */
#include "zkw_fault.h"
#include "zkw_session.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_inband.h"
#include "zkw_metrics.h"
#include "zkw_move.h"
#include "zkw_mutate.h"
#include "zkw_pair.h"
#include "zkw_replies.h"
#include "zkw_text.h"
#include "zkw_tls.h"
#include "zkw_upstream.h"
#include "zkw_journal.h"

/* Monotonic ns of the last byte read from an upstream server (0: never). */
static uint64_t upstream_seen_ns;

uint64_t zkw_session_upstream_seen_ns(void) {
  return upstream_seen_ns;
}

static void process(struct zkw_side *side);
static void upstream_ready(struct zkw_session *s);

/* The opcode a ping passed ahead of the frames it waited behind is marked
 * with in the client's buffer (pass_pings; no client sends it). */
#define PASSED_PING 0x7ffffffe

/* The client gave up on a session whose upstream had gone silent with a
 * request or ping outstanding for half the session timeout (a client's read
 * timeout is two thirds of it): the server is likely paused or cut off, so
 * the client's next connection should go to another server first, as it
 * would direct. */
static void suspect_silent_upstream(struct zkw_session *s) {
  if (s->phase != ZKW_PHASE_ACTIVE || s->close_sent || !s->upstream.connected || s->timeout <= 0) return;
  if ((!s->pings && !s->pending.count) || s->upstream.paused || s->upstream.capped)
    return; /* not reading it: not its silence */
  uint64_t silent = uv_now(s->srv->loop) - s->up_last_read_ms;
  if (silent < (uint64_t)s->timeout / 2) return;
  zkw_upstream_suspect(s, (uint64_t)s->timeout);
  zkw_slog(s, ZKW_LOG_INFO,
           "upstream %s silent for %llu ms with requests outstanding: tried after the others "
           "for %d ms",
           s->up_name, (unsigned long long)silent, s->timeout);
}

/* Ciphertext read from a TLS side: its plaintext goes to side->in, and what
 * OpenSSL has to answer (post-handshake records) to the socket. Returns 0,
 * UV_EOF on close_notify, or a negative error (the session is closed). */
static int tls_read(struct zkw_side *side, const uv_buf_t *buf, size_t n) {
  struct zkw_session *s = side->s;
  int rc = zkw_tls_feed(side->tls, buf->base, n);
  if (rc == 0) rc = zkw_tls_decrypt(side->tls, &side->in);
  if (rc == ZKW_TLS_CLOSED) return UV_EOF;
  if (rc == ZKW_TLS_ERROR) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    if (s->phase == ZKW_PHASE_CONNECTING && !s->response_seen) {
      /* TLS 1.3: a server refusing our certificate says so after its side
       * of the handshake; still a failed handshake, this server comes last. */
      ZKW_METRIC_INC(tls_handshake_failures);
      zkw_tls_note(s->up_name, zkw_tls_conn_error(side->tls));
      zkw_upstream_suspect(s, s->srv->cfg->connect_timeout_ms);
      s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
    }
    if (side == &s->upstream && s->response_seen && zkw_move_start(s, "failed (TLS error)", false))
      return UV_EPROTO;
    zkw_session_close(s, ZKW_LOG_WARN, "TLS error from %s: %s", side->name, zkw_tls_conn_error(side->tls));
    return UV_EPROTO;
  }
  if (rc == 0 && zkw_tls_take_output(side->tls, &side->out) != 0) rc = UV_ENOMEM;
  /* The server's first bytes: it took our certificate too (TLS 1.3 says so
   * only now). */
  if (rc == 0 && side->in.len && s->phase == ZKW_PHASE_CONNECTING && !s->response_seen)
    zkw_tls_note(s->up_name, NULL);
  if (rc < 0) {
    s->close_class = ZKW_CLOSE_IO_ERROR;
    zkw_session_close(s, ZKW_LOG_ERROR, "out of memory reading from %s", side->name);
    return rc;
  }
  zkw_side_flush(side);
  return 0;
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  struct zkw_side *side = stream->data;
  struct zkw_session *s = side->s;
  if (nread > 0 && side->tls) {
    nread = tls_read(side, buf, (size_t)nread);
    if (nread == UV_EPROTO || nread == UV_ENOMEM) return; /* closed */
    s->up_last_read_ms = uv_now(s->srv->loop);
    process(side); /* what came before a close_notify too */
  } else if (nread > 0) {
    if (side == &s->upstream)
      s->up_last_read_ms = uv_now(s->srv->loop);
    else /* logged before it is handled (zkw_journal.h) */
      zkw_journal_client_read(s, side->in.data + side->in.len, (size_t)nread);
    side->in.len += (size_t)nread;
    process(side);
  }
  /* The server's close or reset is its loss, also in the middle of a frame
   * (a server shutting down discards the rest of a large reply it was
   * writing): the partial frame goes with the connection, its request gets
   * CONNECTIONLOSS. A frame that does not decode is a protocol error
   * instead (process). UV_ENOBUFS is zkwarden's own allocation failing
   * (alloc_cb), not the server's loss. */
  if (nread < 0 && nread != UV_ENOBUFS && side == &s->upstream && s->phase == ZKW_PHASE_ACTIVE &&
      zkw_move_start(s,
                     nread != UV_EOF ? uv_strerror((int)nread)
                     : side->in.len  ? "closed the connection in the middle of a frame"
                                     : "closed the connection",
                     false))
    return;
  if (nread < 0) {
    if (side == &s->client) suspect_silent_upstream(s);
    /* After closeSession the server closes first: still the client's doing. */
    s->close_class = nread == UV_ENOBUFS                   ? ZKW_CLOSE_IO_ERROR
                     : side == &s->client || s->close_sent ? ZKW_CLOSE_CLIENT_CLOSED
                                                           : ZKW_CLOSE_UPSTREAM_CLOSED;
    if (nread == UV_EOF)
      zkw_session_close(s, ZKW_LOG_INFO, "%s closed the connection%s", side->name,
                        side->in.len                ? " in the middle of a frame"
                        : s->close_sent             ? " after closeSession"
                        : s->phase == ZKW_PHASE_RAW ? " (four-letter word done)"
                                                    : "");
    else if (nread == UV_ENOBUFS)
      zkw_session_close(s, ZKW_LOG_ERROR, "out of memory reading from %s", side->name);
    else
      zkw_session_close(s, ZKW_LOG_INFO, "read from %s failed: %s", side->name, uv_strerror((int)nread));
  }
  if (side->in.len == 0) zkw_buf_release(&side->in);
}

/* ---- frames ---- */

/* The server took the ConnectRequest and never answered (paused, or the
 * network went silent after the TCP connect): give up as the client would
 * have, so that it comes back at once and is sent to the next server. */
static void upstream_handshake_timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->phase != ZKW_PHASE_CONNECTING || s->response_seen) return;
  ZKW_METRIC_INC(upstream_connect_failures);
  zkw_upstream_suspect(s, (uint64_t)s->up_handshake_ms * (uint64_t)s->srv->cfg->upstream_count);
  s->close_class = ZKW_CLOSE_UPSTREAM_UNREACHABLE;
  zkw_session_close(s, ZKW_LOG_WARN, "upstream %s: no answer to the handshake within %u ms", s->up_name,
                    s->up_handshake_ms);
}

/* Bound on the wait for a ConnectResponse: what the client would give each
 * server direct (its session timeout over the number of servers), at least
 * ZKWARDEN_CONNECT_TIMEOUT_MS. Through zkwarden the client sees one address
 * and would wait its whole session timeout on a silent server. */
static uint32_t upstream_handshake_ms(const struct zkw_session *s, const uint8_t *body, size_t len) {
  struct zkw_connect_req req;
  int32_t requested = zkw_decode_connect_req(body, len, &req) == ZKW_OK ? req.timeout : 0;
  uint32_t n = (uint32_t)(s->srv->cfg->upstream_count > 0 ? s->srv->cfg->upstream_count : 1);
  uint32_t ms = requested > 0 ? (uint32_t)requested / n : 0;
  return ms > s->srv->cfg->connect_timeout_ms ? ms : s->srv->cfg->connect_timeout_ms;
}

/* Handles one client frame (the body starts at frame + 4): the relay's own
 * checks (reserved xids, pings, auth), then the policy's verdict
 * (zkw_hooks.h: forward, replace with s->scratch, drop, hold; a barrier).
 * Returns the verdict, or a negative codec status. */
static int on_client_frame(struct zkw_session *s, const uint8_t *frame, size_t flen, uint64_t end) {
  const uint8_t *body = frame + 4;
  size_t len = flen - 4;
  if (s->phase == ZKW_PHASE_HANDSHAKE) {
    s->phase = ZKW_PHASE_CONNECTING;
    s->up_handshake_ms = upstream_handshake_ms(s, body, len); /* checked by client_hello */
    uv_timer_start(&s->timer, upstream_handshake_timeout_cb, s->up_handshake_ms, 0);
    return ZKW_FORWARD;
  }
  if (len == ZKW_MIN_REQUEST && (int32_t)zkw_load_be32(body) == ZKW_XID_PING &&
      (int32_t)zkw_load_be32(body + 4) == PASSED_PING)
    return ZKW_DROP; /* a ping pass_pings sent on already */
  struct zkw_request req;
  int rc = zkw_decode_request(body, len, &req);
  if (rc) {
    zkw_slog(s, ZKW_LOG_WARN, "bad request from client: %s (xid %d, %s)", zkw_strerror(rc),
             len >= 8 ? (int32_t)zkw_load_be32(body) : 0,
             len >= 8 ? zkw_op_name((int32_t)zkw_load_be32(body + 4)) : "-");
    return rc;
  }
  if (req.xid == ZKW_XID_PING || req.type == ZKW_OP_PING) {
    if (req.xid != ZKW_XID_PING || req.type != ZKW_OP_PING) goto reserved;
    zkw_metrics_request(req.type);
    s->pings++;
    return ZKW_FORWARD;
  }
  if (req.xid == ZKW_XID_NOTIFICATION) goto reserved;
  if (req.xid == ZKW_XID_AUTH) {
    if (req.type != ZKW_OP_AUTH) goto reserved;
    zkw_metrics_request(req.type);
    zkw_move_keep_auth(s, frame, flen);
    zkw_journal_session(s); /* the auth packets a successor replays */
    s->auths++;
    return ZKW_FORWARD;
  }
  int action = ZKW_FORWARD;
  const struct zkw_hooks *hooks = s->srv->hooks;
  if (hooks && hooks->on_request) {
    action = hooks->on_request(s, &req, frame, flen, &s->scratch);
    if (action < 0) return action;
    if ((action & ZKW_VERDICT_MASK) == ZKW_HOLD) return ZKW_HOLD;
    if ((action & ZKW_VERDICT_MASK) == ZKW_DROP) return ZKW_DROP;
  }
  uint8_t pflags = action & ZKW_MARK ? ZKW_PENDING_MARK : 0;
  if (action & (ZKW_KEEP | ZKW_BARRIER)) {
    pflags |= ZKW_PENDING_KEPT | (action & ZKW_BARRIER ? ZKW_PENDING_BARRIER : 0);
    rc = (action & ZKW_VERDICT_MASK) == ZKW_REPLACE
             ? zkw_replies_keep_request(s, s->scratch.data, s->scratch.len)
             : zkw_replies_keep_request(s, frame, flen);
    if (rc) return rc;
  }
  action &= ZKW_VERDICT_MASK;
  zkw_metrics_request(req.type);
  if (req.type == ZKW_OP_CLOSE_SESSION || req.type == ZKW_OP_SASL) zkw_journal_not_durable(s);
  if (req.type == ZKW_OP_CLOSE_SESSION) s->close_sent = true;
  if (req.type == ZKW_OP_SASL) s->sasl = true;
  if (zkw_pending_push_flags(&s->pending, req.xid, req.type, pflags)) return ZKW_E_NOSPACE;
  zkw_journal_pushed(s, req.xid, req.type, pflags, false, end);
  zkw_watches_request(&s->watches, &req);
  zkw_mutate_request(s, &req, frame, flen);
  if (pflags & ZKW_PENDING_BARRIER) { /* the client's next request waits for its answer */
    s->barrier_wait = true;
    s->barrier_wait_counted = false;
  }
  return action;
reserved:
  zkw_slog(s, ZKW_LOG_WARN, "bad request from client: xid %d is reserved and cannot carry %s", req.xid,
           zkw_op_name(req.type));
  return ZKW_E_VALUE;
}

static int on_connect_response(struct zkw_session *s, const uint8_t *body, size_t len) {
  struct zkw_connect_resp resp;
  int rc = zkw_decode_connect_resp(body, len, &resp);
  if (rc) return rc;
  if (!s->response_seen) {
    s->response_seen = true;
    uv_timer_stop(&s->timer); /* the handshake bound */
    zkw_upstream_answered(s);
    s->session_id = resp.session_id;
    s->timeout = resp.timeout;
    s->read_only = resp.read_only;
    s->passwd_len = resp.passwd.len > 0 ? (uint8_t)(resp.passwd.len < 16 ? resp.passwd.len : 16) : 0;
    if (s->passwd_len) memcpy(s->passwd, resp.passwd.p, s->passwd_len);
    zkw_metrics_session(resp.timeout > 0);
    if (resp.timeout <= 0)
      zkw_slog(s, ZKW_LOG_INFO, "session rejected by %s: expired or invalid", s->up_name);
    else
      zkw_slog(s, ZKW_LOG_INFO, "session established via %s, timeout %d ms%s", s->up_name, resp.timeout,
               resp.read_only ? ", read-only" : "");
    if (s->srv->hooks && s->srv->hooks->on_connect_response) s->srv->hooks->on_connect_response(s, &resp);
  }
  s->phase = ZKW_PHASE_ACTIVE;
  return ZKW_FORWARD;
}

/* The reply fault point (zkw_fault.h), one per class of upstream frame: a
 * frame cut after its xid, which does not decode. */
static size_t corrupt(size_t len, const char *what) {
  return ZKW_FAULT_AT(reply, __FILE__, what) && len > 4 ? 4 : len;
}

/* Handles one upstream frame (the body starts at frame + 4): matched to its
 * request, then the policy's verdict on a reply to the client's request.
 * Returns the verdict, or a negative codec status. */
static int on_upstream_frame(struct zkw_session *s, const uint8_t *frame, size_t flen) {
  const uint8_t *body = frame + 4;
  size_t len = flen - 4;
  if (s->phase == ZKW_PHASE_CONNECTING) return on_connect_response(s, body, corrupt(len, "ConnectResponse"));
  if (s->moving) return zkw_move_frame(s, body, corrupt(len, "move"));
  int32_t xid = (int32_t)zkw_load_be32(body);
  int32_t op = ZKW_OP_NOTIFICATION;
  uint8_t pflags = 0;
  int rc;
  if (xid == ZKW_XID_PING) {
    if (!s->pings) goto unmatched;
    s->pings--;
    op = ZKW_OP_PING;
    len = corrupt(len, "ping");
  } else if (xid == ZKW_XID_AUTH) {
    if (!s->auths) goto unmatched;
    s->auths--;
    op = ZKW_OP_AUTH;
    len = corrupt(len, "auth");
  } else if (xid != ZKW_XID_NOTIFICATION) {
    int32_t expected;
    if (s->pending.count && zkw_pending_at(&s->pending, 0).xid != xid)
      zkw_journal_not_durable(s); /* an auth or SASL reply overtook: not kept in order */
    if (zkw_pending_match(&s->pending, xid, &op, &expected) != 0) {
      if (s->pending.count)
        zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: xid %d out of order, expected xid %d (%s)", xid,
                 expected, zkw_op_name(zkw_pending_at(&s->pending, 0).op));
      else
        goto unmatched;
      return ZKW_E_VALUE;
    }
    s->jr.popped++;
    if (s->pending.last_owned) { /* zkwarden's own request: consumed, never forwarded */
      rc = zkw_inband_reply(s, s->pending.last_owned, body, corrupt(len, "in-band"), op);
      return rc < 0 ? rc : ZKW_DROP;
    }
    zkw_metrics_latency(op, s->pending.now - s->pending.last_t0);
    pflags = s->pending.last_flags;
    len = corrupt(len, pflags & ZKW_PENDING_BARRIER ? "barrier" : "reply");
  } else {
    len = corrupt(len, "notification");
  }
  return zkw_mutate_reply(s, frame, flen, op, zkw_replies_take(s, frame, flen, len, op, pflags));
unmatched:
  zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream: xid %d answers no outstanding request", xid);
  return ZKW_E_VALUE;
}

/* Before any upstream connection: waits for a four-letter word or a whole,
 * valid ConnectRequest, then connects upstream. An idle or garbage connection
 * thus never takes a connection slot on the server (ZooKeeper limits them per
 * client address). The ConnectRequest stays in the buffer and is forwarded,
 * parsed again, once the upstream is up. */
static void client_hello(struct zkw_session *s) {
  struct zkw_side *side = &s->client;
  size_t flen;
  if (side->in.len < 4) return;
  const char *word = zkw_four_letter_word(side->in.data);
  if (word) {
    zkw_slog(s, ZKW_LOG_DEBUG, "four-letter word '%s': relaying raw", word);
    s->phase = ZKW_PHASE_RAW;
    zkw_journal_not_durable(s);
  } else {
    int rc = zkw_frame_next(side->in.data, side->in.len, ZKW_CONNECT_REQ_MIN, ZKW_CONNECT_REQ_MAX, &flen);
    if (rc == ZKW_AGAIN) return;
    struct zkw_connect_req req;
    if (rc == ZKW_OK) rc = zkw_decode_connect_req(side->in.data + 4, flen - 4, &req);
    if (rc != ZKW_OK) {
      zkw_metrics_decode_error(1);
      s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
      zkw_session_close(s, ZKW_LOG_WARN, "protocol error from client: bad handshake: %s (frame length %d)",
                        zkw_strerror(rc), (int32_t)zkw_load_be32(side->in.data));
      return;
    }
    zkw_slog(s, ZKW_LOG_DEBUG, "connect request: session 0x%llx, timeout %d ms, read-only %d",
             (unsigned long long)req.session_id, req.timeout, req.read_only);
    s->ro_requested = req.read_only;
    s->last_zxid = req.last_zxid_seen;
    if (s->srv->hooks && s->srv->hooks->on_connect_request &&
        s->srv->hooks->on_connect_request(s, &req) == ZKW_HOLD) {
      /* Until zkw_session_resume, within the policy's own bound (zkw_hooks.h):
       * neither the handshake timer nor a flood's displacement ends it. */
      s->held = true;
      uv_timer_stop(&s->timer);
      zkw_side_stop_reading(side);
      return;
    }
  }
  uv_timer_stop(&s->timer);
  s->upstream_started = true;
  zkw_side_stop_reading(side);
  zkw_upstream_connect(s, upstream_ready, NULL);
}

static void handshake_timeout_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  s->close_class = ZKW_CLOSE_HANDSHAKE_TIMEOUT;
  zkw_session_close(s, ZKW_LOG_WARN, "client sent no handshake within %u ms (%zu bytes received)",
                    s->srv->cfg->handshake_timeout_ms, s->client.in.len);
}

/* Length bounds for the next frame from a side. */
static void frame_bounds(const struct zkw_session *s, bool from_client, uint32_t *min, uint32_t *max) {
  const struct zkw_config *cfg = s->srv->cfg;
  if (from_client) {
    *min = s->phase == ZKW_PHASE_HANDSHAKE ? ZKW_CONNECT_REQ_MIN : ZKW_MIN_REQUEST;
    *max = s->phase == ZKW_PHASE_HANDSHAKE ? ZKW_CONNECT_REQ_MAX : cfg->max_frame;
  } else {
    *min = s->phase == ZKW_PHASE_CONNECTING || (s->moving && !s->move_answered) ? ZKW_CONNECT_RESP_MIN
                                                                                : ZKW_MIN_REPLY;
    *max = cfg->max_reply_frame;
  }
}

/* Sends in[from, to) of a side to its peer. */
static int forward_run(struct zkw_side *side, size_t from, size_t to) {
  if (to <= from) return 0;
  struct zkw_session *s = side->s;
  struct zkw_side *peer = zkw_side_peer(side);
  int rc = zkw_side_send(peer, side->in.data + from, to - from);
  if (rc) {
    zkw_session_write_failed(s, peer, rc);
    return rc;
  }
  zkw_metrics_bytes(side == &s->client, to - from);
  return 0;
}

/* Sends s->scratch (a rewritten frame) to the peer of side. */
static int forward_scratch(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  struct zkw_side *peer = zkw_side_peer(side);
  int rc = zkw_side_send(peer, s->scratch.data, s->scratch.len);
  zkw_metrics_bytes(side == &s->client, s->scratch.len);
  zkw_buf_release(&s->scratch);
  if (rc) zkw_session_write_failed(s, peer, rc);
  return rc;
}

/* While the client's frames wait (a held request, or frames behind a
 * barrier), its pings go on from `from` on: the server answers them after
 * what it already has, and clients match ping replies by their xid (-2),
 * not by position. Without them a long fence, reclaim or sweep would run
 * out the client's read timeout (two thirds of the session timeout). Also
 * bounds what a waiting client has read. Returns 0, or -1 (closed). */
#define WAITING_READ_MAX (64 * 1024)

static int pass_pings(struct zkw_side *side, size_t from) {
  struct zkw_session *s = side->s;
  size_t off = from, flen;
  while (zkw_frame_next(side->in.data + off, side->in.len - off, ZKW_MIN_REQUEST, s->srv->cfg->max_frame,
                        &flen) == ZKW_OK) {
    const uint8_t *body = side->in.data + off + 4;
    bool ping = flen == 4 + ZKW_MIN_REQUEST && (int32_t)zkw_load_be32(body) == ZKW_XID_PING;
    if (ping && (int32_t)zkw_load_be32(body + 4) == PASSED_PING) {
      off += flen;
      continue;
    }
    if (!ping || (int32_t)zkw_load_be32(body + 4) != ZKW_OP_PING) {
      if (s->barrier_wait && !s->held && !s->barrier_wait_counted) { /* a request waits behind a barrier */
        s->barrier_wait_counted = true;
        ZKW_METRIC_INC(barrier_waits);
      }
      off += flen;
      continue;
    }
    int rc = zkw_side_send(&s->upstream, side->in.data + off, flen);
    if (rc) {
      zkw_session_write_failed(s, &s->upstream, rc);
      return -1;
    }
    zkw_metrics_request(ZKW_OP_PING);
    zkw_metrics_bytes(true, flen);
    s->pings++;
    /* Marked as passed, left in place: the client stream keeps its offsets
     * (zkw_journal.h); the frame loop drops it when it gets there. */
    zkw_store_be32(side->in.data + off + 8, (uint32_t)PASSED_PING);
    off += flen;
  }
  if (side->in.len - from > WAITING_READ_MAX) {
    side->paused = true;
    zkw_side_stop_reading(side);
  }
  return 0;
}

/* Parses every complete frame in side->in and forwards them to the peer:
 * runs of unchanged frames in one write, rewritten frames in between. */
static void process_side(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  struct zkw_side *peer = zkw_side_peer(side);
  bool from_client = side == &s->client;
  size_t off = 0, run = 0;

  if (s->phase == ZKW_PHASE_CLOSING || !side->in.len) return;
  /* One timestamp per read batch: request latency and upstream liveness. */
  s->pending.now = uv_hrtime();
  if (!from_client) upstream_seen_ns = s->pending.now;
  /* While the session moves, the client's frames (its pings too) wait. */
  if (from_client && s->moving) {
    if (side->in.len > WAITING_READ_MAX) zkw_side_stop_reading(side);
    return;
  }
  /* The client's bytes wait until the upstream connection is up. */
  if (from_client && !peer->connected) {
    if (!s->upstream_started)
      client_hello(s);
    else if (side->in.len > (size_t)s->srv->cfg->max_frame + 4)
      zkw_side_stop_reading(side);
    return;
  }
  if (s->phase == ZKW_PHASE_RAW) {
    off = side->in.len;
  } else {
    while (s->phase != ZKW_PHASE_CLOSING) {
      if (from_client && (s->held || s->barrier_wait)) { /* frames behind a held request or a barrier wait */
        if (forward_run(side, run, off)) return;
        run = off;
        if (pass_pings(side, off)) return;
        break;
      }
      uint32_t min, max;
      size_t flen;
      frame_bounds(s, from_client, &min, &max);
      int rc = zkw_frame_next(side->in.data + off, side->in.len - off, min, max, &flen);
      if (rc == ZKW_AGAIN) break;
      if (rc == ZKW_OK)
        rc = from_client ? on_client_frame(s, side->in.data + off, flen, s->jr.in_base + off + flen)
                         : on_upstream_frame(s, side->in.data + off, flen);
      if (rc < 0) {
        /* The good frames before the bad one were matched and counted: they
         * go on (flushed before the close), whatever the TCP segmentation. */
        if (forward_run(side, run, off)) return;
        if (rc == ZKW_E_NOSPACE) {
          zkw_session_out_of_memory(s, from_client ? "a request" : "a reply");
          return;
        }
        zkw_metrics_decode_error(from_client);
        s->close_class = ZKW_CLOSE_PROTOCOL_ERROR;
        int32_t n = side->in.len - off >= 4 ? (int32_t)zkw_load_be32(side->in.data + off) : 0;
        zkw_session_close(s, ZKW_LOG_WARN, "protocol error from %s: %s (frame length %d)", side->name,
                          rc == ZKW_E_FRAME_LONG && n < 0 ? "negative frame length" : zkw_strerror(rc), n);
        return;
      }
      if (rc == ZKW_HOLD) {
        s->held = true;
        continue; /* to the pings behind it */
      }
      /* What a successor needs, before anything is written (zkw_journal.h). */
      if (from_client)
        zkw_journal_client_handled(s, s->jr.in_base + off + flen);
      else if (rc == ZKW_FORWARD)
        zkw_journal_to_client(s, side->in.data + off, flen, s->jr.popped);
      else if (rc == ZKW_REPLACE)
        zkw_journal_to_client(s, s->scratch.data, s->scratch.len, s->jr.popped);
      else
        zkw_journal_consumed(s, s->jr.popped);
      if (rc == ZKW_REPLACE || rc == ZKW_DROP) {
        if (forward_run(side, run, off)) return;
        if (rc == ZKW_REPLACE && forward_scratch(side)) return;
        run = off + flen;
      }
      off += flen;
    }
  }
  if (s->phase == ZKW_PHASE_CLOSING) return;
  if (forward_run(side, run, off)) return;
  if (off) {
    zkw_buf_consume(&side->in, off);
    if (from_client) s->jr.in_base += off;
  }
  if (zkw_side_unsent(peer) > ZKW_HIGH_WATER) {
    side->paused = true;
    zkw_side_stop_reading(side);
  }
  zkw_side_check_cap(side);
}

/* Processes a side, and both sides again whenever a hold was lifted
 * meanwhile (never recursively). */
static void process(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  if (s->processing) {
    s->resume_pending = true;
    return;
  }
  s->processing = true;
  process_side(side);
  while (s->resume_pending && s->phase != ZKW_PHASE_CLOSING) {
    s->resume_pending = false;
    s->held = false; /* the held request is asked about again */
    zkw_session_read_client(s);
    process_side(&s->client);
    if (s->upstream.connected) process_side(&s->upstream);
  }
  s->processing = false;
  zkw_move_watch_silence(s);
}

void zkw_session_resume(struct zkw_session *s) {
  if (s->phase == ZKW_PHASE_CLOSING) return;
  s->resume_pending = true;
  if (!s->processing) process(&s->client);
}

void zkw_session_forbid_move(struct zkw_session *s) {
  s->no_move = true;
  if (s->moving) {
    s->close_class = ZKW_CLOSE_OTHER;
    zkw_session_close(s, ZKW_LOG_INFO, "its session is being fenced: not moved");
  }
}

struct zkw_session *zkw_session_first(struct zkw_server *srv) {
  return srv->sessions;
}

struct zkw_session *zkw_session_next(struct zkw_session *s) {
  return s->next;
}

static void upstream_ready(struct zkw_session *s) {
  zkw_side_start_reading(&s->upstream);
  zkw_side_start_reading(&s->client);
  if (s->client.in.len) process(&s->client);
}

/* ---- accept ---- */

static void format_peer(uv_tcp_t *tcp, char *out, size_t len) {
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sl) != 0)
    snprintf(out, len, "?");
  else
    zkw_text_sockaddr((const struct sockaddr *)&ss, out, len);
}

/* A write to the upstream met a socket error (zkw_pair.c): the server's
 * loss, as on a read. */
static void upstream_lost(struct zkw_session *s, int rc) {
  char why[96];
  snprintf(why, sizeof why, "write failed: %s", uv_strerror(rc));
  if (zkw_move_start(s, why, false)) return;
  s->close_class = s->close_sent ? ZKW_CLOSE_CLIENT_CLOSED : ZKW_CLOSE_UPSTREAM_CLOSED;
  zkw_session_close(s, ZKW_LOG_INFO, "write to upstream failed: %s", uv_strerror(rc));
}

/* What the session's modules do when it closes. */
static void session_closing(struct zkw_session *s) {
  zkw_inband_session_closed(s); /* zkwarden's own requests get a connection loss */
  zkw_move_session_closed(s);
}

struct zkw_session *zkw_session_new(struct zkw_server *srv) {
  size_t policy = srv->hooks ? srv->hooks->session_size : 0;
  struct zkw_session *s = zkw_calloc(1, sizeof *s + policy);
  if (!s) return NULL;
  s->srv = srv;
  s->internal = srv->internal;
  s->conn = ++srv->next_conn;
  s->client = (struct zkw_side){.s = s, .name = "client"};
  s->upstream = (struct zkw_side){.s = s, .name = "upstream"};
  s->on_read = read_cb;
  s->on_closing = session_closing;
  s->on_upstream_lost = upstream_lost;
  s->resume = zkw_session_resume;
  zkw_pending_init(&s->pending);
  uv_tcp_init(srv->loop, &s->client.tcp);
  s->client.tcp.data = &s->client;
  uv_timer_init(srv->loop, &s->timer);
  s->timer.data = s;
  uv_timer_init(srv->loop, &s->guard);
  s->guard.data = s;
  s->handles = 3;
  s->client.open = true;
  s->next = srv->sessions;
  if (srv->sessions) srv->sessions->prev = s;
  srv->sessions = s;
  srv->session_count++;
  srv->sessions_open++;
  return s;
}

/* A slot of the journal for a connection just accepted (zkw_journal.h),
 * numbered by the keeper link, which holds a duplicate of its socket; none
 * left: the connection is served, not durable. */
static void make_durable(struct zkw_session *s) {
  struct zkw_server *srv = s->srv;
  uint32_t slot = UINT32_MAX;
  uv_os_fd_t fd;
  if (srv->adopt && (uv_fileno((uv_handle_t *)&s->client.tcp, &fd) != 0 || srv->adopt(srv, fd, &slot) != 0))
    return;
  if (zkw_journal_take(srv->journal, s, slot) < 0 && slot != UINT32_MAX && srv->forget)
    srv->forget(srv, slot);
}

int zkw_session_accept(struct zkw_server *srv) {
  struct zkw_session *s = zkw_session_new(srv);
  if (!s) return UV_ENOMEM;
  int rc = uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&s->client.tcp);
  if (rc) {
    zkw_session_close(s, ZKW_LOG_WARN, "accept failed: %s", uv_strerror(rc));
    return rc;
  }
  s->client.connected = true;
  if (!srv->internal && srv->journal) make_durable(s);
  if (srv->internal) {
    /* zkwarden's own session through the internal relay: not a client. */
    uv_unref((uv_handle_t *)&s->client.tcp);
    uv_unref((uv_handle_t *)&s->timer);
    uv_unref((uv_handle_t *)&s->guard);
  } else {
    ZKW_METRIC_INC(connections_accepted);
  }
  uv_tcp_nodelay(&s->client.tcp, 1);
  format_peer(&s->client.tcp, s->peer, sizeof s->peer);
  if (srv->internal) {
    static const char tag[] = "internal/"; /* in its log lines */
    memmove(s->peer + sizeof tag - 1, s->peer, sizeof s->peer - sizeof tag);
    memcpy(s->peer, tag, sizeof tag - 1);
    s->peer[sizeof s->peer - 1] = 0;
  }
  zkw_slog(s, ZKW_LOG_DEBUG, "accepted");
  zkw_side_start_reading(&s->client);
  uv_timer_start(&s->timer, handshake_timeout_cb, srv->cfg->handshake_timeout_ms, 0);
  return 0;
}
