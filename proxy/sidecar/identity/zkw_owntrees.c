/* zkw_owntrees.c: the identity's own trees at each moment and the record's
 * (see zkw_owntrees.h): precedence, trust, the current incarnation's trees
 * replacing earlier ones, the zkwarden_own_trees gauge. */
#include "zkw_owntrees.h"

#include <string.h>

#include "zkw_config.h"
#include "zkw_identity.h"
#include "zkw_log.h"
#include "zkw_metrics.h"

_Static_assert(ZKW_SWEEP_TREES_MAX + ZKW_TREESET_LEARNED_MAX <= ZKW_TREESET_TREES_MAX,
               "a scope holds the operator's trees beside the learned ones");

static const struct zkw_lock_roots *roots_of(const struct zkw_identity *id) {
  return &id->srv->cfg->lock_roots;
}

/* Adds each tree of from to out; returns how many found no room. */
static int add_all(struct zkw_treeset *out, const struct zkw_lock_roots *roots,
                   const struct zkw_treeset *from) {
  int left = 0;
  for (int i = 0; i < from->count; i++)
    if (zkw_treeset_add(out, roots, from->tree[i]) == ZKW_TREESET_FULL) left++;
  return left;
}

/* The operator's trees, as a scope. */
static void operator_trees(const struct zkw_identity *id, struct zkw_treeset *out) {
  const struct zkw_config *cfg = id->srv->cfg;
  out->count = 0;
  for (int i = 0; i < cfg->sweep_trees.count; i++)
    (void)zkw_treeset_add(out, &cfg->lock_roots, cfg->sweep_trees.root[i]); /* checked at parse: fits */
}

/* zkwarden_own_trees. */
static void count(const struct zkw_identity *id) {
  struct zkw_treeset all;
  (void)zkw_owntrees_of(id, &all); /* the gauge counts what is read */
  ZKW_METRIC_SET(own_trees, (int64_t)all.count);
}

int zkw_owntrees_of(const struct zkw_identity *id, struct zkw_treeset *out) {
  operator_trees(id, out);
  int left = add_all(out, roots_of(id), &id->scope);
  left += add_all(out, roots_of(id), &id->prev_trees);
  if (id->record_trust == ZKW_TRUST_TRUSTED) left += add_all(out, roots_of(id), &id->rec_trees);
  return left;
}

void zkw_owntrees_untrusted(const struct zkw_identity *id, struct zkw_treeset *out) {
  out->count = 0;
  if (id->record_trust != ZKW_TRUST_TRUSTED) (void)add_all(out, roots_of(id), &id->rec_trees);
}

/* What a record write carries; with_record: the record's trees whatever
 * their verdict (to tell whether the record read lacks something). */
static void for_record(const struct zkw_identity *id, struct zkw_treeset *out, bool with_record) {
  out->count = 0;
  (void)add_all(out, roots_of(id), &id->scope);      /* at most ZKW_TREESET_LEARNED_MAX: fits */
  (void)add_all(out, roots_of(id), &id->prev_trees); /* the rest: retired first, the oldest */
  /* Not trusted: with credentials they are not carried on (a write of
   * zkwarden's would make them look trusted); without, nothing read is. */
  if (with_record || id->record_trust == ZKW_TRUST_TRUSTED || !id->srv->cfg->registry_auth[0])
    (void)add_all(out, roots_of(id), &id->rec_trees);
}

void zkw_owntrees_for_record(const struct zkw_identity *id, struct zkw_treeset *out) {
  for_record(id, out, false);
}

static bool same_trees(const struct zkw_treeset *a, const struct zkw_treeset *b) {
  if (a->count != b->count) return false;
  for (int i = 0; i < a->count; i++)
    if (strcmp(a->tree[i], b->tree[i]) != 0) return false;
  return true;
}

bool zkw_owntrees_loaded(struct zkw_identity *id, const struct zkw_treeset *trees) {
  id->rec_trees.count = 0;
  for (int i = 0; i < trees->count; i++) {
    const char *t = trees->tree[i];
    size_t n = strlen(t);
    if (zkw_treeset_covers(&id->scope, t, n) || zkw_treeset_covers(&id->prev_trees, t, n))
      continue; /* this instance's own, written before */
    enum zkw_treeset_change c = zkw_treeset_add(&id->rec_trees, roots_of(id), t);
    if (c == ZKW_TREESET_REFUSED)
      zkw_log_warn("identity %s: the registry record's tree %s is not below a lock root: ignored",
                   zkw_identity_name(id), t);
  }
  count(id);
  struct zkw_treeset written;
  for_record(id, &written, true); /* what this instance adds; the verdict decides about the rest */
  return !same_trees(&written, trees);
}

