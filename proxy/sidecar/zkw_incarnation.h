/* zkw_incarnation.h: where this sidecar's JobManager identity meets the
 * sessions: its start and stop, and the session hooks where an incarnation
 * begins and ends (docs/how-it-works.md: Identities, tags and reclaim; The
 * registry). On the sidecar's top floor, above its rooms: the identity's
 * state and registry (identity/: zkw_identity.h, zkw_registry.h), fences and
 * orphans (fencing/: zkw_fencing.h).
 *
 * The registry lives in ZooKeeper under ZKWARDEN_REGISTRY_ROOT:
 *   <root>/identities/<identity>        the record (zkw_record.h), persistent
 *   <root>/identities/<identity>/owner  ephemeral of the sidecar instance that
 *                                       owns the identity; data: its instance id
 * Only the owner fences, writes the record and reclaims. A new sidecar whose
 * predecessor died waits for the old owner node to go (its registry session
 * expires within seconds); one that still exists after twice that session's
 * timeout belongs to a live sidecar: an identity conflict, reported and
 * counted, and nothing is fenced or reclaimed while it lasts.
 *
 * A session's first request that acts as the JobManager (an ephemeral create
 * under the lock roots: zkw_acts_as_jobmanager) starts a new incarnation:
 * the request is held while the previous incarnation's session is fenced
 * (bounded by ZKWARDEN_FENCE_TIMEOUT_MS, then retried in the background) and
 * the new session is recorded, then forwarded. Every other session is a
 * plain client: never fenced, never fencing. */
#ifndef ZKW_INCARNATION_H
#define ZKW_INCARNATION_H

#include "zkw_identity.h"

/* Starts the registry session and the claim. Returns 0 or an error (logged;
 * the proxy then relays without identity features). */
int zkw_incarnation_start(struct zkw_identity *id, struct zkw_server *srv)
    __attribute__((warn_unused_result));
/* Stops timers and handles (the loop can end); zkw_incarnation_finish after
 * the loop closes the registry session, which removes the owner node. */
void zkw_incarnation_stop(struct zkw_identity *id);
void zkw_incarnation_finish(struct zkw_identity *id);

/* Session hooks, all on the loop thread. */
/* A valid ConnectRequest arrived: a re-attach cancels the session's orphan
 * fence, and a superseded session re-attaching is noted (two live
 * JobManagers on one sidecar). */
int zkw_incarnation_on_connect_request(struct zkw_session *s, const struct zkw_connect_req *req);
/* The server answered the ConnectRequest: the recorded session re-attached
 * is the current incarnation again. */
void zkw_incarnation_on_connect_response(struct zkw_session *s, const struct zkw_connect_resp *resp);
/* The session sent its first request that acts as the JobManager
 * (zkw_acts_as_jobmanager): its incarnation begins. Returns true if the
 * request must be held (hold_jm) while the previous incarnation is fenced
 * and this one recorded; zkw_session_resume follows. False: forward it now
 * (tagged if its incarnation was set, as a plain client otherwise). */
bool zkw_incarnation_on_jm_request(struct zkw_session *s);
/* The session's client connection is closing. */
void zkw_incarnation_on_session_closed(struct zkw_session *s);

#endif
