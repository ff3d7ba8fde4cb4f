/* zkw_sidecar.c: the sidecar's answers to the relay (zkw_hooks.h).
 *
 * Requests: the session's first request that acts as the JobManager begins
 * its incarnation (held until the previous one is fenced and this one
 * recorded); an incarnation's lock creates are tagged and kept, and a
 * delete under the lock roots becomes a barrier request (zkw_replies.h; both
 * held back while a sweep deletes). Replies: a lock create's NODEEXISTS goes
 * on and a reclaim replaces the stale lock behind it; a barrier's NOTEMPTY
 * is withheld while a reclaim runs; getData replies are untagged, and those of
 * /zookeeper/config name the sidecar (each such read is marked, so every
 * reply is rewritten however many are in flight: Curator's ensemble tracker
 * sends two at once). Notifications of the sweep's own watch go to it alone
 * (zkw_sweepwatch.h). A session whose server went away moves (zkw_move.h),
 * but not in observe mode, which reports the move it would have made. */
#include "zkw_sidecar.h"

#include <stdio.h>
#include <string.h>

#include "zkw_fencing.h"
#include "zkw_history.h"
#include "zkw_lockrule.h"
#include "zkw_reclaim.h"
#include "zkw_sweep.h"
#include "zkw_sweepwatch.h"
#include "zkw_rewrite.h"
#include "zkw_replies.h"
#include "zkw_session.h"
#include "zkw_journal.h"

/* What a successor process needs of the session (zkw_journal.h): its
 * incarnation, and whether it is relayed as a plain client in a conflict.
 * Kept when it changed, as each frame passes. */
struct kept {
  uint64_t incarnation;
  uint8_t plain_conflict;
};

static void keep_for_successor(struct zkw_session *s) {
  struct zkw_sc_session *sc = zkw_sc(s);
  if (sc->incarnation == sc->saved_incarnation && sc->plain_conflict == sc->saved_conflict) return;
  sc->saved_incarnation = sc->incarnation;
  sc->saved_conflict = sc->plain_conflict;
  struct kept k = {sc->incarnation, sc->plain_conflict};
  zkw_journal_policy(s, &k, sizeof k);
}

static void on_recover(struct zkw_session *s, const uint8_t *data, size_t len) {
  struct zkw_sc_session *sc = zkw_sc(s);
  struct kept k;
  if (len != sizeof k) return; /* nothing kept: a plain client until it acts as the JobManager */
  memcpy(&k, data, sizeof k);
  sc->incarnation = sc->saved_incarnation = k.incarnation;
  sc->plain_conflict = sc->saved_conflict = k.plain_conflict;
  sc->acts_as_jm = k.incarnation || k.plain_conflict;
}

static bool is_config_node(struct zkw_bytes path) {
  size_t n = strlen(ZKW_CONFIG_NODE);
  return path.len == (int32_t)n && memcmp(path.p, ZKW_CONFIG_NODE, n) == 0;
}

static int on_request(struct zkw_session *s, const struct zkw_request *req, const uint8_t *frame, size_t len,
                      struct zkw_buf *out) {
  (void)frame, (void)len;
  struct zkw_sc_session *sc = zkw_sc(s);
  const struct zkw_config *cfg = s->srv->cfg;
  if (sc->hold_jm) return ZKW_HOLD;
  if (!sc->acts_as_jm && zkw_acts_as_jobmanager(&cfg->lock_roots, req)) {
    if (cfg->observe && req->type != ZKW_OP_MULTI) sc->jm_xid = req->xid;
    if (zkw_incarnation_on_jm_request(s)) return ZKW_HOLD;
  }
  if (sc->incarnation) zkw_sweep_on_jm_request(s, req); /* its own trees, its activity */
  int verdict = ZKW_FORWARD, keep = 0;
  if (sc->incarnation &&
      (req->type == ZKW_OP_CREATE || req->type == ZKW_OP_CREATE2 || req->type == ZKW_OP_MULTI)) {
    struct zkw_tagger t = {&cfg->lock_roots, cfg->identity, sc->incarnation, s->session_id};
    int locks = 0;
    int rc = zkw_rewrite_request(req, &t, out, &locks);
    if (rc < 0) return rc;
    if (rc == 1) verdict = ZKW_REPLACE;
    /* Its NODEEXISTS on a stale lock is reclaimed behind the reply. */
    if (locks > 0 && req->type != ZKW_OP_MULTI) keep = ZKW_KEEP;
  } else if (sc->incarnation && req->type == ZKW_OP_DELETE &&
             zkw_under_lock_roots(&cfg->lock_roots, req->op.path)) {
    zkw_reclaim_on_delete(s, req->op.path);
    /* Its NOTEMPTY may be withheld for a reclaim: the requests after it wait
     * for its answer. Observe mode only reports what it would do: nothing
     * waits. */
    keep = cfg->observe ? ZKW_KEEP : ZKW_BARRIER;
  }
  if (keep) {
    /* While a sweep decides which locks are stale, lock requests wait. */
    struct zkw_identity *id = s->srv->policy;
    if (id && zkw_sweep_holding(id)) {
      zkw_buf_release(out);
      return ZKW_HOLD;
    }
    verdict |= keep;
  }
  if (req->type == ZKW_OP_GET_DATA && is_config_node(req->op.path)) verdict |= ZKW_MARK;
  keep_for_successor(s);
  return verdict;
}

