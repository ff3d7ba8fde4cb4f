/* zkw_reclaim.c: stale-lock decisions, reclaim at create/delete, sweeps.
 *
 * Every read and delete of a lock goes in-band (zkw_inband.h), on the
 * JobManager session's own connection, so it has exactly the JobManager's
 * rights under creator ACLs, digest, SASL and Kerberos. The registry session
 * is used only to read other identities' records. A step that cannot do its
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
#include "zkw_lockrule.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_session.h"
#include "zkw_upstream.h"

#define SWEEP_MAX_NODES 200000
#define SWEEP_WINDOW    8      /* in-band reads in flight during a walk */
#define SWEEP_SOON_MS   1000   /* after a new incarnation */
#define SWEEP_WAIT_MS   20     /* while lock requests are still outstanding */
#define SWEEP_NO_JM_MS  1000   /* while no JobManager session is attached to read with */
#define ZOMBIE_MOVE_MS  600000 /* ZKWARDEN_ZOMBIE_MOVE: a server serving a zombie alone is tried last */

/* One node that may be a stale lock. */
struct lock_check {
  char *path;
  int version;
  int64_t czxid;
  int64_t owner;
  struct zkw_tag tag;
  bool tagged;
  bool stale;
  const char *why; /* not stale: why */
  bool zombie;     /* its owner is a session of this identity zkwarden saw end */
  struct zkw_dead_session dead;
};

/* Why a node is not a stale lock, or NULL if it is one. current is the
 * current incarnation of the tag's identity (0 if unknown). */
static const char *not_stale(const struct lock_check *c, int64_t asking_session, uint64_t current) {
  return zkw_lock_why_not_stale(c->tagged ? &c->tag : NULL, c->owner, asking_session, current);
}

/* Reads a node into a lock_check (from a get result). */
static void fill_check(struct lock_check *c, const struct zkw_zk_result *r) {
  c->version = r->stat.version;
  c->czxid = r->stat.czxid;
  c->owner = r->stat.ephemeralOwner;
  struct zkw_bytes data = {(const uint8_t *)r->data, r->data ? r->data_len : -1};
  c->tagged = zkw_tag_parse(data, &c->tag) == 0;
  c->tag.original = (struct zkw_bytes){NULL, -1}; /* points into r: not kept */
}

/* The failure reason of a ZooKeeper error (the same codes as on the wire). */
static enum zkw_reclaim_failure failure_of(int zerr) {
  switch (zerr) {
  case ZKW_ZERR_NOAUTH:
    return ZKW_RFAIL_NOAUTH;
  case ZKW_ZERR_NONODE:
    return ZKW_RFAIL_NONODE;
  case ZKW_ZERR_BADVERSION:
    return ZKW_RFAIL_BADVERSION;
  case ZKW_ZERR_CONNECTIONLOSS:
  case ZKW_ZERR_SESSIONEXPIRED:
  case ZKW_ZERR_SESSIONMOVED:
  case ZKW_ZERR_CLOSING:
    return ZKW_RFAIL_CONNECTION_LOSS;
  case ZKW_ZERR_OPERATIONTIMEOUT:
  case ZKW_ZERR_REQUESTTIMEOUT:
    return ZKW_RFAIL_TIMEOUT;
  default:
    return ZKW_RFAIL_OTHER;
  }
}

/* A step that could not do its work (zerr: the ZooKeeper error it got):
 * logged at warn with the path, counted by reason, recorded. c: the lock
 * concerned, if known. */
static void step_failed(const struct zkw_session *s, enum zkw_history_kind kind, const char *step,
                        const char *path, int zerr, const struct lock_check *c) {
  enum zkw_reclaim_failure f = failure_of(zerr);
  zkw_metrics.reclaim_failures[f]++;
  const char *reason = zkw_reclaim_failure_name(f);
  const char *what = zkw_history_kind_name(kind);
  if (s)
    zkw_slog(s, ZKW_LOG_WARN, "%s: cannot %s %s: %s (%s)", what, step, path, zkw_zk_error(zerr), reason);
  else
    zkw_log_warn("%s: cannot %s %s: %s (%s)", what, step, path, zkw_zk_error(zerr), reason);
  char why[ZKW_HISTORY_TEXT_MAX];
  snprintf(why, sizeof why, "failed (%s): cannot %s: %s", reason, step, zkw_zk_error(zerr));
  bool known = c && c->tagged;
  zkw_history_failed(kind, path, why, c ? c->owner : 0, known ? c->tag.identity : NULL,
                     known ? c->tag.incarnation : 0);
}

