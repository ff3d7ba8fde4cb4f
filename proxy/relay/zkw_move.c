/* zkw_move.c: moving a session to another server (see zkw_move.h): when to
 * move, the re-attach, the restore, and the bound of the client's time. */
#include "zkw_fault.h"
#include "zkw_move.h"

#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_encode.h"
#include "zkw_inband.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_replies.h"
#include "zkw_tls.h"
#include "zkw_upstream.h"
#include "zkw_journal.h"

/* The move ends this long before the client's read timeout at the latest:
 * its pings, waiting meanwhile, must still get their answers in time. */
#define MOVE_MARGIN_MS 200
/* The first attempt after the server closed or reset the connection waits
 * this long, as the ZooKeeper client waits before it reconnects: when the
 * connection was closed because another handle took the session over to
 * close it (an operator's tool, a fence), that close must win, as it does
 * direct; a re-attach at once would take the session back. A silent server
 * is left at once (a third of the session timeout is gone already). */
#define MOVE_FIRST_DELAY_MS 250u
/* Pauses between rounds of attempts while no server confirms the session. */
#define MOVE_RETRY_MIN_MS 50u
#define MOVE_RETRY_MAX_MS 400u
/* Floor of the wait for one server's answer to the re-attach. */
#define MOVE_HANDSHAKE_MIN_MS 200u

/* uv_now() since which the server counts as silent: its last bytes, or
 * zkwarden resuming to read it after a pause of its own. */
static uint64_t quiet_since(const struct zkw_session *s) {
  return s->up_last_read_ms > s->upstream.resumed_ms ? s->up_last_read_ms : s->upstream.resumed_ms;
}

/* The client's read timeout: two thirds of the session timeout. */
static uint64_t read_timeout_ms(const struct zkw_session *s) {
  return (uint64_t)s->timeout * 2 / 3;
}

static void count(struct zkw_session *s, enum zkw_move_outcome outcome) {
  if (s->move_counted) return;
  s->move_counted = true;
  zkw_metrics.session_moves[outcome]++;
}

/* Bounds on the auth packets kept for a replay (zkw_move_keep_auth). */
#define AUTH_KEEP_MAX       16
#define AUTH_KEEP_MAX_BYTES (64 * 1024)

/* Why a session cannot move, in the order of ZKW_NOT_MOVABLE_REASONS. */
static const char *const refusal_text[ZKW_NMOVE_COUNT] = {
    "a session zkwarden is closing on the ensemble (fenced)",
    "a SASL session (its exchange cannot be replayed)",
    "a read-only session",
    "its auth packets were not all kept for a replay",
    "an auth packet awaits its reply (which a replay cannot tell apart)",
    "its watches could not all be kept",
    "the client's read timeout is too close",
};

/* Why this session cannot move (enum zkw_not_movable), or -1. A request in
 * flight, a lock request zkwarden holds as its barrier, a request the
 * policy holds, zkwarden's own in-band work: none of them keeps a session
 * from moving (see zkw_move.h). */
static int not_movable(const struct zkw_session *s) {
  if (s->no_move) return ZKW_NMOVE_FENCED;
  if (s->sasl) return ZKW_NMOVE_SASL;
  if (s->read_only || s->ro_requested) return ZKW_NMOVE_READ_ONLY;
  if (s->unmovable) return ZKW_NMOVE_AUTH_NOT_KEPT;
  if (s->auths) return ZKW_NMOVE_AUTH_OUTSTANDING;
  if (s->watches.lost) return ZKW_NMOVE_WATCHES_NOT_KEPT;
  return -1;
}

static void give_up(struct zkw_session *s, enum zkw_move_outcome outcome, uint8_t close_class,
                    const char *why) {
  count(s, outcome);
  s->close_class = close_class;
  zkw_session_close(s, ZKW_LOG_INFO, "session not moved: %s", why);
}

static void budget_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (!s->moving || s->phase == ZKW_PHASE_CLOSING) return;
  give_up(s, ZKW_MOVE_TIMED_OUT, ZKW_CLOSE_UPSTREAM_UNREACHABLE,
          "no server confirmed it before the client's read timeout");
}

static void connected_cb(struct zkw_session *s);
static void connect_soon(struct zkw_session *s);

/* One more attempt; when no server takes the connection, zkw_upstream_connect
 * calls connect_soon: attempts go on until the client's time is up. */
