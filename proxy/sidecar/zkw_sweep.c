/* zkw_sweep.c: sweeps of the lock roots, soon after a new incarnation and
 * every ZKWARDEN_SWEEP_INTERVAL_S: this identity's stale locks that fencing
 * could not remove and its zombies are deleted at their exact version while
 * the JobManager's lock requests are held back; other identities' zombies
 * are reported. Reclaim at create and delete is zkw_reclaim.c.
 *
 * Every read and delete of a lock goes in-band (zkw_inband.h), on the
 * JobManager session's own connection, so it has exactly the JobManager's
 * rights under creator ACLs, digest, SASL and Kerberos. The registry session
 * is used only to read other identities' records. A step that cannot do its
 * work is logged at warn, counted in zkwarden_reclaim_failures_total and
 * recorded in /v1/reclaims (step_failed); the JobManager then gets the reply
 * it would have got. */
#include "zkw_fault.h"
#include "zkw_sweep.h"

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
#include "zkw_session.h"
#include "zkw_upstream.h"

#define SWEEP_MAX_NODES 200000
#define SWEEP_WINDOW    8      /* in-band reads in flight during a walk */
#define SWEEP_SOON_MS   1000   /* after a new incarnation */
#define SWEEP_WAIT_MS   20     /* while lock requests are still outstanding */
#define SWEEP_NO_JM_MS  1000   /* while no JobManager session is attached to read with */
#define ZOMBIE_MOVE_MS  600000 /* ZKWARDEN_ZOMBIE_MOVE: a server serving a zombie alone is tried last */

/* ---------------------------------------------------------------- sweep */

struct sweep {
  struct zkw_identity *id;
  struct zkw_session *s; /* the JobManager session it reads and deletes on; NULL once lost */
  int64_t session_id;
  char **queue; /* paths to list, FIFO */
  size_t qhead, qlen, qcap;
  struct zkw_lock_check *found; /* candidates */
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
static void classify_zombie(struct sweep *sw, struct zkw_lock_check *c) {
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
    zkw_lockcheck_format_ms(o->d.ended_ms, ended, sizeof ended);
    ZKW_METRIC_INC(zombie_ephemerals);
    zkw_log_warn("identity %s: zombie ephemeral %s of identity %s: its owner session 0x%" PRIx64
                 " (incarnation %" PRIu64 ") ended at %s, seen by that identity's sidecar, and %s still "
                 "serves it; left to that sidecar: %s",
                 sw->id->srv->cfg->identity, c->path, o->identity, (uint64_t)o->d.session, o->d.incarnation,
                 ended, sw->s ? sw->s->up_name : "the server", ZKW_ZOMBIE_ADVICE);
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
    if (zerr != ZOK) zkw_lockcheck_step_failed(NULL, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
    zkw_session_unref(sw->s);
    sw->s = NULL;
    return false;
  }
  if (zerr != ZOK && zerr != ZNONODE)
    zkw_lockcheck_step_failed(sw->s, ZKW_HISTORY_SWEEP, step, path, zerr, NULL);
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
  struct zkw_lock_check c = {.path = a->path};
  free(a);
  if (sweep_result(sw, "read the lock", c.path, r->rc) && r->rc == ZOK) {
    zkw_lockcheck_fill(&c, r);
    const char *name = strrchr(c.path, '/');
    name = name ? name + 1 : c.path;
    classify_zombie(sw, &c);
    if (c.zombie || (zkw_is_uuid((const uint8_t *)name, strlen(name)) && c.tagged &&
                     strcmp(c.tag.identity, sw->id->srv->cfg->identity) == 0 &&
                     !zkw_lockcheck_why_not(&c, sw->session_id, zkw_identity_current(sw->id)))) {
      if (sw->nfound == sw->capfound) {
        size_t cap = sw->capfound ? sw->capfound * 2 : 16;
        struct zkw_lock_check *f = zkw_realloc(sw->found, cap * sizeof *f);
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
      zkw_lockcheck_would_delete(sw->id, ZKW_HISTORY_SWEEP, &sw->found[i], "not deleted by the sweep");
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
        struct zkw_lock_check t = sw->found[n];
        sw->found[n++] = sw->found[i];
        sw->found[i] = t;
      }
  /* Delete phase: sessions now hold back lock requests (zkw_sweep_holding). */
  sw->deleting = true;
  sw->next = 0;
  sweep_delete_next(sw);
}

static void sweep_deleted(void *arg, const struct zkw_zk_result *r);
static void zombie_deleted(struct sweep *sw, const struct zkw_lock_check *c, int rc);

static void sweep_reread(void *arg, const struct zkw_zk_result *r) {
  struct sweep *sw = arg;
  struct zkw_lock_check *c = &sw->found[sw->next];
  sw->inflight--;
  struct zkw_lock_check now = {.path = c->path};
  if (!sweep_result(sw, "read the lock", c->path, r->rc)) return sweep_free(sw);
  if (r->rc == ZOK) zkw_lockcheck_fill(&now, r);
  /* Still the same node, still stale (or still a dead session's): delete
   * exactly that version. */
  bool still = r->rc == ZOK && now.czxid == c->czxid &&
               (c->zombie ? now.owner == c->owner && zkw_identity_dead_session(sw->id, now.owner) != NULL
                          : now.tagged && strcmp(now.tag.identity, sw->id->srv->cfg->identity) == 0 &&
                                !zkw_lockcheck_why_not(&now, sw->session_id, zkw_identity_current(sw->id)));
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
  struct zkw_lock_check *c = &sw->found[sw->next];
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
  struct zkw_lock_check *c = &sw->found[sw->next];
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
    zkw_lockcheck_step_failed(sw->s, ZKW_HISTORY_SWEEP, "delete the stale lock", c->path, r->rc, c);
  }
  sw->next++;
  sweep_delete_next(sw);
}

/* A zombie of this identity deleted (or its delete failed: rc). */
static void zombie_deleted(struct sweep *sw, const struct zkw_lock_check *c, int rc) {
  const char *identity = sw->id->srv->cfg->identity;
  char ended[40];
  zkw_lockcheck_format_ms(c->dead.ended_ms, ended, sizeof ended);
  if (rc == ZOK) {
    sw->deleted++;
    sw->zombies_deleted++;
    zkw_lockcheck_zombie_deleted(identity, c, sw->s->up_name, "sweep");
  } else if (rc == ZNONODE) {
    /* The JobManager's server still shows it, the quorum has no such
     * node: a zombie in one server's tree alone. Deleting cannot end it;
     * the next sweep looks again (no retry loop). */
    if (report_once(c->czxid)) ZKW_METRIC_INC(zombie_ephemerals);
    zkw_log_warn("identity %s: zombie ephemeral %s of session 0x%" PRIx64 " (ended at %s) is served by %s "
                 "alone: its delete got NONODE, the quorum has no such node; restart %s (%s)",
                 identity, c->path, (uint64_t)c->owner, ended, sw->s->up_name, sw->s->up_name,
                 ZKW_ZOMBIE_ADVICE);
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
