/* zkw_recover.c: a successor takes up the client connections its
 * predecessor left (see zkw_recover.h): each slot of the journal with the
 * socket the keeper held, checked against what the kernel says of the
 * socket's two streams, re-created as a session and re-attached upstream as
 * a move does. */
#include "zkw_fault.h"
#include "zkw_recover.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zkw_metrics.h"
#include "zkw_move.h"
#include "zkw_pair.h"
#include "zkw_session.h"
#include "zkw_sockcount.h"
#include "zkw_text.h"
#include "zkw_journal.h"

/* Why the slot cannot be taken up, or NULL. */
static const char *unrecoverable(const struct zkw_jsession *js, uint64_t consumed, uint64_t written) {
  if (js->sasl) return "a SASL session";
  if (js->read_only || js->ro_requested) return "a read-only session";
  if (js->unmovable) return "its auth packets were not all kept";
  if (js->watches_lost) return "its watches could not all be kept";
  if (consumed != js->in_logged) return "bytes the predecessor read from the client were not logged";
  if (js->in_logged - js->in_handled > ZKW_JOURNAL_IN_RING) return "more unhandled request bytes than kept";
  if (written > js->out_logged) return "bytes were written to the client past the log";
  if (js->out_logged - written > ZKW_JOURNAL_OUT_RING) return "more unwritten reply bytes than kept";
  return NULL;
}

/* The session's state from the slot: fields, buffers, requests in flight,
 * auth packets, watches. Returns NULL, or why it failed. */
static const char *restore_state(struct zkw_session *s, struct zkw_journal *j, const struct zkw_jsession *js,
                                 uint64_t written) {
  s->session_id = js->session_id;
  s->timeout = js->timeout;
  memcpy(s->passwd, js->passwd, sizeof s->passwd);
  s->passwd_len = js->passwd_len;
  s->last_zxid = js->last_zxid;
  s->phase = ZKW_PHASE_ACTIVE;
  s->response_seen = true;
  s->upstream_started = true;
  s->inband_ok = true;
  uint32_t n = (uint32_t)(s->srv->cfg->upstream_count > 0 ? s->srv->cfg->upstream_count : 1);
  uint32_t per = (uint32_t)js->timeout / n;
  s->up_handshake_ms = per > s->srv->cfg->connect_timeout_ms ? per : s->srv->cfg->connect_timeout_ms;
  /* The client's bytes not handled, and the bytes for it not written. */
  size_t in = (size_t)(js->in_logged - js->in_handled), out = (size_t)(js->out_logged - written);
  if (zkw_buf_reserve(&s->client.in, in + 1) || zkw_buf_reserve(&s->client.out, out + 1))
    return "out of memory";
  if (zkw_journal_client_bytes(j, js, false, js->in_handled, s->client.in.data) ||
      zkw_journal_client_bytes(j, js, true, written, s->client.out.data))
    return "its logs no longer hold the bytes";
  s->client.in.len = in;
  s->client.out.len = out;
  if (!in) zkw_buf_release(&s->client.in);
  if (!out) zkw_buf_release(&s->client.out);
  if (js->auth_len) {
    s->auth_frames = zkw_malloc(js->auth_len);
    if (!s->auth_frames) return "out of memory";
    memcpy(s->auth_frames, js->auth, js->auth_len);
    s->auth_len = js->auth_len;
    s->auth_count = js->auth_count;
  }
  if (js->watches_len && zkw_watches_load(&s->watches, js->watches, js->watches_len)) return "its watches";
  /* The journal's state of the slot goes on from here: its logs' ends, and
   * the client's requests in flight pushed again (zkwarden's own, and a
   * replay, answer nothing to the client: gone with the predecessor). */
  zkw_journal_keep(j, s, js->slot);
  s->jr.in_logged = js->in_logged;
  s->jr.in_base = js->in_handled;
  s->jr.out_logged = js->out_logged;
  s->jr.head = s->jr.popped = s->jr.tail = js->head;
  s->jr.watches_gen = s->watches.gen - 1; /* kept again at the first commit */
  for (uint32_t i = 0; i < js->pending_count; i++) {
    struct zkw_jpending e = zkw_journal_pending_at(j, js, i);
    if (e.owned || (e.flags & ZKW_PENDING_REPLAY)) continue;
    uint8_t flags = e.flags & ZKW_PENDING_MARK; /* no copy of a kept request survives */
    if (zkw_pending_push_flags(&s->pending, e.xid, e.op, flags)) return "out of memory";
    zkw_journal_pushed(s, e.xid, e.op, flags, false, e.end);
  }
  zkw_journal_consumed(s, s->jr.popped);
  zkw_journal_session(s);
  return NULL;
}

int zkw_recover_session(struct zkw_server *srv, uint32_t slot, int fd) {
  struct zkw_jsession js;
  const char *why = NULL;
  uint64_t consumed = 0, written = 0;
  int rc = zkw_journal_read(srv->journal, slot, &js);
  if (rc)
    why = rc == -ENOENT ? "no such slot in the journal" : "its requests in flight were not all kept";
  else if (zkw_sockcount(fd, &consumed, &written))
    why = "its socket's state cannot be read";
  else
    why = unrecoverable(&js, consumed, written);
  struct zkw_session *s = why ? NULL : zkw_session_new(srv);
  if (!why && !s) why = "out of memory";
  bool opened = s && uv_tcp_open(&s->client.tcp, fd) == 0;
  if (s && !opened) why = "its socket cannot be used";
  if (why) {
    ZKW_METRIC_INC(recovered_dropped);
    zkw_log_warn("a connection the previous zkwarden process served (session 0x%llx) is closed: %s",
                 rc ? 0ULL : (unsigned long long)js.session_id, why);
    if (!opened) close(fd);
    if (s) zkw_session_close(s, ZKW_LOG_DEBUG, "not recovered");
    if (srv->forget) srv->forget(srv, slot); /* the keeper lets go of its duplicate too */
    return -1;
  }
  s->client.connected = true;
  uv_tcp_nodelay(&s->client.tcp, 1);
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (uv_tcp_getpeername(&s->client.tcp, (struct sockaddr *)&ss, &sl) == 0)
    zkw_text_sockaddr((const struct sockaddr *)&ss, s->peer, sizeof s->peer);
  why = restore_state(s, srv->journal, &js, written);
  if (!why && srv->hooks && srv->hooks->on_recover) srv->hooks->on_recover(s, js.policy, js.policy_len);
  if (why || !zkw_move_recover(s)) {
    /* Its close forgets the slot once it holds it (zkw_journal_keep); one
     * that failed before is forgotten here, or the keeper would keep the
     * client's connection open with no one serving it. */
    bool kept = s->jr.slot != NULL;
    ZKW_METRIC_INC(recovered_dropped);
    s->close_class = ZKW_CLOSE_OTHER;
    zkw_session_close(s, ZKW_LOG_WARN, "not recovered from the previous zkwarden process: %s",
                      why ? why : "it cannot move");
    if (!kept && srv->forget) srv->forget(srv, slot);
    return -1;
  }
  ZKW_METRIC_INC(recovered_sessions);
  zkw_slog(
      s, ZKW_LOG_INFO,
      "taken over from the previous zkwarden process: %zu request byte(s) to handle, %zu reply byte(s) to "
      "write, %u request(s) in flight",
      s->client.in.len, s->client.out.len, js.pending_count);
  if (s->client.out.len) zkw_side_flush(&s->client);
  return 0;
}