static void connect_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (s->moving && s->phase != ZKW_PHASE_CLOSING) zkw_upstream_connect(s, connected_cb, connect_soon);
}

/* The next attempt: at once after the first loss, then after a pause that
 * doubles up to MOVE_RETRY_MAX_MS (an ensemble electing a leader refuses
 * every connection for a second or two). */
static void connect_soon(struct zkw_session *s) {
  uint64_t ms =
      s->move_tries ? MOVE_RETRY_MIN_MS << (s->move_tries < 4 ? s->move_tries - 1 : 3) : s->move_first_ms;
  s->move_tries++;
  uv_timer_start(&s->timer, connect_cb, ms < MOVE_RETRY_MAX_MS ? ms : MOVE_RETRY_MAX_MS, 0);
}

/* Closes the current upstream connection; connecting goes on once it is
 * closed (the handle is reused). */
static void closed_cb(uv_handle_t *h) {
  struct zkw_session *s = ((struct zkw_side *)h->data)->s;
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing) return;
  connect_soon(s);
}

static void drop_connection(struct zkw_session *s) {
  struct zkw_side *up = &s->upstream;
  uv_timer_stop(&s->timer);
  if (up->reading) uv_read_stop((uv_stream_t *)&up->tcp);
  up->reading = false;
  up->paused = false;
  if (up->capped) s->srv->capped--;
  up->capped = false;
  up->connected = false;
  up->lost = 0;
  zkw_buf_release(&up->in);
  zkw_buf_release(&up->out); /* requests not yet written: answered with CONNECTIONLOSS */
  if (up->tls) {
    zkw_tls_conn_free(up->tls);
    up->tls = NULL;
  }
  s->move_answered = false;
  if (up->open) {
    up->open = false; /* a write in flight ends in write_cb, ignored */
    uv_close((uv_handle_t *)&up->tcp, closed_cb);
  } else {
    zkw_session_ref(s); /* what closed_cb gives back */
    up->tcp.data = up;  /* a recovered session's upstream handle was never opened (zkw_recover.c) */
    closed_cb((uv_handle_t *)&up->tcp);
  }
}

/* The wait for one server's answer to the re-attach: a tenth of the
 * session timeout (at least MOVE_HANDSHAKE_MIN_MS, at most the client's own
 * bound per server). A live server answers in a round trip; one that is
 * starting may take the connection and say nothing, and with one server in
 * ZKWARDEN_UPSTREAM the client's bound would be its whole session timeout,
 * past the move's time. */
static uint32_t handshake_bound_ms(const struct zkw_session *s) {
  uint32_t ms = (uint32_t)s->timeout / 10;
  if (ms < MOVE_HANDSHAKE_MIN_MS) ms = MOVE_HANDSHAKE_MIN_MS;
  return ms < s->up_handshake_ms ? ms : s->up_handshake_ms;
}

/* No answer to the handshake from the new server within its share of the
 * time: the next one. */
static void handshake_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  if (!s->moving || s->move_answered || s->phase == ZKW_PHASE_CLOSING) return;
  zkw_slog(s, ZKW_LOG_WARN, "moving: upstream %s did not answer the handshake within %u ms", s->up_name,
           handshake_bound_ms(s));
  zkw_upstream_suspect(s, (uint64_t)s->timeout);
  zkw_upstream_lost(s);
  s->move_failed |= 1u << s->up_idx;
  drop_connection(s);
}

/* Connected to a server (TCP, and TLS when on): the ConnectRequest that
 * re-attaches the session. */
static void connected_cb(struct zkw_session *s) {
  uint8_t frame[4 + ZKW_CONNECT_REQ_MAX];
  struct zkw_connect_req req = {.protocol_version = 0,
                                .last_zxid_seen = s->last_zxid,
                                .timeout = s->timeout,
                                .session_id = s->session_id,
                                .passwd = {s->passwd, s->passwd_len},
                                .has_read_only = true,
                                .read_only = false};
  size_t len;
  int rc = zkw_encode_connect_req(frame, sizeof frame, &req, &len);
  if (rc == ZKW_OK) rc = zkw_side_send(&s->upstream, frame, len);
  memset(frame, 0, sizeof frame); /* the password */
  if (rc) {
    give_up(s, ZKW_MOVE_FAILED, ZKW_CLOSE_IO_ERROR, "cannot write the ConnectRequest");
    return;
  }
  if (s->upstream.lost) return; /* the loss is handled on the next turn: the next server */
  zkw_side_start_reading(&s->upstream);
  uv_timer_start(&s->timer, handshake_cb, handshake_bound_ms(s), 0);
}