enum zkw_treeset_change zkw_owntrees_learn(struct zkw_identity *id, uint64_t current, struct zkw_bytes path) {
  /* Below an operator's tree: read anyway, nothing to learn. */
  struct zkw_treeset op;
  operator_trees(id, &op);
  size_t parent = path.len > 0 ? (size_t)path.len : 0;
  while (parent > 1 && path.p[parent - 1] != '/')
    parent--;
  bool under_op = parent > 1 && zkw_treeset_covers(&op, (const char *)path.p, parent - 1);
  struct zkw_treeset learned = id->scope_inc == current ? id->scope : (struct zkw_treeset){0};
  enum zkw_treeset_change c = under_op ? ZKW_TREESET_SAME : zkw_treeset_learn(&learned, roots_of(id), path);
  if (c != ZKW_TREESET_CHANGED && (c != ZKW_TREESET_SAME || !under_op || id->scope_inc == current)) return c;
  if (id->scope_inc != current) {
    /* The current incarnation's first tree: the last one's join the
     * earlier ones (first: the newest), which serve until a walk. */
    struct zkw_treeset earlier = id->scope;
    (void)add_all(&earlier, roots_of(id), &id->prev_trees);
    id->prev_trees = earlier;
    id->scope_inc = current;
    id->scope_full_logged = false;
  }
  id->scope = learned; /* under an operator's tree: none learned, the incarnation begun all the same */
  count(id);
  return c;
}

/* Drops the trees of sc that a complete pass read (walked), and every one
 * when untrusted (an untrusted record's, which is read by nothing); returns
 * how many. A tree that found no room in the own trees was not read: it
 * stays, and is read once the retired ones make room for it. */
static int retire(struct zkw_treeset *sc, const struct zkw_treeset *walked, bool untrusted) {
  int kept = 0, gone = 0;
  for (int i = 0; i < sc->count; i++) {
    if (!untrusted && !zkw_treeset_covers(walked, sc->tree[i], strlen(sc->tree[i]))) {
      if (kept != i) memcpy(sc->tree[kept], sc->tree[i], ZKW_TREESET_PATH_MAX);
      kept++;
    } else {
      gone++;
    }
  }
  sc->count = kept;
  return gone;
}

int zkw_owntrees_walked(struct zkw_identity *id, uint64_t incarnation, const struct zkw_treeset *walked) {
  if (incarnation == 0 || id->scope_inc != incarnation) return 0;
  struct zkw_treeset op;
  operator_trees(id, &op);
  if (id->scope.count == 0 && op.count == 0) return 0; /* the incarnation's own trees are not known yet */
  /* An untrusted record's trees are read by nothing: retired with the
   * first complete pass; a pending verdict leaves them as they are. */
  int gone = retire(&id->prev_trees, walked, false);
  if (id->record_trust != ZKW_TRUST_PENDING)
    gone += retire(&id->rec_trees, walked, id->record_trust == ZKW_TRUST_UNTRUSTED);
  if (gone) count(id);
  return gone;
}

bool zkw_owntrees_judged(struct zkw_identity *id, const char *why) {
  count(id);
  if (id->rec_trees.count == 0) return false;
  if (!why) return true; /* held back from writes while not judged */
  char trees[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX];
  zkw_treeset_format(&id->rec_trees, trees, sizeof trees);
  zkw_log(id->rec_trees_warned ? ZKW_LOG_INFO : ZKW_LOG_WARN,
          "identity %s: the trees %s read from registry record %s are not swept: the record is not trusted "
          "(%s), so anyone could have written them. The lock report shows them, marked untrusted; the trees "
          "the JobManager's creates show, and ZKWARDEN_SWEEP_TREES, are swept",
          zkw_identity_name(id), trees, id->node, why);
  id->rec_trees_warned = true;
  return id->srv->cfg->registry_auth[0] != 0; /* with credentials no write carries them on */
}
