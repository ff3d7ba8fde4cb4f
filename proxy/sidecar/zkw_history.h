/* zkw_history.h: the last reclaim actions, for GET /v1/reclaims.
 *
 * A fixed ring of the ZKW_HISTORY_SIZE most recent actions that removed
 * locks or sessions on an identity's behalf: reclaims at create and at
 * delete, sweeps, fences, orphan fences, and zombies (ephemerals of a
 * session that ended: deleted, or reported when another identity's). The identity/reclaim code calls
 * zkw_history_add once per action (after it succeeded or failed; the reason
 * says which). Nothing secret is stored: no session password ever goes in.
 * Logging the action stays the caller's job (info level, with the path),
 * except for would-actions (zkw_history_would logs them itself).
 *
 * In ZKWARDEN_MODE=observe, the fences and deletes sidecar mode would do
 * are not done: each is recorded with done false (a "would-action").
 * With ZKWARDEN_AUDIT_FILE, every action, done or would-be, is also
 * appended to that file as one JSON line (write(2) with O_APPEND, one line
 * per call), which outlives the process; SIGHUP reopens it (logrotate).
 * Single-threaded: the event loop only. */
#ifndef ZKW_HISTORY_H
#define ZKW_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "zkw_buf.h"
#include "zkw_metrics.h"

#define ZKW_HISTORY_SIZE     256
#define ZKW_HISTORY_PATH_MAX 512 /* longer paths are cut (at a UTF-8 boundary) */
#define ZKW_HISTORY_TEXT_MAX 160 /* reason and identity */

/* X(name, "kind as shown"): the one list is ZKW_ACTION_KINDS (zkw_metrics.h),
 * which also labels zkwarden_would_actions_total. */
#define ZKW_HISTORY_KINDS(X) ZKW_ACTION_KINDS(X)

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
  int32_t version; /* the znode version acted on; -1 when none or unknown */
  bool done;       /* the action changed the ensemble (a fence ran, a node was deleted) */
  bool would;      /* a would-action of observe mode (not done); neither: a step that failed */
};

/* One action in full, for zkw_history_record and zkw_history_would. */
struct zkw_action {
  enum zkw_history_kind kind;
  const char *path; /* NULL: none */
  int32_t version;  /* -1: none or unknown */
  const char *reason;
  int64_t session_id; /* the owner session of the lock, or the session fenced */
  const char *identity;
  uint64_t incarnation;
};

/* Records one action, stamped with the current time. path, reason and
 * identity may be NULL (stored as ""); long strings are cut. Cannot fail. */
void zkw_history_add(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                     const char *identity, uint64_t incarnation);
/* Records one action that was done (with its version). */
void zkw_history_record(const struct zkw_action *a);
/* Records a step that failed (done and would both false; the reason says
 * why). */
void zkw_history_failed(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                        const char *identity, uint64_t incarnation);
/* Observe mode: an action sidecar mode would have taken here and that was
 * not taken: logged at info (kind, path, session, identity, incarnation,
 * reason), counted in zkwarden_would_actions_total{kind}, recorded with
 * done false. */
void zkw_history_would(const struct zkw_action *a);
/* Would-actions recorded since start. */
uint64_t zkw_history_would_total(void);
/* Opens (or creates) the audit file, appending. Returns 0 or -errno.
 * NULL or "": no audit trail. */
int zkw_history_audit_open(const char *path) __attribute__((warn_unused_result));
/* Reopens the audit file under its name (SIGHUP, after logrotate moved it).
 * Returns 0 (also without an audit file) or -errno; the old descriptor
 * stays in use on failure. */
int zkw_history_audit_reopen(void) __attribute__((warn_unused_result));
void zkw_history_audit_close(void);

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
