/* zkw_sweepdel.c: a sweep pass's candidates and its delete phase (see
 * zkw_sweepdel.h): each candidate read again and deleted at its exact
 * version, in-band on the JobManager's connection, zombie latches last; a
 * zombie whose delete gets NONODE while the JobManager's server still shows
 * it is reported as served by that server alone. */
#include "zkw_fault.h"
#include "zkw_sweepdel.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_inband.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_replies.h"
#include "zkw_session.h"
#include "zkw_upstream.h"

#define ZOMBIE_MOVE_MS 600000 /* ZKWARDEN_ZOMBIE_MOVE: a server serving a zombie alone is tried last */

int zkw_sweep_batch_add(struct zkw_sweep_batch *b, struct zkw_lock_check *c) {
  if (b->nfound == b->capfound) {
    size_t cap = b->capfound ? b->capfound * 2 : 16;
    struct zkw_lock_check *f = zkw_realloc(b->found, cap * sizeof *f);
    if (!f) return -ENOMEM;
    b->found = f;
    b->capfound = cap;
  }
  b->found[b->nfound++] = *c;
  c->path = NULL;
  return 0;
}

void zkw_sweep_batch_free(struct zkw_sweep_batch *b) {
  for (size_t i = 0; i < b->nfound; i++)
    free(b->found[i].path);
  free(b->found);
  b->found = NULL;
  b->nfound = b->capfound = 0;
}

