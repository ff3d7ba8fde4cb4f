/* zkw_fencing.c: ending the sessions of an identity that must go: the
 * previous incarnation's session when a new one begins (bounded by
 * ZKWARDEN_FENCE_TIMEOUT_MS, then retried in the background), a superseded
 * session still attached here, and orphans (a JobManager connection that
 * went without closeSession and did not come back within the grace). In
 * observe mode each of these is a would-fence, and the wait it would have
 * saved is measured. One fence (zkw_fenceconn.c) runs at a time. Above
 * zkw_registry.c (it records the sessions it saw end there), below
 * zkw_incarnation.c. */
#include "zkw_fencing.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_fault.h"
#include "zkw_history.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_session.h"

/* Between background fence attempts. */
#define FENCE_RETRY_MS 1000

struct zkw_orphan {
  struct zkw_orphan *next;
  struct zkw_identity *id;
  uv_timer_t timer;
  int64_t session_id;
  uint8_t passwd[16];
  uint64_t incarnation;
  int timeout_ms; /* the session's negotiated timeout */
  bool fencing;
  /* A client re-attaching the session (its ConnectRequest, with the right
   * password, went to the server or waits for the fence): the orphan goes
   * only once the server confirms it (zkw_fencing_reattached); if that
   * connection ends first, the orphan is fenced after all. */
  struct zkw_session *reattach;
  bool grace_over; /* the grace ended (or a fence began) while the re-attach was pending */
};

/* ---- observe mode: the fences not done ---- */

bool zkw_fencing_would_have_fenced(const struct zkw_identity *id, int64_t session) {
  for (int i = 0; session && i < ZKW_SUPERSEDED_KEPT; i++)
    if (id->would_fenced[i] == session) return true;
  return false;
}

/* Observe mode: the superseded session's latch went `ms` after the fence
 * not done: that long the new JobManager could not lead. */
void zkw_fencing_latch_gone(struct zkw_identity *id, uint64_t ms) {
  id->wait.active = false;
  zkw_metrics.would_fence_wait_ms += ms;
  zkw_log_info("observe: the fence not done of session 0x%" PRIx64 " (identity %s, incarnation %" PRIu64
               ") cost %" PRIu64 " ms: its latch %s stayed that long (a fence removes it at once)",
               (uint64_t)id->wait.session, zkw_identity_name(id), id->wait.incarnation, ms, id->wait.path);
}

static void latch_watched(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (!id->wait.active || id->stopping) return;
  if (r->rc == ZNONODE)
    return zkw_fencing_latch_gone(id, zkw_identity_now_ms() - id->wait.since_ms); /* gone already */
  if (r->rc != ZOK) {
    id->wait.active = false;
    zkw_log_warn("observe: cannot watch %s to measure the fence not done: %s", id->wait.path,
                 zkw_zk_error(r->rc));
  }
}

/* Starts measuring how long the session's latch (known when it created its
 * latch through this sidecar) outlives the fence not done. */
static void wait_for_latch(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  if (id->latch_session != session || !id->latch_path[0] || !id->zk) return;
  id->wait.active = true;
  id->wait.session = session;
  id->wait.incarnation = incarnation;
  id->wait.since_ms = zkw_identity_now_ms();
  snprintf(id->wait.path, sizeof id->wait.path, "%s", id->latch_path);
  if (zkw_zk_exists(id->zk, id->wait.path, true, latch_watched, id) != ZOK) id->wait.active = false;
}

void zkw_fencing_on_jm_created(struct zkw_session *s, struct zkw_bytes path) {
  struct zkw_identity *id = s->srv->policy;
  if (!zkw_identity_observing(id) || id->disabled || path.len <= 0 ||
      (size_t)path.len >= sizeof id->latch_path || !zkw_sc(s)->incarnation ||
      zkw_sc(s)->incarnation != id->rec.incarnation)
    return;
  id->latch_session = s->session_id;
  memcpy(id->latch_path, path.p, (size_t)path.len);
  id->latch_path[path.len] = 0;
}

