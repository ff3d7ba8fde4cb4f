/* zkw_locks.c: the lock report: the walk over the lock roots, the verdicts
 * and their renderings (table, JSON, HTML summary). */
#include "zkw_fault.h"
#include "zkw_locks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "zkw_record.h"
#include "zkw_text.h"

enum item_kind { LIST_DIR, GET_LOCK, LIST_REGISTRY, GET_RECORD };

struct item {
  enum item_kind kind;
  char *path;
  int id; /* GET_RECORD: the identity */
};

struct zkw_locks_walk {
  struct zkw_zk *zk;
  zkw_locks_done done;
  void *arg;
  bool cancelled;
  struct zkw_locks_report *rep;
  struct item *q; /* FIFO */
  size_t qhead, qlen, qcap;
  int inflight;
  int last_id; /* the identity found last (locks come in runs of one identity) */
  char reg_ids[300];
  uint64_t start_ns;
};

struct op {
  struct zkw_locks_walk *w;
  struct item it;
};

/* Room for one more element at index n; on failure arr stays as it was. */
static void *grow(void *arr, size_t *cap, size_t n, size_t size, bool *ok) {
  *ok = true;
  if (n < *cap) return arr;
  size_t nc = *cap ? *cap * 2 : 64;
  void *q = zkw_realloc(arr, nc * size);
  if (!q) {
    *ok = false;
    return arr;
  }
  *cap = nc;
  return q;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = zkw_malloc(n);
  if (p) snprintf(p, n, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name);
  return p;
}

static int push(struct zkw_locks_walk *w, enum item_kind kind, char *path, int id) {
  if (!path) return -1;
  if (w->qhead > 4096 && w->qhead * 2 > w->qlen) { /* drop what was taken */
    memmove(w->q, w->q + w->qhead, (w->qlen - w->qhead) * sizeof *w->q);
    w->qlen -= w->qhead;
    w->qhead = 0;
  }
  if (w->qlen == w->qcap) {
    size_t cap = w->qcap ? w->qcap * 2 : 256;
    struct item *q = zkw_realloc(w->q, cap * sizeof *q);
    if (!q) {
      free(path);
      return -1;
    }
    w->q = q;
    w->qcap = cap;
  }
  w->q[w->qlen++] = (struct item){kind, path, id};
  return 0;
}

static void unreadable(struct zkw_locks_walk *w, char *path, int rc) {
  struct zkw_locks_report *r = w->rep;
  bool ok;
  r->unreadable = grow(r->unreadable, &r->capu, r->nunreadable, sizeof *r->unreadable, &ok);
  if (!ok) {
    free(path);
    return;
  }
  r->unreadable[r->nunreadable++] = (struct zkw_locks_unreadable){path, rc};
}

/* The index of an identity, added (and its record queued) when new. */
static int identity_index(struct zkw_locks_walk *w, const char *name) {
  struct zkw_locks_report *r = w->rep;
  if (w->last_id >= 0 && strcmp(r->ids[w->last_id].name, name) == 0) return w->last_id;
  for (size_t i = 0; i < r->nids; i++)
    if (strcmp(r->ids[i].name, name) == 0) return w->last_id = (int)i;
  bool ok;
  r->ids = grow(r->ids, &r->capi, r->nids, sizeof *r->ids, &ok);
  if (!ok) return w->last_id = -1;
  struct zkw_locks_identity *id = &r->ids[r->nids];
  memset(id, 0, sizeof *id);
  snprintf(id->name, sizeof id->name, "%s", name);
  id->record = "not read";
  w->last_id = (int)r->nids++;
  (void)push(w, GET_RECORD, join(w->reg_ids, name), w->last_id);
  return w->last_id;
}

/* The state node a lock guards: its parent, or its grandparent under a
 * `locks` container. */
static char *state_of(const char *path) {
  const char *end = strrchr(path, '/');
  size_t n = end ? (size_t)(end - path) : 0;
  if (n >= 6 && memcmp(path + n - 6, "/locks", 6) == 0) n -= 6;
  if (n == 0) return zkw_strdup("/");
  char *s = zkw_malloc(n + 1);
  if (s) {
    memcpy(s, path, n);
    s[n] = 0;
  }
  return s;
}