bool zkw_sweep_step(struct zkw_sweep_batch *b, const char *step, const char *path, int zerr) {
  if (b->lost) return false;
  if (b->s->phase == ZKW_PHASE_CLOSING) {
    if (zerr != ZOK) zkw_lockcheck_step_failed(NULL, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
    b->lost = true;
    return false;
  }
  if (zerr != ZOK && zerr != ZNONODE)
    zkw_lockcheck_step_failed(b->s, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
  return true;
}

static void end_phase(struct zkw_sweep_batch *b) {
  b->deleting = false;
  b->done(b);
}

static void sweep_deleted(void *arg, const struct zkw_zk_result *r);

/* Still the same node, still stale (or still a proven-dead session's)? */
static bool still_candidate(struct zkw_sweep_batch *b, const struct zkw_lock_check *c,
                            const struct zkw_lock_check *now) {
  if (now->czxid != c->czxid) return false;
  if (c->zombie) {
    const char *why;
    return now->owner == c->owner && zkw_identity_proven_dead(b->id, now->owner, b->session_id, &why) != NULL;
  }
  return now->tagged && strcmp(now->tag.identity, zkw_identity_name(b->id)) == 0 &&
         !zkw_lockcheck_why_not(now, b->session_id, zkw_identity_current(b->id));
}

/* A candidate not settled: the next pass reads it again. */
static void left(struct zkw_sweep_batch *b, const struct zkw_lock_check *c) {
  if (b->again(b, c) != 0) b->retry = true;
}

/* An in-band request of the delete phase could not be sent (rc from
 * zkw_inband_*): logged and counted, and the candidate is left for the next
 * pass. */
static void not_sent(struct zkw_sweep_batch *b, const char *step, const struct zkw_lock_check *c, int rc) {
  zkw_lockcheck_step_failed(b->s, ZKW_HISTORY_SWEEP, step, c->path,
                            rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, c);
  left(b, c);
}

static void sweep_reread(void *arg, const struct zkw_zk_result *r) {
  struct zkw_sweep_batch *b = arg;
  struct zkw_lock_check *c = &b->found[b->next];
  b->inflight--;
  struct zkw_lock_check now = {.path = c->path};
  if (!zkw_sweep_step(b, c->zombie ? "read the zombie" : "read the lock", c->path, r->rc))
    return end_phase(b);
  if (r->rc != ZOK && r->rc != ZNONODE) left(b, c); /* still there, maybe: logged by zkw_sweep_step */
  if (r->rc == ZOK) zkw_lockcheck_fill(&now, r);
  if (r->rc == ZOK && still_candidate(b, c, &now)) {
    int rc = zkw_inband_delete(b->s, c->path, now.version, sweep_deleted, b);
    if (rc == 0) {
      b->inflight++;
      c->tag = now.tag;
      c->owner = now.owner;
      c->version = now.version;
      return;
    }
    not_sent(b, c->zombie ? "delete the zombie" : "delete the stale lock", c, rc);
  }
  b->next++;
  zkw_sweepdel_next(b);
}

/* A zombie of this identity deleted (or its delete failed: rc). */
static void zombie_deleted(struct zkw_sweep_batch *b, const struct zkw_lock_check *c, int rc) {
  const char *identity = zkw_identity_name(b->id);
  char ended[40];
  zkw_lockcheck_format_ms(c->dead.ended_ms, ended, sizeof ended);
  if (rc == ZOK) {
    b->deleted++;
    b->zombies_deleted++;
    zkw_lockcheck_zombie_deleted(identity, c, b->s->up_name, "sweep");
  } else if (rc == ZNONODE) {
    /* The JobManager's server still shows it, the quorum has no such
     * node: a zombie in one server's tree alone. Deleting cannot end it;
     * the next sweep looks again (no retry loop). */
    left(b, c);
    if (zkw_lockcheck_report_once(c->czxid)) ZKW_METRIC_INC(zombie_ephemerals);
    zkw_log_warn("identity %s: zombie ephemeral %s of session 0x%" PRIx64 " (ended at %s) is served by %s "
                 "alone: its delete got NONODE, the quorum has no such node; restart %s (%s)",
                 identity, c->path, (uint64_t)c->owner, ended, b->s->up_name, b->s->up_name,
                 ZKW_ZOMBIE_ADVICE);
    if (b->id->srv->cfg->zombie_move && b->s->srv->cfg->upstream_count > 1) {
      /* The JobManager's next connection goes to another server. */
      zkw_upstream_suspect(b->s, ZOMBIE_MOVE_MS);
      zkw_log_warn("identity %s: %s is tried after the other servers for the next %d min "
                   "(ZKWARDEN_ZOMBIE_MOVE=on)",
                   identity, b->s->up_name, ZOMBIE_MOVE_MS / 60000);
    }
    char why[ZKW_HISTORY_TEXT_MAX];
    snprintf(why, sizeof why, "zombie on %.100s alone (NONODE from the quorum): not deleted", b->s->up_name);
    zkw_history_add(ZKW_HISTORY_ZOMBIE, c->path, why, c->owner, identity, c->dead.incarnation);
  }
}

/* A zombie's delete got NONODE: if the JobManager's server still serves
 * the same node, it exists in that server's tree alone. */
static void zombie_recheck(void *arg, const struct zkw_zk_result *r) {
  struct zkw_sweep_batch *b = arg;
  struct zkw_lock_check *c = &b->found[b->next];
  b->inflight--;
  if (!zkw_sweep_step(b, "read the zombie", c->path, r->rc)) return end_phase(b);
  if (r->rc != ZOK && r->rc != ZNONODE)
    left(b, c); /* unknown: logged by zkw_sweep_step; the next pass looks again */
  else if (r->rc == ZOK && r->stat.czxid == c->czxid)
    zombie_deleted(b, c, ZNONODE);
  else
    zkw_log_debug("identity %s: zombie %s went before the sweep's delete", zkw_identity_name(b->id), c->path);
  b->next++;
  zkw_sweepdel_next(b);
}

static void sweep_deleted(void *arg, const struct zkw_zk_result *r) {
  struct zkw_sweep_batch *b = arg;
  struct zkw_lock_check *c = &b->found[b->next];
  b->inflight--;
  if (!zkw_sweep_step(b, c->zombie ? "delete the zombie" : "delete the stale lock", c->path, r->rc))
    return end_phase(b);
  /* Not deleted, and maybe still a candidate (NOAUTH, BADVERSION, ...:
   * logged by zkw_sweep_step): the next pass reads it again. */
  if (r->rc != ZOK && r->rc != ZNONODE) left(b, c);
  if (c->zombie && r->rc == ZNONODE) {
    int rc = zkw_inband_get(b->s, c->path, zombie_recheck, b);
    if (rc == 0) {
      b->inflight++; /* does the JobManager's server still show it? */
      return;
    }
    not_sent(b, "read the zombie", c, rc);
  } else if (c->zombie) {
    zombie_deleted(b, c, r->rc);
  } else if (r->rc == ZOK) {
    b->deleted++;
    ZKW_METRIC_INC(stale_locks_swept);
    zkw_log_info("identity %s: sweep deleted stale lock %s (incarnation %" PRIu64 ", session 0x%" PRIx64 ")",
                 zkw_identity_name(b->id), c->path, c->tag.incarnation, (uint64_t)c->owner);
    zkw_history_record(&(struct zkw_action){ZKW_HISTORY_SWEEP, c->path, c->version,
                                            "stale lock of a superseded incarnation", c->owner,
                                            c->tag.identity, c->tag.incarnation});
  } else if (r->rc == ZNONODE) { /* gone before our delete: not by us */
    zkw_lockcheck_step_failed(b->s, ZKW_HISTORY_SWEEP, "delete the stale lock", c->path, r->rc, c);
  }
  b->next++;
  zkw_sweepdel_next(b);
}

void zkw_sweepdel_next(struct zkw_sweep_batch *b) {
  struct zkw_identity *id = b->id;
  for (;;) { /* a loop, not a call per candidate: every send may fail (a closing session) */
    if (b->s->phase == ZKW_PHASE_CLOSING) b->lost = true; /* nothing more can be sent with it */
    if (id->stopping || b->lost || b->next >= b->nfound || !zkw_identity_current(id)) return end_phase(b);
    /* No lock request of this sidecar may be outstanding while we decide. */
    for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
      if (zkw_session_in_barrier(s)) return b->wait(b);
    const struct zkw_lock_check *c = &b->found[b->next];
    int rc = zkw_inband_get(b->s, c->path, sweep_reread, b);
    if (rc == 0) {
      b->inflight++;
      return;
    }
    not_sent(b, c->zombie ? "read the zombie" : "read the lock", c, rc);
    b->next++;
  }
}

void zkw_sweepdel_start(struct zkw_sweep_batch *b) {
  if (b->nfound == 0) return b->done(b);
  if (zkw_identity_observing(b->id)) { /* nothing deleted, nothing held back, nothing to retry */
    for (size_t i = 0; i < b->nfound; i++)
      zkw_lockcheck_would_delete(b->id, ZKW_HISTORY_SWEEP, &b->found[i], "not deleted by the sweep");
    b->next = b->nfound;
    return b->done(b);
  }
  /* Zombie latch nodes last: the new JobManager leads once the first in
   * line goes, and by then no other zombie (a leader node it would
   * replace, a lock) is left in its way. */
  size_t n = 0;
  for (int latches = 0; latches < 2; latches++)
    for (size_t i = n; i < b->nfound; i++)
      if ((strstr(b->found[i].path, "-latch-") != NULL) == latches) {
        struct zkw_lock_check t = b->found[n];
        b->found[n++] = b->found[i];
        b->found[i] = t;
      }
  /* Sessions now hold back lock requests (zkw_sweep_holding). */
  b->deleting = true;
  b->next = 0;
  zkw_sweepdel_next(b);
}
