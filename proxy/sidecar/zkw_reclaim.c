/* zkw_reclaim.c: reclaim at create and at delete: a lock create that got
 * NODEEXISTS on a stale lock, or a delete that got NOTEMPTY because of
 * stale locks, deletes them and replays the request. The sweep is
 * zkw_sweep.c; what both share about a node, zkw_lockcheck.c.
 *
 * Every read and delete of a lock goes in-band (zkw_inband.h), on the
 * JobManager session's own connection, so it has exactly the JobManager's
 * rights under creator ACLs, digest, SASL and Kerberos. The registry session
 * is used only to read other identities' records (trusted only as
 * zkw_regtrust.h says) and their ACLs. A step that cannot do its
 * work is logged at warn, counted in zkwarden_reclaim_failures_total and
 * recorded in /v1/reclaims (step_failed); the JobManager then gets the reply
 * it would have got. */
#include "zkw_fault.h"
#include "zkw_reclaim.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zkw_history.h"
#include "zkw_identity.h"
#include "zkw_inband.h"
#include "zkw_lockcheck.h"
#include "zkw_lockrule.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_regtrust.h"
#include "zkw_replies.h"
#include "zkw_session.h"
#include "zkw_upstream.h"

/* ---------------------------------------------------------------- reclaim */

static const char NOT_A_LOCK[] = "not a lock (its name is not a UUID)";
static const char UNTRUSTED_RECORD[] =
    "a lock of an identity whose registry record is not trusted (see the warn "
    "line about it): its incarnation makes nothing stale";

struct reclaim {
  struct zkw_session *s;
  struct zkw_identity *id;
  uint32_t barrier; /* the barrier whose reply is withheld (zkw_session_barrier) */
  bool is_create;
  char path[1024];
  int pending; /* registry operations in flight */
  int count;
  struct zkw_lock_check *locks;
  const char *blocked; /* a child that is not a stale lock: why */
  char blocked_path[1024];
  bool deleting;
  int deleted;
};

static enum zkw_history_kind reclaim_kind(const struct reclaim *rcl) {
  return rcl->is_create ? ZKW_HISTORY_RECLAIM_CREATE : ZKW_HISTORY_RECLAIM_DELETE;
}

static void reclaim_finish(struct reclaim *rcl, bool replay) {
  struct zkw_session *s = rcl->s;
  uint32_t barrier = rcl->barrier;
  if (zkw_identity_observing(rcl->id)) replay = false; /* the JobManager gets its own reply */
  for (int i = 0; i < rcl->count; i++)
    free(rcl->locks[i].path);
  free(rcl->locks);
  free(rcl);
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing) return;
  /* Replayed: the JobManager gets the replay's reply. Not reclaimed: the
   * reply it would have had anyway. A session move in the meantime answered
   * the request with CONNECTIONLOSS: both do nothing. */
  if (!replay || zkw_session_replay(s, barrier) != 0) zkw_session_deliver(s, barrier);
}

/* The argument of a callback about one lock of a reclaim. */
struct lock_arg {
  struct reclaim *rcl;
  int index;
};

static void reclaim_deleted(void *arg, const struct zkw_zk_result *r);

/* One delete settled (or the sending loop ended): replay once all have. */
static void delete_settled(struct reclaim *rcl) {
  if (--rcl->pending) return;
  if (rcl->deleted) {
    if (rcl->is_create)
      ZKW_METRIC_INC(reclaims_create);
    else
      ZKW_METRIC_INC(reclaims_delete);
  }
  reclaim_finish(rcl, true);
}

