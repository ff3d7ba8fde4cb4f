/* zkw_incarnation.c: where an incarnation begins and ends, seen from the
 * sessions: the sidecar's session hooks (a re-attach, the request that acts
 * as the JobManager, a closing connection), sessions adopted once the
 * identity is owned, the registry session's events, start and stop. The
 * registry itself is identity/zkw_registry.c (and zkw_regacl.c), the fences
 * and orphans fencing/zkw_fencing.c; this file is above both rooms. */
#include "zkw_incarnation.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "zkw_fault.h"
#include "zkw_fencing.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_registry.h"
#include "zkw_session.h"
#include "zkw_journal.h"

/* A new session within this time after a superseded client came back alive
 * is a conflict. */
#define SHARED_SIDECAR_WINDOW_MS 60000

static void adopt_sessions(struct zkw_identity *id);

/* The record is loaded (id->on_record_loaded): a request waiting for the
 * fence gets it, sessions that acted as the JobManager before are recorded. */
static void record_loaded(struct zkw_identity *id) {
  if (id->waiting) zkw_fencing_previous(id);
  adopt_sessions(id);
}

/* ---- session hooks: where an incarnation begins ---- */

int zkw_incarnation_on_connect_request(struct zkw_session *s, const struct zkw_connect_req *req) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled || req->session_id == 0) return ZKW_FORWARD;
  if (zkw_fencing_reattach(id, s, req)) {
    /* Its orphan fence is under way (and stops unless its closeSession was
     * already sent): the re-attach waits for its word (zkw_fencing.h). */
    zkw_sc(s)->wait_fence = true;
    return ZKW_HOLD;
  }
  /* A session superseded while it was still attached, re-attaching: its
   * process is alive after all (a hang ended, or a second JobManager shares
   * this sidecar); the new session it opens next must not fence ours. */
  for (int i = 0; i < ZKW_SUPERSEDED_KEPT; i++)
    if (id->superseded[i] == req->session_id) {
      zkw_slog(s, ZKW_LOG_WARN,
               "identity %s: superseded session 0x%" PRIx64 " is re-attaching: its client is alive",
               zkw_identity_name(id), (uint64_t)req->session_id);
      id->superseded_alive_ms = zkw_identity_now_ms();
    }
  return ZKW_FORWARD;
}

void zkw_incarnation_on_connect_response(struct zkw_session *s, const struct zkw_connect_resp *resp) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled) return;
  zkw_fencing_reattached(id, s, resp->timeout > 0 && resp->session_id != 0);
  if (resp->timeout <= 0 || resp->session_id == 0) return;
  if (id->rec_loaded && id->rec.session == resp->session_id && id->rec.dead < id->rec.incarnation)
    zkw_sc(s)->incarnation = id->rec.incarnation; /* the current incarnation re-attached */
}

