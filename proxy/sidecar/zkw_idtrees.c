/* zkw_idtrees.c: the identity's own trees at each moment and the record's
 * (see zkw_idtrees.h): precedence, trust, the current incarnation's trees
 * replacing earlier ones, the zkwarden_own_trees gauge. */
#include "zkw_idtrees.h"

#include <string.h>

#include "zkw_config.h"
#include "zkw_idstate.h"
#include "zkw_log.h"
#include "zkw_metrics.h"

_Static_assert(ZKW_SWEEP_TREES_MAX + ZKW_SCOPE_LEARNED_MAX <= ZKW_SCOPE_TREES_MAX,
               "a scope holds the operator's trees beside the learned ones");

static const struct zkw_lock_roots *roots_of(const struct zkw_identity *id) {
  return &id->srv->cfg->lock_roots;
}

/* Adds each tree of from to out; returns how many found no room. */
static int add_all(struct zkw_scope *out, const struct zkw_lock_roots *roots, const struct zkw_scope *from) {
  int left = 0;
  for (int i = 0; i < from->count; i++)
    if (zkw_scope_add(out, roots, from->tree[i]) == ZKW_SCOPE_FULL) left++;
  return left;
}

/* The operator's trees, as a scope. */
static void operator_trees(const struct zkw_identity *id, struct zkw_scope *out) {
  const struct zkw_config *cfg = id->srv->cfg;
  out->count = 0;
  for (int i = 0; i < cfg->sweep_trees.count; i++)
    (void)zkw_scope_add(out, &cfg->lock_roots, cfg->sweep_trees.root[i]); /* checked at parse: fits */
}

/* zkwarden_own_trees. */
static void count(const struct zkw_identity *id) {
  struct zkw_scope all;
  (void)zkw_identity_own_trees(id, &all); /* the gauge counts what is read */
  ZKW_METRIC_SET(own_trees, (int64_t)all.count);
}

int zkw_identity_own_trees(const struct zkw_identity *id, struct zkw_scope *out) {
  operator_trees(id, out);
  int left = add_all(out, roots_of(id), &id->scope);
  left += add_all(out, roots_of(id), &id->prev_trees);
  if (id->record_trust == ZKW_TRUST_TRUSTED) left += add_all(out, roots_of(id), &id->rec_trees);
  return left;
}

void zkw_identity_untrusted_trees(const struct zkw_identity *id, struct zkw_scope *out) {
  out->count = 0;
  if (id->record_trust != ZKW_TRUST_TRUSTED) (void)add_all(out, roots_of(id), &id->rec_trees);
}

/* What a record write carries; with_record: the record's trees whatever
 * their verdict (to tell whether the record read lacks something). */
static void for_record(const struct zkw_identity *id, struct zkw_scope *out, bool with_record) {
  out->count = 0;
  (void)add_all(out, roots_of(id), &id->scope);      /* at most ZKW_SCOPE_LEARNED_MAX: fits */
  (void)add_all(out, roots_of(id), &id->prev_trees); /* the rest: retired first, the oldest */
  /* Not trusted: with credentials they are not carried on (a write of
   * zkwarden's would make them look trusted); without, nothing read is. */
  if (with_record || id->record_trust == ZKW_TRUST_TRUSTED || !id->srv->cfg->registry_auth[0])
    (void)add_all(out, roots_of(id), &id->rec_trees);
}

void zkw_idtrees_for_record(const struct zkw_identity *id, struct zkw_scope *out) {
  for_record(id, out, false);
}

static bool same_trees(const struct zkw_scope *a, const struct zkw_scope *b) {
  if (a->count != b->count) return false;
  for (int i = 0; i < a->count; i++)
    if (strcmp(a->tree[i], b->tree[i]) != 0) return false;
  return true;
}

bool zkw_idtrees_loaded(struct zkw_identity *id, const struct zkw_scope *trees) {
  id->rec_trees.count = 0;
  for (int i = 0; i < trees->count; i++) {
    const char *t = trees->tree[i];
    size_t n = strlen(t);
    if (zkw_scope_covers(&id->scope, t, n) || zkw_scope_covers(&id->prev_trees, t, n))
      continue; /* this instance's own, written before */
    enum zkw_scope_change c = zkw_scope_add(&id->rec_trees, roots_of(id), t);
    if (c == ZKW_SCOPE_REFUSED)
      zkw_log_warn("identity %s: the registry record's tree %s is not below a lock root: ignored",
                   zkw_identity_name(id), t);
  }
  count(id);
  struct zkw_scope written;
  for_record(id, &written, true); /* what this instance adds; the verdict decides about the rest */
  return !same_trees(&written, trees);
}

enum zkw_scope_change zkw_idtrees_learn(struct zkw_identity *id, uint64_t current, struct zkw_bytes path) {
  /* Below an operator's tree: read anyway, nothing to learn. */
  struct zkw_scope op;
  operator_trees(id, &op);
  size_t parent = path.len > 0 ? (size_t)path.len : 0;
  while (parent > 1 && path.p[parent - 1] != '/')
    parent--;
  bool under_op = parent > 1 && zkw_scope_covers(&op, (const char *)path.p, parent - 1);
  struct zkw_scope learned = id->scope_inc == current ? id->scope : (struct zkw_scope){0};
  enum zkw_scope_change c = under_op ? ZKW_SCOPE_SAME : zkw_scope_learn(&learned, roots_of(id), path);
  if (c != ZKW_SCOPE_CHANGED && (c != ZKW_SCOPE_SAME || !under_op || id->scope_inc == current)) return c;
  if (id->scope_inc != current) {
    /* The current incarnation's first tree: the last one's join the
     * earlier ones (first: the newest), which serve until a walk. */
    struct zkw_scope earlier = id->scope;
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
static int retire(struct zkw_scope *sc, const struct zkw_scope *walked, bool untrusted) {
  int kept = 0, gone = 0;
  for (int i = 0; i < sc->count; i++) {
    if (!untrusted && !zkw_scope_covers(walked, sc->tree[i], strlen(sc->tree[i]))) {
      if (kept != i) memcpy(sc->tree[kept], sc->tree[i], ZKW_SCOPE_PATH_MAX);
      kept++;
    } else {
      gone++;
    }
  }
  sc->count = kept;
  return gone;
}

int zkw_idtrees_walked(struct zkw_identity *id, uint64_t incarnation, const struct zkw_scope *walked) {
  if (incarnation == 0 || id->scope_inc != incarnation) return 0;
  struct zkw_scope op;
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

bool zkw_idtrees_judged(struct zkw_identity *id, const char *why) {
  count(id);
  if (id->rec_trees.count == 0) return false;
  if (!why) return true; /* held back from writes while not judged */
  char trees[ZKW_SCOPE_TREES_MAX * ZKW_SCOPE_PATH_MAX];
  zkw_scope_format(&id->rec_trees, trees, sizeof trees);
  zkw_log(id->rec_trees_warned ? ZKW_LOG_INFO : ZKW_LOG_WARN,
          "identity %s: the trees %s read from registry record %s are not swept: the record is not trusted "
          "(%s), so anyone could have written them. The lock report shows them, marked untrusted; the trees "
          "the JobManager's creates show, and ZKWARDEN_SWEEP_TREES, are swept",
          zkw_identity_name(id), trees, id->node, why);
  id->rec_trees_warned = true;
  return id->srv->cfg->registry_auth[0] != 0; /* with credentials no write carries them on */
}