/* Observe mode: the fence of a session that sidecar mode would do here. */
static void would_fence(struct zkw_identity *id, enum zkw_history_kind kind, int64_t session,
                        uint64_t incarnation, int timeout_ms, const char *why) {
  char reason[ZKW_HISTORY_TEXT_MAX + 128]; /* cut to ZKW_HISTORY_TEXT_MAX when recorded */
  snprintf(reason, sizeof reason, "%s; not closed: its ephemerals stay until it expires (timeout %d ms)", why,
           timeout_ms);
  zkw_history_would(
      &(struct zkw_action){kind, NULL, -1, reason, session, zkw_identity_name(id), incarnation});
  id->would_fenced[id->would_fenced_next++ % ZKW_SUPERSEDED_KEPT] = session;
  wait_for_latch(id, session, incarnation);
}

/* ---- fencing ---- */

static void fence_done(struct zkw_fenceconn *f, enum zkw_fenceconn_result result, void *arg);

void zkw_fencing_timeout_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  if (id->waiting)
    zkw_log_warn(
        "identity %s: fencing did not finish within %u ms; the new incarnation goes on, fencing goes on",
        zkw_identity_name(id), id->srv->cfg->fence_timeout_ms);
  zkw_registry_release_waiting(id);
}

/* A superseded session that was still attached here (a hung JobManager):
 * its connection goes too, so the old process learns at once. */
static void close_superseded(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == session && s->phase != ZKW_PHASE_CLOSING)
      zkw_session_close(s, ZKW_LOG_INFO, "superseded: incarnation %" PRIu64 " was fenced by a newer one",
                        incarnation);
}

static bool start_fence(struct zkw_identity *id, int64_t session, const uint8_t passwd[16], int timeout_ms,
                        uint64_t incarnation, void *orphan) {
  /* An orphan that was re-attached meanwhile is not an orphan. */
  if (orphan && zkw_identity_attached(id, session)) return false;
  /* A connection of that session still here (a hung JobManager) is closed
   * by the server when the fence takes the session: it must not move. */
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (zkw_session_id(s) == session && zkw_session_phase(s) != ZKW_PHASE_CLOSING) zkw_session_forbid_move(s);
  struct zkw_fenceconn *f = &id->fence;
  zkw_config_upstream_list(id->srv->cfg, f->hosts, sizeof f->hosts);
  f->session_id = session;
  memcpy(f->passwd, passwd, sizeof f->passwd);
  f->timeout_ms = (int)id->srv->cfg->fence_timeout_ms;
  f->session_timeout_ms = timeout_ms;
  /* A server that takes the connection and says nothing (paused, starting)
   * leaves time for the others. */
  f->attempt_ms = id->srv->cfg->connect_timeout_ms;
  if (f->attempt_ms > id->srv->cfg->fence_timeout_ms / 3) f->attempt_ms = id->srv->cfg->fence_timeout_ms / 3;
  f->auth = id->srv->cfg->registry_auth[0] ? id->srv->cfg->registry_auth : NULL;
  id->fence_incarnation = incarnation;
  if (zkw_fenceconn_start(id->srv->loop, f, fence_done, orphan) != 0) {
    memset(f->passwd, 0, sizeof f->passwd);
    return false;
  }
  id->fencing = true;
  return true;
}

/* Fences the previous incarnation's session if it may still be alive. */
void zkw_fencing_previous(struct zkw_identity *id) {
  if (id->state != ZKW_REG_OWNER || !id->rec_loaded) return;
  zkw_registry_capture_previous(id);
  if (!id->prev.pending || id->prev.incarnation <= id->rec.dead ||
      (zkw_identity_observing(id) && id->prev.incarnation <= id->would_dead)) {
    id->prev.pending = false;
    zkw_registry_release_waiting(id);
    return;
  }
  if (zkw_identity_observing(id)) {
    /* Observe: the JobManager waits for the old session as it would direct. */
    char why[80];
    snprintf(why, sizeof why, "superseded by incarnation %" PRIu64, id->rec.incarnation + 1);
    would_fence(id, ZKW_HISTORY_FENCE, id->prev.session, id->prev.incarnation, id->rec.timeout, why);
    zkw_fencing_cancel_orphan(id, id->prev.session);
    id->prev.pending = false;
    memset(id->prev.passwd, 0, sizeof id->prev.passwd);
    zkw_registry_release_waiting(id);
    return;
  }
  if (id->fencing) return;                         /* fence_done comes back here */
  zkw_fencing_cancel_orphan(id, id->prev.session); /* fenced here, not a second time as an orphan */
  if (!start_fence(id, id->prev.session, id->prev.passwd, id->prev.timeout_ms, id->prev.incarnation, NULL)) {
    id->prev.pending = false;
    zkw_registry_release_waiting(id);
  } else if (id->waiting && !uv_is_active((uv_handle_t *)&id->fence_timer)) {
    uv_timer_start(&id->fence_timer, zkw_fencing_timeout_cb, id->srv->cfg->fence_timeout_ms, 0);
  }
}