bool zkw_move_start(struct zkw_session *s, const char *why, bool silent) {
  if (s->moving) {
    /* The new connection ended too: the server took it and does not serve
     * (an election, a server still syncing or behind the client's zxid), or
     * went away at once. This move tries the other servers before it again
     * (move_failed), but it is not marked lost or suspect for everyone:
     * during an election every server does this, and once each has failed
     * the order starts over with the preferred one. */
    zkw_slog(s, ZKW_LOG_INFO, "moving: upstream %s %s", s->up_name, why);
    s->move_failed |= 1u << s->up_idx; /* this move tries the others first */
    drop_connection(s);
    return true;
  }
  if (s->phase != ZKW_PHASE_ACTIVE || s->close_sent || s->timeout <= 0 || !s->session_id ||
      !s->srv->cfg->session_move || s->srv->stopping)
    return false;
  int no = not_movable(s);
  uint64_t now = uv_now(s->srv->loop);
  uint64_t deadline = quiet_since(s) + read_timeout_ms(s);
  deadline = deadline > MOVE_MARGIN_MS ? deadline - MOVE_MARGIN_MS : 0;
  if (no < 0 && deadline <= now) no = ZKW_NMOVE_NO_TIME;
  zkw_upstream_lost(s);
  if (no >= 0) {
    zkw_metrics.session_moves[ZKW_MOVE_NOT_MOVABLE]++;
    if (no != ZKW_NMOVE_AUTH_NOT_KEPT) zkw_metrics.session_moves_refused[no]++; /* counted when marked */
    zkw_slog(s, ZKW_LOG_INFO, "upstream %s %s: not moving %s", s->up_name, why, refusal_text[no]);
    return false;
  }
  const struct zkw_hooks *hooks = s->srv->hooks;
  if (hooks && hooks->on_move && hooks->on_move(s, why, silent) != ZKW_FORWARD)
    return false; /* the policy's */
  /* A barrier request in flight, or its reply withheld while the policy
   * reclaimed: its outcome is unknown, as any request's (zkw_replies.h). */
  zkw_replies_connection_lost(s);
  s->moving = true;
  s->move_counted = false;
  s->move_recovery = false;
  s->move_tries = 0;
  s->move_failed = 0;
  s->move_first_ms = silent ? 0 : MOVE_FIRST_DELAY_MS;
  s->move_from = s->up_idx;
  s->move_t0 = uv_hrtime();
  zkw_slog(s, ZKW_LOG_INFO, "upstream %s %s: moving the session (%llu ms left)", s->up_name, why,
           (unsigned long long)(deadline - now));
  zkw_upstream_suspect(s, (uint64_t)s->timeout);
  zkw_inband_connection_lost(s);
  zkw_watches_lost_replies(&s->watches);
  uv_timer_start(&s->guard, budget_cb, deadline - now, 0);
  drop_connection(s);
  return true;
}

bool zkw_move_recover(struct zkw_session *s) {
  int no = not_movable(s);
  if (no >= 0 || !s->srv->cfg->session_move) {
    zkw_slog(s, ZKW_LOG_INFO, "not recovered: %s", no >= 0 ? refusal_text[no] : "ZKWARDEN_SESSION_MOVE=off");
    return false;
  }
  uint64_t now = uv_now(s->srv->loop);
  /* When the client last heard from the server is not known here: its read
   * timeout is counted from now, and the client's own ends the move if the
   * real one comes first. */
  s->up_last_read_ms = now;
  s->moving = true;
  s->move_counted = true; /* not a move of the server's failure: not counted as one */
  s->move_recovery = true;
  s->move_tries = 0;
  s->move_failed = 0;
  s->move_first_ms = 0;
  s->move_from = s->up_idx;
  s->move_t0 = uv_hrtime();
  uv_timer_start(&s->guard, budget_cb, read_timeout_ms(s) - MOVE_MARGIN_MS, 0);
  drop_connection(s); /* none yet: the first attempt at once */
  return true;
}

/* ---- the restore ---- */

/* One request answered with CONNECTIONLOSS; the policy sees the answer as
 * the client does. Returns 0 or -1 (closed). */
