/* zkw_reclaim.c: reclaim at create and at delete (see zkw_reclaim.h): a
 * lock create that got NODEEXISTS on a stale lock replaces that lock with
 * the JobManager's own; a delete that got NOTEMPTY because of stale locks
 * deletes them and replays the request. The sweep is zkw_sweep.c; what both
 * share about a node, zkw_lockcheck.c.
 *
 * Every read, delete and create goes in-band (zkw_inband.h), on the
 * JobManager session's own connection, so it has exactly the JobManager's
 * rights under creator ACLs, digest, SASL and Kerberos. The registry session
 * is used only to read other identities' records (trusted only as
 * zkw_regtrust.h says) and their ACLs, and in observe mode, which sends
 * nothing on the JobManager's connection, for the reads that tell what
 * sidecar mode would have done. A step that cannot do its work is logged at
 * warn, counted in zkwarden_reclaim_failures_total and recorded in
 * /v1/reclaims (step_failed); the JobManager then has the reply it would
 * have had direct. */
#include "zkw_fault.h"
#include "zkw_reclaim.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zkw_history.h"
#include "zkw_registry.h"
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

/* At create: the reads of the lock, the first included, when a step's
 * connection goes away under it (create_again). */
#define CREATE_TRIES 3

static const char NOT_A_LOCK[] = "not a lock (its name is not a UUID)";
static const char UNTRUSTED_RECORD[] =
    "a lock of an identity whose registry record is not trusted (see the warn "
    "line about it): its incarnation makes nothing stale";

struct zkw_reclaim {
  struct zkw_session *s;
  struct zkw_identity *id;
  struct zkw_reclaim *next; /* the session's reclaims at create (zkw_sc_session.reclaims) */
  uint32_t barrier;         /* at delete: the barrier whose reply is withheld (0: observe mode, none) */
  bool is_create;
  bool observing;   /* observe mode: read through the registry session, change nothing */
  bool released;    /* at create: the JobManager deleted the lock since its NODEEXISTS */
  int tries;        /* at create: reads of the lock begun (another after a connection loss) */
  uint8_t *request; /* at create: the JobManager's create (RequestHeader + CreateRequest, tagged) */
  size_t request_len;
  char path[1024];
  int pending; /* operations in flight */
  int count;
  struct zkw_lock_check *locks;
  const char *blocked; /* a child that is not a stale lock: why */
  char blocked_path[1024];
  bool deleting;
  int deleted;
};

static enum zkw_history_kind reclaim_kind(const struct zkw_reclaim *rcl) {
  return rcl->is_create ? ZKW_HISTORY_RECLAIM_CREATE : ZKW_HISTORY_RECLAIM_DELETE;
}

/* A reclaim at create is on its session's list until it ends, so that the
 * JobManager's delete of the lock (its release) is seen (zkw_reclaim_on_delete). */
static void unlink_reclaim(struct zkw_reclaim *rcl) {
  struct zkw_sc_session *sc = zkw_sc(rcl->s);
  for (struct zkw_reclaim **p = (struct zkw_reclaim **)&sc->reclaims; *p; p = &(*p)->next)
    if (*p == rcl) {
      *p = rcl->next;
      return;
    }
}

static void reclaim_finish(struct zkw_reclaim *rcl, bool replay) {
  struct zkw_session *s = rcl->s;
  uint32_t barrier = rcl->barrier;
  if (rcl->is_create) unlink_reclaim(rcl);
  for (int i = 0; i < rcl->count; i++)
    free(rcl->locks[i].path);
  free(rcl->locks);
  free(rcl->request);
  free(rcl);
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing || !barrier) return;
  /* At delete: replayed, the JobManager gets the replay's reply; not
   * reclaimed, the reply it would have had anyway. A session move in the
   * meantime answered the request: both do nothing. */
  if (!replay || zkw_session_replay(s, barrier) != 0) zkw_session_deliver(s, barrier);
}

/* Reads: in-band, on the JobManager's connection, or in observe mode through
 * the registry session. Return 0, or an error (then no callback). */
