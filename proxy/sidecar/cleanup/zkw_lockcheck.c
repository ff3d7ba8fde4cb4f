/* zkw_lockcheck.c: what reclaim (zkw_reclaim.c) and the sweep
 * (zkw_sweep.c) share about one node that may be a stale lock or a zombie:
 * reading it, the staleness verdict, a step that failed (logged, counted,
 * recorded), the would-delete of observe mode, and the report of a zombie
 * deleted. Below both; calls neither. */
#include "zkw_lockcheck.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "zkw_fencing.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_session.h"

/* Why a node is not a stale lock, or NULL if it is one. current is the
 * current incarnation of the tag's identity (0 if unknown). */
const char *zkw_lockcheck_why_not(const struct zkw_lock_check *c, int64_t asking_session, uint64_t current) {
  return zkw_lock_why_not_stale(c->tagged ? &c->tag : NULL, c->owner, asking_session, current);
}

/* Reads a node into a lock_check (from a get result). */
void zkw_lockcheck_fill(struct zkw_lock_check *c, const struct zkw_zk_result *r) {
  c->version = r->stat.version;
  c->czxid = r->stat.czxid;
  c->ctime = r->stat.ctime;
  c->owner = r->stat.ephemeralOwner;
  struct zkw_bytes data = {(const uint8_t *)r->data, r->data ? r->data_len : -1};
  c->tagged = zkw_tag_parse(data, &c->tag) == 0;
  c->tag.original = (struct zkw_bytes){NULL, -1}; /* points into r: not kept */
}

/* The failure reason of a ZooKeeper error (the same codes as on the wire). */
static enum zkw_reclaim_failure failure_of(int zerr) {
  switch (zerr) {
  case ZKW_ZERR_NOAUTH:
    return ZKW_RFAIL_NOAUTH;
  case ZKW_ZERR_NONODE:
    return ZKW_RFAIL_NONODE;
  case ZKW_ZERR_BADVERSION:
    return ZKW_RFAIL_BADVERSION;
  case ZKW_ZERR_CONNECTIONLOSS:
  case ZKW_ZERR_SESSIONEXPIRED:
  case ZKW_ZERR_SESSIONMOVED:
  case ZKW_ZERR_CLOSING:
    return ZKW_RFAIL_CONNECTION_LOSS;
  case ZKW_ZERR_OPERATIONTIMEOUT:
  case ZKW_ZERR_REQUESTTIMEOUT:
    return ZKW_RFAIL_TIMEOUT;
  default:
    return ZKW_RFAIL_OTHER;
  }
}

/* A step that could not do its work (zerr: the ZooKeeper error it got):
 * logged at warn with the path, counted by reason, recorded. c: the lock
 * concerned, if known. */
void zkw_lockcheck_step_failed(const struct zkw_session *s, enum zkw_history_kind kind, const char *step,
                               const char *path, int zerr, const struct zkw_lock_check *c) {
  enum zkw_reclaim_failure f = failure_of(zerr);
  zkw_metrics.reclaim_failures[f]++;
  const char *reason = zkw_reclaim_failure_name(f);
  const char *what = zkw_history_kind_name(kind);
  if (s)
    zkw_slog(s, ZKW_LOG_WARN, "%s: cannot %s %s: %s (%s)", what, step, path, zkw_zk_error(zerr), reason);
  else
    zkw_log_warn("%s: cannot %s %s: %s (%s)", what, step, path, zkw_zk_error(zerr), reason);
  char why[ZKW_HISTORY_TEXT_MAX];
  snprintf(why, sizeof why, "failed (%s): cannot %s: %s", reason, step, zkw_zk_error(zerr));
  bool known = c && c->tagged;
  zkw_history_failed(kind, path, why, c ? c->owner : 0, known ? c->tag.identity : NULL,
                     known ? c->tag.incarnation : 0);
}

/* ------------------------------------------------------- observe mode */

/* Observe mode deletes nothing: each stale lock sidecar mode would delete
 * is reported once (sidecar mode would have deleted it the first time),
 * however often the JobManager or a sweep meets it again. */
#define WOULD_SEEN 1024
static int64_t would_seen[WOULD_SEEN]; /* czxids of the locks reported */
static unsigned would_seen_next;

