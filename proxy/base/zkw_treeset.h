/* zkw_treeset.h: a set of trees below the lock roots, the shape of an
 * identity's own trees (the subtrees of the lock roots where its JobManager
 * creates its ephemerals: leader latch, connection_info, locks; and nothing
 * else): what the sweep and the lock report read. In base/ beside the lock
 * rules (zkw_lockrule.h) it stands on: the record, the identity, the sweep
 * and the lock report all hold one.
 *
 * Learned from the JobManager's own creates: the parent of each ephemeral it
 * creates under a lock root joins the trees, merged with a tree under the
 * same root into their deepest common ancestor, but never shallower than one
 * level below that root. A Flink cluster's ephemerals all lie under its
 * <path.root>/<cluster-id>, so its latch, its leader nodes and its locks end
 * as that one tree; another cluster beside it under the same root is never
 * in it. Bounded (ZKW_TREESET_LEARNED_MAX trees learned, ZKW_TREESET_TREES_MAX
 * in a scope, each of at most ZKW_TREESET_PATH_MAX-1 bytes), and kept in the identity's registry record
 * (zkw_record.h) so that a restarted JobManager's first sweep knows them before its first request. Pure
 * functions: no I/O. */
#ifndef ZKW_TREESET_H
#define ZKW_TREESET_H

#include <stdbool.h>
#include <stddef.h>

#include "zkw_lockrule.h"
#include "zkw_wire.h"

/* A scope holds the operator's trees (ZKWARDEN_SWEEP_TREES, at most
 * ZKW_SWEEP_TREES_MAX) beside those learned (at most ZKW_TREESET_LEARNED_MAX),
 * so that naming a tree the bound left out always makes room for it. */
#define ZKW_TREESET_TREES_MAX   16
#define ZKW_TREESET_LEARNED_MAX 8
#define ZKW_TREESET_PATH_MAX    256 /* with the NUL, as a lock root */

struct zkw_treeset {
  int count;
  char tree[ZKW_TREESET_TREES_MAX][ZKW_TREESET_PATH_MAX];
};

/* What zkw_treeset_learn and zkw_treeset_add did. */
enum zkw_treeset_change {
  ZKW_TREESET_SAME = 0,    /* already covered */
  ZKW_TREESET_CHANGED = 1, /* a tree was added or widened */
  ZKW_TREESET_REFUSED = 2, /* not a path a tree can be made of (outside the roots, at a root, too long) */
  ZKW_TREESET_FULL =
      3, /* no room for another tree (learned: ZKW_TREESET_LEARNED_MAX; added: ZKW_TREESET_TREES_MAX) */
};

/* Learns the JobManager's ephemeral at `path` (create or create2 or a
 * create inside multi, ephemeral, under one of roots): its parent joins the
 * trees (ZKW_TREESET_FULL past ZKW_TREESET_LEARNED_MAX trees). */
enum zkw_treeset_change zkw_treeset_learn(struct zkw_treeset *sc, const struct zkw_lock_roots *roots,
                                          struct zkw_bytes path);
/* Adds a tree as it is (a record's, an operator's), if it lies at least one
 * level below one of roots; a tree below it goes, one above it keeps it. */
enum zkw_treeset_change zkw_treeset_add(struct zkw_treeset *sc, const struct zkw_lock_roots *roots,
                                        const char *tree);
/* True if path is one of the trees or below one (component boundary). */
bool zkw_treeset_covers(const struct zkw_treeset *sc, const char *path, size_t len);
/* The trees as "a,b" (for logs and reports). */
void zkw_treeset_format(const struct zkw_treeset *sc, char *out, size_t cap);

#endif