static int read_node(struct zkw_reclaim *rcl, const char *path, zkw_zk_cb cb, void *arg) {
  if (!rcl->observing) return zkw_inband_get(rcl->s, path, cb, arg);
  return rcl->id->zk ? zkw_zk_get(rcl->id->zk, path, false, cb, arg) : ZCONNECTIONLOSS;
}

static int read_children(struct zkw_reclaim *rcl, const char *path, zkw_zk_cb cb, void *arg) {
  if (!rcl->observing) return zkw_inband_children(rcl->s, path, cb, arg);
  return rcl->id->zk ? zkw_zk_children(rcl->id->zk, path, cb, arg) : ZCONNECTIONLOSS;
}

/* The argument of a callback about one lock of a reclaim. */
struct lock_arg {
  struct zkw_reclaim *rcl;
  int index;
};

static void reclaim_deleted(void *arg, const struct zkw_zk_result *r);

/* One delete settled (or the sending loop ended): replay once all have. */
static void delete_settled(struct zkw_reclaim *rcl) {
  if (--rcl->pending) return;
  if (rcl->deleted) ZKW_METRIC_INC(reclaims_delete);
  reclaim_finish(rcl, true);
}

static void reclaim_done_cb(void *arg, const struct zkw_zk_result *r);
static void lock_read_cb(void *arg, const struct zkw_zk_result *r);

/* At create: a step on the JobManager's connection got no answer (zerr: a
 * connection loss, a session move answered it; a timeout): its outcome is
 * unknown, and the JobManager, told it holds the lock, would hold nothing.
 * The lock is read again, in-band (once the session has moved: the in-band
 * queue sends it then), and the reclaim goes on from what that read shows,
 * the lost step's work included, unless the JobManager released the lock
 * meanwhile or CREATE_TRIES reads were begun. Returns true if it goes on. */
static bool create_again(struct zkw_reclaim *rcl, int zerr) {
  if (!rcl->is_create || rcl->observing || rcl->released || rcl->s->phase == ZKW_PHASE_CLOSING ||
      (zerr != ZCONNECTIONLOSS && zerr != ZOPERATIONTIMEOUT) || rcl->tries >= CREATE_TRIES)
    return false;
  struct zkw_lock_check *c = &rcl->locks[0];
  char *path = c->path ? c->path : zkw_strdup(rcl->path);
  *c = (struct zkw_lock_check){.path = path};
  rcl->count = rcl->pending = 1;
  rcl->blocked = NULL;
  struct lock_arg *a = path ? zkw_malloc(sizeof *a) : NULL;
  if (a) *a = (struct lock_arg){rcl, 0};
  if (!a || read_node(rcl, rcl->path, lock_read_cb, a) != 0) {
    free(a);
    return false;
  }
  rcl->tries++;
  zkw_slog(rcl->s, ZKW_LOG_INFO, "reclaim at create: %s: %s: reading it again", rcl->path,
           zerr == ZCONNECTIONLOSS ? "the connection went away under the last step"
                                   : "the last step timed out");
  return true;
}

/* At create: the JobManager holds the lock as far as it knows (its client
 * had NODEEXISTS); the node that was in the way is gone (or was swept
 * meanwhile): its create is made again, in-band, unless it released the
 * lock since. */
static void create_own(struct zkw_reclaim *rcl, const char *why) {
  if (rcl->observing || rcl->released) return reclaim_finish(rcl, false);
  zkw_slog(rcl->s, ZKW_LOG_INFO, "reclaim at create: %s: %s: creating the JobManager's lock", rcl->path, why);
  int rc = zkw_inband_create(rcl->s, rcl->request, rcl->request_len, reclaim_done_cb, rcl);
  if (rc != 0) {
    zkw_lockcheck_step_failed(rcl->s, ZKW_HISTORY_RECLAIM_CREATE, "create the JobManager's lock", rcl->path,
                              rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, NULL);
    reclaim_finish(rcl, false);
  }
}