/* ------------------------------------------------------- observe mode */

/* Observe mode deletes nothing: each stale lock sidecar mode would delete
 * is reported once (sidecar mode would have deleted it the first time),
 * however often the JobManager or a sweep meets it again. */
#define WOULD_SEEN 1024
static int64_t would_seen[WOULD_SEEN]; /* czxids of the locks reported */
static unsigned would_seen_next;

static void would_delete(struct zkw_identity *id, enum zkw_history_kind kind, const struct lock_check *c,
                         const char *cost) {
  for (unsigned i = 0; i < WOULD_SEEN; i++)
    if (would_seen[i] == c->czxid && c->czxid) return;
  would_seen[would_seen_next++ % WOULD_SEEN] = c->czxid;
  char reason[ZKW_HISTORY_TEXT_MAX];
  if (c->zombie) kind = ZKW_HISTORY_ZOMBIE; /* as sidecar mode records it */
  snprintf(reason, sizeof reason, "%s; %s%s",
           c->zombie ? "zombie: its owner session ended" : "stale lock of a superseded incarnation", cost,
           zkw_identity_would_have_fenced(id, c->owner) ? " (the would-fence of its session removes it)"
                                                        : "");
  zkw_history_would(&(struct zkw_action){kind, c->path, c->version, reason, c->owner,
                                         c->tagged ? c->tag.identity : NULL,
                                         c->tagged ? c->tag.incarnation : 0});
}

/* ms since the epoch as 2026-01-02T03:04:05.678Z. */
static void format_ms(uint64_t ms, char *out, size_t cap) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
    snprintf(out, cap, "%" PRIu64 " ms", ms);
    return;
  }
  size_t n = strlen(out);
  snprintf(out + n, cap - n, ".%03uZ", (unsigned)(ms % 1000));
}

/* What a zombie means, for the operator (log lines and the alert say it). */
#define ZOMBIE_ADVICE                                                                                        \
  "the ensemble kept an ephemeral after its session ended: check the servers' sync (initLimit, syncLimit), " \
  "their versions against ZOOKEEPER-2355/4541/4712/4837/5010, and restart the server that still serves it"

/* A zombie of this identity deleted (at version c->version, on the
 * JobManager's connection to `server`): one warn line, the counter, a row. */
static void zombie_deleted_report(const char *identity, const struct lock_check *c, const char *server,
                                  const char *by) {
  char ended[40];
  format_ms(c->dead.ended_ms, ended, sizeof ended);
  ZKW_METRIC_INC(zombie_ephemerals);
  zkw_log_warn("identity %s: zombie ephemeral %s deleted (version %d, %s): its owner session 0x%" PRIx64
               " (incarnation %" PRIu64 ") ended at %s, seen by zkwarden, yet %s still served it: %s",
               identity, c->path, c->version, by, (uint64_t)c->owner, c->dead.incarnation, ended, server,
               ZOMBIE_ADVICE);
  char why[ZKW_HISTORY_TEXT_MAX];
  snprintf(why, sizeof why, "zombie: owner session ended %s; deleted (%s)", ended, by);
  zkw_history_add(ZKW_HISTORY_ZOMBIE, c->path, why, c->owner, identity, c->dead.incarnation);
}

/* ---------------------------------------------------------------- reclaim */

static const char NOT_A_LOCK[] = "not a lock (its name is not a UUID)";

struct reclaim {
  struct zkw_session *s;
  struct zkw_identity *id;
  bool is_create;
  char path[1024];
  int pending; /* registry operations in flight */
  int count;
  struct lock_check *locks;
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
  if (zkw_identity_observing(rcl->id)) replay = false; /* the JobManager gets its own reply */
  for (int i = 0; i < rcl->count; i++)
    free(rcl->locks[i].path);
  free(rcl->locks);
  free(rcl);
  bool closing = s->phase == ZKW_PHASE_CLOSING;
  zkw_session_unref(s); /* frees s only when closing */
  if (closing) return;
  /* Replayed: the JobManager gets the replay's reply. Not reclaimed: the
   * reply it would have had anyway. */
  if (!replay || zkw_session_replay(s) != 0) zkw_session_deliver(s);
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
      would_delete(rcl->id, reclaim_kind(rcl), &rcl->locks[i], cost);
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
      step_failed(s, reclaim_kind(rcl), "delete the stale lock", rcl->locks[i].path,
                  rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, &rcl->locks[i]);
    }
  }
  delete_settled(rcl);
}

