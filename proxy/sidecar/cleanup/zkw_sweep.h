/* zkw_sweep.h: sweeps of the identity's own trees (zkw_sweep.c).
 *
 * A sweep pass reads this identity's own trees (zkw_treeset.h: where its
 * JobManager creates its ephemerals, learned from its requests and kept in
 * the registry record; ZKWARDEN_SWEEP_TREES), never another cluster's, for
 * the stale locks of this identity that fencing could not remove and the
 * zombies of its sessions proven dead, in-band on the session of the
 * current incarnation (waiting while none is attached). Its reads yield to
 * the JobManager's own requests; its deletes run while every session of this
 * sidecar holds back its lock requests (zkw_sweepdel.h). A periodic pass
 * reads only what changed since the last one where a watch tells it
 * (zkw_sweepwatch.h). Nothing depends on when a pass runs: reclaim at create
 * and at delete (zkw_reclaim.h) keep the JobManager's own requests right
 * meanwhile. */
#ifndef ZKW_SWEEP_H
#define ZKW_SWEEP_H

#include <stdbool.h>

#include "zkw_codec.h"

struct zkw_identity;
struct zkw_session;

/* A new incarnation began: its first pass runs once the JobManager's
 * recovery burst is over (SWEEP_QUIET_MS without a request of its own, at
 * most SWEEP_FIRST_WAIT_MS), then every ZKWARDEN_SWEEP_INTERVAL_S. */
void zkw_sweep_soon(struct zkw_identity *id);
/* True while a sweep deletes: sessions hold back lock requests. */
bool zkw_sweep_holding(const struct zkw_identity *id);
/* A request of an incarnation's session (zkw_sidecar.c): the JobManager is
 * busy (the sweep yields), the parents of the ephemerals it creates are its
 * own trees, and it may touch the sweep's watch. */
void zkw_sweep_on_jm_request(struct zkw_session *s, const struct zkw_request *req);
/* The sidecar stops (after zkw_incarnation_stop): a pass with nothing in
 * flight ends now, one with a request in flight in its callback; what
 * sweeps keep between passes is freed. */
void zkw_sweep_stop(struct zkw_identity *id);

#endif