static void replaced_cb(void *arg, const struct zkw_zk_result *r) {
  struct zkw_reclaim *rcl = arg;
  struct zkw_lock_check *c = &rcl->locks[0];
  if (r->rc == ZOK) {
    ZKW_METRIC_INC(reclaims_create);
    if (c->zombie) {
      zkw_lockcheck_zombie_deleted(rcl->s->srv->cfg->identity, c, rcl->s->up_name, "reclaim at create");
    } else {
      zkw_slog(rcl->s, ZKW_LOG_INFO,
               "reclaim at create: replaced stale lock %s (identity %s, incarnation %" PRIu64
               ", session 0x%" PRIx64 ") with the JobManager's",
               c->path, c->tag.identity, c->tag.incarnation, (uint64_t)c->owner);
      zkw_history_record(&(struct zkw_action){ZKW_HISTORY_RECLAIM_CREATE, c->path, c->version,
                                              "NODEEXISTS on a stale lock", c->owner, c->tag.identity,
                                              c->tag.incarnation});
    }
    return reclaim_finish(rcl, false);
  }
  if (r->rc == ZNONODE && r->failed_op == 0) return create_own(rcl, "the stale lock went meanwhile");
  zkw_lockcheck_step_failed(rcl->s, ZKW_HISTORY_RECLAIM_CREATE, "replace the stale lock", c->path, r->rc, c);
  if (!create_again(rcl, r->rc)) reclaim_finish(rcl, false);
}

