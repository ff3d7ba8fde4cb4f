/* zkw_owntrees.h: which trees are the identity's own (zkw_treeset.h) at each
 * moment, for the sweep and the lock report, and which the registry record
 * keeps (zkw_owntrees.c).
 *
 * In precedence: the operator's (ZKWARDEN_SWEEP_TREES: always read, never
 * dropped; what the JobManager creates below them is not learned and takes
 * no room); the current incarnation's, learned from its creates in this
 * process; and those of earlier incarnations: learned here before the
 * current one began (trusted), or read from the registry record (swept only
 * once the record is judged trusted, zkw_regtrust.h: a record someone else
 * can write could name another cluster's tree). A record's trees not
 * trusted are shown by the lock report, marked so, and never swept; with
 * credentials no write carries them on (without, nothing read from the
 * registry is ever trusted, and they are carried on for the lock report
 * until they retire). Earlier incarnations' trees serve until the current
 * incarnation has learned a tree of its own and a complete pass of it read
 * the older ones (its stale locks lie there): then they are retired, and
 * the record keeps the current incarnation's alone. So a cluster-id change
 * leaves no tree behind for good, and the current incarnation's trees
 * always have room.
 *
 * A leaf under zkw_registry.c and zkw_regacl.c: no I/O, it calls neither
 * (they write the record when a function here says it changed). */
#ifndef ZKW_OWNTREES_H
#define ZKW_OWNTREES_H

#include <stdbool.h>
#include <stdint.h>

#include "zkw_treeset.h"
#include "zkw_wire.h"

struct zkw_identity;

/* The own trees now, in precedence: what the sweep reads. Returns how many
 * trees of earlier incarnations found no room (ZKW_TREESET_TREES_MAX; the
 * operator's and the current incarnation's always fit). */
int zkw_owntrees_of(const struct zkw_identity *id, struct zkw_treeset *out);
/* The record's trees that are not trusted (not judged yet, or judged not
 * trusted): the lock report reads them too, marked so; never swept. */
void zkw_owntrees_untrusted(const struct zkw_identity *id, struct zkw_treeset *out);
/* What a record write carries: the current incarnation's trees, then the
 * earlier ones not yet retired (the operator's are configuration). */
void zkw_owntrees_for_record(const struct zkw_identity *id, struct zkw_treeset *out);
/* The record was read with these trees: those below a lock root that this
 * instance does not already hold become the record's. Returns true if the
 * record lacks what this instance writes (a write is due). */
bool zkw_owntrees_loaded(struct zkw_identity *id, const struct zkw_treeset *trees);
/* The JobManager of the current incarnation (`current`) created an
 * ephemeral at path: its parent joins the current incarnation's trees,
 * unless an operator's tree covers it. The first tree of a new incarnation
 * moves the last one's to the earlier ones. */
enum zkw_treeset_change zkw_owntrees_learn(struct zkw_identity *id, uint64_t current, struct zkw_bytes path);
/* A complete pass of incarnation `incarnation` (the current one) over
 * `walked` (a walk of every tree, and every node it left read since:
 * zkw_sweep.c): if the current incarnation has learned a tree, the earlier
 * trees it read, and an untrusted record's, are retired; one that found no
 * room (not read) stays until a pass reads it. Returns the number retired (a
 * write is due when > 0). */
int zkw_owntrees_walked(struct zkw_identity *id, uint64_t incarnation, const struct zkw_treeset *walked);
/* The record loaded last was judged (zkw_regacl.c): trusted (why NULL), its
 * trees are swept; else not, said once at warn. Returns true if a write is
 * due (what the record holds changes). */
bool zkw_owntrees_judged(struct zkw_identity *id, const char *why);

#endif