static void add_lock(struct zkw_locks_walk *w, char *path, const struct zkw_zk_result *res) {
  struct zkw_locks_report *r = w->rep;
  struct zkw_tag tag;
  struct zkw_bytes data = {(const uint8_t *)res->data, res->data ? res->data_len : -1};
  bool tagged = zkw_tag_parse(data, &tag) == 0;
  char *state = state_of(path);
  bool ok;
  r->locks = grow(r->locks, &r->capl, r->nlocks, sizeof *r->locks, &ok);
  if (!state || !ok) {
    free(state);
    free(path);
    return;
  }
  r->locks[r->nlocks++] = (struct zkw_lock_entry){
      .path = path,
      .state = state,
      .id = tagged ? identity_index(w, tag.identity) : -1,
      .incarnation = tagged ? tag.incarnation : 0,
      .owner = res->stat.ephemeralOwner,
      .czxid = res->stat.czxid,
      .version = res->stat.version,
      .zombie_of = -1,
  };
}

static void record_read(struct zkw_locks_walk *w, int id, const struct zkw_zk_result *res) {
  struct zkw_locks_identity *e = &w->rep->ids[id];
  if (res->rc == ZNONODE) {
    e->record = "no registry record";
    return;
  }
  if (res->rc != ZOK) {
    e->record = zkw_zk_error(res->rc);
    return;
  }
  struct zkw_record rec;
  if (zkw_record_parse(res->data, res->data_len, &rec) != 0) {
    e->record = "corrupt registry record";
  } else {
    e->current = rec.incarnation;
    e->record = "ok";
    e->ndead = rec.ndead;
    memcpy(e->dead, rec.dead_sessions, sizeof e->dead);
  }
  memset(&rec, 0, sizeof rec); /* it holds the session password */
}

static void children_read(struct zkw_locks_walk *w, struct item *it, const struct zkw_zk_result *res) {
  struct zkw_locks_report *r = w->rep;
  for (int i = 0; i < res->child_count; i++) {
    const char *name = res->children[i];
    if (it->kind == LIST_REGISTRY) {
      if (zkw_identity_valid(name)) (void)identity_index(w, name);
      continue;
    }
    if (r->visited >= ZKW_LOCKS_MAX_NODES) {
      r->truncated = true;
      return;
    }
    r->visited++;
    bool lock = zkw_is_uuid((const uint8_t *)name, strlen(name));
    (void)push(w, lock ? GET_LOCK : LIST_DIR, join(it->path, name), -1);
  }
}

static void walk_pump(struct zkw_locks_walk *w);

static void op_done(void *arg, const struct zkw_zk_result *res) {
  struct op *o = arg;
  struct zkw_locks_walk *w = o->w;
  struct item it = o->it;
  free(o);
  w->inflight--;
  if (it.kind == GET_RECORD) {
    record_read(w, it.id, res);
  } else if (res->rc == ZNONODE) {
    /* gone meanwhile, or a lock root that does not exist */
  } else if (res->rc != ZOK) {
    if (it.kind != LIST_REGISTRY) {
      unreadable(w, it.path, res->rc);
      it.path = NULL;
    }
  } else if (it.kind == GET_LOCK) {
    add_lock(w, it.path, res);
    it.path = NULL;
  } else {
    children_read(w, &it, res);
  }
  free(it.path);
  walk_pump(w);
}

struct id_order {
  const struct zkw_locks_identity *id;
  int old;
};

static int by_name(const void *x, const void *y) {
  return strcmp(((const struct id_order *)x)->id->name, ((const struct id_order *)y)->id->name);
}

/* Identities by name; the locks' references follow. */
static void sort_identities(struct zkw_locks_report *r) {
  if (r->nids < 2) return;
  struct id_order *o = zkw_malloc(r->nids * sizeof *o);
  struct zkw_locks_identity *ids = zkw_malloc(r->nids * sizeof *ids);
  int *map = zkw_malloc(r->nids * sizeof *map);
  if (o && ids && map) {
    for (size_t i = 0; i < r->nids; i++)
      o[i] = (struct id_order){&r->ids[i], (int)i};
    qsort(o, r->nids, sizeof *o, by_name);
    for (size_t i = 0; i < r->nids; i++) {
      ids[i] = *o[i].id;
      map[o[i].old] = (int)i;
    }
    for (size_t i = 0; i < r->nlocks; i++) {
      if (r->locks[i].id >= 0) r->locks[i].id = map[r->locks[i].id];
      if (r->locks[i].zombie_of >= 0) r->locks[i].zombie_of = map[r->locks[i].zombie_of];
    }
    free(r->ids);
    r->ids = ids;
    r->capi = r->nids;
    ids = NULL;
  }
  free(o);
  free(ids);
  free(map);
}

