/* zkw_locks.c: the lock report: the walk over the lock roots (and the
 * registry's records and ACLs), the verdicts, and how far they are trusted.
 * The renderings are zkw_locksrender.c. */
#include "zkw_fault.h"
#include "zkw_locks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "zkw_record.h"

enum item_kind { LIST_DIR, GET_LOCK, LIST_REGISTRY, GET_RECORD, GET_ACL };

/* GET_ACL of the registry's parents (else of an identity's record). */
#define ACL_PARENT (-2)

struct item {
  enum item_kind kind;
  char *path;
  int id; /* GET_RECORD, GET_ACL: the identity (ACL_PARENT: a registry parent) */
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
  struct zkw_lock_roots trusted, untrusted; /* the paths walked, by their source */
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
  if (r->have_auth) (void)push(w, GET_ACL, join(w->reg_ids, name), w->last_id); /* else nothing is trusted */
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
    e->rec_stat = res->stat;
    e->ndead = rec.ndead;
    memcpy(e->dead, rec.dead_sessions, sizeof e->dead);
  }
  memset(&rec, 0, sizeof rec); /* it holds the session password */
}

/* A record's ACL (id >= 0) or a registry parent's: who else can change it. */
static void acl_read(struct zkw_locks_walk *w, const struct item *it, const struct zkw_zk_result *res) {
  struct zkw_locks_report *r = w->rep;
  char buf[ZKW_REGTRUST_WHY_MAX];
  const char *why = zkw_regtrust_why(res, r->have_auth, buf, sizeof buf);
  if (it->id == ACL_PARENT) {
    if (why && !r->registry_trust[0])
      snprintf(r->registry_trust, sizeof r->registry_trust, "the registry node %.300s: %.199s", it->path,
               why);
    return;
  }
  struct zkw_locks_identity *e = &r->ids[it->id];
  e->acl_read = res->rc == ZOK;
  e->acl_stat = res->stat;
  snprintf(e->trust, sizeof e->trust, "%s", why ? why : "");
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
  } else if (it.kind == GET_ACL) {
    acl_read(w, &it, res);
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

static const char UNDER_UNTRUSTED[] = "found under a tree read from a registry record that is not trusted";
static const char ON_UNTRUSTED[] =
    "its verdict rests on its identity's registry record, which is not trusted";

/* Whether each identity's record is trusted (zkw_regtrust.h). */
static void judge_records(struct zkw_locks_report *r) {
  for (size_t k = 0; k < r->nids; k++) {
    struct zkw_locks_identity *id = &r->ids[k];
    const char *why = NULL;
    if (!r->have_auth)
      why = ZKW_REGTRUST_NO_AUTH;
    else if (strcmp(id->record, "ok") != 0)
      why = id->record; /* nothing read to trust */
    else if (r->registry_trust[0])
      why = r->registry_trust;
    else if (id->trust[0])
      why = id->trust;
    else if (!id->acl_read)
      why = "its ACL was not read";
    else if (!zkw_regtrust_same(&id->acl_stat, &id->rec_stat))
      why = "it changed while it was read";
    if (why && why != id->trust) snprintf(id->trust, sizeof id->trust, "%s", why);
    id->trusted = !why;
  }
}

static bool under(const struct zkw_lock_roots *roots, const char *path) {
  return zkw_under_lock_roots(roots, (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)});
}

/* Verdicts, counts and order, once every read is back. */
static void walk_finish(struct zkw_locks_walk *w) {
  struct zkw_locks_report *r = w->rep;
  judge_records(r);
  for (size_t i = 0; i < r->nlocks; i++) {
    struct zkw_lock_entry *e = &r->locks[i];
    e->under_untrusted = under(&w->untrusted, e->path) && !under(&w->trusted, e->path);
    /* The verdict rests on the record where it weighs the incarnation. */
    bool weighs = e->id >= 0 && e->owner && e->owner != r->asking_session && r->ids[e->id].current;
    e->untrusted = e->under_untrusted                 ? UNDER_UNTRUSTED
                   : weighs && !r->ids[e->id].trusted ? ON_UNTRUSTED
                                                      : NULL;
    if (e->untrusted) r->untrusted++;
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
      else if (it.kind == GET_ACL)
        rc = zkw_zk_get_acl(w->zk, it.path, "acl-report", op_done, o);
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
    } else if (it.kind == GET_ACL) {
      struct zkw_zk_result failed = {.rc = rc};
      acl_read(w, &it, &failed);
      free(it.path);
    } else if (it.kind != LIST_REGISTRY) {
      unreadable(w, it.path, rc);
    } else {
      free(it.path);
    }
  }
  if (w->inflight == 0 && w->qhead == w->qlen) walk_finish(w);
}

void zkw_locks_tree_roots(const struct zkw_treeset *trees, struct zkw_lock_roots *out) {
  out->count = 0;
  for (int i = 0; i < trees->count && i < ZKW_MAX_LOCK_ROOTS; i++)
    snprintf(out->root[out->count++], sizeof out->root[0], "%s", trees->tree[i]);
}

/* Appends the roots to the report's list (comma-separated, cut to fit). */
static void list_roots(char *out, size_t cap, const struct zkw_lock_roots *roots) {
  size_t n = strlen(out);
  for (int i = 0; i < roots->count && n < cap - 1; i++) {
    n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", roots->root[i]);
    if (n >= cap) n = cap - 1;
  }
}

int zkw_locks_walk_start(struct zkw_zk *zk, const struct zkw_locks_opts *o, zkw_locks_done done, void *arg,
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
  r->asking_session = o->asking_session;
  r->all = o->all;
  r->have_auth = o->have_auth;
  const char *root = strcmp(o->registry_root, "/") ? o->registry_root : "";
  snprintf(w->reg_ids, sizeof w->reg_ids, "%s/identities", root);
  /* A tree below another is walked through it (what is under a trusted
   * one stays trusted). */
  static const struct zkw_lock_roots none;
  const struct zkw_lock_roots *untrusted = o->untrusted ? o->untrusted : &none;
  w->trusted = *o->roots;
  for (int i = 0; i < untrusted->count; i++)
    if (!under(o->roots, untrusted->root[i]) && w->untrusted.count < ZKW_MAX_LOCK_ROOTS)
      snprintf(w->untrusted.root[w->untrusted.count++], sizeof w->untrusted.root[0], "%s",
               untrusted->root[i]);
  struct zkw_lock_roots walked = {0};
  for (int i = 0; i < w->trusted.count; i++)
    if (!under(&w->untrusted, w->trusted.root[i]))
      snprintf(walked.root[walked.count++], sizeof walked.root[0], "%s", w->trusted.root[i]);
  for (int i = 0; i < w->untrusted.count && walked.count < ZKW_MAX_LOCK_ROOTS; i++)
    snprintf(walked.root[walked.count++], sizeof walked.root[0], "%s", w->untrusted.root[i]);
  list_roots(r->roots, sizeof r->roots, &walked);
  list_roots(r->untrusted_roots, sizeof r->untrusted_roots, &w->untrusted);
  int rc = push(w, LIST_REGISTRY, zkw_strdup(w->reg_ids), -1);
  if (o->have_auth && rc == 0) rc = push(w, GET_ACL, zkw_strdup(w->reg_ids), ACL_PARENT);
  if (o->have_auth && rc == 0) rc = push(w, GET_ACL, zkw_strdup(root[0] ? root : "/"), ACL_PARENT);
  for (int i = 0; i < walked.count && rc == 0; i++)
    rc = push(w, LIST_DIR, zkw_strdup(walked.root[i]), -1);
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