void zkw_lockcheck_would_delete(struct zkw_identity *id, enum zkw_history_kind kind,
                                const struct zkw_lock_check *c, const char *cost) {
  for (unsigned i = 0; i < WOULD_SEEN; i++)
    if (would_seen[i] == c->czxid && c->czxid) return;
  would_seen[would_seen_next++ % WOULD_SEEN] = c->czxid;
  char reason[ZKW_HISTORY_TEXT_MAX];
  if (c->zombie) kind = ZKW_HISTORY_ZOMBIE; /* as sidecar mode records it */
  snprintf(reason, sizeof reason, "%s; %s%s",
           c->zombie ? "zombie: its owner session ended" : "stale lock of a superseded incarnation", cost,
           zkw_fencing_would_have_fenced(id, c->owner) ? " (the would-fence of its session removes it)" : "");
  zkw_history_would(&(struct zkw_action){kind, c->path, c->version, reason, c->owner,
                                         c->tagged ? c->tag.identity : NULL,
                                         c->tagged ? c->tag.incarnation : 0});
}

/* ------------------------------------------------------------- zombies */

#define ZOMBIE_CTIME_SLACK_MS 10000

static int64_t reported[ZKW_LOCKCHECK_REPORTED];
static unsigned reported_next;

bool zkw_lockcheck_report_once(int64_t czxid) {
  for (unsigned i = 0; i < ZKW_LOCKCHECK_REPORTED; i++)
    if (reported[i] == czxid) return false;
  reported[reported_next++ % ZKW_LOCKCHECK_REPORTED] = czxid;
  return true;
}

bool zkw_lockcheck_zombie(const struct zkw_identity *id, struct zkw_lock_check *c, int64_t asking_session,
                          bool report) {
  const char *why;
  const struct zkw_dead_session *d =
      c->owner ? zkw_identity_proven_dead(id, c->owner, asking_session, &why) : NULL;
  /* A node its owner created after it was seen ending: the owner was alive
   * then, and the dead list is wrong about it (a clock skew of up to
   * ZOMBIE_CTIME_SLACK_MS is allowed for). */
  if (d && c->ctime > 0 && (uint64_t)c->ctime > d->ended_ms + ZOMBIE_CTIME_SLACK_MS) {
    d = NULL;
    why = "created after its owner session was listed dead: alive then";
  }
  if (d) {
    c->zombie = true;
    c->dead = *d;
    return true;
  }
  if (c->owner && why && report) zkw_lockcheck_unproven(id, c, why);
  return false;
}

void zkw_lockcheck_unproven(const struct zkw_identity *id, const struct zkw_lock_check *c, const char *why) {
  if (!zkw_lockcheck_report_once(c->czxid)) return;
  const struct zkw_dead_session *d = zkw_identity_dead_session(id, c->owner);
  ZKW_METRIC_INC(zombies_unproven);
  zkw_log_warn("identity %s: %s is owned by session 0x%" PRIx64 ", which the dead list names, but it is not "
               "proven dead (%s): not deleted",
               zkw_identity_name(id), c->path, (uint64_t)c->owner, why);
  char reason[ZKW_HISTORY_TEXT_MAX];
  snprintf(reason, sizeof reason, "owner listed dead, not proven (%s): not deleted", why);
  zkw_history_failed(ZKW_HISTORY_ZOMBIE, c->path, reason, c->owner, zkw_identity_name(id),
                     d ? d->incarnation : 0);
}

/* ms since the epoch as 2026-01-02T03:04:05.678Z. */
void zkw_lockcheck_format_ms(uint64_t ms, char *out, size_t cap) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
    snprintf(out, cap, "%" PRIu64 " ms", ms);
    return;
  }
  size_t n = strlen(out);
  snprintf(out + n, cap - n, ".%03uZ", (unsigned)(ms % 1000));
}

/* A zombie of this identity deleted (at version c->version, on the
 * JobManager's connection to `server`): one warn line, the counter, a row. */
void zkw_lockcheck_zombie_deleted(const char *identity, const struct zkw_lock_check *c, const char *server,
                                  const char *by) {
  char ended[40];
  zkw_lockcheck_format_ms(c->dead.ended_ms, ended, sizeof ended);
  ZKW_METRIC_INC(zombie_ephemerals);
  zkw_log_warn("identity %s: zombie ephemeral %s deleted (version %d, %s): its owner session 0x%" PRIx64
               " (incarnation %" PRIu64 ") ended at %s, seen by zkwarden, yet %s still served it: %s",
               identity, c->path, c->version, by, (uint64_t)c->owner, c->dead.incarnation, ended, server,
               ZKW_ZOMBIE_ADVICE);
  char why[ZKW_HISTORY_TEXT_MAX];
  snprintf(why, sizeof why, "zombie: owner session ended %s; deleted (%s)", ended, by);
  zkw_history_add(ZKW_HISTORY_ZOMBIE, c->path, why, c->owner, identity, c->dead.incarnation);
}