static int by_state(const void *x, const void *y) {
  const struct zkw_lock_entry *a = x, *b = y;
  int c = strcmp(a->state, b->state);
  return c ? c : strcmp(a->path, b->path);
}

/* Verdicts, counts and order, once every read is back. */
static void walk_finish(struct zkw_locks_walk *w) {
  struct zkw_locks_report *r = w->rep;
  for (size_t i = 0; i < r->nlocks; i++) {
    struct zkw_lock_entry *e = &r->locks[i];
    struct zkw_tag tag = {.incarnation = e->incarnation};
    uint64_t current = e->id >= 0 ? r->ids[e->id].current : 0;
    e->why = zkw_lock_why_not_stale(e->id >= 0 ? &tag : NULL, e->owner, r->asking_session, current);
    if (e->id >= 0) {
      r->ids[e->id].locks++;
      if (!e->why) r->ids[e->id].stale++;
    } else {
      r->untagged++;
    }
    if (!e->why) r->stale++;
    for (size_t k = 0; k < r->nids && e->owner && e->zombie_of < 0; k++)
      for (int d = 0; d < r->ids[k].ndead; d++)
        if (r->ids[k].dead[d].session == e->owner) {
          e->zombie_of = (int)k;
          e->ended_ms = r->ids[k].dead[d].ended_ms;
          r->ids[k].zombies++;
          r->zombies++;
          break;
        }
  }
  sort_identities(r);
  if (r->nlocks > 1) qsort(r->locks, r->nlocks, sizeof *r->locks, by_state);
  r->seconds = (double)(uv_hrtime() - w->start_ns) / 1e9;
  free(w->q);
  if (w->cancelled)
    zkw_locks_report_free(r);
  else
    w->done(w->arg, r);
  free(w);
}

static void walk_pump(struct zkw_locks_walk *w) {
  while (w->inflight < ZKW_LOCKS_WINDOW && w->qhead < w->qlen) {
    struct item it = w->q[w->qhead++];
    if (w->cancelled) { /* send nothing more */
      free(it.path);
      continue;
    }
    struct op *o = zkw_malloc(sizeof *o);
    int rc = ZSYSTEMERROR;
    if (o) {
      *o = (struct op){w, it};
      if (it.kind == LIST_DIR || it.kind == LIST_REGISTRY)
        rc = zkw_zk_children(w->zk, it.path, op_done, o);
      else
        rc = zkw_zk_get(w->zk, it.path, false, op_done, o);
    }
    if (rc == ZOK) {
      w->inflight++;
      continue;
    }
    free(o);
    if (it.kind == GET_RECORD) {
      w->rep->ids[it.id].record = zkw_zk_error(rc);
      free(it.path);
    } else if (it.kind != LIST_REGISTRY) {
      unreadable(w, it.path, rc);
    } else {
      free(it.path);
    }
  }
  if (w->inflight == 0 && w->qhead == w->qlen) walk_finish(w);
}

void zkw_locks_scope_roots(const struct zkw_scope *trees, struct zkw_lock_roots *out) {
  out->count = 0;
  for (int i = 0; i < trees->count && i < ZKW_MAX_LOCK_ROOTS; i++)
    snprintf(out->root[out->count++], sizeof out->root[0], "%s", trees->tree[i]);
}

