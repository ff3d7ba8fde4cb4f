/* zkw_sweepwatch.c: the sweep's persistent recursive watch on the own trees
 * (see zkw_sweepwatch.h): setting it in-band, answering its notifications
 * (passed on only when the JobManager's own watches asked for them), the
 * paths they name kept for the next pass, and whether the server the
 * JobManager's connection is on can take it (its own `srvr` answer, asked
 * after that connection began). */
#include "zkw_fault.h"
#include "zkw_sweepwatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_config.h"
#include "zkw_hooks.h"
#include "zkw_identity.h"
#include "zkw_inband.h"
#include "zkw_log.h"
#include "zkw_relay.h"
#include "zkw_zk.h"

#define WATCH_RECURSIVE  1     /* addWatch mode: persistent recursive */
#define WATCHER_ANY      3     /* removeWatches type: any (3.6+: persistent recursive included) */
#define VERSION_RETRY_MS 10000 /* a version probe that got no answer is asked again after */
#define VERSION_WAIT_MS  2000  /* the first walk on a connection waits this long for the answer */

/* Trees below "/": any absolute path (for the scopes of trees asked and set). */
static const struct zkw_lock_roots ANY_ROOT = {1, {"/"}};

/* What the server of a connection is known to take: nothing yet, no
 * addWatch (older than 3.6, refused it, or its `srvr` names no version: a
 * whitelist without srvr), addWatch. */
enum { VERSION_UNKNOWN, VERSION_OLD, VERSION_NEW };

/* One path kept: created or changed below a watched tree since it was set. */
struct zkw_sweepwatch_kept {
  struct zkw_sweepwatch_kept *next;
  uint32_t hash;
  uint32_t len;
  char path[];
};

static uint32_t hash_path(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint8_t)p[i]) * 16777619u;
  return h;
}