bool zkw_incarnation_on_jm_request(struct zkw_session *s) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled) return false;
  zkw_sc(s)->acts_as_jm = true;
  if (s->session_id == 0 || s->timeout <= 0) return false;
  switch (id->state) {
  case ZKW_REG_OWNER:
    if (!id->rec_loaded) break;
    if (id->rec.session == s->session_id && id->rec.dead < id->rec.incarnation) {
      zkw_sc(s)->incarnation = id->rec.incarnation; /* already the current incarnation */
      return false;
    }
    if (id->rec.session != 0 && id->rec.dead < id->rec.incarnation &&
        zkw_identity_attached(id, id->rec.session)) {
      /* The current incarnation's session is still attached: a hung
       * JobManager and its replacement. But if a client we superseded came
       * back alive just now, this is that client's new session: two live
       * JobManagers share this sidecar, each re-opening a session when the
       * other's is fenced. Do not play that game. */
      bool shared = id->rec.session == id->shared_with ||
                    (id->superseded_alive_ms &&
                     zkw_identity_now_ms() - id->superseded_alive_ms < SHARED_SIDECAR_WINDOW_MS);
      if (shared) {
        id->shared_with = id->rec.session; /* and so while that session stays attached */
        zkw_slog(s, ZKW_LOG_ERROR,
                 "identity %s: CONFLICT: a client whose session was superseded is alive and acts as the "
                 "JobManager in a new session while session 0x%" PRIx64
                 " of the current incarnation is attached: two JobManagers share this sidecar. This "
                 "session is relayed as a plain client, nothing is fenced.",
                 zkw_identity_name(id), (uint64_t)id->rec.session);
        ZKW_METRIC_INC(identity_conflicts);
        zkw_sc(s)->plain_conflict = true;
        return false;
      }
      /* (Observe mode closes nothing: a re-attach of that session proves nothing.) */
      if (!zkw_identity_observing(id))
        id->superseded[id->superseded_next++ % ZKW_SUPERSEDED_KEPT] = id->rec.session;
    }
    break;
  case ZKW_REG_CONNECTING:
  case ZKW_REG_CLAIMING:
    /* Observe mode never makes the JobManager wait for zkwarden: the session
     * is recorded (adopt_sessions) once the identity is owned. */
    if (zkw_identity_observing(id)) return false;
    break; /* held until the identity is owned, or the fence timeout */
  default:
    return false; /* conflict or broken: relayed without identity features */
  }
  zkw_slog(s, ZKW_LOG_INFO, "identity %s: this session acts as the JobManager: a new incarnation",
           zkw_identity_name(id));
  zkw_sc(s)->hold_jm = true;
  zkw_session_ref(s);
  zkw_registry_list_append(&id->waiting, s, ZKW_ID_WAITING);
  if (!uv_is_active((uv_handle_t *)&id->fence_timer))
    uv_timer_start(&id->fence_timer, zkw_fencing_timeout_cb, id->srv->cfg->fence_timeout_ms, 0);
  zkw_fencing_previous(id);
  return zkw_sc(s)->hold_jm;
}

void zkw_incarnation_on_session_closed(struct zkw_session *s) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled) return;
  /* Leave the lists (a write in flight keeps its reference until it ends).
   * The caller is closing s: it is freed once its handles are gone. */
  if (zkw_sc(s)->id_list == ZKW_ID_WAITING) zkw_registry_list_remove(&id->waiting, s);
  if (zkw_sc(s)->id_list == ZKW_ID_WRITERS) zkw_registry_list_remove(&id->writers, s);
  if (zkw_sc(s)->id_list == ZKW_ID_WAITING || zkw_sc(s)->id_list == ZKW_ID_WRITERS) {
    zkw_sc(s)->id_list = ZKW_ID_NONE;
    zkw_session_unref(s); /* not yet closing: s stays */
  }
  zkw_sc(s)->hold_jm = false;
  zkw_fencing_reattach_ended(id, s); /* a re-attach of an orphan that the server did not answer */
  /* An orphan: the JobManager's connection went without closeSession. */
  if (id->stopping || s->srv->stopping || s->close_sent || !zkw_sc(s)->incarnation || s->session_id == 0 ||
      id->srv->cfg->orphan_grace_ms == 0 || id->state != ZKW_REG_OWNER ||
      zkw_sc(s)->incarnation != id->rec.incarnation || s->session_id != id->rec.session)
    return;
  zkw_fencing_orphan(id, s);
}

/* Sessions that began while this instance was not yet the owner: record
 * them now (the first one becomes the current incarnation). */
static void adopt_sessions(struct zkw_identity *id) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s)) {
    if (s->phase != ZKW_PHASE_ACTIVE || !zkw_sc(s)->acts_as_jm || zkw_sc(s)->plain_conflict ||
        zkw_sc(s)->incarnation || s->session_id == 0 || zkw_sc(s)->id_list != ZKW_ID_NONE || s->timeout <= 0)
      continue;
    zkw_slog(s, ZKW_LOG_INFO,
             "identity %s: recording this session, which acted as the JobManager before the identity was "
             "owned",
             zkw_identity_name(id));
    zkw_session_ref(s);
    zkw_registry_list_append(&id->writers, s, ZKW_ID_WRITERS);
  }
  if (id->writers) {
    /* Fence the previous incarnation first, in the background. */
    zkw_fencing_previous(id);
  }
}

