/* zkw_sweepdel.h: a sweep pass's candidates and its delete phase
 * (zkw_sweepdel.c), below the passes themselves (zkw_sweep.c).
 *
 * A candidate is a node a pass read: a stale lock of this identity or a
 * zombie (an ephemeral whose owner is a session of this identity proven
 * dead). The delete phase takes them one at a time, zombie latch nodes
 * last: each is read again in-band on the JobManager's connection and
 * deleted at the version just read, only if it is still the same node
 * (czxid) and still stale or still a proven-dead session's. Meanwhile every
 * session of this sidecar holds back its lock requests (zkw_sweep_holding),
 * and no step is taken while one is in flight (wait). Observe mode deletes
 * nothing: each candidate is a would-delete. */
#ifndef ZKW_SWEEPDEL_H
#define ZKW_SWEEPDEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_lockcheck.h"

struct zkw_sweep_batch {
  struct zkw_identity *id;
  struct zkw_session *s; /* the JobManager's session (the pass holds its reference) */
  int64_t session_id;
  struct zkw_lock_check *found;
  size_t nfound, capfound;
  /* The delete phase. */
  bool deleting;
  size_t next;
  int inflight;
  int deleted, zombies_deleted;
  bool lost; /* the session closed: the phase ended */
  /* A candidate left for a reason other than being no longer one (a read or
   * delete failed or could not be sent, a zombie served by one server alone)
   * is handed to again, so that the next pass reads it again (zkw_sweep.c;
   * so are the candidates not yet taken when the phase ends: next < nfound).
   * When again fails (out of memory), retry: the next pass walks the trees
   * afresh. */
  int (*again)(struct zkw_sweep_batch *b, const struct zkw_lock_check *c);
  bool retry;
  /* The phase ended (all done, the session lost, the identity stopping). */
  void (*done)(struct zkw_sweep_batch *b);
  /* A lock request of this sidecar is in flight: call zkw_sweepdel_next
   * again a little later. */
  void (*wait)(struct zkw_sweep_batch *b);
};

/* Keeps a candidate (takes c->path). Returns 0, or -ENOMEM (c untouched). */
int zkw_sweep_batch_add(struct zkw_sweep_batch *b, struct zkw_lock_check *c)
    __attribute__((warn_unused_result));
/* Starts the delete phase (done follows, maybe at once). */
void zkw_sweepdel_start(struct zkw_sweep_batch *b);
/* Takes the next step after a wait. */
void zkw_sweepdel_next(struct zkw_sweep_batch *b);
void zkw_sweep_batch_free(struct zkw_sweep_batch *b);
/* A sweep step's ZooKeeper result: false (b->lost set) when the session is
 * closing; else a failure other than NONODE is logged and counted. */
bool zkw_sweep_step(struct zkw_sweep_batch *b, const char *step, const char *path, int zerr);

#endif
