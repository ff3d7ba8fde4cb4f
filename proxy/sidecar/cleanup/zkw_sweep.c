/* zkw_sweep.c: sweep passes over the identity's own trees (see
 * zkw_sweep.h): when a pass runs, what it reads (a walk of the trees, or
 * what the watch kept since the last pass), how its reads yield to the
 * JobManager's own requests, the bound on one pass, and what a pass that
 * could not finish leaves to the next: the paths past the bound, and every
 * node it could not read and candidate it could not settle (a read or
 * delete that failed or was not sent), read again by the next pass until
 * they are read. A tree is retired (zkw_owntrees.h) only after a complete
 * pass: a walk of every tree, then every path left read. The candidates'
 * deletes are zkw_sweepdel.c, the watch zkw_sweepwatch.c.
 *
 * Every read goes in-band (zkw_inband.h), on the JobManager session's own
 * connection, so it has exactly the JobManager's rights under creator ACLs,
 * digest, SASL and Kerberos. A read is sent only while the JobManager has no
 * request of its own outstanding (then up to SWEEP_WINDOW at once once it
 * has been calm for SWEEP_CALM_MS, else one), or, on a JobManager that is
 * never idle, one per SWEEP_PACE_MS: a request of the JobManager waits
 * behind at most one read of the sweep. A walk reads each node once:
 * getChildren2 for every node not named as a lock (its Stat tells an
 * ephemeral leaf's owner: a latch, a connection_info), getData for the
 * locks (their tag). */
#include "zkw_fault.h"
#include "zkw_sweep.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_history.h"
#include "zkw_registry.h"
#include "zkw_inband.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_session.h"
#include "zkw_sweepdel.h"
#include "zkw_sweepwatch.h"

#define SWEEP_WINDOW        8     /* reads in flight while the JobManager is calm */
#define SWEEP_CALM_MS       50    /* calm: no request of its own for this long */
#define SWEEP_PACE_MS       10    /* a JobManager never idle: one read per */
#define SWEEP_POLL_MS       2     /* the JobManager busy: look again after */
#define SWEEP_QUIET_MS      500   /* a new incarnation's first pass waits for this much quiet: */
#define SWEEP_QUIET_MAX     50    /* at most this many requests of the JobManager in it (100/s) */
#define SWEEP_FIRST_WAIT_MS 30000 /* at most */
#define BURST_SLOT_MS       100   /* the JobManager's requests are counted per slot */
#define BURST_SLOTS         ZKW_SWEEP_BURST_SLOTS
_Static_assert(BURST_SLOTS == SWEEP_QUIET_MS / BURST_SLOT_MS, "the identity keeps one count per slot");
#define SWEEP_WAIT_MS     20   /* lock requests still outstanding (the delete phase) */
#define SWEEP_NO_JM_MS    1000 /* no JobManager session (or no own tree yet) to read with */
#define SWEEP_CONTINUE_MS 1000 /* after a pass that reached ZKWARDEN_SWEEP_MAX_NODES */
#define SWEEP_VERSION_MS  20   /* the server's version is asked: look again after */
#define SWEEP_REDO_TEXT   160  /* how the log line names what a pass left */

/* One pass (the identity keeps what lasts between passes: struct
 * zkw_sweeper, zkw_identity.h). */
struct zkw_sweep_pass {
  struct zkw_identity *id;
  struct zkw_session *s; /* the JobManager's session (a reference); NULL once lost */
  bool changes;          /* reads what the watch kept (and what the last pass left) */
  bool continued;        /* goes on from what the last pass left */
  struct zkw_sweep_basis basis;
  struct zkw_sweep_items stack; /* to read: a stack, depth first */
  struct zkw_sweep_items redo;  /* read again by the next pass: a read or a candidate that failed */
  size_t visited;
  int inflight;
  bool capped;
  bool broken; /* something to read again could not be kept: the next pass walks afresh */
  uint64_t t0_ms, last_send_ms;
  struct zkw_sweep_batch batch;
};

static uint64_t now_ms(void) {
  return zkw_identity_now_ms();
}

bool zkw_sweep_holding(const struct zkw_identity *id) {
  return id->sweeper.current && id->sweeper.current->batch.deleting;
}

