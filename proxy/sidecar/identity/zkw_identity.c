/* zkw_identity.c: what the rest of the sidecar, and the operations above
 * it, ask of this sidecar's JobManager identity: its registry state, its
 * current incarnation, whether it observes only, and its sessions seen to
 * end (dead, and proven dead: whose ephemerals are zombies). Reads of
 * struct zkw_identity (zkw_identity.h), no I/O; the registry that fills it is
 * zkw_registry.c. */
#include "zkw_identity.h"

#include "zkw_session.h"

bool zkw_identity_attached(const struct zkw_identity *id, int64_t session) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == session && s->phase == ZKW_PHASE_ACTIVE) return true;
  return false;
}

static const char *const state_names[] = {
#define ZKW_X_REG(name, str) str,
    ZKW_REG_STATES(ZKW_X_REG)
#undef ZKW_X_REG
};

const char *zkw_identity_state_name(enum zkw_reg_state state) {
  return state_names[state];
}

bool zkw_identity_ready(const struct zkw_identity *id, const char **why) {
  if (!id || id->disabled || (id->state == ZKW_REG_OWNER && id->rec_loaded)) return true;
  *why = id->why[0] ? id->why : state_names[id->state];
  return false;
}

bool zkw_identity_observing(const struct zkw_identity *id) {
  return id && id->srv->cfg->observe;
}

uint64_t zkw_identity_current(const struct zkw_identity *id) {
  return id->state == ZKW_REG_OWNER && id->rec_loaded ? id->rec.incarnation : 0;
}

const struct zkw_dead_session *zkw_identity_dead_session(const struct zkw_identity *id, int64_t session) {
  return zkw_record_find_dead(&id->dead, session);
}

const struct zkw_dead_session *zkw_identity_proven_dead(const struct zkw_identity *id, int64_t session,
                                                        int64_t asking_session, const char **why) {
  *why = NULL;
  const struct zkw_dead_session *d = session ? zkw_record_find_dead(&id->dead, session) : NULL;
  if (!d) return NULL;
  if (d->ended_ms + ZKW_DEAD_SESSION_MAX_AGE_MS < zkw_identity_epoch_ms())
    *why = "listed dead more than a day ago (aged out)";
  else if (session == asking_session)
    *why = "it is the asking session";
  else if (id->rec_loaded && session == id->rec.session && id->rec.dead < id->rec.incarnation)
    *why = "it is the current incarnation's session";
  else if (zkw_identity_attached(id, session))
    *why = "it is attached through this sidecar";
  else if (!d->observed && !id->srv->cfg->registry_auth[0])
    *why = "listed dead only by the registry record, which anyone may write (ZKWARDEN_REGISTRY_AUTH unset)";
  else if (!d->observed && !d->trusted)
    *why = "listed dead only by a registry record not found to be writable by zkwarden alone";
  return *why ? NULL : d;
}