static int answer_one_lost(struct zkw_session *s, struct zkw_pending_entry e) {
  struct zkw_reply rep = {.xid = e.xid, .zxid = s->last_zxid, .err = ZKW_ZERR_CONNECTIONLOSS};
  uint8_t frame[32];
  size_t len;
  int rc = zkw_encode_reply(frame, sizeof frame, &rep, e.op, &len);
  const struct zkw_hooks *hooks = s->srv->hooks;
  if (rc == ZKW_OK && hooks && hooks->on_reply) {
    hooks->on_reply(s, &rep, e.op, e.flags & ZKW_PENDING_MARK ? ZKW_REPLY_MARKED : 0u, &s->scratch);
    zkw_buf_release(&s->scratch); /* the answer is ours, whatever the verdict */
  }
  if (rc == ZKW_OK) {
    zkw_journal_to_client(s, frame, len, s->jr.popped);
    rc = zkw_side_send(&s->client, frame, len);
  }
  if (rc) {
    zkw_session_write_failed(s, &s->client, rc);
    return -1;
  }
  s->move_lost++;
  return 0;
}

static int answer_barrier_lost(struct zkw_session *s, int32_t xid, int32_t op, uint8_t pflags) {
  return answer_one_lost(s, (struct zkw_pending_entry){.xid = xid, .op = op, .flags = pflags});
}

/* Answers the client's requests in flight, in their order: a barrier whose
 * reply was withheld first (zkw_replies_restore: its reply as the server
 * gave it, or CONNECTIONLOSS once its replay was sent: the replay's entry is
 * that one), then the pending ring with CONNECTIONLOSS (nothing of the
 * client's is behind a barrier; zkwarden's own got theirs from zkw_inband).
 * Returns 0 or -1 (closed). */
static int answer_lost(struct zkw_session *s) {
  s->move_lost = 0;
  if (zkw_replies_restore(s, answer_barrier_lost)) return -1;
  uint64_t base = s->jr.popped; /* the journal's index of the ring's oldest entry */
  for (uint32_t i = 0; i < s->pending.count; i++) {
    struct zkw_pending_entry e = zkw_pending_at(&s->pending, i);
    s->jr.popped = base + i + 1;
    if (!e.owned && !(e.flags & ZKW_PENDING_REPLAY) && answer_one_lost(s, e)) return -1;
  }
  s->jr.popped = base + s->pending.count;
  zkw_journal_consumed(s, s->jr.popped);
  zkw_pending_free(&s->pending);
  zkw_pending_init(&s->pending);
  return 0;
}

/* Writes the auth replay, the setWatches frames and the pings again. */
static int restore(struct zkw_session *s) {
  struct zkw_buf frames = {0};
  int n = zkw_watches_encode(&s->watches, s->last_zxid, &frames);
  if (n < 0) {
    zkw_buf_release(&frames); /* the frames encoded before the failure */
    return -1;
  }
  s->move_watches = (uint32_t)n;
  s->move_auths = s->auth_count; /* none of the client's is outstanding (not_movable) */
  int rc = zkw_side_send(&s->upstream, s->auth_frames, s->auth_len);
  if (!rc) rc = zkw_side_send(&s->upstream, frames.data, frames.len);
  zkw_buf_release(&frames);
  uint8_t ping[16];
  size_t len;
  for (uint32_t i = 0; !rc && i < s->pings; i++)
    rc = zkw_encode_ping(ping, sizeof ping, &len) == ZKW_OK ? zkw_side_send(&s->upstream, ping, len) : -1;
  return rc ? -1 : 0;
}

static void finish(struct zkw_session *s) {
  s->moving = false;
  uv_timer_stop(&s->guard);
  count(s, ZKW_MOVE_MOVED);
  uint64_t ns = uv_hrtime() - s->move_t0;
  zkw_histogram_observe(&zkw_metrics.session_move_duration, ns);
  const struct zkw_hostport *from = &s->srv->cfg->upstream[s->move_from];
  if (s->move_recovery)
    zkw_slog(s, ZKW_LOG_INFO,
             "session re-attached on %s after the take-over in %llu ms: %u request(s) answered with "
             "CONNECTIONLOSS, %u watch(es) re-armed, %u auth packet(s) replayed",
             s->up_name, (unsigned long long)(ns / 1000000), s->move_lost, s->watches.count, s->auth_count);
  else
    zkw_slog(s, ZKW_LOG_INFO,
             "session moved from %s:%s to %s in %llu ms: %u request(s) answered with CONNECTIONLOSS, %u "
             "watch(es) re-armed, %u auth packet(s) replayed",
             from->host, from->port, s->up_name, (unsigned long long)(ns / 1000000), s->move_lost,
             s->watches.count, s->auth_count);
  zkw_session_read_client(s);
  zkw_side_start_reading(&s->client);
  zkw_inband_resume(s);
  if (s->phase != ZKW_PHASE_CLOSING) s->resume(s);
}