static void reclaim_decide(struct reclaim *rcl) {
  struct zkw_session *s = rcl->s;
  if (s->phase == ZKW_PHASE_CLOSING) return reclaim_finish(rcl, false);
  if (rcl->blocked) {
    /* A delete whose children are not locks (Flink 2.x deleting
     * leader/job-<id> with its connection_info) is routine: debug. */
    zkw_slog(s, rcl->blocked == NOT_A_LOCK ? ZKW_LOG_DEBUG : ZKW_LOG_INFO, "%s %s: not reclaimed: %s is %s",
             rcl->is_create ? "create" : "delete", rcl->path, rcl->blocked_path, rcl->blocked);
    return reclaim_finish(rcl, false);
  }
  if (rcl->count == 0) return reclaim_finish(rcl, true); /* gone meanwhile: replay */
  if (zkw_identity_observing(rcl->id)) {
    char cost[120];
    snprintf(cost, sizeof cost, "not deleted: the JobManager got %s",
             rcl->is_create ? "NODEEXISTS" : "NOTEMPTY");
    for (int i = 0; i < rcl->count; i++)
      zkw_lockcheck_would_delete(rcl->id, reclaim_kind(rcl), &rcl->locks[i], cost);
    return reclaim_finish(rcl, false);
  }
  rcl->deleting = true;
  rcl->pending = 1; /* held by the loop below until every delete is sent */
  for (int i = 0; i < rcl->count; i++) {
    struct lock_arg *a = zkw_malloc(sizeof *a);
    if (a) *a = (struct lock_arg){rcl, i};
    int rc =
        a ? zkw_inband_delete(s, rcl->locks[i].path, rcl->locks[i].version, reclaim_deleted, a) : -ENOMEM;
    if (rc == 0) {
      rcl->pending++;
    } else {
      free(a);
      zkw_lockcheck_step_failed(s, reclaim_kind(rcl), "delete the stale lock", rcl->locks[i].path,
                                rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, &rcl->locks[i]);
    }
  }
  delete_settled(rcl);
}

static void reclaim_deleted(void *arg, const struct zkw_zk_result *r) {
  struct lock_arg *a = arg;
  struct reclaim *rcl = a->rcl;
  struct zkw_lock_check *c = &rcl->locks[a->index];
  free(a);
  if (r->rc == ZOK && c->zombie) {
    rcl->deleted++;
    zkw_lockcheck_zombie_deleted(rcl->s->srv->cfg->identity, c, rcl->s->up_name,
                                 rcl->is_create ? "reclaim at create" : "reclaim at delete");
  } else if (r->rc == ZOK) {
    rcl->deleted++;
    zkw_slog(rcl->s, ZKW_LOG_INFO,
             "reclaim at %s: deleted stale lock %s (identity %s, incarnation %" PRIu64 ", session 0x%" PRIx64
             ")",
             rcl->is_create ? "create" : "delete", c->path, c->tag.identity, c->tag.incarnation,
             (uint64_t)c->owner);
    zkw_history_record(
        &(struct zkw_action){reclaim_kind(rcl), c->path, c->version,
                             rcl->is_create ? "NODEEXISTS on a stale lock" : "NOTEMPTY: stale lock", c->owner,
                             c->tag.identity, c->tag.incarnation});
  } else {
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "delete the stale lock", c->path, r->rc, c);
  }
  delete_settled(rcl);
}

/* One lock's read settled: once all have, the vanished ones are dropped
 * and the reclaim decides. */
static void read_settled(struct reclaim *rcl) {
  if (--rcl->pending) return;
  int n = 0;
  for (int k = 0; k < rcl->count; k++)
    if (rcl->locks[k].path) rcl->locks[n++] = rcl->locks[k];
  rcl->count = n;
  reclaim_decide(rcl);
}

/* untrusted: the lock's identity's record is not trusted (its incarnation
 * makes nothing stale). */
static void check_done(struct reclaim *rcl, int i, uint64_t current, bool untrusted) {
  struct zkw_lock_check *c = &rcl->locks[i];
  c->why = untrusted ? UNTRUSTED_RECORD : zkw_lockcheck_why_not(c, rcl->s->session_id, current);
  /* Not stale, but its owner is a session of this identity proven dead: a
   * zombie, deleted like a stale lock. */
  if (c->why && zkw_lockcheck_zombie(rcl->id, c, rcl->s->session_id, true)) c->why = NULL;
  c->stale = c->why == NULL;
  if (!c->stale && !rcl->blocked) {
    rcl->blocked = c->why;
    snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%s", c->path);
  }
  read_settled(rcl);
}

/* Another identity's record, read to tell whether its lock is stale: its
 * incarnation counts only when only zkwarden's registry identity can change
 * the record (zkw_regtrust.h): a record anyone else could write (an `ip`
 * ACL, another user's, or no credentials at all) could name incarnation 999
 * and make a live JobManager's lock look stale. */
