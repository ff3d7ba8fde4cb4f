/* zkw_fencing.h: fences and orphans of the identity (zkw_fencing.c). */
#ifndef ZKW_FENCING_H
#define ZKW_FENCING_H

#include "zkw_registry.h"

/* Fences the previous incarnation's session if it may still be alive (in
 * observe mode records the would-fence); the requests waiting for it go on
 * when it ends (zkw_registry_release_waiting). */
void zkw_fencing_previous(struct zkw_identity *id);
/* The bound on holding requests for the fence (id->fence_timer). */
void zkw_fencing_timeout_cb(uv_timer_t *t);
/* The session is back: its orphan entry goes. Returns true when its fence
 * is already under way (then asked to cancel; the re-attach waits for it). */
bool zkw_fencing_cancel_orphan(struct zkw_identity *id, int64_t session_id);
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
void zkw_identity_on_jm_created(struct zkw_session *s, struct zkw_bytes path);
/* Observe mode: a fence of this session would have been done. */
bool zkw_identity_would_have_fenced(const struct zkw_identity *id, int64_t session);

#endif