static void reclaim_decide(struct zkw_reclaim *rcl) {
  struct zkw_session *s = rcl->s;
  if (s->phase == ZKW_PHASE_CLOSING) return reclaim_finish(rcl, false);
  if (rcl->blocked) {
    /* A delete whose children are not locks (Flink 2.x deleting
     * leader/job-<id> with its connection_info) is routine: debug. */
    zkw_slog(s, rcl->blocked == NOT_A_LOCK ? ZKW_LOG_DEBUG : ZKW_LOG_INFO, "%s %s: not reclaimed: %s is %s",
             rcl->is_create ? "create" : "delete", rcl->path, rcl->blocked_path, rcl->blocked);
    return reclaim_finish(rcl, false);
  }
  if (rcl->count == 0) { /* gone meanwhile */
    if (rcl->is_create) return create_own(rcl, "the lock in the way went meanwhile");
    return reclaim_finish(rcl, true); /* replay */
  }
  if (rcl->observing) {
    char cost[120];
    snprintf(cost, sizeof cost, "not deleted: the JobManager got %s",
             rcl->is_create ? "NODEEXISTS" : "NOTEMPTY");
    for (int i = 0; i < rcl->count; i++)
      zkw_lockcheck_would_delete(rcl->id, reclaim_kind(rcl), &rcl->locks[i], cost);
    return reclaim_finish(rcl, false);
  }
  if (rcl->is_create) {
    /* The stale lock and the JobManager's own in one multi: the path never
     * empty in between, and nothing done if the node changed since read. */
    if (rcl->released) return reclaim_finish(rcl, false);
    int rc = zkw_inband_replace(s, rcl->path, rcl->locks[0].version, rcl->request, rcl->request_len,
                                replaced_cb, rcl);
    if (rc != 0) {
      zkw_lockcheck_step_failed(s, ZKW_HISTORY_RECLAIM_CREATE, "replace the stale lock", rcl->path,
                                rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, &rcl->locks[0]);
      reclaim_finish(rcl, false);
    }
    return;
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

/* The JobManager's lock created again (create_own): said, then done. */
static void reclaim_done_cb(void *arg, const struct zkw_zk_result *r) {
  struct zkw_reclaim *rcl = arg;
  if (r->rc == ZOK)
    ZKW_METRIC_INC(reclaims_create);
  else
    zkw_lockcheck_step_failed(rcl->s, ZKW_HISTORY_RECLAIM_CREATE, "create the JobManager's lock", rcl->path,
                              r->rc, NULL);
  if (r->rc == ZOK || !create_again(rcl, r->rc)) reclaim_finish(rcl, false);
}

static void reclaim_deleted(void *arg, const struct zkw_zk_result *r) {
  struct lock_arg *a = arg;
  struct zkw_reclaim *rcl = a->rcl;
  struct zkw_lock_check *c = &rcl->locks[a->index];
  free(a);
  if (r->rc == ZOK && c->zombie) {
    rcl->deleted++;
    zkw_lockcheck_zombie_deleted(rcl->s->srv->cfg->identity, c, rcl->s->up_name, "reclaim at delete");
  } else if (r->rc == ZOK) {
    rcl->deleted++;
    zkw_slog(rcl->s, ZKW_LOG_INFO,
             "reclaim at delete: deleted stale lock %s (identity %s, incarnation %" PRIu64
             ", session 0x%" PRIx64 ")",
             c->path, c->tag.identity, c->tag.incarnation, (uint64_t)c->owner);
    zkw_history_record(&(struct zkw_action){reclaim_kind(rcl), c->path, c->version, "NOTEMPTY: stale lock",
                                            c->owner, c->tag.identity, c->tag.incarnation});
  } else {
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "delete the stale lock", c->path, r->rc, c);
  }
  delete_settled(rcl);
}

/* One lock's read settled: once all have, the vanished ones are dropped
 * and the reclaim decides. */
static void read_settled(struct zkw_reclaim *rcl) {
  if (--rcl->pending) return;
  int n = 0;
  for (int k = 0; k < rcl->count; k++)
    if (rcl->locks[k].path) rcl->locks[n++] = rcl->locks[k];
  rcl->count = n;
  reclaim_decide(rcl);
}

/* untrusted: the lock's identity's record is not trusted (its incarnation
 * makes nothing stale). */
static void check_done(struct zkw_reclaim *rcl, int i, uint64_t current, bool untrusted) {
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
  struct zkw_reclaim *rcl;
  int index;
  uint64_t current;
  struct Stat stat; /* the record as read: its ACL must be of the same node and ACL version */
  char node[600];
};

static void foreign_untrusted(struct zkw_reclaim *rcl, int i, const char *node, const char *why) {
  ZKW_METRIC_INC(untrusted_records);
  zkw_regtrust_say(rcl->locks[i].tag.identity, node, why);
  check_done(rcl, i, 0, true);
}

static void foreign_acl_read(void *arg, const struct zkw_zk_result *r) {
  struct foreign *f = arg;
  struct zkw_reclaim *rcl = f->rcl;
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
  struct zkw_reclaim *rcl = f->rcl;
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

static void lock_read(struct zkw_reclaim *rcl, int i, const struct zkw_zk_result *r) {
  struct zkw_lock_check *c = &rcl->locks[i];
  if (r->rc == ZNONODE) { /* gone meanwhile: nothing to delete */
    free(c->path);
    c->path = NULL;
    return read_settled(rcl);
  }
  if (r->rc != ZOK) {
    c->why = "unreadable";
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "read the lock", c->path, r->rc, NULL);
    if (create_again(rcl, r->rc)) return;
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
  struct zkw_reclaim *rcl = a->rcl;
  int i = a->index;
  free(a);
  lock_read(rcl, i, r);
}

/* Reads every lock (a read that cannot be sent fails as a connection loss). */
static void read_locks(struct zkw_reclaim *rcl) {
  int n = rcl->count;
  rcl->pending = n + 1; /* held by the loop: a read that settles at once cannot end the reclaim under it */
  for (int i = 0; i < n; i++) {
    struct lock_arg *a = zkw_malloc(sizeof *a);
    if (a) *a = (struct lock_arg){rcl, i};
    int rc = a ? read_node(rcl, rcl->locks[i].path, lock_read_cb, a) : -ENOMEM;
    if (rc != 0) {
      free(a);
      struct zkw_zk_result fake = {.rc = rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS};
      lock_read(rcl, i, &fake);
    }
  }
  read_settled(rcl);
}

/* The children could not be kept: a failed step like any other (logged at
 * warn, counted, recorded); the JobManager gets the reply it would have
 * had. */
static void out_of_memory(struct zkw_reclaim *rcl) {
  zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "keep (out of memory) the locks under", rcl->path,
                            ZSYSTEMERROR, NULL);
  reclaim_finish(rcl, false);
}

static void children_read(void *arg, const struct zkw_zk_result *r) {
  struct zkw_reclaim *rcl = arg;
  if (r->rc == ZNONODE) return reclaim_finish(rcl, true); /* the parent is gone: replay */
  if (r->rc != ZOK) {
    zkw_lockcheck_step_failed(rcl->s, reclaim_kind(rcl), "list the locks under", rcl->path, r->rc, NULL);
    return reclaim_finish(rcl, false);
  }
  rcl->locks = zkw_calloc((size_t)(r->child_count ? r->child_count : 1), sizeof *rcl->locks);
  if (!rcl->locks) return out_of_memory(rcl);
  for (int i = 0; i < r->child_count; i++) {
    const char *name = r->children[i];
    if (!zkw_is_uuid((const uint8_t *)name, strlen(name))) {
      rcl->blocked = NOT_A_LOCK;
      snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%.700s/%.200s", rcl->path, name);
      return reclaim_decide(rcl);
    }
    size_t n = strlen(rcl->path) + strlen(name) + 2;
    rcl->locks[i].path = zkw_malloc(n);
    if (!rcl->locks[i].path) return out_of_memory(rcl);
    snprintf(rcl->locks[i].path, n, "%s/%s", rcl->path, name);
    rcl->count = i + 1;
  }
  read_locks(rcl);
}

/* A reclaim for the session's current incarnation, or NULL. */
static struct zkw_reclaim *new_reclaim(struct zkw_session *s, bool is_create, struct zkw_bytes path) {
  struct zkw_identity *id = s->srv->policy;
  if (!zkw_sc(s)->incarnation || zkw_sc(s)->incarnation != zkw_identity_current(id) || path.len <= 0 ||
      (size_t)path.len >= sizeof((struct zkw_reclaim *)0)->path)
    return NULL;
  struct zkw_reclaim *rcl = zkw_calloc(1, sizeof *rcl);
  if (!rcl) return NULL;
  rcl->s = s;
  rcl->id = id;
  rcl->is_create = is_create;
  rcl->observing = zkw_identity_observing(id);
  memcpy(rcl->path, path.p, (size_t)path.len);
  rcl->path[path.len] = 0;
  return rcl;
}

bool zkw_reclaim_at_delete(struct zkw_session *s, struct zkw_bytes path, bool withheld) {
  struct zkw_reclaim *rcl = new_reclaim(s, false, path);
  if (!rcl) return false;
  rcl->barrier = withheld ? zkw_session_barrier(s) : 0;
  /* On the JobManager's own connection: no sync needed, it sees its writes. */
  if (read_children(rcl, rcl->path, children_read, rcl) != 0) {
    free(rcl);
    return false;
  }
  zkw_session_ref(s);
  return true;
}

void zkw_reclaim_at_create(struct zkw_session *s, struct zkw_bytes path, const uint8_t *request, size_t len) {
  struct zkw_reclaim *rcl = new_reclaim(s, true, path);
  if (!rcl) return;
  rcl->locks = zkw_calloc(1, sizeof *rcl->locks);
  rcl->request = zkw_malloc(len);
  struct lock_arg *a = zkw_malloc(sizeof *a);
  if (a) *a = (struct lock_arg){rcl, 0};
  rcl->count = rcl->pending = 1;
  rcl->tries = 1;
  if (!rcl->locks || !rcl->request || !a || !(rcl->locks[0].path = zkw_strdup(rcl->path)) ||
      read_node(rcl, rcl->path, lock_read_cb, a) != 0) {
    zkw_lockcheck_step_failed(s, ZKW_HISTORY_RECLAIM_CREATE, "read the lock", rcl->path, ZSYSTEMERROR, NULL);
    if (rcl->locks) free(rcl->locks[0].path);
    free(rcl->locks);
    free(rcl->request);
    free(a);
    free(rcl);
    return;
  }
  memcpy(rcl->request, request, len);
  rcl->request_len = len;
  struct zkw_sc_session *sc = zkw_sc(s);
  rcl->next = sc->reclaims;
  sc->reclaims = rcl;
  zkw_session_ref(s);
}

void zkw_reclaim_on_delete(struct zkw_session *s, struct zkw_bytes path) {
  for (struct zkw_reclaim *rcl = zkw_sc(s)->reclaims; rcl; rcl = rcl->next)
    if (strlen(rcl->path) == (size_t)path.len && memcmp(rcl->path, path.p, (size_t)path.len) == 0)
      rcl->released = true;
}