static void retry_fence_cb(uv_timer_t *t) {
  zkw_fencing_previous(t->data);
}

static void orphan_fenced(struct zkw_orphan *o, enum zkw_fenceconn_result result);
static void orphan_free(struct zkw_orphan *o);

static void fence_done(struct zkw_fenceconn *f, enum zkw_fenceconn_result result, void *arg) {
  struct zkw_identity *id = (struct zkw_identity *)((char *)f - offsetof(struct zkw_identity, fence));
  id->fencing = false;
  if (result == ZKW_FENCE_CANCELLED && id->stopping) { /* zkw_fencing_stop */
    zkw_log_info("identity %s: fencing session 0x%" PRIx64 " given up: zkwarden is stopping",
                 zkw_identity_name(id), (uint64_t)f->session_id);
    if (arg) orphan_free(arg);
    return;
  }
  if (arg) {
    orphan_fenced(arg, result);
  } else {
    uint64_t inc = id->fence_incarnation;
    if (result == ZKW_FENCE_FAILED) {
      ZKW_METRIC_INC(fence_failures);
      zkw_log_warn("identity %s: fencing session 0x%" PRIx64 " of incarnation %" PRIu64 " failed: %s",
                   zkw_identity_name(id), (uint64_t)f->session_id, inc, f->detail);
      zkw_history_failed(ZKW_HISTORY_FENCE, NULL, "fence failed", f->session_id, zkw_identity_name(id), inc);
      if (zkw_identity_now_ms() < id->prev.deadline_ms && !id->stopping)
        uv_timer_start(&id->retry_timer, retry_fence_cb, FENCE_RETRY_MS, 0);
      else
        id->prev.pending = false; /* by now the server has expired it */
    } else {
      if (result == ZKW_FENCE_CLOSED) ZKW_METRIC_INC(fences);
      zkw_log_info("identity %s: previous session 0x%" PRIx64 " of incarnation %" PRIu64 " fenced: %s",
                   zkw_identity_name(id), (uint64_t)f->session_id, inc, zkw_fenceconn_result_name(result));
      zkw_history_add(ZKW_HISTORY_FENCE, NULL, zkw_fenceconn_result_name(result), f->session_id,
                      zkw_identity_name(id), inc);
      id->prev.pending = false;
      memset(id->prev.passwd, 0, sizeof id->prev.passwd);
      zkw_registry_note_dead(id, f->session_id, inc);
      zkw_registry_write_dead(id, inc);
      close_superseded(id, f->session_id, inc);
    }
    zkw_registry_release_waiting(id);
  }
  if (!id->stopping && id->waiting) zkw_fencing_previous(id);
}

/* ---- orphans ---- */

static void orphan_closed(uv_handle_t *h) {
  free(h->data);
}

static void orphan_free(struct zkw_orphan *o) {
  for (struct zkw_orphan **p = &o->id->orphans; *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  memset(o->passwd, 0, sizeof o->passwd);
  uv_close((uv_handle_t *)&o->timer, orphan_closed);
}

/* Re-attaches that waited for an orphan fence go on. */
static void resume_fence_waiters(struct zkw_identity *id) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (zkw_sc(s)->wait_fence) {
      zkw_sc(s)->wait_fence = false;
      zkw_session_resume(s);
    }
}

static void orphan_timer_cb(uv_timer_t *t);