struct foreign {
  struct reclaim *rcl;
  int index;
  uint64_t current;
  struct Stat stat; /* the record as read: its ACL must be of the same node and ACL version */
  char node[600];
};

static void foreign_untrusted(struct reclaim *rcl, int i, const char *node, const char *why) {
  ZKW_METRIC_INC(untrusted_records);
  zkw_regtrust_say(rcl->locks[i].tag.identity, node, why);
  check_done(rcl, i, 0, true);
}

static void foreign_acl_read(void *arg, const struct zkw_zk_result *r) {
  struct foreign *f = arg;
  struct reclaim *rcl = f->rcl;
  int i = f->index;
  if (r->rc != ZOK && r->rc != ZNONODE) { /* not known this time: the lock is not stale */
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the registry ACL of the identity of",
                              rcl->locks[i].path, r->rc, &rcl->locks[i]);
    free(f);
    return check_done(rcl, i, 0, false);
  }
  char buf[ZKW_REGTRUST_WHY_MAX];
  const char *why = zkw_regtrust_why(r, true, buf, sizeof buf);
  if (!why && !zkw_regtrust_same(&r->stat, &f->stat)) why = "it changed while it was read";
  if (why)
    foreign_untrusted(rcl, f->index, f->node, why);
  else
    check_done(rcl, f->index, f->current, false);
  free(f);
}

static void foreign_record_read(void *arg, const struct zkw_zk_result *r) {
  struct foreign *f = arg;
  struct reclaim *rcl = f->rcl;
  int i = f->index;
  struct zkw_record rec;
  bool parsed = r->rc == ZOK && zkw_record_parse(r->data, r->data_len, &rec) == 0;
  f->current = parsed ? rec.incarnation : 0;
  memset(&rec, 0, sizeof rec);
  if (r->rc != ZOK && r->rc != ZNONODE)
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the registry record of the identity of",
                              rcl->locks[i].path, r->rc, &rcl->locks[i]);
  if (!parsed || f->current == 0) { /* nothing to trust: the lock is not stale */
    free(f);
    return check_done(rcl, i, 0, false);
  }
  f->stat = r->stat;
  struct zkw_identity *id = rcl->id;
  int zrc = zkw_zk_get_acl(id->zk, f->node, "acl-foreign", foreign_acl_read, f);
  if (zrc != ZOK) {
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the registry ACL of the identity of",
                              rcl->locks[i].path, zrc, &rcl->locks[i]);
    free(f);
    check_done(rcl, i, 0, false);
  }
}

static void lock_read(struct reclaim *rcl, int i, const struct zkw_zk_result *r) {
  struct zkw_lock_check *c = &rcl->locks[i];
  if (r->rc == ZNONODE) { /* gone meanwhile: nothing to delete */
    free(c->path);
    c->path = NULL;
    return read_settled(rcl);
  }
  if (r->rc != ZOK) {
    c->why = "unreadable";
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the lock", c->path, r->rc, NULL);
    if (!rcl->blocked) {
      rcl->blocked = "unreadable by the JobManager's session";
      snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%s", c->path);
    }
    return read_settled(rcl);
  }
  zkw_lockcheck_fill(c, r);
  struct zkw_identity *id = rcl->id;
  if (!c->tagged || strcmp(c->tag.identity, rcl->s->srv->cfg->identity) == 0)
    return check_done(rcl, i, zkw_identity_current(id), false);
  /* Another identity's lock: its own record says whether it moved on. */
  char node[600];
  snprintf(node, sizeof node, "%s/%s", id->root_identities, c->tag.identity);
  if (!id->srv->cfg->registry_auth[0]) return foreign_untrusted(rcl, i, node, ZKW_REGTRUST_NO_AUTH);
  if (!id->parents_trusted)
    return foreign_untrusted(rcl, i, node,
                             id->acl_pass_why[0]
                                 ? id->acl_pass_why
                                 : "the registry's parent nodes are not known zkwarden-only yet");
  struct foreign *f = zkw_malloc(sizeof *f);
  if (f) {
    *f = (struct foreign){.rcl = rcl, .index = i};
    snprintf(f->node, sizeof f->node, "%s", node);
  }
  int zrc = f ? zkw_zk_get(id->zk, node, false, foreign_record_read, f) : ZSYSTEMERROR;
  if (zrc != ZOK) {
    free(f);
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the registry record of the identity of",
                              c->path, zrc, c);
    return check_done(rcl, i, 0, false);
  }
}