/* Its requests in the last SWEEP_QUIET_MS (slot: now's). */
static uint32_t recent_requests(const struct zkw_sweeper *sweeper, uint64_t slot) {
  uint32_t n = 0;
  for (uint64_t k = slot >= BURST_SLOTS - 1 ? slot - (BURST_SLOTS - 1) : 0; k <= slot; k++)
    if (k <= sweeper->burst_slot && sweeper->burst_slot - k < BURST_SLOTS)
      n += sweeper->burst[k % BURST_SLOTS];
  return n;
}

static void count_request(struct zkw_sweeper *sweeper, uint64_t now) {
  uint64_t slot = now / BURST_SLOT_MS;
  for (uint64_t k = sweeper->burst_slot + 1; k <= slot && k <= sweeper->burst_slot + BURST_SLOTS; k++)
    sweeper->burst[k % BURST_SLOTS] = 0;
  if (slot > sweeper->burst_slot) sweeper->burst_slot = slot;
  sweeper->burst[slot % BURST_SLOTS]++;
  sweeper->jm_request_ms = now;
}

static void learn(struct zkw_identity *id, uint64_t incarnation, int32_t type, int32_t flags,
                  struct zkw_bytes path) {
  if ((type == ZKW_OP_CREATE || type == ZKW_OP_CREATE2) &&
      (flags == ZKW_CREATE_EPHEMERAL || flags == ZKW_CREATE_EPHEMERAL_SEQUENTIAL) &&
      zkw_under_lock_roots(&id->srv->cfg->lock_roots, path))
    zkw_registry_learn_tree(id, incarnation, path);
}

static void sweep_wait_cb(uv_timer_t *t);

static void schedule(struct zkw_identity *id, uint64_t ms) {
  if (!id->stopping) uv_timer_start(&id->sweep_timer, sweep_wait_cb, ms, 0);
}

static void schedule_periodic(struct zkw_identity *id) {
  uint32_t every = id->srv->cfg->sweep_interval_s;
  if (every) schedule(id, (uint64_t)every * 1000);
}

/* The session of this identity's current incarnation, attached now. */
static struct zkw_session *jm_session(struct zkw_identity *id) {
  uint64_t current = zkw_identity_current(id);
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->phase == ZKW_PHASE_ACTIVE && zkw_sc(s)->incarnation && zkw_sc(s)->incarnation == current) return s;
  return NULL;
}

static void free_items(struct zkw_sweep_items *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i].path);
  free(l->v);
  *l = (struct zkw_sweep_items){0};
}