static void orphan_fenced(struct zkw_orphan *o, enum zkw_fenceconn_result result) {
  struct zkw_identity *id = o->id;
  if (result == ZKW_FENCE_CANCELLED) {
    /* Stopped before closeSession for a re-attach: the orphan stays until
     * the server confirms the session (or fences it at once if that
     * connection has already gone). */
    o->grace_over = true;
    if (o->reattach) {
      zkw_log_info("identity %s: orphaned session 0x%" PRIx64
                   " is re-attaching: its fence stopped before closing it; fenced after all unless the "
                   "server confirms the session",
                   zkw_identity_name(id), (uint64_t)o->session_id);
    } else { /* the re-attaching connection is gone already: a grace again */
      o->grace_over = false;
      uv_timer_start(&o->timer, orphan_timer_cb, id->srv->cfg->orphan_grace_ms, 0);
    }
    resume_fence_waiters(id);
    return;
  } else if (result == ZKW_FENCE_FAILED) {
    ZKW_METRIC_INC(fence_failures);
    zkw_log_warn("identity %s: fencing orphaned session 0x%" PRIx64 " failed: %s", zkw_identity_name(id),
                 (uint64_t)o->session_id, id->fence.detail);
  } else {
    if (result == ZKW_FENCE_CLOSED) ZKW_METRIC_INC(orphans_fenced);
    zkw_log_info("identity %s: orphaned session 0x%" PRIx64 " (incarnation %" PRIu64 ") fenced: %s",
                 zkw_identity_name(id), (uint64_t)o->session_id, o->incarnation,
                 zkw_fenceconn_result_name(result));
    zkw_registry_note_dead(id, o->session_id, o->incarnation);
    if (o->incarnation == id->rec.incarnation && o->session_id == id->rec.session)
      zkw_registry_write_dead(id, o->incarnation);
    else
      zkw_registry_flush_dead(id);
  }
  (result == ZKW_FENCE_FAILED ? zkw_history_failed : zkw_history_add)(
      ZKW_HISTORY_ORPHAN_FENCE, NULL, zkw_fenceconn_result_name(result), o->session_id, zkw_identity_name(id),
      o->incarnation);
  orphan_free(o);
  resume_fence_waiters(id);
}

static void orphan_timer_cb(uv_timer_t *t) {
  struct zkw_orphan *o = t->data;
  struct zkw_identity *id = o->id;
  if (id->stopping) return;
  if (o->reattach) { /* its outcome decides (zkw_fencing_reattached, _reattach_ended) */
    o->grace_over = true;
    return;
  }
  if (id->fencing) { /* one fence at a time: try again shortly */
    uv_timer_start(&o->timer, orphan_timer_cb, 200, 0);
    return;
  }
  if (zkw_identity_observing(id)) {
    if (!zkw_identity_attached(id, o->session_id)) {
      char why[120];
      snprintf(why, sizeof why, "dropped without closeSession, not re-attached in %u ms",
               id->srv->cfg->orphan_grace_ms);
      would_fence(id, ZKW_HISTORY_ORPHAN_FENCE, o->session_id, o->incarnation, o->timeout_ms, why);
      if (o->incarnation == id->rec.incarnation && o->session_id == id->rec.session)
        id->would_dead = o->incarnation; /* as write_dead: the next incarnation has nothing to fence */
    }
    orphan_free(o);
    return;
  }
  zkw_log_info("identity %s: session 0x%" PRIx64 " was not re-attached within %u ms; fencing it",
               zkw_identity_name(id), (uint64_t)o->session_id, id->srv->cfg->orphan_grace_ms);
  if (!start_fence(id, o->session_id, o->passwd, o->timeout_ms, o->incarnation, o)) orphan_free(o);
}

static struct zkw_orphan *orphan_of(struct zkw_identity *id, int64_t session_id) {
  for (struct zkw_orphan *o = id->orphans; o; o = o->next)
    if (o->session_id == session_id && !uv_is_closing((uv_handle_t *)&o->timer)) return o;
  return NULL;
}

/* The session is fenced another way (as the previous incarnation's): its
 * orphan entry goes (no fence of it is under way: one fence at a time). */
void zkw_fencing_cancel_orphan(struct zkw_identity *id, int64_t session_id) {
  struct zkw_orphan *o = orphan_of(id, session_id);
  if (o && !(id->fencing && id->fence.arg == o)) orphan_free(o);
}