/* ---- start and stop ---- */

/* What a successor process needs to go on as this identity (zkw_journal.h):
 * the registry session to re-attach (so the identity stays owned: no wait
 * for it to expire), and this instance's name. */
struct kept_process {
  char identity[256];
  char instance[40];
  int64_t registry_session;
  uint8_t registry_passwd[16];
};

static void keep_for_successor(struct zkw_identity *id) {
  struct kept_process k = {0};
  if (!id->srv->journal || !zkw_zk_client_id(id->zk, &k.registry_session, k.registry_passwd)) return;
  snprintf(k.identity, sizeof k.identity, "%s", zkw_identity_name(id));
  snprintf(k.instance, sizeof k.instance, "%s", id->instance);
  int rc = zkw_journal_save_process(id->srv->journal, &k, sizeof k);
  memset(&k, 0, sizeof k);
  if (rc)
    zkw_log_warn("identity %s: cannot keep the registry session for a successor: %s", zkw_identity_name(id),
                 strerror(-rc));
}

/* What a predecessor kept for this identity: true and k filled, or false. */
static bool kept_by_predecessor(const struct zkw_identity *id, struct kept_process *k) {
  if (zkw_journal_load_process(id->srv->journal, k, sizeof *k) != sizeof *k) return false;
  k->identity[sizeof k->identity - 1] = k->instance[sizeof k->instance - 1] = 0;
  return strcmp(k->identity, zkw_identity_name(id)) == 0 && k->registry_session;
}

static void on_registry_event(void *arg, int type, int state, const char *path) {
  struct zkw_identity *id = arg;
  if (id->stopping) return;
  if (type == ZOO_SESSION_EVENT) {
    if (state == ZOO_CONNECTED_STATE) {
      keep_for_successor(id);
      if (id->state != ZKW_REG_OWNER)
        zkw_registry_claim(id);
      else if (!id->rec_loaded)
        zkw_registry_load_record(id);
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      zkw_log_warn("identity %s: registry session expired; claiming the identity again",
                   zkw_identity_name(id));
      zkw_registry_set_state(id, ZKW_REG_CONNECTING, "registry session expired");
      id->rec_loaded = false;
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      zkw_registry_broken(id, "authentication", ZAUTHFAILED);
    }
    return;
  }
  if (type == ZOO_DELETED_EVENT && id->wait.active && strcmp(path, id->wait.path) == 0)
    return zkw_fencing_latch_gone(id, zkw_identity_now_ms() - id->wait.since_ms);
  if (type == ZOO_DELETED_EVENT && strcmp(path, id->owner_node) == 0 &&
      (id->state == ZKW_REG_CLAIMING || id->state == ZKW_REG_CONFLICT))
    zkw_registry_claim(id);
  else if (strcmp(path, id->owner_node) == 0 && id->state == ZKW_REG_CONFLICT)
    zkw_registry_claim(id); /* re-arm the watch */
}

/* Opens the registry session; when that fails (out of memory, a host list
 * libzookeeper refuses), tries again with a growing delay: the sidecar
 * relays meanwhile, and /readyz says why. */
static void open_registry(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  const struct zkw_config *cfg = id->srv->cfg;
  char hosts[4096];
  zkw_config_upstream_list(cfg, hosts, sizeof hosts);
  struct kept_process k;
  bool resume = kept_by_predecessor(id, &k);
  int rc = zkw_zk_open_resumed(&id->zk, id->srv->loop, hosts, ZKW_REGISTRY_SESSION_MS,
                               cfg->registry_auth[0] ? cfg->registry_auth : NULL, on_registry_event, id,
                               resume ? k.registry_session : 0, resume ? k.registry_passwd : NULL);
  if (resume)
    zkw_log_info("identity %s: re-attaching registry session 0x%" PRIx64 " of the previous process",
                 cfg->identity, (uint64_t)k.registry_session);
  memset(&k, 0, sizeof k);
  if (rc == 0) {
    id->open_retry_ms = 0;
    return;
  }
  id->zk = NULL;
  id->open_retry_ms = id->open_retry_ms ? id->open_retry_ms * 2 : ZKW_REGISTRY_RETRY_MS;
  if (id->open_retry_ms > ZKW_REGISTRY_OPEN_RETRY_MAX_MS) id->open_retry_ms = ZKW_REGISTRY_OPEN_RETRY_MAX_MS;
  zkw_log_error("identity %s: cannot start the registry session: %s; trying again in %u ms", cfg->identity,
                uv_strerror(rc), id->open_retry_ms);
  zkw_registry_set_state(id, ZKW_REG_BROKEN, "cannot start the registry session");
  if (!id->stopping) uv_timer_start(&id->claim_timer, open_registry, id->open_retry_ms, 0);
}