/* Appends an item (takes path). Returns 0, or -ENOMEM (path freed). */
static int items_push(struct zkw_sweep_items *l, char *path, bool read) {
  if (!path) return -ENOMEM;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    struct zkw_sweep_item *v = zkw_realloc(l->v, cap * sizeof *v);
    if (!v) {
      free(path);
      return -ENOMEM;
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (struct zkw_sweep_item){path, read};
  return 0;
}

/* Moves every item of from to the end of to, in order. Returns 0, or
 * -ENOMEM (what was not moved is freed with from). */
static int items_join(struct zkw_sweep_items *to, struct zkw_sweep_items *from) {
  int rc = 0;
  for (size_t i = 0; i < from->n && rc == 0; i++) {
    char *path = from->v[i].path;
    from->v[i].path = NULL;
    rc = items_push(to, path, from->v[i].read);
  }
  free_items(from);
  return rc;
}

static struct zkw_sweep_basis basis_of(struct zkw_identity *id, const struct zkw_session *s,
                                       const struct zkw_treeset *trees) {
  struct zkw_sweep_basis b = {
      .incarnation = zkw_identity_current(id), .session = s->session_id, .trees = *trees};
  b.ndead = id->dead.ndead;
  for (int i = 0; i < b.ndead; i++) {
    const char *why;
    b.dead[i] = id->dead.dead_sessions[i].session;
    b.proven[i] = zkw_identity_proven_dead(id, b.dead[i], s->session_id, &why) != NULL;
  }
  return b;
}

static bool same_basis(const struct zkw_sweep_basis *a, const struct zkw_sweep_basis *b) {
  if (a->incarnation != b->incarnation || a->session != b->session || a->ndead != b->ndead ||
      a->trees.count != b->trees.count)
    return false;
  for (int i = 0; i < a->ndead; i++)
    if (a->dead[i] != b->dead[i] || a->proven[i] != b->proven[i]) return false;
  for (int i = 0; i < a->trees.count; i++)
    if (strcmp(a->trees.tree[i], b->trees.tree[i]) != 0) return false;
  return true;
}

/* True while the JobManager has a request of its own outstanding (or held). */
static bool jm_busy(const struct zkw_session *s) {
  if (s->moving || s->barrier || s->held) return true;
  for (uint32_t i = 0; i < s->pending.count; i++)
    if (!zkw_pending_at(&s->pending, i).owned) return true;
  return false;
}

/* How many reads may be in flight now. */
static int window(const struct zkw_sweep_pass *sw, uint64_t now) {
  if (jm_busy(sw->s)) return sw->inflight == 0 && now - sw->last_send_ms >= SWEEP_PACE_MS ? 1 : 0;
  return now - sw->id->sweeper.jm_request_ms >= SWEEP_CALM_MS ? SWEEP_WINDOW : 1;
}

static int push(struct zkw_sweep_pass *sw, char *path, bool read) {
  return items_push(&sw->stack, path, read);
}

/* A node this pass could not read, or a candidate it could not settle: the
 * next pass reads it again (takes path; read: getData, else getChildren2).
 * If it cannot be kept, the pass has lost track (broken): the next pass
 * walks the trees afresh, which finds it again. */
static void again(struct zkw_sweep_pass *sw, char *path, bool read) {
  /* Once: a node a pass read twice (left by the last pass, and changed since)
   * is left once, so what is left never grows past what failed. */
  for (size_t i = 0; path && i < sw->redo.n; i++)
    if (sw->redo.v[i].read == read && strcmp(sw->redo.v[i].path, path) == 0) {
      free(path);
      return;
    }
  if (items_push(&sw->redo, path, read) != 0) sw->broken = true;
}

static void pump(struct zkw_sweep_pass *sw);
static void walk_done(struct zkw_sweep_pass *sw);

struct read_arg {
  struct zkw_sweep_pass *sw;
  char *path;
};

/* A read node that is a candidate joins the batch: a zombie (its owner a
 * session of this identity proven dead), or a stale lock of this identity. */
static void consider(struct zkw_sweep_pass *sw, struct zkw_lock_check *c, bool lock_named) {
  if (c->owner == 0 || c->owner == sw->batch.session_id) return;
  bool stale = lock_named && c->tagged && strcmp(c->tag.identity, zkw_identity_name(sw->id)) == 0 &&
               !zkw_lockcheck_why_not(c, sw->batch.session_id, zkw_identity_current(sw->id));
  if (!zkw_lockcheck_zombie(sw->id, c, sw->batch.session_id, !stale) && !stale) return;
  if (zkw_sweep_batch_add(&sw->batch, c) != 0) {
    zkw_lockcheck_step_failed(sw->s, ZKW_HISTORY_SWEEP, "keep (out of memory) the candidate", c->path,
                              ZSYSTEMERROR, c);
    again(sw, c->path, true); /* the next pass reads it again */
    c->path = NULL;
  }
}

/* A read's reply: true when it read the node. One that failed (other than
 * NONODE: gone) is read again by the next pass. */
static bool read_ok(struct zkw_sweep_pass *sw, const char *step, const char *path, bool read,
                    const struct zkw_zk_result *r) {
  sw->inflight--;
  if (!zkw_sweep_step(&sw->batch, step, path, r->rc)) return false;
  if (r->rc != ZOK && r->rc != ZNONODE) again(sw, zkw_strdup(path), read);
  return r->rc == ZOK;
}

static void node_read(void *arg, const struct zkw_zk_result *r) {
  struct read_arg *a = arg;
  struct zkw_sweep_pass *sw = a->sw;
  struct zkw_lock_check c = {.path = a->path};
  free(a);
  if (read_ok(sw, "read the lock", c.path, true, r)) {
    zkw_lockcheck_fill(&c, r);
    const char *name = strrchr(c.path, '/');
    name = name ? name + 1 : c.path;
    consider(sw, &c, zkw_is_uuid((const uint8_t *)name, strlen(name)));
  }
  free(c.path);
  pump(sw);
}

static void node_listed(void *arg, const struct zkw_zk_result *r) {
  struct read_arg *a = arg;
  struct zkw_sweep_pass *sw = a->sw;
  if (read_ok(sw, "list the children of", a->path, false, r)) {
    for (int i = 0; i < r->child_count; i++) {
      const char *name = r->children[i];
      size_t n = strlen(a->path) + strlen(name) + 2;
      char *child = zkw_malloc(n);
      if (child) snprintf(child, n, "%s%s%s", a->path, strcmp(a->path, "/") == 0 ? "" : "/", name);
      if (push(sw, child, zkw_is_uuid((const uint8_t *)name, strlen(name))) != 0) {
        zkw_lockcheck_step_failed(sw->s, ZKW_HISTORY_SWEEP, "keep (out of memory) the children of", a->path,
                                  ZSYSTEMERROR, NULL);
        again(sw, zkw_strdup(a->path), false); /* the next pass lists it again */
        break;
      }
    }
    /* An ephemeral (a latch node, a connection_info: never a parent) may
     * be a zombie: its Stat says whose it is. */
    if (r->has_stat && r->stat.ephemeralOwner) {
      struct zkw_lock_check c = {.path = a->path};
      zkw_lockcheck_fill(&c, r);
      consider(sw, &c, false);
      a->path = c.path; /* NULL once kept */
    }
  }
  free(a->path);
  free(a);
  pump(sw);
}

/* Sends reads while the JobManager lets it; when there is nothing left (or
 * the bound is reached), the walk is over. */
static void pump(struct zkw_sweep_pass *sw) {
  if (sw->s->phase == ZKW_PHASE_CLOSING) sw->batch.lost = true; /* nothing more can be read with it */
  if (sw->id->stopping || sw->batch.lost) {
    if (sw->inflight == 0) walk_done(sw);
    return;
  }
  uint64_t now = now_ms();
  while (sw->stack.n > 0 && sw->inflight < window(sw, now)) {
    if (sw->visited >= sw->id->srv->cfg->sweep_max_nodes) {
      sw->capped = true;
      break;
    }
    struct zkw_sweep_item it = sw->stack.v[--sw->stack.n];
    struct read_arg *a = zkw_malloc(sizeof *a);
    if (a) *a = (struct read_arg){sw, it.path};
    int rc = !a        ? -ENOMEM
             : it.read ? zkw_inband_get(sw->s, it.path, node_read, a)
                       : zkw_inband_children2(sw->s, it.path, node_listed, a);
    if (rc != 0) {
      free(a);
      zkw_lockcheck_step_failed(sw->s, ZKW_HISTORY_SWEEP, it.read ? "read the lock" : "list the children of",
                                it.path, rc == -ENOMEM ? ZSYSTEMERROR : ZCONNECTIONLOSS, NULL);
      again(sw, it.path, it.read); /* not read: the next pass reads it */
      continue;
    }
    sw->inflight++;
    sw->visited++;
    sw->last_send_ms = now;
    ZKW_METRIC_INC(sweep_reads);
  }
  if (sw->inflight) return;
  if (sw->stack.n > 0 && !sw->capped) return schedule(sw->id, SWEEP_POLL_MS); /* the JobManager goes first */
  walk_done(sw);
}

static void pass_end(struct zkw_sweep_batch *b);

static void deletes_wait(struct zkw_sweep_batch *b) {
  schedule(b->id, SWEEP_WAIT_MS);
}

/* A pass at the bound: said (the paths left go to the next pass). */
static void report_capped(struct zkw_sweep_pass *sw) {
  const char *identity = zkw_identity_name(sw->id);
  const char *next = sw->stack.n ? sw->stack.v[sw->stack.n - 1].path : "";
  zkw_log_warn("identity %s: sweep pass stopped at ZKWARDEN_SWEEP_MAX_NODES (%zu node(s) read); %zu path(s) "
               "left, from %s: the next pass goes on from there in %.1f s",
               identity, sw->visited, sw->stack.n, next, SWEEP_CONTINUE_MS / 1000.0);
  char why[ZKW_HISTORY_TEXT_MAX];
  snprintf(why, sizeof why,
           "stopped at %zu node(s) read (ZKWARDEN_SWEEP_MAX_NODES); %zu path(s) left for the next pass",
           sw->visited, sw->stack.n);
  zkw_history_failed(ZKW_HISTORY_SWEEP_INCOMPLETE, next, why, 0, identity, zkw_identity_current(sw->id));
}

/* The reads are over: what the pass covered, then its deletes. */
static void walk_done(struct zkw_sweep_pass *sw) {
  bool over = sw->batch.lost || sw->id->stopping;
  if (sw->capped && !over) report_capped(sw);
  /* A walk (begun from the trees, or going on from what the last one left)
   * that read every path it had: every node of the trees is read or left to
   * read again. */
  if (!sw->changes && !sw->capped && !sw->broken && !over) {
    sw->id->sweeper.walked = true;
    sw->id->sweeper.walked_basis = sw->basis;
  }
  if (over) return pass_end(&sw->batch);
  zkw_sweepdel_start(&sw->batch);
}

/* A candidate the delete phase could not settle (zkw_sweepdel.h again). */
static int batch_again(struct zkw_sweep_batch *b, const struct zkw_lock_check *c) {
  struct zkw_sweep_pass *sw = (struct zkw_sweep_pass *)((char *)b - offsetof(struct zkw_sweep_pass, batch));
  char *path = zkw_strdup(c->path);
  if (!path) return -ENOMEM;
  again(sw, path, true);
  return sw->broken ? -ENOMEM : 0;
}

/* What the pass leaves to the next one: the paths past the bound, then (read
 * first) those to read again. Returns how many, or -1 when none can be kept
 * (the next pass walks afresh). */
static long keep_left(struct zkw_sweep_pass *sw, bool over) {
  struct zkw_sweep_batch *b = &sw->batch;
  if (!over) /* candidates the delete phase did not take */
    for (size_t i = b->next; i < b->nfound; i++)
      if (batch_again(b, &b->found[i]) != 0) b->retry = true;
  free_items(&sw->id->sweeper.left);
  if (over || sw->broken || b->retry || items_join(&sw->stack, &sw->redo) != 0) {
    sw->id->sweeper.walked = false;
    free_items(&sw->stack);
    free_items(&sw->redo);
    return over ? 0 : -1;
  }
  sw->id->sweeper.left = sw->stack;
  sw->id->sweeper.left_basis = sw->basis;
  sw->stack = (struct zkw_sweep_items){0};
  return (long)sw->id->sweeper.left.n;
}

static void pass_end(struct zkw_sweep_batch *b) {
  struct zkw_sweep_pass *sw = (struct zkw_sweep_pass *)((char *)b - offsetof(struct zkw_sweep_pass, batch));
  struct zkw_identity *id = sw->id;
  const char *identity = zkw_identity_name(id);
  bool lost = b->lost, over = lost || id->stopping;
  size_t past_bound = sw->capped ? sw->stack.n : 0, redo = sw->redo.n;
  long left = keep_left(sw, over);
  /* Complete: a walk of every tree read every node, and nothing is left.
   * Only then do earlier incarnations' trees retire. */
  bool complete = !over && left == 0;
  if (complete && id->sweeper.walked && same_basis(&id->sweeper.walked_basis, &sw->basis))
    zkw_registry_trees_walked(id, sw->basis.incarnation, &sw->basis.trees);
  ZKW_METRIC_SET(sweep_last_reads, (int64_t)sw->visited);
  ZKW_METRIC_SET(sweep_left, left > 0 ? left : 0);
  if (!complete && !id->stopping) ZKW_METRIC_INC(sweep_incomplete);
  if (sw->changes)
    ZKW_METRIC_INC(sweep_change_passes);
  else
    ZKW_METRIC_INC(sweep_full_passes);
  char trees[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX], rest[SWEEP_REDO_TEXT] = "";
  zkw_treeset_format(&sw->basis.trees, trees, sizeof trees);
  if (left > 0)
    snprintf(rest, sizeof rest,
             "; incomplete: %ld path(s) left for the next pass (%zu past ZKWARDEN_SWEEP_MAX_NODES, %zu to "
             "read again: a read or delete failed)",
             left, past_bound, (size_t)left - past_bound);
  else if (left < 0)
    snprintf(rest, sizeof rest,
             "; incomplete: %zu path(s) to read again could not be kept (out of memory): the next pass "
             "walks the trees afresh",
             redo);
  if (id->stopping)
    zkw_log_info("identity %s: sweep stopped with zkwarden (%zu node(s) read, %d stale lock(s) deleted)",
                 identity, sw->visited, b->deleted - b->zombies_deleted);
  else if (lost)
    zkw_log_warn("identity %s: sweep cut short: the JobManager session closed (%zu node(s) read, %d stale "
                 "lock(s) deleted); it runs again once a JobManager session is attached",
                 identity, sw->visited, b->deleted - b->zombies_deleted);
  else
    zkw_log(left ? ZKW_LOG_WARN : ZKW_LOG_INFO,
            "identity %s: sweep done (%s): %zu node(s) read in %.2f s (own trees %s), %d stale lock(s) and "
            "%d zombie(s) deleted%s",
            identity,
            sw->changes     ? "what changed"
            : sw->continued ? "the walk went on"
                            : "walk",
            sw->visited, (double)(now_ms() - sw->t0_ms) / 1000.0, trees, b->deleted - b->zombies_deleted,
            b->zombies_deleted, rest);
  zkw_sweep_batch_free(b);
  free_items(&sw->stack);
  free_items(&sw->redo);
  if (sw->s) zkw_session_unref(sw->s);
  free(sw);
  id->sweeper.current = NULL;
  id->sweeping = false;
  if (!id->stopping) {
    if (lost || id->sweep_again)
      zkw_sweep_soon(id);
    else if (past_bound && left > 0)
      schedule(id, SWEEP_CONTINUE_MS); /* the walk goes on; what failed is read again then too */
    else
      schedule_periodic(id); /* what failed is read again by the next periodic pass */
  }
  /* Sessions held back their lock requests during the deletes (stopping:
   * they are about to close). */
  for (struct zkw_session *s = zkw_session_first(id->srv); s && !id->stopping; s = zkw_session_next(s))
    if (s->phase != ZKW_PHASE_CLOSING) zkw_session_resume(s);
}

/* Takes what the last pass left as this pass's stack. */
static void take_left(struct zkw_sweep_pass *sw) {
  sw->stack = sw->id->sweeper.left;
  sw->id->sweeper.left = (struct zkw_sweep_items){0};
  sw->continued = true;
}

/* The reads of a pass: what the last pass left (the same basis), then what
 * the watch kept since the last pass once a walk read every tree; else a
 * walk of the trees afresh. Returns 0 or -ENOMEM. */
static int plan(struct zkw_sweep_pass *sw) {
  bool left = sw->id->sweeper.left.n && same_basis(&sw->id->sweeper.left_basis, &sw->basis);
  if (left && !sw->id->sweeper.walked) {
    take_left(sw); /* a walk goes on */
    return 0;
  }
  char **paths;
  size_t n;
  sw->changes = sw->id->sweeper.walked && same_basis(&sw->id->sweeper.walked_basis, &sw->basis) &&
                zkw_sweepwatch_complete(sw->s, &sw->basis.trees) &&
                zkw_sweepwatch_take(sw->id, &paths, &n) == 0;
  if (sw->changes) {
    if (left) take_left(sw);
    free_items(&sw->id->sweeper.left);
    int rc = 0;
    for (size_t i = 0; i < n; i++)
      if (rc == 0)
        rc = push(sw, paths[i], true);
      else
        free(paths[i]);
    free(paths);
    return rc;
  }
  /* A walk afresh: it reads whatever was left. The watch first (in-band,
   * ahead of the reads), then the trees. */
  free_items(&sw->id->sweeper.left);
  sw->id->sweeper.walked = false;
  (void)zkw_sweepwatch_arm(sw->s, &sw->basis.trees);
  for (int i = sw->basis.trees.count - 1; i >= 0; i--)
    if (push(sw, zkw_strdup(sw->basis.trees.tree[i]), false) != 0) return -ENOMEM;
  return 0;
}

static void sweep_start(struct zkw_identity *id) {
  if (id->sweeping || id->stopping) return;
  id->sweep_again = false;
  if (!zkw_identity_current(id)) return schedule_periodic(id);
  /* Reads and deletes go on the JobManager's session: wait for one. */
  struct zkw_session *s = jm_session(id);
  struct zkw_treeset trees;
  int left = zkw_owntrees_of(id, &trees);
  uint64_t now = now_ms();
  if (!s) return schedule(id, SWEEP_NO_JM_MS);
  zkw_sweepwatch_ask(s); /* while the pass waits for a burst to end, the server's version comes */
  if (left)
    zkw_log_info("identity %s: sweep: %d tree(s) of earlier incarnations find no room beside the operator's "
                 "and the current incarnation's (%d in all): not read",
                 zkw_identity_name(id), left, ZKW_TREESET_TREES_MAX);
  if (!trees.count) { /* they come with the JobManager's first creates */
    zkw_log_debug("identity %s: sweep: no own tree known yet", zkw_identity_name(id));
    if (id->sweeper.first_since && now - id->sweeper.first_since < SWEEP_FIRST_WAIT_MS)
      return schedule(id, SWEEP_NO_JM_MS);
    id->sweeper.first_since = 0;
    return schedule_periodic(id);
  }
  /* A new incarnation's first pass waits for its recovery burst to end. */
  if (id->sweeper.first_since) {
    bool burst = now - id->sweeper.first_since < SWEEP_QUIET_MS ||
                 recent_requests(&id->sweeper, now / BURST_SLOT_MS) > SWEEP_QUIET_MAX;
    if (burst && now - id->sweeper.first_since < SWEEP_FIRST_WAIT_MS) return schedule(id, BURST_SLOT_MS);
    id->sweeper.first_since = 0;
  }
  /* The first walk on a connection sets the watch once its server said it
   * takes it: that answer is a moment away. */
  if (zkw_sweepwatch_answer_due(s, uv_now(id->srv->loop))) return schedule(id, SWEEP_VERSION_MS);
  struct zkw_sweep_pass *sw = zkw_calloc(1, sizeof *sw);
  if (!sw) {
    zkw_log_warn("identity %s: out of memory starting a sweep; trying again in %d ms", zkw_identity_name(id),
                 SWEEP_NO_JM_MS);
    return schedule(id, SWEEP_NO_JM_MS);
  }
  sw->id = id;
  sw->s = s;
  sw->t0_ms = now;
  sw->basis = basis_of(id, s, &trees);
  sw->batch = (struct zkw_sweep_batch){.id = id,
                                       .s = s,
                                       .session_id = s->session_id,
                                       .done = pass_end,
                                       .wait = deletes_wait,
                                       .again = batch_again};
  zkw_session_ref(s); /* until the pass ends */
  id->sweeping = true;
  id->sweeper.current = sw;
  if (plan(sw) != 0) {
    zkw_lockcheck_step_failed(s, ZKW_HISTORY_SWEEP, "plan (out of memory) the sweep of", trees.tree[0],
                              ZSYSTEMERROR, NULL);
    sw->broken = true;
  }
  pump(sw);
}

static void sweep_wait_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  struct zkw_sweep_pass *sw = id->sweeper.current;
  if (sw && sw->batch.deleting)
    zkw_sweepdel_next(&sw->batch);
  else if (sw)
    pump(sw);
  else
    sweep_start(id);
}