static int on_response(struct zkw_session *s, const uint8_t *body, size_t len) {
  struct zkw_connect_resp resp;
  int rc = zkw_decode_connect_resp(body, len, &resp);
  if (rc) return rc;
  uv_timer_stop(&s->timer);
  if (resp.timeout <= 0 || resp.session_id != s->session_id) {
    give_up(s, ZKW_MOVE_EXPIRED, ZKW_CLOSE_UPSTREAM_CLOSED,
            "the ensemble reports it expired (the client learns it when it reconnects)");
    return ZKW_DROP;
  }
  zkw_upstream_answered(s);
  s->move_answered = true;
  if (answer_lost(s)) return ZKW_DROP;
  if (restore(s)) {
    give_up(s, ZKW_MOVE_FAILED, ZKW_CLOSE_IO_ERROR, "cannot write the restore");
    return ZKW_DROP;
  }
  if (s->upstream.lost) return ZKW_DROP; /* lost at once: the next server, on the next turn */
  if (!s->move_auths && !s->move_watches) finish(s);
  return ZKW_DROP;
}

int zkw_move_frame(struct zkw_session *s, const uint8_t *body, size_t len) {
  if (!s->move_answered) return on_response(s, body, len);
  struct zkw_reply rep;
  int32_t xid = len >= 4 ? (int32_t)zkw_load_be32(body) : 0;
  int rc = zkw_decode_reply(body, len, ZKW_OP_NOTIFICATION, &rep);
  if (rc) return rc;
  if (xid == ZKW_XID_NOTIFICATION) {
    zkw_watches_event(&s->watches, &rep.event);
    return ZKW_FORWARD;
  }
  if (xid == ZKW_XID_PING && s->pings) {
    s->pings--;
    return ZKW_FORWARD;
  }
  if (xid == ZKW_XID_AUTH && s->move_auths) {
    if (rep.err) {
      give_up(s, ZKW_MOVE_FAILED, ZKW_CLOSE_UPSTREAM_CLOSED, "the server refused the replayed auth");
      return ZKW_DROP;
    }
    s->move_auths--;
  } else if (xid == ZKW_XID_SET_WATCHES && s->move_watches) {
    s->move_watches--;
  } else {
    zkw_slog(s, ZKW_LOG_WARN, "bad reply from upstream while moving: xid %d answers no outstanding request",
             xid);
    return ZKW_E_VALUE;
  }
  if (!s->move_auths && !s->move_watches) finish(s);
  return ZKW_DROP;
}

/* ---- silence ----
 *
 * Silent: nothing read from the server for a third of the session timeout,
 * and the oldest request or ping outstanding sent at least a sixth of it
 * ago. The second bound spares a ping the client has just sent: an idle
 * client pings a third of the timeout after it last heard from the server,
 * and is judged half-way to its own read timeout at the earliest, with a
 * sixth of the timeout left to move.
 *
 * Only the server's silence counts. While zkwarden does not read the server
 * itself (the client is not reading its replies: a GC pause, a slow
 * consumer; zkw_session.c stops reading a side whose peer has ZKW_HIGH_WATER
 * unsent), nothing is judged, and the silence is counted again from the
 * moment reading resumed: the client's own read timeout decides, as it
 * would direct. */

/* uv_now() at which the session counts as silent, or 0 (nothing outstanding,
 * or zkwarden itself is not reading the server). */
static uint64_t silent_at(const struct zkw_session *s) {
  if (!(s->pings || s->pending.count) || s->upstream.paused || s->upstream.capped) return 0;
  uint64_t t = (uint64_t)s->timeout;
  uint64_t a = quiet_since(s) + t / 3, b = s->outstanding_since_ms + t / 6;
  return a > b ? a : b;
}