int zkw_incarnation_start(struct zkw_identity *id, struct zkw_server *srv) {
  const struct zkw_config *cfg = srv->cfg;
  memset(id, 0, sizeof *id);
  id->srv = srv;
  id->on_record_loaded = record_loaded;
  id->on_trust = zkw_registry_flush_dead;
  if (cfg->relay_only) {
    id->disabled = true;
    zkw_log_info("ZKWARDEN_MODE=relay: a plain proxy, without identity, tags, fencing or reclaim");
    return 0;
  }
  if (cfg->observe)
    zkw_log_info("ZKWARDEN_MODE=observe: identity, registry and tags as in sidecar mode; nothing is fenced "
                 "or deleted: each fence and delete sidecar mode would do is logged as \"observe: would\" "
                 "and counted in zkwarden_would_actions_total");
  id->rec_version = -1;
  zkw_registry_set_state(id, ZKW_REG_CONNECTING, "registry session connecting");
  struct kept_process k;
  if (kept_by_predecessor(id, &k)) { /* the same instance goes on */
    snprintf(id->instance, sizeof id->instance, "%s", k.instance);
  } else {
    uuid_t u;
    uuid_generate(u);
    uuid_unparse_lower(u, id->instance);
  }
  memset(&k, 0, sizeof k);
  snprintf(id->root_identities, sizeof id->root_identities, "%s/identities", cfg->registry_root);
  snprintf(id->node, sizeof id->node, "%s/%s", id->root_identities, cfg->identity);
  snprintf(id->owner_node, sizeof id->owner_node, "%s/owner", id->node);
  uv_timer_t *timers[] = {&id->claim_timer, &id->fence_timer, &id->retry_timer, &id->sweep_timer,
                          &id->check_timer};
  for (int i = 0; i < 5; i++) {
    uv_timer_init(srv->loop, timers[i]);
    timers[i]->data = id;
  }
  if (!cfg->registry_auth[0])
    zkw_log_warn(
        "ZKWARDEN_REGISTRY_AUTH is not set: the registry (which holds session passwords) gets a world "
        "ACL; anyone who can reach the ensemble can read it");
  zkw_log_info("identity %s: sidecar instance %s, registry %s, lock roots %s", cfg->identity, id->instance,
               id->node, cfg->raw_lock_roots);
  open_registry(&id->claim_timer);
  return 0;
}

void zkw_incarnation_stop(struct zkw_identity *id) {
  if (id->stopping || id->disabled) return;
  id->stopping = true;
  zkw_registry_release_waiting(id);
  while (id->writers) {
    zkw_registry_release_hold(zkw_registry_list_pop(&id->writers));
  }
  zkw_fencing_stop(id);
  uv_timer_t *timers[] = {&id->claim_timer, &id->fence_timer, &id->retry_timer, &id->sweep_timer,
                          &id->check_timer};
  for (int i = 0; i < 5; i++)
    if (timers[i]->loop && !uv_is_closing((uv_handle_t *)timers[i])) uv_close((uv_handle_t *)timers[i], NULL);
  if (id->zk) zkw_zk_close_handle(id->zk);
}

void zkw_incarnation_finish(struct zkw_identity *id) {
  if (id->zk) zkw_zk_close(id->zk);
  id->zk = NULL;
  memset(&id->rec, 0, sizeof id->rec);
}