/* A kept request's reply (zkw_replies.h): NODEEXISTS on a lock create goes
 * on and is reclaimed behind it; NOTEMPTY on a delete under the lock roots
 * may be a stale lock in the way: withheld while reclaiming (the barrier). */
static int on_kept_reply(struct zkw_session *s, const struct zkw_reply *rep, unsigned flags) {
  size_t len;
  const uint8_t *body = zkw_session_kept_request(s, &len);
  struct zkw_request req;
  if (!body || !s->srv->policy || zkw_decode_request(body, len, &req) != ZKW_OK) return ZKW_FORWARD;
  bool is_create = req.type != ZKW_OP_DELETE;
  if (rep->err != (is_create ? ZKW_ZERR_NODEEXISTS : ZKW_ZERR_NOTEMPTY)) return ZKW_FORWARD;
  if (is_create) {
    zkw_reclaim_at_create(s, req.op.path, body, len);
    return ZKW_FORWARD;
  }
  bool withhold = (flags & ZKW_REPLY_AT_BARRIER) != 0;
  return zkw_reclaim_at_delete(s, req.op.path, withhold) && withhold ? ZKW_WITHHOLD : ZKW_FORWARD;
}

static int on_reply(struct zkw_session *s, const struct zkw_reply *rep, int32_t op, unsigned flags,
                    struct zkw_buf *out) {
  struct zkw_sc_session *sc = zkw_sc(s);
  sc->silent_server = false; /* it answers again */
  keep_for_successor(s);
  if (sc->jm_xid && sc->jm_xid == rep->xid) {
    sc->jm_xid = 0;
    if (rep->err == 0 && (op == ZKW_OP_CREATE || op == ZKW_OP_CREATE2))
      zkw_fencing_on_jm_created(s, rep->op.path);
  }
  if (flags & ZKW_REPLY_KEPT) return on_kept_reply(s, rep, flags);
  int rc;
  if (op == ZKW_OP_GET_DATA && (flags & ZKW_REPLY_MARKED)) {
    rc = zkw_rewrite_config_reply(rep, s->srv->listen_name, out);
  } else {
    rc = zkw_rewrite_untag_reply(rep, op, out);
  }
  return rc < 0 ? rc : rc == 1 ? ZKW_REPLACE : ZKW_FORWARD;
}

/* Observe mode: a move that sidecar mode would have made and that saved
 * the client a drop (SUSPENDED), once per connection. */
static void would_move(struct zkw_session *s, const char *what) {
  struct zkw_sc_session *sc = zkw_sc(s);
  if (sc->would_moved) return;
  sc->would_moved = true;
  char
      reason[ZKW_SESSION_UPSTREAM_MAX + ZKW_HISTORY_TEXT_MAX]; /* cut to ZKW_HISTORY_TEXT_MAX when recorded */
  snprintf(reason, sizeof reason,
           "server %s %s: %s connection dropped as direct (SUSPENDED); sidecar mode moves it", s->up_name,
           what, sc->incarnation ? "the JobManager's" : "a plain client's");
  zkw_history_would(&(struct zkw_action){ZKW_HISTORY_SESSION_MOVE, NULL, -1, reason, s->session_id,
                                         s->srv->cfg->identity, sc->incarnation});
}

/* Observe mode: the JobManager meets what it meets direct. A server that
 * closed or reset the connection drops the client now; one that went
 * silent drops it only if the client gives up on it (on_close), not if the
 * server answers again (on_reply). */
static int on_move(struct zkw_session *s, const char *why, bool silent) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || !zkw_identity_observing(id)) return ZKW_FORWARD;
  if (silent)
    zkw_sc(s)->silent_server = true;
  else
    would_move(s, why);
  return ZKW_DROP;
}

static void on_close(struct zkw_session *s) {
  if (zkw_sc(s)->silent_server && s->close_class == ZKW_CLOSE_CLIENT_CLOSED)
    would_move(s, "went silent and the client gave up on it");
  zkw_incarnation_on_session_closed(s);
}

static void on_stop(void *policy) {
  if (!policy) return;
  zkw_incarnation_stop(policy); /* stopping: the sweep's timer is closed, a pass ends at its next step */
  zkw_sweep_stop(policy);       /* ends a pass that waits on that timer */
}

const struct zkw_hooks zkw_sidecar_hooks = {
    .session_size = sizeof(struct zkw_sc_session),
    .on_connect_request = zkw_incarnation_on_connect_request,
    .on_connect_response = zkw_incarnation_on_connect_response,
    .on_request = on_request,
    .on_reply = on_reply,
    .on_notification = zkw_sweepwatch_on_notification,
    .on_move = on_move,
    .on_close = on_close,
    .on_recover = on_recover,
    .on_stop = on_stop,
};

int zkw_sidecar_start(struct zkw_identity *id, struct zkw_server *srv) {
  int rc = zkw_incarnation_start(id, srv);
  id->on_incarnation = zkw_sweep_soon; /* zkw_incarnation_start cleared it */
  return rc;
}

void zkw_sidecar_finish(void *id) {
  zkw_incarnation_finish(id);
}

struct zkw_identity *zkw_sidecar_identity(const struct zkw_server *srv) {
  return srv->hooks == &zkw_sidecar_hooks ? srv->policy : NULL;
}

uint64_t zkw_sidecar_incarnation(const struct zkw_session *s) {
  const struct zkw_sc_session *sc = s->srv->hooks == &zkw_sidecar_hooks ? zkw_sc_c(s) : NULL;
  return sc ? sc->incarnation : 0;
}