static void forget_kept(struct zkw_sweepwatch *w) {
  for (uint32_t i = 0; i < w->nbuckets; i++)
    for (struct zkw_sweepwatch_kept *e = w->bucket[i], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  free(w->bucket);
  w->bucket = NULL;
  w->nbuckets = 0;
  w->count = 0;
}

/* No watch any more (a new one is set before the next walk). */
static void drop(struct zkw_sweepwatch *w) {
  forget_kept(w);
  w->conn = 0;
  w->asked.count = w->armed.count = 0;
  w->gen++;
  w->spoiled = w->overflow = false;
}

void zkw_sweepwatch_reset(struct zkw_identity *id) {
  drop(&id->sweepwatch);
}

static struct zkw_sweepwatch_kept **slot(struct zkw_sweepwatch *w, const char *p, size_t n, uint32_t h) {
  struct zkw_sweepwatch_kept **pp = &w->bucket[h & (w->nbuckets - 1)];
  while (*pp && ((*pp)->hash != h || (*pp)->len != n || memcmp((*pp)->path, p, n) != 0))
    pp = &(*pp)->next;
  return pp;
}

static void removed_cb(void *arg, const struct zkw_zk_result *r) {
  char *tree = arg;
  if (r->rc != ZOK)
    zkw_log_info(
        "sweep: removeWatches %s (the watch of a set that overflowed) failed: %s; its notifications "
        "keep coming to the JobManager's connection, answered by zkwarden alone, until the connection "
        "ends",
        tree, zkw_zk_error(r->rc));
  free(tree);
}

/* The set overflowed: what it kept is forgotten and the next pass walks.
 * The watch itself is removed in-band (removeWatches, type any: the one
 * type every 3.6+ server takes for a persistent recursive watch), so the
 * rest of the interval's changes stop coming to the JobManager's connection
 * for nothing; the next walk sets it again. Type any also removes the
 * connection's other watches on that exact path, so a tree on whose path
 * the JobManager may watch itself (its table says so, or is incomplete, or
 * it touched a watch there since: spoiled) keeps the watch, said at info. */
static void overflowed(struct zkw_sweepwatch *w, struct zkw_session *s) {
  forget_kept(w);
  w->overflow = true;
  for (int i = 0; i < w->asked.count; i++) {
    const char *tree = w->asked.tree[i];
    size_t n = strlen(tree);
    if (s->watches.lost || w->spoiled || zkw_watches_kinds(&s->watches, tree, n) != 0) {
      zkw_log_info("sweep: the watch on %s stays (the JobManager may watch that path itself): its "
                   "notifications keep coming, answered by zkwarden alone",
                   tree);
      continue;
    }
    char *arg = zkw_strdup(tree);
    int rc = arg ? zkw_inband_remove_watches(s, tree, WATCHER_ANY, removed_cb, arg) : -ENOMEM;
    if (rc != 0) {
      free(arg);
      zkw_log_info("sweep: cannot send removeWatches %s (%s): its notifications keep coming, answered by "
                   "zkwarden alone",
                   tree, rc == -ENOMEM ? "out of memory" : "the connection is closing");
    }
  }
}

/* Keeps a path; past the bound, or out of memory, the set is forgotten, the
 * watch removed, and the next pass walks. */
static void keep(struct zkw_sweepwatch *w, struct zkw_session *s, const char *p, size_t n) {
  if (w->overflow) return;
  if (w->count >= ZKW_SWEEPWATCH_MAX) {
    zkw_log_info("sweep: more than %d nodes changed in the own trees since the last pass: the next pass "
                 "walks them (the watch is removed until then)",
                 ZKW_SWEEPWATCH_MAX);
    return overflowed(w, s);
  }
  if (!w->bucket || w->count >= w->nbuckets) {
    uint32_t nb = w->nbuckets ? w->nbuckets * 2 : 64;
    struct zkw_sweepwatch_kept **b = zkw_calloc(nb, sizeof *b);
    if (!b) return overflowed(w, s);
    for (uint32_t i = 0; i < w->nbuckets; i++)
      for (struct zkw_sweepwatch_kept *e = w->bucket[i], *next; e; e = next) {
        next = e->next;
        e->next = b[e->hash & (nb - 1)];
        b[e->hash & (nb - 1)] = e;
      }
    free(w->bucket);
    w->bucket = b;
    w->nbuckets = nb;
  }
  uint32_t h = hash_path(p, n);
  struct zkw_sweepwatch_kept **pp = slot(w, p, n, h);
  if (*pp) return;
  struct zkw_sweepwatch_kept *e = zkw_malloc(sizeof *e + n + 1);
  if (!e) return overflowed(w, s);
  *e = (struct zkw_sweepwatch_kept){.hash = h, .len = (uint32_t)n};
  memcpy(e->path, p, n);
  e->path[n] = 0;
  *pp = e;
  w->count++;
}

static void unkeep(struct zkw_sweepwatch *w, const char *p, size_t n) {
  if (!w->bucket) return;
  struct zkw_sweepwatch_kept **pp = slot(w, p, n, hash_path(p, n));
  struct zkw_sweepwatch_kept *e = *pp;
  if (!e) return;
  *pp = e->next;
  free(e);
  w->count--;
}

/* ---- whether the JobManager's server takes addWatch ---- */

static struct zkw_sweepwatch *watch_of(const struct zkw_session *s) {
  return &((struct zkw_identity *)s->srv->policy)->sweepwatch;
}

static uint64_t now_ms(const struct zkw_session *s) {
  return uv_now(s->srv->loop);
}

/* The server of s's connection takes addWatch: its own `srvr` answer, asked
 * after this connection began, named 3.6 or newer, and it never refused it.
 * Else the connection is noted, so that the readiness probe's loop asks that
 * server (zkw_sweepwatch_version_wanted), and false: a pass walks. Nothing
 * else is taken for it: another server's version (a rolling upgrade from 3.5
 * runs both), nor this server's before the connection began (it may have
 * been replaced by an older one since). */
static bool supported(const struct zkw_session *s) {
  struct zkw_sweepwatch *w = watch_of(s);
  if (s->up_idx >= ZKW_MAX_UPSTREAMS || (w->refused & (1u << s->up_idx)) || s->moving ||
      !s->upstream.connected)
    return false;
  if (w->server.conn == s->conn && w->server.move_t0 == s->move_t0 && w->server.idx == s->up_idx)
    return w->server.verdict == VERSION_NEW;
  struct sockaddr_storage addr;
  int len = sizeof addr;
  if (uv_tcp_getpeername(&s->upstream.tcp, (struct sockaddr *)&addr, &len) != 0) return false;
  w->server.conn = s->conn;
  w->server.move_t0 = s->move_t0;
  w->server.gen++;
  w->server.idx = s->up_idx;
  w->server.addr = addr;
  w->server.since_ms = now_ms(s);
  w->server.asked_ms = 0;
  w->server.verdict = VERSION_UNKNOWN;
  zkw_log_debug("sweep: asking %s its version before the watch is set on the JobManager's connection",
                s->up_name);
  if (w->ask) w->ask();
  return false;
}

void zkw_sweepwatch_on_ask(struct zkw_identity *id, void (*ask)(void)) {
  struct zkw_sweepwatch *w = &id->sweepwatch;
  w->ask = ask;
}

bool zkw_sweepwatch_answer_due(const struct zkw_session *s, uint64_t now) {
  struct zkw_sweepwatch *w = watch_of(s);
  return w->server.conn == s->conn && w->server.move_t0 == s->move_t0 &&
         w->server.verdict == VERSION_UNKNOWN && now - w->server.since_ms < VERSION_WAIT_MS;
}

void zkw_sweepwatch_ask(const struct zkw_session *s) {
  if (s->srv->cfg->sweep_watch && !s->srv->cfg->observe) (void)supported(s);
}

bool zkw_sweepwatch_version_wanted(struct zkw_identity *id, uint64_t now, struct sockaddr_storage *addr,
                                   uint32_t *idx, uint64_t *gen) {
  struct zkw_sweepwatch *w = &id->sweepwatch;
  if (!w->server.conn || w->server.verdict != VERSION_UNKNOWN) return false;
  if (w->server.asked_ms && now - w->server.asked_ms < VERSION_RETRY_MS) return false;
  w->server.asked_ms = now ? now : 1;
  *addr = w->server.addr;
  *idx = w->server.idx;
  *gen = w->server.gen;
  return true;
}

void zkw_sweepwatch_version_answer(struct zkw_identity *id, uint64_t gen, const char *answer) {
  struct zkw_sweepwatch *w = &id->sweepwatch;
  /* No answer, or a server not serving (no quorum): asked again later. */
  if (gen != w->server.gen || w->server.verdict != VERSION_UNKNOWN || !answer || !*answer ||
      strstr(answer, "not currently serving"))
    return;
  const char *v = strstr(answer, "Zookeeper version: ");
  int major, minor;
  if (v && sscanf(v + 19, "%d.%d", &major, &minor) == 2)
    w->server.verdict = major > 3 || (major == 3 && minor >= 6) ? VERSION_NEW : VERSION_OLD;
  else /* answered without a version (srvr not whitelisted): not asked again on this connection */
    w->server.verdict = VERSION_OLD;
  zkw_log_info("sweep: upstream server #%u %s: %s", w->server.idx + 1,
               w->server.verdict == VERSION_NEW ? "is ZooKeeper 3.6 or newer"
               : v                              ? "is older than ZooKeeper 3.6"
                                                : "does not tell its version (srvr)",
               w->server.verdict == VERSION_NEW
                   ? "the sweep's next walk sets its watch on the JobManager's connection"
                   : "no addWatch is sent on the JobManager's connection there; every sweep pass walks");
}

/* ---- setting the watch ---- */

struct arm_arg {
  struct zkw_sweepwatch *w; /* the identity's: it outlives the session's in-band requests */
  unsigned gen;
  uint32_t idx;
  char tree[ZKW_TREESET_PATH_MAX];
};

static void armed_cb(void *arg, const struct zkw_zk_result *r) {
  struct arm_arg *a = arg;
  struct zkw_sweepwatch *w = a->w;
  if (a->gen == w->gen) {
    if (r->rc == ZOK) {
      (void)zkw_treeset_add(&w->armed, &ANY_ROOT, a->tree);
    } else {
      w->spoiled = true;
      if (r->rc == ZUNIMPLEMENTED && a->idx < ZKW_MAX_UPSTREAMS) {
        w->refused |= 1u << a->idx;
        w->server.verdict = VERSION_OLD;
        zkw_log_warn("sweep: upstream server #%u refused addWatch (ZooKeeper older than 3.6): every sweep "
                     "pass through it walks the own trees",
                     a->idx + 1);
      } else {
        zkw_log_debug("sweep: addWatch %s failed: %s", a->tree, zkw_zk_error(r->rc));
      }
    }
  }
  free(a);
}

bool zkw_sweepwatch_arm(struct zkw_session *s, const struct zkw_treeset *trees) {
  struct zkw_sweepwatch *w = watch_of(s);
  /* Observe mode sends nothing in-band of its own making beyond the reads
   * that decide its would-actions: no watch. */
  if (!s->srv->cfg->sweep_watch || s->srv->cfg->observe || !supported(s)) {
    drop(w);
    return false;
  }
  if (w->conn != s->conn || w->move_t0 != s->move_t0 || w->spoiled || w->overflow) {
    drop(w);
    w->conn = s->conn;
    w->move_t0 = s->move_t0;
  }
  forget_kept(w); /* the walk reads it all */
  for (int i = 0; i < trees->count; i++) {
    const char *tree = trees->tree[i];
    if (zkw_treeset_covers(&w->asked, tree, strlen(tree))) continue;
    struct arm_arg *a = zkw_malloc(sizeof *a);
    if (a) {
      *a = (struct arm_arg){.w = w, .gen = w->gen, .idx = s->up_idx};
      snprintf(a->tree, sizeof a->tree, "%s", tree);
    }
    if (!a || zkw_inband_add_watch(s, tree, WATCH_RECURSIVE, armed_cb, a) != 0) {
      free(a);
      drop(w);
      return false;
    }
    (void)zkw_treeset_add(&w->asked, &ANY_ROOT, tree);
  }
  return true;
}

bool zkw_sweepwatch_complete(const struct zkw_session *s, const struct zkw_treeset *trees) {
  struct zkw_sweepwatch *w = watch_of(s);
  if (!w->conn || s->conn != w->conn || s->move_t0 != w->move_t0 || s->moving || w->spoiled || w->overflow)
    return false;
  for (int i = 0; i < trees->count; i++)
    if (!zkw_treeset_covers(&w->armed, trees->tree[i], strlen(trees->tree[i]))) return false;
  return true;
}

int zkw_sweepwatch_take(struct zkw_identity *id, char ***paths, size_t *n) {
  struct zkw_sweepwatch *w = &id->sweepwatch;
  *paths = NULL;
  *n = 0;
  if (!w->count) return 0;
  char **out = zkw_malloc(w->count * sizeof *out);
  if (!out) {
    w->spoiled = true;
    return -ENOMEM;
  }
  size_t k = 0;
  for (uint32_t i = 0; i < w->nbuckets; i++)
    for (struct zkw_sweepwatch_kept *e = w->bucket[i], *next; e; e = next) {
      next = e->next;
      memmove(e, e->path, e->len + 1); /* the block becomes the string */
      out[k++] = (char *)e;
    }
  free(w->bucket);
  w->bucket = NULL;
  w->nbuckets = 0;
  w->count = 0;
  *paths = out;
  *n = k;
  return 0;
}

/* ---- the notifications ---- */

/* True if the JobManager's own watches (its table, as the relay keeps it)
 * ask for this event. */
static bool client_wants(const struct zkw_session *s, const struct zkw_watcher_event *ev) {
  if (s->watches.lost) return true; /* its table is incomplete: every notification goes on */
  const char *p = (const char *)ev->path.p;
  size_t n = (size_t)ev->path.len;
  unsigned k = zkw_watches_kinds(&s->watches, p, n), want;
  switch (ev->type) {
  case 1: /* NodeCreated */
    want = ZKW_WATCH_EXIST | ZKW_WATCH_PERSISTENT;
    break;
  case 2: /* NodeDeleted */
    want = ZKW_WATCH_DATA | ZKW_WATCH_EXIST | ZKW_WATCH_CHILD | ZKW_WATCH_PERSISTENT;
    break;
  case 3: /* NodeDataChanged */
    want = ZKW_WATCH_DATA | ZKW_WATCH_EXIST | ZKW_WATCH_PERSISTENT;
    break;
  default:
    return true;
  }
  if (k & want) return true;
  /* A persistent recursive watch of its own on the path or above it. */
  for (size_t i = n; i > 0; i--)
    if ((i == n || p[i] == '/') && (zkw_watches_kinds(&s->watches, p, i) & ZKW_WATCH_RECURSIVE)) return true;
  return (zkw_watches_kinds(&s->watches, "/", 1) & ZKW_WATCH_RECURSIVE) != 0;
}

int zkw_sweepwatch_on_notification(struct zkw_session *s, const struct zkw_watcher_event *ev) {
  if (!s->srv->policy) return ZKW_FORWARD; /* the hooks without an identity: no watch of the sweep's */
  struct zkw_sweepwatch *w = watch_of(s);
  if (!w->conn || s->conn != w->conn || ev->type < 1 || ev->type > 3 || ev->path.len <= 0) return ZKW_FORWARD;
  const char *p = (const char *)ev->path.p;
  size_t n = (size_t)ev->path.len;
  if (!zkw_treeset_covers(&w->armed, p, n)) return ZKW_FORWARD;
  if (ev->type == 2)
    unkeep(w, p, n);
  else
    keep(w, s, p, n);
  return client_wants(s, ev) ? ZKW_FORWARD : ZKW_DROP;
}

void zkw_sweepwatch_on_request(const struct zkw_session *s, const struct zkw_request *req) {
  struct zkw_sweepwatch *w = watch_of(s);
  if (!w->conn || s->conn != w->conn || req->op.path.len <= 0) return;
  bool touches = req->type == ZKW_OP_ADD_WATCH || req->type == ZKW_OP_REMOVE_WATCHES ||
                 ((req->type == ZKW_OP_EXISTS || req->type == ZKW_OP_GET_DATA ||
                   req->type == ZKW_OP_GET_CHILDREN || req->type == ZKW_OP_GET_CHILDREN2) &&
                  req->op.watch);
  if (!touches) return;
  for (int i = 0; i < w->asked.count; i++)
    if ((size_t)req->op.path.len == strlen(w->asked.tree[i]) &&
        memcmp(req->op.path.p, w->asked.tree[i], (size_t)req->op.path.len) == 0) {
      zkw_log_debug("sweep: the JobManager sets or removes a watch on %s, which the sweep watches: the next "
                    "pass walks",
                    w->asked.tree[i]);
      w->spoiled = true;
    }
}