int zkw_locks_walk_start(struct zkw_zk *zk, const struct zkw_lock_roots *roots, bool all,
                         const char *registry_root, int64_t asking_session, zkw_locks_done done, void *arg,
                         struct zkw_locks_walk **out) {
  if (!zk || !zkw_zk_connected(zk)) return -1;
  struct zkw_locks_walk *w = zkw_calloc(1, sizeof *w);
  struct zkw_locks_report *r = zkw_calloc(1, sizeof *r);
  if (!w || !r) {
    free(w);
    free(r);
    return -1;
  }
  *w = (struct zkw_locks_walk){.zk = zk, .done = done, .arg = arg, .rep = r, .last_id = -1};
  w->start_ns = uv_hrtime();
  r->asking_session = asking_session;
  r->all = all;
  snprintf(w->reg_ids, sizeof w->reg_ids, "%s/identities", strcmp(registry_root, "/") ? registry_root : "");
  size_t rl = 0;
  for (int i = 0; i < roots->count; i++) {
    rl += (size_t)snprintf(r->roots + rl, sizeof r->roots - rl, "%s%s", i ? "," : "", roots->root[i]);
    if (rl >= sizeof r->roots) rl = sizeof r->roots - 1;
  }
  int rc = push(w, LIST_REGISTRY, zkw_strdup(w->reg_ids), -1);
  for (int i = 0; i < roots->count && rc == 0; i++)
    rc = push(w, LIST_DIR, zkw_strdup(roots->root[i]), -1);
  if (rc != 0) {
    for (size_t i = 0; i < w->qlen; i++)
      free(w->q[i].path);
    free(w->q);
    free(w);
    zkw_locks_report_free(r);
    return -1;
  }
  *out = w;
  walk_pump(w);
  return 0;
}

void zkw_locks_walk_cancel(struct zkw_locks_walk *w) {
  w->cancelled = true;
}

void zkw_locks_report_free(struct zkw_locks_report *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nlocks; i++) {
    free(r->locks[i].path);
    free(r->locks[i].state);
  }
  for (size_t i = 0; i < r->nunreadable; i++)
    free(r->unreadable[i].path);
  free(r->locks);
  free(r->ids);
  free(r->unreadable);
  free(r);
}

const char *zkw_locks_identity_of(const struct zkw_locks_report *r, const struct zkw_lock_entry *e) {
  return e->id >= 0 ? r->ids[e->id].name : "";
}

/* ---------------------------------------------------------------- renderings */

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

/* One state node: the run of locks [i, end) that guard it. */
struct state_run {
  size_t end, stale;
  const struct zkw_lock_entry *holder; /* the first lock that is not stale, or NULL */
};

static struct state_run state_run(const struct zkw_locks_report *r, size_t i) {
  struct state_run s = {i, 0, NULL};
  while (s.end < r->nlocks && strcmp(r->locks[s.end].state, r->locks[i].state) == 0) {
    if (!r->locks[s.end].why)
      s.stale++;
    else if (!s.holder)
      s.holder = &r->locks[s.end];
    s.end++;
  }
  return s;
}

static void count_states(const struct zkw_locks_report *r, size_t *states, size_t *held) {
  *states = *held = 0;
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    (*states)++;
    if (s.holder) (*held)++;
    i = s.end;
  }
}

/* When a zombie's owner session was seen to end, as 2026-01-02T03:04:05.678Z. */
static void zombie_ended(const struct zkw_lock_entry *e, char *out, size_t cap) {
  time_t t = (time_t)(e->ended_ms / 1000);
  struct tm tm;
  size_t n = gmtime_r(&t, &tm) ? strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm) : 0;
  if (n)
    snprintf(out + n, cap - n, ".%03uZ", (unsigned)(e->ended_ms % 1000));
  else
    snprintf(out, cap, "%" PRIu64 " ms", e->ended_ms);
}

static const char *const ONLY_STALE = "only stale locks: freed by reclaim (zkwarden locks --reclaim)";

