/* zkw_treeset.c: an identity's own trees (see zkw_treeset.h): learning them
 * from the JobManager's creates, merging, bounds. */
#include "zkw_treeset.h"

#include <stdio.h>
#include <string.h>

/* True if p[0..pn) is base[0..bn) or below it (component boundary). */
static bool below(const char *base, size_t bn, const char *p, size_t pn) {
  if (bn == 1 && base[0] == '/') return pn >= 1 && p[0] == '/';
  return pn >= bn && memcmp(p, base, bn) == 0 && (pn == bn || p[bn] == '/');
}

/* The length of the deepest lock root p[0..n) lies in or below; 0: none. */
static size_t root_of(const struct zkw_lock_roots *roots, const char *p, size_t n) {
  size_t best = 0;
  for (int i = 0; i < roots->count; i++) {
    size_t rl = strlen(roots->root[i]);
    if (rl > best && below(roots->root[i], rl, p, n)) best = rl;
  }
  return best;
}

/* The deepest common ancestor of a and b[0..bn), as its length in a. */
static size_t common_ancestor(const char *a, const char *b, size_t bn) {
  size_t an = strlen(a), i = 0;
  while (i < an && i < bn && a[i] == b[i])
    i++;
  /* Back to a component boundary shared by both. */
  for (size_t k = i; k > 0; k--)
    if ((k == an || a[k] == '/') && (k == bn || b[k] == '/')) return k;
  return 1; /* "/" */
}

/* Drops every tree below p[0..n) other than tree[keep] (-1: none), which
 * covers them now. p may point into tree[keep]: a moved tree's old slot
 * keeps its text. */
static void drop_covered(struct zkw_treeset *sc, const char *p, size_t n, int keep) {
  for (int i = 0; i < sc->count;) {
    if (i != keep && below(p, n, sc->tree[i], strlen(sc->tree[i]))) {
      sc->count--;
      if (i != sc->count) memcpy(sc->tree[i], sc->tree[sc->count], ZKW_TREESET_PATH_MAX);
      if (keep == sc->count) keep = i;
    } else {
      i++;
    }
  }
}

bool zkw_treeset_covers(const struct zkw_treeset *sc, const char *path, size_t len) {
  for (int i = 0; i < sc->count; i++)
    if (below(sc->tree[i], strlen(sc->tree[i]), path, len)) return true;
  return false;
}

static enum zkw_treeset_change append(struct zkw_treeset *sc, const char *p, size_t n, int max) {
  drop_covered(sc, p, n, -1);
  if (sc->count >= max) return ZKW_TREESET_FULL;
  memcpy(sc->tree[sc->count], p, n);
  sc->tree[sc->count][n] = 0;
  sc->count++;
  return ZKW_TREESET_CHANGED;
}

enum zkw_treeset_change zkw_treeset_learn(struct zkw_treeset *sc, const struct zkw_lock_roots *roots,
                                          struct zkw_bytes path) {
  if (path.len <= 1 || path.p[0] != '/') return ZKW_TREESET_REFUSED;
  const char *p = (const char *)path.p;
  size_t n = (size_t)path.len;
  while (n > 1 && p[n - 1] != '/') /* the parent */
    n--;
  if (n > 1) n--; /* without its trailing '/' */
  size_t rl = root_of(roots, p, n);
  if (rl == 0 || n <= rl || n >= ZKW_TREESET_PATH_MAX) return ZKW_TREESET_REFUSED;
  if (zkw_treeset_covers(sc, p, n)) return ZKW_TREESET_SAME;
  /* Merge with the tree of the same root whose common ancestor with the
   * parent is deepest, if that ancestor lies below the root. */
  int best = -1;
  size_t best_len = 0;
  for (int i = 0; i < sc->count; i++) {
    if (root_of(roots, sc->tree[i], strlen(sc->tree[i])) != rl) continue;
    size_t c = common_ancestor(sc->tree[i], p, n);
    if (c > rl && c > best_len) best = i, best_len = c;
  }
  if (best < 0) return append(sc, p, n, ZKW_TREESET_LEARNED_MAX);
  sc->tree[best][best_len] = 0;
  drop_covered(sc, sc->tree[best], best_len, best);
  return ZKW_TREESET_CHANGED;
}

enum zkw_treeset_change zkw_treeset_add(struct zkw_treeset *sc, const struct zkw_lock_roots *roots,
                                        const char *tree) {
  size_t n = strlen(tree);
  size_t rl = root_of(roots, tree, n);
  if (rl == 0 || n <= rl || n >= ZKW_TREESET_PATH_MAX || tree[n - 1] == '/') return ZKW_TREESET_REFUSED;
  if (zkw_treeset_covers(sc, tree, n)) return ZKW_TREESET_SAME;
  return append(sc, tree, n, ZKW_TREESET_TREES_MAX);
}

void zkw_treeset_format(const struct zkw_treeset *sc, char *out, size_t cap) {
  size_t used = 0;
  if (cap) out[0] = 0;
  for (int i = 0; i < sc->count && used < cap; i++) {
    int w = snprintf(out + used, cap - used, "%s%s", i ? "," : "", sc->tree[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (!cap || sc->count) return;
  snprintf(out, cap, "(none yet)");
}
