/* zkw_fencing.h: fences and orphans of the identity (zkw_fencing.c), the
 * header the fencing room offers the floors above it (cleanup/ and the
 * sidecar's hooks). Below it: the identity room (zkw_registry.h) and the
 * fence connection (proxy/client/zkw_fenceconn.h). */
#ifndef ZKW_FENCING_H
#define ZKW_FENCING_H

#include "zkw_registry.h"

/* Fences the previous incarnation's session if it may still be alive (in
 * observe mode records the would-fence); the requests waiting for it go on
 * when it ends (zkw_registry_release_waiting). */
void zkw_fencing_previous(struct zkw_identity *id);
/* The bound on holding requests for the fence (id->fence_timer). */
void zkw_fencing_timeout_cb(uv_timer_t *t);
/* The session is fenced another way (as the previous incarnation): its
 * orphan entry goes. */
void zkw_fencing_cancel_orphan(struct zkw_identity *id, int64_t session_id);
/* A ConnectRequest re-attaches the session of an orphan: with its password,
 * the orphan waits for the outcome (zkw_fencing_reattached or
 * zkw_fencing_reattach_ended) instead of its grace, and a fence under way is
 * asked to stop before closeSession. Returns true when the request must wait
 * for that fence to report (the session's wait_fence, resumed then); false:
 * it goes on now. */
bool zkw_fencing_reattach(struct zkw_identity *id, struct zkw_session *s, const struct zkw_connect_req *req);
/* The server answered s's re-attach: confirmed (the orphan goes, never
 * fenced) or not (expired: nothing left to fence). */
void zkw_fencing_reattached(struct zkw_identity *id, struct zkw_session *s, bool confirmed);
/* s closed before the server answered its re-attach: its orphan is fenced
 * after all, unless re-attached within a grace again (the client may come
 * back: zkwarden itself closes a re-attach whose server stays silent). */
void zkw_fencing_reattach_ended(struct zkw_identity *id, struct zkw_session *s);
/* The current incarnation's connection closed without closeSession: fenced
 * after ZKWARDEN_ORPHAN_GRACE_MS unless it re-attaches. */
void zkw_fencing_orphan(struct zkw_identity *id, struct zkw_session *s);
/* Frees the orphans (one being fenced is freed when its fence reports). */
void zkw_fencing_stop(struct zkw_identity *id);
/* Observe mode: the superseded session's latch went `ms` after the fence
 * not done (the registry session's watch saw it). */
void zkw_fencing_latch_gone(struct zkw_identity *id, uint64_t ms);

/* Observe mode: the request that began the session's incarnation created
 * `path` (its leader latch, usually). */
void zkw_fencing_on_jm_created(struct zkw_session *s, struct zkw_bytes path);
/* Observe mode: a fence of this session would have been done. */
bool zkw_fencing_would_have_fenced(const struct zkw_identity *id, int64_t session);

#endif