int zkw_locks_render_json(const struct zkw_locks_report *r, struct zkw_buf *b) {
  size_t states, held;
  count_states(r, &states, &held);
  TRY(zkw_text_printf(b, "{\"scope\":\"%s\",\"roots\":", r->all ? "lock_roots" : "own_trees"));
  TRY(zkw_text_json_string(b, r->roots, sizeof r->roots));
  TRY(zkw_text_printf(
      b,
      ",\"nodes_visited\":%zu,\"truncated\":%s,\"seconds\":%.3f,\"asking_session\":\"0x%" PRIx64
      "\",\"summary\":{\"locks\":%zu,\"stale\":%zu,\"untagged\":%zu,\"unreadable\":%zu,"
      "\"state_nodes\":%zu,\"state_nodes_held\":%zu,\"zombies\":%zu},\"identities\":[",
      r->visited, r->truncated ? "true" : "false", r->seconds, (uint64_t)r->asking_session, r->nlocks,
      r->stale, r->untagged, r->nunreadable, states, held, r->zombies));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "%s{\"identity\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, id->name, sizeof id->name));
    TRY(zkw_text_printf(b, ",\"current_incarnation\":%" PRIu64 ",\"record\":", id->current));
    TRY(zkw_text_json_string(b, id->record, 200));
    TRY(zkw_text_printf(b, ",\"locks\":%zu,\"stale\":%zu,\"zombies\":%zu}", id->locks, id->stale,
                        id->zombies));
  }
  TRY(zkw_text_printf(b, "],\"locks\":["));
  for (size_t i = 0; i < r->nlocks; i++) {
    const struct zkw_lock_entry *e = &r->locks[i];
    TRY(zkw_text_printf(b, "%s{\"path\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, e->path, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"state_node\":"));
    TRY(zkw_text_json_string(b, e->state, SIZE_MAX));
    if (e->id >= 0) {
      TRY(zkw_text_printf(b, ",\"tagged\":true,\"identity\":"));
      TRY(zkw_text_json_string(b, r->ids[e->id].name, ZKW_IDENTITY_MAX));
      TRY(zkw_text_printf(b, ",\"incarnation\":%" PRIu64, e->incarnation));
    } else {
      TRY(zkw_text_printf(b, ",\"tagged\":false,\"identity\":null,\"incarnation\":null"));
    }
    TRY(zkw_text_printf(b, ",\"session\":\"0x%" PRIx64 "\",\"stale\":%s,\"why\":", (uint64_t)e->owner,
                        e->why ? "false" : "true"));
    if (e->why)
      TRY(zkw_text_json_string(b, e->why, 200));
    else
      TRY(zkw_text_printf(b, "null"));
    TRY(zkw_text_printf(b, ",\"zombie\":"));
    if (e->zombie_of >= 0) {
      char ended[40];
      zombie_ended(e, ended, sizeof ended);
      TRY(zkw_text_printf(b, "{\"seen_ended_by\":"));
      TRY(zkw_text_json_string(b, r->ids[e->zombie_of].name, ZKW_IDENTITY_MAX));
      TRY(zkw_text_printf(b, ",\"ended\":\"%s\",\"ended_ms\":%" PRIu64 "}", ended, e->ended_ms));
    } else {
      TRY(zkw_text_printf(b, "null"));
    }
    TRY(zkw_text_printf(b, "}"));
  }
  TRY(zkw_text_printf(b, "],\"state_nodes\":["));
  bool first = true;
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    TRY(zkw_text_printf(b, "%s{\"path\":", first ? "" : ","));
    first = false;
    TRY(zkw_text_json_string(b, r->locks[i].state, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"locks\":%zu,\"stale_locks\":%zu,\"held\":%s,\"held_by\":", s.end - i, s.stale,
                        s.holder ? "true" : "false"));
    if (s.holder) {
      TRY(zkw_text_json_string(b, s.holder->path, SIZE_MAX));
      TRY(zkw_text_printf(b, ",\"why\":"));
      TRY(zkw_text_json_string(b, s.holder->why, 200));
    } else {
      TRY(zkw_text_printf(b, "null,\"why\":"));
      TRY(zkw_text_json_string(b, ONLY_STALE, 200));
    }
    TRY(zkw_text_printf(b, "}"));
    i = s.end;
  }
  TRY(zkw_text_printf(b, "],\"unreadable\":["));
  for (size_t i = 0; i < r->nunreadable; i++) {
    TRY(zkw_text_printf(b, "%s{\"path\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, r->unreadable[i].path, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"error\":"));
    TRY(zkw_text_json_string(b, zkw_zk_error(r->unreadable[i].rc), 200));
    TRY(zkw_text_printf(b, "}"));
  }
  TRY(zkw_text_printf(b, "]}\n"));
  return 0;
}

static int summary_line(const struct zkw_locks_report *r, struct zkw_buf *b) {
  size_t states, held;
  count_states(r, &states, &held);
  return zkw_text_printf(
      b,
      "%zu lock(s): %zu stale, %zu untagged; %zu state node(s), %zu held; %zu unreadable "
      "node(s); %zu zombie(s); %zu node(s) under %s visited in %.2f s%s",
      r->nlocks, r->stale, r->untagged, states, held, r->nunreadable, r->zombies, r->visited,
      r->roots[0] ? r->roots
      : r->all    ? "no lock root"
                  : "the own trees (none known yet: its JobManager created nothing; --all walks "
                    "every lock root)",
      r->seconds, r->truncated ? " (truncated: too many nodes)" : "");
}