static void reclaim_deleted(void *arg, const struct zkw_zk_result *r) {
  struct lock_arg *a = arg;
  struct reclaim *rcl = a->rcl;
  struct lock_check *c = &rcl->locks[a->index];
  free(a);
  if (r->rc == ZOK && c->zombie) {
    rcl->deleted++;
    zombie_deleted_report(rcl->s->srv->cfg->identity, c, rcl->s->up_name,
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
    step_failed(rcl->s, reclaim_kind(rcl), "delete the stale lock", c->path, r->rc, c);
  }
  delete_settled(rcl);
}

/* The identity's current incarnation for a foreign tag. */

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

static void check_done(struct reclaim *rcl, int i, uint64_t current) {
  struct lock_check *c = &rcl->locks[i];
  c->why = not_stale(c, rcl->s->session_id, current);
  /* Not stale, but its owner is a session of this identity that zkwarden
   * saw end: a zombie, deleted like a stale lock. */
  const struct zkw_dead_session *d = c->why && c->owner && c->owner != rcl->s->session_id
                                         ? zkw_identity_dead_session(rcl->id, c->owner)
                                         : NULL;
  if (d) {
    c->zombie = true;
    c->dead = *d;
    c->why = NULL;
  }
  c->stale = c->why == NULL;
  if (!c->stale && !rcl->blocked) {
    rcl->blocked = c->why;
    snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%s", c->path);
  }
  read_settled(rcl);
}

static void foreign_record_read(void *arg, const struct zkw_zk_result *r) {
  struct lock_arg *fr = arg;
  struct reclaim *rcl = fr->rcl;
  int i = fr->index;
  free(fr);
  struct zkw_record rec;
  uint64_t current = 0;
  if (r->rc == ZOK && zkw_record_parse(r->data, r->data_len, &rec) == 0) current = rec.incarnation;
  if (r->rc != ZOK && r->rc != ZNONODE)
    step_failed(rcl->s, reclaim_kind(rcl), "read the registry record of the identity of", rcl->locks[i].path,
                r->rc, &rcl->locks[i]);
  memset(&rec, 0, sizeof rec);
  check_done(rcl, i, current);
}

static void lock_read(struct reclaim *rcl, int i, const struct zkw_zk_result *r) {
  struct lock_check *c = &rcl->locks[i];
  if (r->rc == ZNONODE) { /* gone meanwhile: nothing to delete */
    free(c->path);
    c->path = NULL;
    return read_settled(rcl);
  }
  if (r->rc != ZOK) {
    c->why = "unreadable";
    step_failed(rcl->s, reclaim_kind(rcl), "read the lock", c->path, r->rc, NULL);
    if (!rcl->blocked) {
      rcl->blocked = "unreadable by the JobManager's session";
      snprintf(rcl->blocked_path, sizeof rcl->blocked_path, "%s", c->path);
    }
    return read_settled(rcl);
  }
  fill_check(c, r);
  struct zkw_identity *id = rcl->id;
  if (!c->tagged || strcmp(c->tag.identity, rcl->s->srv->cfg->identity) == 0)
    return check_done(rcl, i, zkw_identity_current(id));
  /* Another identity's lock: its own record says whether it moved on. */
  char node[600];
  snprintf(node, sizeof node, "%s/%s", id->root_identities, c->tag.identity);
  struct lock_arg *fr = zkw_malloc(sizeof *fr);
  if (fr) *fr = (struct lock_arg){rcl, i};
  int zrc = fr ? zkw_zk_get(id->zk, node, false, foreign_record_read, fr) : ZSYSTEMERROR;
  if (zrc != ZOK) {
    free(fr);
    step_failed(rcl->s, reclaim_kind(rcl), "read the registry record of the identity of", c->path, zrc, c);
    return check_done(rcl, i, 0);
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
    step_failed(rcl->s, reclaim_kind(rcl), "list the locks under", rcl->path, r->rc, NULL);
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

/* ---------------------------------------------------------------- sweep */

struct sweep {
  struct zkw_identity *id;
  struct zkw_session *s; /* the JobManager session it reads and deletes on; NULL once lost */
  int64_t session_id;
  char **queue; /* paths to list, FIFO */
  size_t qhead, qlen, qcap;
  struct lock_check *found; /* candidates */
  size_t nfound, capfound;
  size_t visited;
  int inflight;
  /* Zombies: checked while this identity or another has sessions known
   * dead; others: the dead lists of the other identities' records. */
  bool zombies;
  int reg_pending; /* registry reads of other records (counted in inflight too) */
  struct other_dead *others;
  size_t nothers, capothers;
  int zombies_deleted;
  /* Delete phase: sessions hold back lock requests meanwhile. */
  bool deleting;
  size_t next;
  int deleted;
};

static struct sweep *current_sweep;

/* A session of another identity that its sidecar saw end. */
struct other_dead {
  char identity[ZKW_HISTORY_TEXT_MAX];
  struct zkw_dead_session d;
};

/* Other identities' zombies already reported (by czxid): one warn line and
 * one count per node, not one per sweep. */
#define REPORTED_KEPT 256
static int64_t reported[REPORTED_KEPT];
static unsigned reported_next;

static bool report_once(int64_t czxid) {
  for (unsigned i = 0; i < REPORTED_KEPT; i++)
    if (reported[i] == czxid) return false;
  reported[reported_next++ % REPORTED_KEPT] = czxid;
  return true;
}

/* A node whose owner is a session some sidecar saw end: this identity's
 * (c->zombie set: the sweep deletes it) or another's (reported once, left
 * to that identity's own sidecar). */
static void classify_zombie(struct sweep *sw, struct lock_check *c) {
  if (!sw->zombies || c->owner == 0 || c->owner == sw->session_id) return;
  const struct zkw_dead_session *d = zkw_identity_dead_session(sw->id, c->owner);
  if (d) {
    c->zombie = true;
    c->dead = *d;
    return;
  }
  for (size_t i = 0; i < sw->nothers; i++) {
    const struct other_dead *o = &sw->others[i];
    if (o->d.session != c->owner || !report_once(c->czxid)) continue;
    char ended[40];
    format_ms(o->d.ended_ms, ended, sizeof ended);
    ZKW_METRIC_INC(zombie_ephemerals);
    zkw_log_warn("identity %s: zombie ephemeral %s of identity %s: its owner session 0x%" PRIx64
                 " (incarnation %" PRIu64 ") ended at %s, seen by that identity's sidecar, and %s still "
                 "serves it; left to that sidecar: %s",
                 sw->id->srv->cfg->identity, c->path, o->identity, (uint64_t)o->d.session, o->d.incarnation,
                 ended, sw->s ? sw->s->up_name : "the server", ZOMBIE_ADVICE);
    char why[ZKW_HISTORY_TEXT_MAX];
    snprintf(why, sizeof why, "zombie of another identity (session ended %s): reported, not deleted", ended);
    zkw_history_add(ZKW_HISTORY_ZOMBIE, c->path, why, c->owner, o->identity, o->d.incarnation);
    return;
  }
}

bool zkw_sweep_holding(const struct zkw_identity *id) {
  return current_sweep && current_sweep->id == id && current_sweep->deleting;
}

static void sweep_wait_cb(uv_timer_t *t);

static void schedule_periodic(struct zkw_identity *id) {
  uint32_t every = id->srv->cfg->sweep_interval_s;
  if (every && !id->stopping) uv_timer_start(&id->sweep_timer, sweep_wait_cb, (uint64_t)every * 1000, 0);
}

/* The session of this identity's current incarnation, attached now. */
static struct zkw_session *jm_session(struct zkw_identity *id) {
  uint64_t current = zkw_identity_current(id);
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->phase == ZKW_PHASE_ACTIVE && zkw_sc(s)->incarnation && zkw_sc(s)->incarnation == current) return s;
  return NULL;
}

static void sweep_free(struct sweep *sw) {
  for (size_t i = sw->qhead; i < sw->qlen; i++)
    free(sw->queue[i]);
  free(sw->queue);
  for (size_t i = 0; i < sw->nfound; i++)
    free(sw->found[i].path);
  free(sw->found);
  free(sw->others);
  struct zkw_identity *id = sw->id;
  bool lost = !sw->s;
  if (lost)
    zkw_log_warn("identity %s: sweep cut short: the JobManager session closed (%zu node(s) visited, %d stale "
                 "lock(s) deleted); it runs again once a JobManager session is attached",
                 id->srv->cfg->identity, sw->visited, sw->deleted);
  else
    zkw_log_info("identity %s: sweep done: %zu node(s) visited, %d stale lock(s) and %d zombie(s) deleted",
                 id->srv->cfg->identity, sw->visited, sw->deleted - sw->zombies_deleted, sw->zombies_deleted);
  if (sw->s) {
    zkw_session_unref(sw->s);
  }
  free(sw);
  current_sweep = NULL;
  id->sweeping = false;
  if ((lost || id->sweep_again) && !id->stopping)
    zkw_sweep_soon(id);
  else
    schedule_periodic(id);
  /* Sessions held back their lock requests during the deletes. */
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->phase != ZKW_PHASE_CLOSING) zkw_session_resume(s);
}

/* A sweep step's result: false (and the sweep loses its session) when the
 * JobManager session is gone, else counts a failure other than NONODE. */
static bool sweep_result(struct sweep *sw, const char *step, const char *path, int zerr) {
  if (!sw->s) return false;
  if (sw->s->phase == ZKW_PHASE_CLOSING) {
    if (zerr != ZOK) step_failed(NULL, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
    zkw_session_unref(sw->s);
    sw->s = NULL;
    return false;
  }
  if (zerr != ZOK && zerr != ZNONODE) step_failed(sw->s, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
  return true;
}

static int push_path(struct sweep *sw, const char *path) {
  if (sw->qlen == sw->qcap) {
    size_t cap = sw->qcap ? sw->qcap * 2 : 64;
    char **q = zkw_realloc(sw->queue, cap * sizeof *q);
    if (!q) return -1;
    sw->queue = q;
    sw->qcap = cap;
  }
  if (!(sw->queue[sw->qlen] = zkw_strdup(path))) return -1;
  sw->qlen++;
  return 0;
}

static void sweep_pump(struct sweep *sw);
static void sweep_delete_next(struct sweep *sw);

struct sweep_read {
  struct sweep *sw;
  char *path;
};

static void sweep_lock_read(void *arg, const struct zkw_zk_result *r) {
  struct sweep_read *a = arg;
  struct sweep *sw = a->sw;
  sw->inflight--;
  struct lock_check c = {.path = a->path};
  free(a);
  if (sweep_result(sw, "read the lock", c.path, r->rc) && r->rc == ZOK) {
    fill_check(&c, r);
    const char *name = strrchr(c.path, '/');
    name = name ? name + 1 : c.path;
    classify_zombie(sw, &c);
    if (c.zombie || (zkw_is_uuid((const uint8_t *)name, strlen(name)) && c.tagged &&
                     strcmp(c.tag.identity, sw->id->srv->cfg->identity) == 0 &&
                     !not_stale(&c, sw->session_id, zkw_identity_current(sw->id)))) {
      if (sw->nfound == sw->capfound) {
        size_t cap = sw->capfound ? sw->capfound * 2 : 16;
        struct lock_check *f = zkw_realloc(sw->found, cap * sizeof *f);
        if (f) sw->found = f, sw->capfound = cap;
      }
      if (sw->nfound < sw->capfound) {
        sw->found[sw->nfound++] = c;
        c.path = NULL;
      }
    }
  }
  free(c.path);
  sweep_pump(sw);
}

static bool is_lock_root(const struct sweep *sw, const char *path) {
  const struct zkw_config *cfg = sw->id->srv->cfg;
  for (int i = 0; i < cfg->lock_roots.count; i++)
    if (strcmp(cfg->lock_roots.root[i], path) == 0) return true;
  return false;
}

static void sweep_children_read(void *arg, const struct zkw_zk_result *r) {
  struct sweep_read *a = arg;
  struct sweep *sw = a->sw;
  sw->inflight--;
  if (sweep_result(sw, "list the children of", a->path, r->rc) && r->rc == ZOK) {
    /* A leaf that is not named as a lock (a latch node, a connection_info)
     * may be a zombie: read its owner. */
    if (r->child_count == 0 && sw->zombies && !is_lock_root(sw, a->path) &&
        zkw_inband_get(sw->s, a->path, sweep_lock_read, a) == 0) {
      sw->inflight++;
      return sweep_pump(sw);
    }
    for (int i = 0; i < r->child_count && sw->visited < SWEEP_MAX_NODES && sw->s; i++) {
      const char *name = r->children[i];
      size_t n = strlen(a->path) + strlen(name) + 2;
      char *child = zkw_malloc(n);
      if (!child) break;
      snprintf(child, n, "%s%s%s", a->path, strcmp(a->path, "/") == 0 ? "" : "/", name);
      sw->visited++;
      if (zkw_is_uuid((const uint8_t *)name, strlen(name))) {
        struct sweep_read *b = zkw_malloc(sizeof *b);
        if (b) *b = (struct sweep_read){sw, child};
        if (b && zkw_inband_get(sw->s, child, sweep_lock_read, b) == 0) {
          sw->inflight++;
          continue;
        }
        free(b);
        free(child);
      } else {
        if (push_path(sw, child) != 0) {
          free(child);
          break;
        }
        free(child);
      }
    }
  }
  free(a->path);
  free(a);
  sweep_pump(sw);
}

/* Lists queued paths, at most SWEEP_WINDOW reads in flight; when the walk
 * is over, goes on to the deletes. */
static void sweep_pump(struct sweep *sw) {
  if (sw->id->stopping || !sw->s) {
    if (sw->inflight == 0) sweep_free(sw);
    return;
  }
  /* The walk begins once the other identities' dead lists are known. */
  while (sw->reg_pending == 0 && sw->inflight < SWEEP_WINDOW && sw->qhead < sw->qlen && sw->s) {
    char *path = sw->queue[sw->qhead];
    sw->queue[sw->qhead++] = NULL;
    struct sweep_read *a = zkw_malloc(sizeof *a);
    if (a) *a = (struct sweep_read){sw, path};
    if (a && zkw_inband_children(sw->s, path, sweep_children_read, a) == 0) {
      sw->inflight++;
    } else {
      free(a);
      free(path);
    }
  }
  if (sw->inflight || sw->qhead < sw->qlen) return;
  if (sw->nfound == 0) {
    zkw_log_debug("identity %s: sweep found no stale lock (%zu nodes)", sw->id->srv->cfg->identity,
                  sw->visited);
    sweep_free(sw);
    return;
  }
  if (zkw_identity_observing(sw->id)) { /* nothing deleted, nothing held back */
    for (size_t i = 0; i < sw->nfound; i++)
      would_delete(sw->id, ZKW_HISTORY_SWEEP, &sw->found[i], "not deleted by the sweep");
    sweep_free(sw);
    return;
  }
  /* Zombie latch nodes last: the new JobManager leads once the first in
   * line goes, and by then no other zombie (a leader node it would
   * replace, a lock) is left in its way. */
  size_t n = 0;
  for (int latches = 0; latches < 2; latches++)
    for (size_t i = n; i < sw->nfound; i++)
      if ((strstr(sw->found[i].path, "-latch-") != NULL) == latches) {
        struct lock_check t = sw->found[n];
        sw->found[n++] = sw->found[i];
        sw->found[i] = t;
      }
  /* Delete phase: sessions now hold back lock requests (zkw_sweep_holding). */
  sw->deleting = true;
  sw->next = 0;
  sweep_delete_next(sw);
}

static void sweep_deleted(void *arg, const struct zkw_zk_result *r);
static void zombie_deleted(struct sweep *sw, const struct lock_check *c, int rc);

static void sweep_reread(void *arg, const struct zkw_zk_result *r) {
  struct sweep *sw = arg;
  struct lock_check *c = &sw->found[sw->next];
  sw->inflight--;
  struct lock_check now = {.path = c->path};
  if (!sweep_result(sw, "read the lock", c->path, r->rc)) return sweep_free(sw);
  if (r->rc == ZOK) fill_check(&now, r);
  /* Still the same node, still stale (or still a dead session's): delete
   * exactly that version. */
  bool still = r->rc == ZOK && now.czxid == c->czxid &&
               (c->zombie ? now.owner == c->owner && zkw_identity_dead_session(sw->id, now.owner) != NULL
                          : now.tagged && strcmp(now.tag.identity, sw->id->srv->cfg->identity) == 0 &&
                                !not_stale(&now, sw->session_id, zkw_identity_current(sw->id)));
  if (still && zkw_inband_delete(sw->s, c->path, now.version, sweep_deleted, sw) == 0) {
    c->version = now.version;
    sw->inflight++;
    c->tag = now.tag;
    c->owner = now.owner;
    c->version = now.version;
    return;
  }
  sw->next++;
  sweep_delete_next(sw);
}

/* A zombie's delete got NONODE: if the JobManager's server still serves
 * the same node, it exists in that server's tree alone. */
static void zombie_recheck(void *arg, const struct zkw_zk_result *r) {
  struct sweep *sw = arg;
  struct lock_check *c = &sw->found[sw->next];
  sw->inflight--;
  if (!sweep_result(sw, "read the zombie", c->path, r->rc)) return sweep_free(sw);
  if (r->rc == ZOK && r->stat.czxid == c->czxid)
    zombie_deleted(sw, c, ZNONODE);
  else
    zkw_log_debug("identity %s: zombie %s went before the sweep's delete", sw->id->srv->cfg->identity,
                  c->path);
  sw->next++;
  sweep_delete_next(sw);
}

static void sweep_deleted(void *arg, const struct zkw_zk_result *r) {
  struct sweep *sw = arg;
  struct lock_check *c = &sw->found[sw->next];
  sw->inflight--;
  if (!sweep_result(sw, c->zombie ? "delete the zombie" : "delete the stale lock", c->path, r->rc))
    return sweep_free(sw);
  if (c->zombie && r->rc == ZNONODE && zkw_inband_get(sw->s, c->path, zombie_recheck, sw) == 0) {
    sw->inflight++; /* does the JobManager's server still show it? */
    return;
  }
  if (c->zombie) {
    zombie_deleted(sw, c, r->rc);
  } else if (r->rc == ZOK) {
    sw->deleted++;
    ZKW_METRIC_INC(stale_locks_swept);
    zkw_log_info("identity %s: sweep deleted stale lock %s (incarnation %" PRIu64 ", session 0x%" PRIx64 ")",
                 sw->id->srv->cfg->identity, c->path, c->tag.incarnation, (uint64_t)c->owner);
    zkw_history_record(&(struct zkw_action){ZKW_HISTORY_SWEEP, c->path, c->version,
                                            "stale lock of a superseded incarnation", c->owner,
                                            c->tag.identity, c->tag.incarnation});
  } else if (r->rc == ZNONODE) { /* gone before our delete: not by us */
    step_failed(sw->s, ZKW_HISTORY_SWEEP, "delete the stale lock", c->path, r->rc, c);
  }
  sw->next++;
  sweep_delete_next(sw);
}

/* A zombie of this identity deleted (or its delete failed: rc). */
static void zombie_deleted(struct sweep *sw, const struct lock_check *c, int rc) {
  const char *identity = sw->id->srv->cfg->identity;
  char ended[40];
  format_ms(c->dead.ended_ms, ended, sizeof ended);
  if (rc == ZOK) {
    sw->deleted++;
    sw->zombies_deleted++;
    zombie_deleted_report(identity, c, sw->s->up_name, "sweep");
  } else if (rc == ZNONODE) {
    /* The JobManager's server still shows it, the quorum has no such
     * node: a zombie in one server's tree alone. Deleting cannot end it;
     * the next sweep looks again (no retry loop). */
    if (report_once(c->czxid)) ZKW_METRIC_INC(zombie_ephemerals);
    zkw_log_warn("identity %s: zombie ephemeral %s of session 0x%" PRIx64 " (ended at %s) is served by %s "
                 "alone: its delete got NONODE, the quorum has no such node; restart %s (%s)",
                 identity, c->path, (uint64_t)c->owner, ended, sw->s->up_name, sw->s->up_name, ZOMBIE_ADVICE);
    if (sw->id->srv->cfg->zombie_move && sw->s->srv->cfg->upstream_count > 1) {
      /* The JobManager's next connection goes to another server. */
      zkw_upstream_suspect(sw->s, ZOMBIE_MOVE_MS);
      zkw_log_warn("identity %s: %s is tried after the other servers for the next %d min "
                   "(ZKWARDEN_ZOMBIE_MOVE=on)",
                   identity, sw->s->up_name, ZOMBIE_MOVE_MS / 60000);
    }
    char why[ZKW_HISTORY_TEXT_MAX];
    snprintf(why, sizeof why, "zombie on %.100s alone (NONODE from the quorum): not deleted", sw->s->up_name);
    zkw_history_add(ZKW_HISTORY_ZOMBIE, c->path, why, c->owner, identity, c->dead.incarnation);
  }
}

static void sweep_delete_next(struct sweep *sw) {
  struct zkw_identity *id = sw->id;
  if (id->stopping || !sw->s || sw->next >= sw->nfound || !zkw_identity_current(id)) {
    sweep_free(sw);
    return;
  }
  /* No lock request of this sidecar may be outstanding while we decide. */
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (zkw_session_in_barrier(s)) {
      uv_timer_start(&id->sweep_timer, sweep_wait_cb, SWEEP_WAIT_MS, 0);
      return;
    }
  if (zkw_inband_get(sw->s, sw->found[sw->next].path, sweep_reread, sw) == 0) {
    sw->inflight++;
    return;
  }
  sw->next++;
  sweep_delete_next(sw);
}

static void sweep_start(struct zkw_identity *id);

static void sweep_wait_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  if (current_sweep && current_sweep->id == id)
    sweep_delete_next(current_sweep);
  else
    sweep_start(id);
}

/* One other identity's record read: its dead sessions. */
static void other_record_read(void *arg, const struct zkw_zk_result *r) {
  struct sweep_read *a = arg;
  struct sweep *sw = a->sw;
  sw->inflight--;
  sw->reg_pending--;
  struct zkw_record rec;
  if (r->rc == ZOK && zkw_record_parse(r->data, r->data_len, &rec) == 0) {
    for (int i = 0; i < rec.ndead; i++) {
      if (sw->nothers == sw->capothers) {
        size_t cap = sw->capothers ? sw->capothers * 2 : 16;
        struct other_dead *o = realloc(sw->others, cap * sizeof *o);
        if (!o) break;
        sw->others = o;
        sw->capothers = cap;
      }
      struct other_dead *o = &sw->others[sw->nothers++];
      snprintf(o->identity, sizeof o->identity, "%s", a->path);
      o->d = rec.dead_sessions[i];
    }
    if (rec.ndead) sw->zombies = true;
  }
  memset(&rec, 0, sizeof rec);
  free(a->path);
  free(a);
  sweep_pump(sw);
}

/* The identities of the registry: each other one's record is read. */
static void identities_listed(void *arg, const struct zkw_zk_result *r) {
  struct sweep *sw = arg;
  sw->inflight--;
  sw->reg_pending--;
  for (int i = 0; r->rc == ZOK && i < r->child_count; i++) {
    const char *name = r->children[i];
    if (strcmp(name, sw->id->srv->cfg->identity) == 0) continue;
    char node[700];
    snprintf(node, sizeof node, "%s/%s", sw->id->root_identities, name);
    struct sweep_read *b = malloc(sizeof *b);
    if (b) *b = (struct sweep_read){sw, strdup(name)};
    if (b && b->path && zkw_zk_get(sw->id->zk, node, false, other_record_read, b) == ZOK) {
      sw->inflight++;
      sw->reg_pending++;
      continue;
    }
    if (b) free(b->path);
    free(b);
  }
  if (r->rc != ZOK && r->rc != ZNONODE)
    zkw_log_warn("identity %s: sweep: cannot list the other identities under %s: %s (their zombies are not "
                 "reported in this sweep)",
                 sw->id->srv->cfg->identity, sw->id->root_identities, zkw_zk_error(r->rc));
  sweep_pump(sw);
}

static void sweep_start(struct zkw_identity *id) {
  const struct zkw_config *cfg = id->srv->cfg;
  if (id->sweeping || id->stopping) return;
  id->sweep_again = false;
  if (!zkw_identity_current(id)) return schedule_periodic(id);
  /* Reads and deletes go on the JobManager's session: wait for one. */
  struct zkw_session *s = jm_session(id);
  if (!s) {
    uv_timer_start(&id->sweep_timer, sweep_wait_cb, SWEEP_NO_JM_MS, 0);
    return;
  }
  struct sweep *sw = zkw_calloc(1, sizeof *sw);
  if (!sw) {
    zkw_log_warn("identity %s: out of memory starting a sweep; trying again in %d ms", cfg->identity,
                 SWEEP_NO_JM_MS);
    uv_timer_start(&id->sweep_timer, sweep_wait_cb, SWEEP_NO_JM_MS, 0);
    return;
  }
  sw->id = id;
  sw->s = s;
  sw->session_id = s->session_id;
  zkw_session_ref(s); /* until the sweep ends or the session closes (sweep_result) */
  for (int i = 0; i < cfg->lock_roots.count; i++)
    if (push_path(sw, cfg->lock_roots.root[i]) != 0) break;
  id->sweeping = true;
  current_sweep = sw;
  /* Zombies: this identity's dead sessions, and (for the report) the
   * other identities' ones from their records. */
  sw->zombies = id->dead.ndead > 0;
  if (id->zk && id->state == ZKW_REG_OWNER &&
      zkw_zk_children(id->zk, id->root_identities, identities_listed, sw) == ZOK) {
    sw->inflight++;
    sw->reg_pending++;
  }
  sweep_pump(sw);
}

void zkw_sweep_soon(struct zkw_identity *id) {
  if (id->sweeping) {
    id->sweep_again = true; /* a new incarnation: look again once this sweep ends */
    return;
  }
  uv_timer_start(&id->sweep_timer, sweep_wait_cb, SWEEP_SOON_MS, 0);
}