void zkw_sweep_soon(struct zkw_identity *id) {
  id->sweeper.began = true;
  id->sweeper.first_since = now_ms();
  if (id->sweeping) {
    id->sweep_again = true; /* a new incarnation: look again once this pass ends */
    return;
  }
  schedule(id, SWEEP_QUIET_MS);
}

/* ---- the JobManager's requests ---- */

void zkw_sweep_on_jm_request(struct zkw_session *s, const struct zkw_request *req) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled) return;
  count_request(&id->sweeper, now_ms());
  zkw_sweepwatch_on_request(s, req);
  /* A current incarnation re-attached through this sidecar (restarted):
   * its passes begin with its first request here. */
  if (!id->sweeper.began) zkw_sweep_soon(id);
  uint64_t incarnation = zkw_sc(s)->incarnation;
  if (req->type != ZKW_OP_MULTI) return learn(id, incarnation, req->type, req->op.flags, req->op.path);
  struct zkw_multi_iter it = zkw_multi_iter(req->op.ops);
  struct zkw_op_req op;
  while (zkw_multi_next_req(&it, &op) == ZKW_OK)
    learn(id, incarnation, op.type, op.flags, op.path);
}

void zkw_sweep_stop(struct zkw_identity *id) {
  /* A pass waiting on the sweep timer (the JobManager busy, the deletes
   * waiting for a lock request) with nothing in flight is never called
   * again once the identity closed that timer: it ends here (its session
   * reference, stack and candidates freed). One with a read or delete in
   * flight ends in that request's callback, which the session's close
   * calls. */
  struct zkw_sweep_pass *sw = id->sweeper.current;
  if (sw && sw->id->stopping && sw->inflight == 0 && sw->batch.inflight == 0) {
    if (sw->batch.deleting)
      zkw_sweepdel_next(&sw->batch);
    else
      pump(sw);
  }
  free_items(&id->sweeper.left);
  id->sweeper.walked = false;
  zkw_sweepwatch_reset(id);
}