int zkw_locks_render_table(const struct zkw_locks_report *r, struct zkw_buf *b) {
  TRY(summary_line(r, b));
  TRY(zkw_text_printf(b, "\n\n%-32s %11s %7s %7s %7s  %s\n", "IDENTITY", "CURRENT", "LOCKS", "STALE",
                      "ZOMBIES", "RECORD"));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "%-32s %11" PRIu64 " %7zu %7zu %7zu  %s\n", id->name, id->current, id->locks,
                        id->stale, id->zombies, id->record));
  }
  if (r->untagged)
    TRY(zkw_text_printf(b, "%-32s %11s %7zu %7s %7s  %s\n", "(untagged)", "-", r->untagged, "-", "-", "-"));
  if (r->nlocks)
    TRY(zkw_text_printf(b, "\n%-44s %-20s %11s %-18s %s\n", "STATE NODE / LOCK", "IDENTITY", "INCARNATION",
                        "SESSION", "VERDICT"));
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    TRY(zkw_text_printf(b, "%s  [%s%s%s]\n", r->locks[i].state, s.holder ? "held: " : "",
                        s.holder ? s.holder->why : ONLY_STALE, ""));
    for (size_t k = i; k < s.end; k++) {
      const struct zkw_lock_entry *e = &r->locks[k];
      char inc[24] = "-";
      if (e->id >= 0) snprintf(inc, sizeof inc, "%" PRIu64, e->incarnation);
      char sess[24];
      snprintf(sess, sizeof sess, "0x%" PRIx64, (uint64_t)e->owner);
      const char *rel = e->path + strlen(e->state) + (strcmp(e->state, "/") ? 1 : 0);
      TRY(zkw_text_printf(b, "  %-42s %-20s %11s %-18s %s%s", rel, e->id >= 0 ? r->ids[e->id].name : "-", inc,
                          sess, e->why ? "not stale: " : "STALE", e->why ? e->why : ""));
      if (e->zombie_of >= 0) {
        char ended[40];
        zombie_ended(e, ended, sizeof ended);
        TRY(zkw_text_printf(
            b, "; ZOMBIE: its session ended %s (seen by the sidecar of %s), the ensemble kept it", ended,
            r->ids[e->zombie_of].name));
      }
      TRY(zkw_text_printf(b, "\n"));
    }
    i = s.end;
  }
  if (r->nunreadable) TRY(zkw_text_printf(b, "\nUNREADABLE (not judged)\n"));
  for (size_t i = 0; i < r->nunreadable; i++)
    TRY(zkw_text_printf(b, "  %s  %s\n", r->unreadable[i].path, zkw_zk_error(r->unreadable[i].rc)));
  return 0;
}

int zkw_locks_render_html_summary(const struct zkw_locks_report *r, struct zkw_buf *b) {
  TRY(zkw_text_printf(b, "<p>"));
  struct zkw_buf line = {0};
  int rc = summary_line(r, &line);
  if (!rc) rc = zkw_buf_append(&line, "", 1);
  if (!rc) rc = zkw_text_html(b, (const char *)line.data, line.len);
  zkw_buf_release(&line);
  TRY(rc);
  TRY(zkw_text_printf(b, "</p>\n<table><tr><th>identity</th><th>current incarnation</th><th>locks</th>"
                         "<th>stale</th><th>zombies</th><th>record</th></tr>\n"));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "<tr><td>"));
    TRY(zkw_text_html(b, id->name, sizeof id->name));
    TRY(zkw_text_printf(
        b, "</td><td>%" PRIu64 "</td><td>%zu</td><td class=\"%s\">%zu</td><td class=\"%s\">%zu</td><td>",
        id->current, id->locks, id->stale ? "bad" : "", id->stale, id->zombies ? "bad" : "", id->zombies));
    TRY(zkw_text_html(b, id->record, 200));
    TRY(zkw_text_printf(b, "</td></tr>\n"));
  }
  if (r->untagged)
    TRY(zkw_text_printf(b,
                        "<tr><td>(untagged)</td><td>-</td><td>%zu</td><td>-</td><td>-</td><td>-</td></tr>\n",
                        r->untagged));
  TRY(zkw_text_printf(b, "</table>\n"));
  return 0;
}