static void silence_cb(uv_timer_t *t) {
  struct zkw_session *s = t->data;
  uint64_t at = silent_at(s), now = uv_now(s->srv->loop);
  if (s->moving || s->phase != ZKW_PHASE_ACTIVE || !at) return;
  if (now < at) {
    uv_timer_start(&s->guard, silence_cb, at - now, 0);
    return;
  }
  uint64_t heard = quiet_since(s);
  if (s->move_refused_at == heard) return; /* this silence was judged already */
  s->move_refused_at = heard;
  char why[96];
  snprintf(why, sizeof why, "silent for %llu ms with requests outstanding",
           (unsigned long long)(now - heard));
  if (!zkw_move_start(s, why, true)) return; /* the client's own timeout decides, as before */
}

void zkw_move_watch_silence(struct zkw_session *s) {
  bool outstanding = s->pings || s->pending.count;
  if (outstanding && !s->outstanding) s->outstanding_since_ms = uv_now(s->srv->loop);
  s->outstanding = outstanding;
  if (s->moving || s->phase != ZKW_PHASE_ACTIVE || s->timeout <= 0 || !outstanding ||
      uv_is_active((uv_handle_t *)&s->guard) || !s->srv->cfg->session_move)
    return;
  uint64_t now = uv_now(s->srv->loop), at = silent_at(s);
  uv_timer_start(&s->guard, silence_cb, at > now ? at - now : 0, 0);
}

/* ---- what the session keeps for a move ---- */

static void wipe_auth(struct zkw_session *s) {
  if (s->auth_frames) {
    memset(s->auth_frames, 0, s->auth_len);
    free(s->auth_frames);
  }
  s->auth_frames = NULL;
  s->auth_len = 0;
  s->auth_count = 0;
}

/* True if the frame is kept already (the kept frames lie back to back). */
static bool auth_kept(const struct zkw_session *s, const uint8_t *frame, size_t len) {
  for (size_t off = 0; off + 4 <= s->auth_len;) {
    size_t n = 4 + (size_t)zkw_load_be32(s->auth_frames + off);
    if (n == len && memcmp(s->auth_frames + off, frame, len) == 0) return true;
    off += n;
  }
  return false;
}

/* Kept: each distinct packet once (a client that adds the same credentials
 * again), at most AUTH_KEEP_MAX of them and AUTH_KEEP_MAX_BYTES, and only
 * where a move could replay them. Past that, or out of memory, the session
 * is marked not movable (one log line, counted in
 * zkwarden_session_moves_refused_total then) and nothing is kept. */
void zkw_move_keep_auth(struct zkw_session *s, const uint8_t *frame, size_t len) {
  if (s->unmovable || s->sasl || s->ro_requested || !s->srv->cfg->session_move) return;
  if (auth_kept(s, frame, len)) return;
  const char *why = s->auth_count >= AUTH_KEEP_MAX || s->auth_len + len > AUTH_KEEP_MAX_BYTES
                        ? "more auth packets than zkwarden keeps for a replay"
                        : NULL;
  uint8_t *p = why ? NULL : zkw_malloc(s->auth_len + len);
  if (!p) {
    zkw_slog(s, ZKW_LOG_WARN, "%s (%u, %zu bytes): this session cannot move to another server",
             why ? why : "out of memory keeping an auth packet for a replay", s->auth_count, s->auth_len);
    wipe_auth(s);
    s->unmovable = true;
    zkw_metrics.session_moves_refused[ZKW_NMOVE_AUTH_NOT_KEPT]++; /* counted now, not again at a loss */
    return;
  }
  if (s->auth_len) memcpy(p, s->auth_frames, s->auth_len);
  memcpy(p + s->auth_len, frame, len);
  size_t kept = s->auth_len;
  uint32_t count = s->auth_count;
  wipe_auth(s);
  s->auth_frames = p;
  s->auth_len = kept + len;
  s->auth_count = count + 1;
}

static void guard_closed_cb(uv_handle_t *h) {
  zkw_session_unref(h->data);
}

void zkw_move_session_closed(struct zkw_session *s) {
  if (s->moving) count(s, ZKW_MOVE_FAILED);
  s->moving = false;
  zkw_watches_free(&s->watches);
  wipe_auth(s);
  if (!uv_is_closing((uv_handle_t *)&s->guard)) uv_close((uv_handle_t *)&s->guard, guard_closed_cb);
}
