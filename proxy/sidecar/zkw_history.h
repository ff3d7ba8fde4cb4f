/* zkw_history.h: the last reclaim actions, for GET /v1/reclaims.
 *
 * A fixed ring of the ZKW_HISTORY_SIZE most recent actions that removed
 * locks or sessions on an identity's behalf: reclaims at create and at
 * delete, sweeps, fences, orphan fences, and zombies (ephemerals of a
 * session that ended: deleted, or reported when another identity's). The identity/reclaim code calls
 * zkw_history_add once per action (after it succeeded or failed; the reason
 * says which). Nothing secret is stored: no session password ever goes in.
 * Logging the action stays the caller's job (info level, with the path).
 * Single-threaded: the event loop only. */
#ifndef ZKW_HISTORY_H
#define ZKW_HISTORY_H

#include <stdint.h>

#include "zkw_buf.h"

#define ZKW_HISTORY_SIZE     256
#define ZKW_HISTORY_PATH_MAX 512 /* longer paths are cut (at a UTF-8 boundary) */
#define ZKW_HISTORY_TEXT_MAX 160 /* reason and identity */

/* X(name, "kind as shown") */
#define ZKW_HISTORY_KINDS(X)                                                                                 \
  X(RECLAIM_CREATE, "reclaim_at_create")                                                                     \
  X(RECLAIM_DELETE, "reclaim_at_delete")                                                                     \
  X(SWEEP, "sweep")                                                                                          \
  X(FENCE, "fence")                                                                                          \
  X(ORPHAN_FENCE, "orphan_fence")                                                                            \
  X(ZOMBIE, "zombie")

/* clang-format off */
enum zkw_history_kind {
#define ZKW_X_HKIND(name, str) ZKW_HISTORY_##name,
  ZKW_HISTORY_KINDS(ZKW_X_HKIND)
#undef ZKW_X_HKIND
  ZKW_HISTORY_KIND_COUNT
};
/* clang-format on */

struct zkw_history_entry {
  int64_t time_ms; /* wall clock, ms since the Unix epoch */
  enum zkw_history_kind kind;
  int64_t session_id;              /* the session whose lock/session was removed (0 if none) */
  uint64_t incarnation;            /* the incarnation the removed lock or session belonged to */
  char path[ZKW_HISTORY_PATH_MAX]; /* the znode acted on ("" for a fence) */
  char reason[ZKW_HISTORY_TEXT_MAX];
  char identity[ZKW_HISTORY_TEXT_MAX];
};

/* Records one action, stamped with the current time. path, reason and
 * identity may be NULL (stored as ""); long strings are cut. Cannot fail. */
void zkw_history_add(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                     const char *identity, uint64_t incarnation);
/* Actions recorded since start (may exceed what the ring still holds). */
uint64_t zkw_history_total(void);
/* Appends {"capacity":N,"total":T,"reclaims":[...]} with the newest action
 * first; at most limit entries. Returns 0 or -ENOMEM. */
int zkw_history_render_json(struct zkw_buf *out, unsigned limit) __attribute__((warn_unused_result));
const char *zkw_history_kind_name(enum zkw_history_kind kind);
/* The i-th newest action still held (0: the newest), or NULL. */
const struct zkw_history_entry *zkw_history_newest(unsigned i);
/* An action's time as 2026-01-02T03:04:05.678Z. */
void zkw_history_time(const struct zkw_history_entry *e, char *out, size_t cap);

#endif