bool zkw_fencing_reattach(struct zkw_identity *id, struct zkw_session *s, const struct zkw_connect_req *req) {
  struct zkw_orphan *o = orphan_of(id, req->session_id);
  if (!o) return false;
  bool fencing = id->fencing && id->fence.arg == o;
  if (req->passwd.len != (int32_t)sizeof o->passwd ||
      memcmp(req->passwd.p, o->passwd, sizeof o->passwd) != 0) {
    /* Not its password: no re-attach of ours; it waits for the fence to end, if one runs. */
    if (fencing)
      zkw_slog(s, ZKW_LOG_INFO,
               "identity %s: a ConnectRequest for session 0x%" PRIx64 " with another password while its "
               "orphan fence is under way: it waits for the fence to end",
               zkw_identity_name(id), (uint64_t)o->session_id);
    return fencing;
  }
  o->reattach = s;
  if (!fencing) return false;
  /* A fence never closes a session that is attached again (one that
   * closed it first leaves the client to learn so from the server). */
  zkw_slog(s, ZKW_LOG_INFO,
           "identity %s: session 0x%" PRIx64 " re-attaches while its orphan fence is under way: "
           "the fence ends without closing it unless closeSession was sent, the re-attach waits for it",
           zkw_identity_name(id), (uint64_t)o->session_id);
  zkw_fenceconn_cancel(&id->fence);
  return true;
}

void zkw_fencing_reattached(struct zkw_identity *id, struct zkw_session *s, bool confirmed) {
  /* Confirmed: the server took the session's password, whichever
   * connection re-attaching it set o->reattach last. */
  for (struct zkw_orphan *o = id->orphans; o; o = o->next)
    if ((o->reattach == s || (confirmed && o->session_id == s->session_id)) &&
        !uv_is_closing((uv_handle_t *)&o->timer) && !(id->fencing && id->fence.arg == o)) {
      o->reattach = NULL;
      if (confirmed) {
        zkw_log_info("identity %s: orphaned session 0x%" PRIx64 " re-attached: not fenced",
                     zkw_identity_name(id), (uint64_t)o->session_id);
      } else { /* the server no longer knows it: its ephemerals are gone */
        zkw_log_info("identity %s: orphaned session 0x%" PRIx64 " expired on the ensemble",
                     zkw_identity_name(id), (uint64_t)o->session_id);
        zkw_registry_note_dead(id, o->session_id, o->incarnation);
        zkw_registry_flush_dead(id);
      }
      orphan_free(o);
      return;
    }
}

void zkw_fencing_reattach_ended(struct zkw_identity *id, struct zkw_session *s) {
  for (struct zkw_orphan *o = id->orphans; o; o = o->next)
    if (o->reattach == s) {
      o->reattach = NULL;
      if (uv_is_closing((uv_handle_t *)&o->timer) || (id->fencing && id->fence.arg == o)) continue;
      /* Its client may come back (zkwarden gave up on a silent server, and
       * the client reconnects), or be gone: a grace again, then the fence. */
      zkw_log_info("identity %s: the re-attach of orphaned session 0x%" PRIx64
                   " ended before the server confirmed it: fenced unless re-attached within %u ms",
                   zkw_identity_name(id), (uint64_t)o->session_id, id->srv->cfg->orphan_grace_ms);
      if (o->grace_over) {
        o->grace_over = false;
        uv_timer_start(&o->timer, orphan_timer_cb, id->srv->cfg->orphan_grace_ms, 0);
      }
    }
}

/* The JobManager's connection went without closeSession: its session is
 * fenced unless it re-attaches within ZKWARDEN_ORPHAN_GRACE_MS. */
void zkw_fencing_orphan(struct zkw_identity *id, struct zkw_session *s) {
  struct zkw_orphan *o = zkw_calloc(1, sizeof *o);
  if (!o) return;
  o->id = id;
  o->session_id = s->session_id;
  memcpy(o->passwd, s->passwd, sizeof o->passwd);
  o->incarnation = zkw_sc(s)->incarnation;
  o->timeout_ms = s->timeout;
  uv_timer_init(id->srv->loop, &o->timer);
  o->timer.data = o;
  o->next = id->orphans;
  id->orphans = o;
  uv_timer_start(&o->timer, orphan_timer_cb, id->srv->cfg->orphan_grace_ms, 0);
}

void zkw_fencing_stop(struct zkw_identity *id) {
  /* A fence under way ends at once unless its closeSession is out (then
   * with the reply, within its timeout); its orphan is freed then. */
  if (id->fencing) zkw_fenceconn_cancel(&id->fence);
  for (struct zkw_orphan *o = id->orphans, *next; o; o = next) {
    next = o->next;
    if (!(id->fencing && id->fence.arg == o)) orphan_free(o);
  }
}