static void lock_read_cb(void *arg, const struct zkw_zk_result *r) {
  struct lock_arg *a = arg;
  struct reclaim *rcl = a->rcl;
  int i = a->index;
  free(a);
  lock_read(rcl, i, r);
}

/* Reads every lock (a read that cannot be sent fails as a connection loss). */
static void read_locks(struct reclaim *rcl) {
  int n = rcl->count;
  rcl->pending = n + 1; /* held by the loop: a read that settles at once cannot end the reclaim under it */
  for (int i = 0; i < n; i++) {
    struct lock_arg *a = zkw_malloc(sizeof *a);
    if (a) *a = (struct lock_arg){rcl, i};
    int rc = a ? zkw_inband_get(rcl->s, rcl->locks[i].path, lock_read_cb, a) : -ENOMEM;
    if (rc != 0) {
      free(a);
      struct zkw_zk_result fake = {.rc = rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS};
      lock_read(rcl, i, &fake);
    }
  }
  read_settled(rcl);
}

static void children_read(void *arg, const struct zkw_zk_result *r) {
  struct reclaim *rcl = arg;
  if (r->rc == ZNONODE) return reclaim_finish(rcl, true); /* the parent is gone: replay */
  if (r->rc != ZOK) {
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "list the locks under", rcl->path, r->rc, NULL);
    return reclaim_finish(rcl, false);
  }
  rcl->locks = zkw_calloc((size_t)(r->child_count ? r->child_count : 1), sizeof *rcl->locks);
  if (!rcl->locks) return reclaim_finish(rcl, false);
  for (int i = 0; i < r->child_count; i++) {
    const char *name = r->children[i];
    if (!zkw_is_uuid((const uint8_t *)name, strlen(name))) {
      rcl->blocked = NOT_A_LOCK;
      snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%.700s/%.200s", rcl->path, name);
      return reclaim_decide(rcl);
    }
    size_t n = strlen(rcl->path) + strlen(name) + 2;
    rcl->locks[i].path = zkw_malloc(n);
    if (!rcl->locks[i].path) return reclaim_finish(rcl, false);
    snprintf(rcl->locks[i].path, n, "%s/%s", rcl->path, name);
    rcl->count = i + 1;
  }
  read_locks(rcl);
}

bool zkw_reclaim_start(struct zkw_session *s, bool is_create, struct zkw_bytes path) {
  struct zkw_identity *id = s->srv->policy;
  if (!zkw_sc(s)->incarnation || zkw_sc(s)->incarnation != zkw_identity_current(id) || path.len <= 0 ||
      (size_t)path.len >= sizeof((struct reclaim *)0)->path)
    return false;
  struct reclaim *rcl = zkw_calloc(1, sizeof *rcl);
  if (!rcl) return false;
  rcl->s = s;
  rcl->id = id;
  rcl->barrier = zkw_session_barrier(s);
  rcl->is_create = is_create;
  memcpy(rcl->path, path.p, (size_t)path.len);
  rcl->path[path.len] = 0;
  /* On the JobManager's own connection: no sync needed, it sees its writes. */
  if (!is_create) {
    if (zkw_inband_children(s, rcl->path, children_read, rcl) != 0) {
      free(rcl);
      return false;
    }
    zkw_session_ref(s);
    return true;
  }
  rcl->locks = zkw_calloc(1, sizeof *rcl->locks);
  struct lock_arg *a = zkw_malloc(sizeof *a);
  if (a) *a = (struct lock_arg){rcl, 0};
  rcl->count = rcl->pending = 1;
  if (!rcl->locks || !a || !(rcl->locks[0].path = zkw_strdup(rcl->path)) ||
      zkw_inband_get(s, rcl->path, lock_read_cb, a) != 0) {
    if (rcl->locks) free(rcl->locks[0].path);
    free(rcl->locks);
    free(a);
    free(rcl);
    return false;
  }
  zkw_session_ref(s);
  return true;
}
