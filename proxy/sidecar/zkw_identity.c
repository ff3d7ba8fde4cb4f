/* zkw_identity.c: the registry claim, incarnations, fencing and orphans.
 *
 * Everything here runs on the loop thread: registry results arrive through
 * zkw_zk's queue, fences through uv_queue_work. A session referenced by a
 * pending registry step holds a reference (zkw_session_ref), so it is never
 * freed under a callback. */
#include "zkw_fault.h"
#include "zkw_identity.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "zkw_history.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_session.h"

/* zkwarden's own registry session: short, so that the owner node of a
 * sidecar that died goes quickly (the server clamps it to >= 2 ticks). */
#define REGISTRY_SESSION_MS 4000
/* How often a broken registry is retried. */
#define OPEN_RETRY_MAX_MS 30000
#define REGISTRY_RETRY_MS 5000
/* How often the owner checks that its owner node and record are still as it
 * wrote them (deleted, overwritten or made unreadable by someone else). */
#define REGISTRY_CHECK_MS 2000
/* Between background fence attempts. */
#define FENCE_RETRY_MS 1000
/* A new session within this time after a superseded client came back alive
 * is a conflict. */
#define SHARED_SIDECAR_WINDOW_MS 60000

struct zkw_orphan {
  struct zkw_orphan *next;
  struct zkw_identity *id;
  uv_timer_t timer;
  int64_t session_id;
  uint8_t passwd[16];
  uint64_t incarnation;
  int timeout_ms; /* the session's negotiated timeout */
  bool fencing;
};

static const char *const state_names[] = {
#define ZKW_X_REG(name, str) str,
    ZKW_REG_STATES(ZKW_X_REG)
#undef ZKW_X_REG
};

const char *zkw_identity_state_name(enum zkw_reg_state state) {
  return state_names[state];
}

static const char *identity_name(const struct zkw_identity *id) {
  return id->srv->cfg->identity;
}

bool zkw_identity_ready(const struct zkw_identity *id, const char **why) {
  if (!id || id->disabled || (id->state == ZKW_REG_OWNER && id->rec_loaded)) return true;
  *why = id->why[0] ? id->why : state_names[id->state];
  return false;
}

bool zkw_identity_observing(const struct zkw_identity *id) {
  return id && id->srv->cfg->observe;
}

bool zkw_identity_would_have_fenced(const struct zkw_identity *id, int64_t session) {
  for (int i = 0; session && i < ZKW_SUPERSEDED_KEPT; i++)
    if (id->would_fenced[i] == session) return true;
  return false;
}

static uint64_t now_ms(void);

/* Observe mode: the superseded session's latch went `ms` after the fence
 * not done: that long the new JobManager could not lead. */
static void latch_gone(struct zkw_identity *id, uint64_t ms) {
  id->wait.active = false;
  zkw_metrics.would_fence_wait_ms += ms;
  zkw_log_info("observe: the fence not done of session 0x%" PRIx64 " (identity %s, incarnation %" PRIu64
               ") cost %" PRIu64 " ms: its latch %s stayed that long (a fence removes it at once)",
               (uint64_t)id->wait.session, identity_name(id), id->wait.incarnation, ms, id->wait.path);
}

static void latch_watched(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (!id->wait.active || id->stopping) return;
  if (r->rc == ZNONODE) return latch_gone(id, now_ms() - id->wait.since_ms); /* gone already */
  if (r->rc != ZOK) {
    id->wait.active = false;
    zkw_log_warn("observe: cannot watch %s to measure the fence not done: %s", id->wait.path,
                 zkw_zk_error(r->rc));
  }
}

/* Starts measuring how long the session's latch (known when it created its
 * latch through this sidecar) outlives the fence not done. */
static void wait_for_latch(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  if (id->latch_session != session || !id->latch_path[0] || !id->zk) return;
  id->wait.active = true;
  id->wait.session = session;
  id->wait.incarnation = incarnation;
  id->wait.since_ms = now_ms();
  snprintf(id->wait.path, sizeof id->wait.path, "%s", id->latch_path);
  if (zkw_zk_exists(id->zk, id->wait.path, true, latch_watched, id) != ZOK) id->wait.active = false;
}

void zkw_identity_on_jm_created(struct zkw_session *s, struct zkw_bytes path) {
  struct zkw_identity *id = s->srv->policy;
  if (!zkw_identity_observing(id) || id->disabled || path.len <= 0 ||
      (size_t)path.len >= sizeof id->latch_path || !zkw_sc(s)->incarnation ||
      zkw_sc(s)->incarnation != id->rec.incarnation)
    return;
  id->latch_session = s->session_id;
  memcpy(id->latch_path, path.p, (size_t)path.len);
  id->latch_path[path.len] = 0;
}

/* Observe mode: the fence of a session that sidecar mode would do here. */
static void would_fence(struct zkw_identity *id, enum zkw_history_kind kind, int64_t session,
                        uint64_t incarnation, int timeout_ms, const char *why) {
  char reason[ZKW_HISTORY_TEXT_MAX + 128]; /* cut to ZKW_HISTORY_TEXT_MAX when recorded */
  snprintf(reason, sizeof reason, "%s; not closed: its ephemerals stay until it expires (timeout %d ms)", why,
           timeout_ms);
  zkw_history_would(&(struct zkw_action){kind, NULL, -1, reason, session, identity_name(id), incarnation});
  id->would_fenced[id->would_fenced_next++ % ZKW_SUPERSEDED_KEPT] = session;
  wait_for_latch(id, session, incarnation);
}

uint64_t zkw_identity_current(const struct zkw_identity *id) {
  return id->state == ZKW_REG_OWNER && id->rec_loaded ? id->rec.incarnation : 0;
}

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000;
}

static void set_state(struct zkw_identity *id, enum zkw_reg_state st, const char *why) {
  id->state = st;
  /* Cut to fit (the reason is for logs and /readyz only). */
  size_t n = why ? strnlen(why, sizeof id->why - 1) : 0;
  if (n) memcpy(id->why, why, n);
  id->why[n] = 0;
}

static void claim(struct zkw_identity *id);
static void load_record(struct zkw_identity *id);
static void release_waiting(struct zkw_identity *id);
static void write_next(struct zkw_identity *id);
static void claim_recorded_session(struct zkw_identity *id);
static void fence_previous(struct zkw_identity *id);
static void adopt_sessions(struct zkw_identity *id);
static void capture_previous(struct zkw_identity *id);
static bool cancel_orphan(struct zkw_identity *id, int64_t session_id);
static bool attached_here(const struct zkw_identity *id, int64_t session);
static void check_cb(uv_timer_t *t);
static void write_back(struct zkw_identity *id);
static bool with_dead(const struct zkw_identity *id, struct zkw_record *rec);
static void flush_dead(struct zkw_identity *id);
static void acl_check(struct zkw_identity *id);

static void claim_again_cb(uv_timer_t *t) {
  claim(t->data);
}
static void reload_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  /* Back to the owner state, to read the record again. */
  if (id->state == ZKW_REG_BROKEN && zkw_zk_connected(id->zk)) claim(id);
}

/* A registry step failed: report it, relay on without identity features,
 * and retry later. */
static void broken(struct zkw_identity *id, const char *what, int rc) {
  char why[256];
  snprintf(why, sizeof why, "registry %s: %s", what, zkw_zk_error(rc));
  if (id->state != ZKW_REG_BROKEN || strcmp(why, id->why) != 0)
    zkw_log_error("identity %s: %s (record %s); relaying without fencing or reclaim until it recovers",
                  identity_name(id), why, id->node);
  ZKW_METRIC_INC(registry_errors);
  set_state(id, ZKW_REG_BROKEN, why);
  id->rec_loaded = false;
  release_waiting(id);
  uv_timer_start(&id->claim_timer, claim_again_cb, REGISTRY_RETRY_MS, 0);
}

/* ---- session references ---- */

static void list_remove(struct zkw_session **head, struct zkw_session *s) {
  for (struct zkw_session **p = head; *p; p = &zkw_sc(*p)->id_next)
    if (*p == s) {
      *p = zkw_sc(s)->id_next;
      zkw_sc(s)->id_next = NULL;
      return;
    }
}

static void list_append(struct zkw_session **head, struct zkw_session *s, enum zkw_id_list which) {
  zkw_sc(s)->id_list = which;
  struct zkw_session **p = head;
  while (*p)
    p = &zkw_sc(*p)->id_next;
  zkw_sc(s)->id_next = NULL;
  *p = s;
}

/* Takes the first session off an identity list. */
static struct zkw_session *list_pop(struct zkw_session **head) {
  struct zkw_session *s = *head;
  *head = zkw_sc(s)->id_next;
  zkw_sc(s)->id_next = NULL;
  zkw_sc(s)->id_list = ZKW_ID_NONE;
  return s;
}

/* Lets a held request go on (unrecorded: adopted once the record can be
 * written). */
static void release_hold(struct zkw_session *s) {
  if (zkw_sc(s)->hold_jm) {
    zkw_sc(s)->hold_jm = false;
    if (s->phase != ZKW_PHASE_CLOSING) zkw_session_resume(s);
  }
  zkw_session_unref(s);
}

/* The fence is done, failed or timed out: every request held for it goes on
 * to the record write if the registry can take it now, else on its way. */
static void release_waiting(struct zkw_identity *id) {
  uv_timer_stop(&id->fence_timer);
  bool record = id->state == ZKW_REG_OWNER && id->rec_loaded && !id->stopping;
  while (id->waiting) {
    struct zkw_session *s = list_pop(&id->waiting);
    if (record && s->phase != ZKW_PHASE_CLOSING)
      list_append(&id->writers, s, ZKW_ID_WRITERS); /* keeps its reference and its hold */
    else
      release_hold(s);
  }
  if (record) write_next(id);
}

static void fence_timeout_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  if (id->waiting)
    zkw_log_warn(
        "identity %s: fencing did not finish within %u ms; the new incarnation goes on, fencing goes on",
        identity_name(id), id->srv->cfg->fence_timeout_ms);
  release_waiting(id);
}

/* ---- registry paths and claim ---- */

static void created_identity_node(void *arg, const struct zkw_zk_result *r);

static void created_identities(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return broken(id, "cannot create identities node", r->rc);
  int rc = zkw_zk_create(id->zk, id->node, "", 0, false, created_identity_node, id);
  if (rc != ZOK) broken(id, "cannot create identity node", rc);
}

static void created_root(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return broken(id, "cannot create root node", r->rc);
  int rc = zkw_zk_create(id->zk, id->root_identities, "", 0, false, created_identities, id);
  if (rc != ZOK) broken(id, "cannot create identities node", rc);
}

static void owner_created(void *arg, const struct zkw_zk_result *r);

static void created_identity_node(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return broken(id, "cannot create identity node", r->rc);
  int rc =
      zkw_zk_create(id->zk, id->owner_node, id->instance, (int)strlen(id->instance), true, owner_created, id);
  if (rc != ZOK) broken(id, "cannot create owner node", rc);
}

static void became_owner(struct zkw_identity *id) {
  uv_timer_stop(&id->claim_timer);
  if (id->state == ZKW_REG_CONFLICT)
    zkw_log_info("identity %s: the other sidecar instance is gone; this instance owns the identity now",
                 identity_name(id));
  set_state(id, ZKW_REG_OWNER, NULL);
  uv_timer_start(&id->check_timer, check_cb, REGISTRY_CHECK_MS, REGISTRY_CHECK_MS);
  load_record(id);
}

static void conflict_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  if (id->state != ZKW_REG_CLAIMING) return;
  zkw_log_error("identity %s: CONFLICT: the identity is held by another live sidecar instance (%s); two "
                "JobManagers are configured with one identity. This instance (%s) will not fence or reclaim.",
                identity_name(id), id->why, id->instance);
  ZKW_METRIC_INC(identity_conflicts);
  char why[sizeof id->why];
  snprintf(why, sizeof why, "identity conflict: %.200s", id->why);
  set_state(id, ZKW_REG_CONFLICT, why);
  release_waiting(id);
}

static void owner_read(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc == ZNONODE) return claim(id); /* gone meanwhile */
  if (r->rc != ZOK) return broken(id, "cannot read owner node", r->rc);
  if (r->stat.ephemeralOwner == zkw_zk_session_id(id->zk)) return became_owner(id);
  char why[200];
  snprintf(why, sizeof why, "instance %.60s, registry session 0x%" PRIx64, r->data ? r->data : "?",
           (uint64_t)r->stat.ephemeralOwner);
  if (id->state == ZKW_REG_CONFLICT) {
    snprintf(id->why, sizeof id->why, "identity conflict: %s", why);
    return; /* still held; the watch set above tells when it goes */
  }
  zkw_log_info("identity %s: held by %s; waiting for it to go (a sidecar that died releases it when its "
               "registry session expires)",
               identity_name(id), why);
  set_state(id, ZKW_REG_CLAIMING, why);
  /* A live holder keeps its node; a dead one loses it within its session
   * timeout. Twice our own registry timeout bounds the wait. */
  int bound = 2 * (zkw_zk_timeout(id->zk) > 0 ? zkw_zk_timeout(id->zk) : REGISTRY_SESSION_MS) + 1000;
  uv_timer_start(&id->claim_timer, conflict_cb, (uint64_t)bound, 0);
}

static void owner_created(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc == ZOK) return became_owner(id);
  if (r->rc == ZNODEEXISTS) {
    int rc = zkw_zk_get(id->zk, id->owner_node, true, owner_read, id);
    if (rc != ZOK) broken(id, "cannot read owner node", rc);
    return;
  }
  broken(id, "cannot create owner node", r->rc);
}

static void claim(struct zkw_identity *id) {
  if (id->stopping || !zkw_zk_connected(id->zk)) return;
  int rc = zkw_zk_create(id->zk, id->srv->cfg->registry_root, "", 0, false, created_root, id);
  if (rc != ZOK) broken(id, "cannot create root node", rc);
}

/* ---- the record ---- */

static void record_loaded(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->state != ZKW_REG_OWNER) return;
  struct zkw_record rec;
  bool rewrite = false;
  if (r->rc == ZNONODE) {
    memset(&rec, 0, sizeof rec);
    id->rec_version = -1;
  } else if (r->rc != ZOK) {
    return broken(id, "cannot read the record", r->rc);
  } else if (zkw_record_parse(r->data, r->data_len, &rec) != 0 && id->rec_known) {
    /* This instance knows the record: the owner's copy is written back. */
    zkw_log_error(
        "identity %s: registry record %s is corrupt; writing this instance's record (incarnation %" PRIu64
        ") back",
        identity_name(id), id->node, id->rec.incarnation);
    ZKW_METRIC_INC(registry_errors);
    id->rec_version = r->stat.version;
    rec = id->rec;
    rewrite = true;
  } else if (zkw_record_parse(r->data, r->data_len, &rec) != 0) {
    if (!id->corrupt_logged)
      zkw_log_error(
          "identity %s: registry record %s is corrupt; relaying without fencing or reclaim (delete the "
          "node to start the identity afresh)",
          identity_name(id), id->node);
    if (!id->corrupt_logged) ZKW_METRIC_INC(registry_errors);
    id->corrupt_logged = true;
    set_state(id, ZKW_REG_BROKEN, "registry record corrupt");
    id->rec_loaded = false;
    release_waiting(id);
    uv_timer_start(&id->claim_timer, reload_cb, REGISTRY_RETRY_MS, 0);
    return;
  } else {
    id->rec_version = r->stat.version;
  }
  id->corrupt_logged = false;
  /* Keep the newest we know: a record deleted, emptied or corrupted under
   * us is written back. */
  bool behind = rewrite || (id->rec_known && rec.incarnation < id->rec.incarnation);
  /* The dead list: what the record knows (an earlier instance) and what
   * this instance saw. */
  for (int i = 0; i < rec.ndead; i++)
    zkw_record_add_dead(&id->dead, &rec.dead_sessions[i]);
  if (!behind) id->rec = rec;
  if (with_dead(id, &id->rec)) id->dead_dirty = true;
  id->rec_loaded = id->rec_known = true;
  memset(&rec, 0, sizeof rec);
  ZKW_METRIC_SET(identity_incarnation, (int64_t)id->rec.incarnation);
  zkw_log_info("identity %s: owned by this instance (%s); incarnation %" PRIu64 ", session 0x%" PRIx64
               ", dead up to %" PRIu64,
               identity_name(id), id->instance, id->rec.incarnation, (uint64_t)id->rec.session, id->rec.dead);
  if (behind) write_back(id); /* write_next follows it */
  claim_recorded_session(id);
  if (id->waiting) fence_previous(id);
  adopt_sessions(id);
  write_next(id);
  acl_check(id);
}

static void load_record(struct zkw_identity *id) {
  if (id->state != ZKW_REG_OWNER) return;
  int rc = zkw_zk_get(id->zk, id->node, false, record_loaded, id);
  if (rc != ZOK) broken(id, "cannot read the record", rc);
}

struct record_write {
  struct zkw_identity *id;
  struct zkw_session *s; /* the session being recorded, or NULL */
  struct zkw_record rec;
  char text[1024];
  int len;
  bool created;
};

static void record_written(void *arg, const struct zkw_zk_result *r);

static int send_write(struct record_write *w) {
  struct zkw_identity *id = w->id;
  if (id->rec_version < 0) {
    w->created = true;
    return zkw_zk_create(id->zk, id->node, w->text, w->len, false, record_written, w);
  }
  w->created = false;
  return zkw_zk_set(id->zk, id->node, w->text, w->len, id->rec_version, record_written, w);
}

/* A record write for s (or for `dead` alone) ended: s goes on, recorded or
 * not (then as a plain client), and the next write may start. */
static void write_ended(struct zkw_identity *id, struct zkw_session *s, bool ok) {
  id->writing = false;
  if (s) {
    zkw_sc(s)->id_list = ZKW_ID_NONE;
    if (!ok) zkw_sc(s)->incarnation = 0;
    release_hold(s);
  }
  write_next(id);
}

static void finish_write(struct record_write *w, bool ok) {
  struct zkw_identity *id = w->id;
  struct zkw_session *s = w->s;
  memset(w, 0, sizeof *w);
  free(w);
  write_ended(id, s, ok);
}

static void record_written(void *arg, const struct zkw_zk_result *r) {
  struct record_write *w = arg;
  struct zkw_identity *id = w->id;
  struct zkw_session *s = w->s;
  if (r->rc == ZBADVERSION || (r->rc == ZNONODE && !w->created) || (r->rc == ZNODEEXISTS && w->created)) {
    /* Someone else wrote or removed the record: it is not ours alone. */
    zkw_log_error("identity %s: the registry record changed under this instance (%s); re-reading it",
                  identity_name(id), zkw_zk_error(r->rc));
    ZKW_METRIC_INC(registry_errors);
    if (r->rc == ZNONODE)
      id->rec_version = -1;
    else
      load_record(id);
    return finish_write(w, false);
  }
  if (r->rc != ZOK) {
    broken(id, "cannot write the record", r->rc);
    return finish_write(w, false);
  }
  uint64_t dead = id->rec.dead; /* a fence may have ended meanwhile */
  id->rec = w->rec;
  if (dead > id->rec.dead && dead < id->rec.incarnation) {
    id->rec.dead = dead;
    id->dead_dirty = true;
  }
  if (with_dead(id, &id->rec)) id->dead_dirty = true;
  id->rec_known = true;
  id->write_gen++;
  id->rec_version = w->created ? 0 : r->stat.version;
  ZKW_METRIC_SET(identity_incarnation, (int64_t)id->rec.incarnation);
  if (s && zkw_sc(s)->incarnation == id->rec.incarnation) {
    zkw_slog(s, ZKW_LOG_INFO, "identity %s: incarnation %" PRIu64 " begins", identity_name(id),
             id->rec.incarnation);
    if (id->on_incarnation) id->on_incarnation(id);
  }
  finish_write(w, true);
}

/* Writes the record for the next session waiting for one, or a pending
 * change of `dead`. One write at a time. */
static void write_next(struct zkw_identity *id) {
  if (id->writing || id->state != ZKW_REG_OWNER || !id->rec_loaded || id->stopping) return;
  if (!id->writers) return flush_dead(id);
  struct zkw_session *s = list_pop(&id->writers);
  if (s->session_id == id->rec.session) { /* already the current incarnation */
    zkw_sc(s)->incarnation = id->rec.incarnation;
    release_hold(s);
    write_next(id);
    return;
  }
  zkw_sc(s)->id_list = ZKW_ID_WRITING;
  struct record_write *w = zkw_calloc(1, sizeof *w);
  if (!w) {
    zkw_slog(s, ZKW_LOG_ERROR, "identity %s: out of memory writing the registry record: relayed unrecorded",
             identity_name(id));
    write_ended(id, s, false);
    return;
  }
  capture_previous(id);
  w->id = id;
  w->s = s;
  w->rec = id->rec;
  w->rec.incarnation = id->rec.incarnation + 1;
  w->rec.session = s->session_id;
  memcpy(w->rec.passwd, s->passwd, sizeof w->rec.passwd);
  w->rec.timeout = s->timeout;
  snprintf(w->rec.instance, sizeof w->rec.instance, "%s", id->instance);
  with_dead(id, &w->rec);
  id->dead_dirty = false; /* this write carries the dead list */
  zkw_sc(s)->incarnation = w->rec.incarnation;
  w->len = zkw_record_format(&w->rec, w->text, sizeof w->text);
  id->writing = true;
  int rc = w->len < 0 ? ZBADARGUMENTS : send_write(w);
  if (rc != ZOK) {
    broken(id, "cannot write the record", rc);
    finish_write(w, false);
  }
}

/* Copies the identity's dead list into a record about to be written.
 * Returns true if the record's list changed. */
static bool with_dead(const struct zkw_identity *id, struct zkw_record *rec) {
  bool changed =
      rec->ndead != id->dead.ndead || memcmp(rec->dead_sessions, id->dead.dead_sessions,
                                             (size_t)id->dead.ndead * sizeof id->dead.dead_sessions[0]) != 0;
  rec->ndead = id->dead.ndead;
  memcpy(rec->dead_sessions, id->dead.dead_sessions, sizeof rec->dead_sessions);
  return changed;
}

/* A change of `dead` alone (after a fence). */
static void dead_written(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->writing = false;
  id->write_gen++;
  if (r->rc == ZOK)
    id->rec_version = r->stat.version;
  else if (r->rc == ZBADVERSION)
    load_record(id);
  write_next(id);
}

static void flush_dead(struct zkw_identity *id) {
  if (!id->dead_dirty) return;
  if (id->writing || id->rec_version < 0 || id->writers || id->state != ZKW_REG_OWNER || !id->rec_loaded ||
      id->stopping)
    return; /* the next record write carries it */
  id->dead_dirty = false;
  with_dead(id, &id->rec);
  char text[1024];
  int len = zkw_record_format(&id->rec, text, sizeof text);
  if (len < 0) return;
  id->writing = true;
  int rc = zkw_zk_set(id->zk, id->node, text, len, id->rec_version, dead_written, id);
  memset(text, 0, sizeof text);
  if (rc != ZOK) {
    id->writing = false;
    id->dead_dirty = true;
  }
}

static void write_dead(struct zkw_identity *id, uint64_t dead) {
  if (dead > id->rec.dead) {
    id->rec.dead = dead;
    id->dead_dirty = true;
  }
  flush_dead(id);
}

/* zkwarden saw a session of this identity end (it closed it, or the server
 * no longer knew it): an ephemeral it still owns later is a zombie. */
static void note_dead(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct zkw_dead_session d = {session, incarnation,
                               (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000};
  if (zkw_record_add_dead(&id->dead, &d)) id->dead_dirty = true;
}

const struct zkw_dead_session *zkw_identity_dead_session(const struct zkw_identity *id, int64_t session) {
  return zkw_record_find_dead(&id->dead, session);
}

/* The record written back after it was deleted, emptied or corrupted. */
static void written_back(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->writing = false;
  id->write_gen++;
  if (r->rc == ZOK) {
    id->rec_version = r->has_stat ? r->stat.version : 0;
    zkw_log_info("identity %s: registry record %s written back: incarnation %" PRIu64 ", session 0x%" PRIx64,
                 identity_name(id), id->node, id->rec.incarnation, (uint64_t)id->rec.session);
  } else if (r->rc == ZBADVERSION || r->rc == ZNONODE || r->rc == ZNODEEXISTS) {
    return load_record(id); /* changed again meanwhile: look again */
  } else {
    return broken(id, "cannot write the record back", r->rc);
  }
  write_next(id);
}

/* Writes this instance's record over what the registry holds (version
 * rec_version; created when absent). */
static void write_back(struct zkw_identity *id) {
  if (id->writing || !id->rec_known || id->state != ZKW_REG_OWNER) return;
  with_dead(id, &id->rec);
  id->dead_dirty = false;
  char text[1024];
  int len = zkw_record_format(&id->rec, text, sizeof text);
  if (len < 0) return;
  id->writing = true;
  int rc = id->rec_version < 0 ? zkw_zk_create(id->zk, id->node, text, len, false, written_back, id)
                               : zkw_zk_set(id->zk, id->node, text, len, id->rec_version, written_back, id);
  memset(text, 0, sizeof text);
  if (rc != ZOK) {
    id->writing = false;
    broken(id, "cannot write the record back", rc);
  }
}

/* ---- the owner's check ---- */

/* The owner node is gone or another session's: claim the identity again
 * (the record is written back once owned). */
static void lost_owner(struct zkw_identity *id, const char *what) {
  zkw_log_error("identity %s: registry %s was deleted or taken under this instance; claiming the identity "
                "again (fencing and reclaim wait until it is owned)",
                identity_name(id), what);
  ZKW_METRIC_INC(registry_errors);
  uv_timer_stop(&id->check_timer);
  set_state(id, ZKW_REG_CONNECTING, "registry owner node lost; claiming the identity again");
  id->rec_loaded = false;
  claim(id);
}

static void checked_record(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->checking = false;
  if (id->stopping || id->state != ZKW_REG_OWNER || !id->rec_loaded) return;
  if (id->writing || id->write_gen != id->check_gen) return; /* a write raced the check */
  if (r->rc == ZNONODE) return lost_owner(id, id->node);
  if (r->rc != ZOK) return broken(id, "cannot read the record", r->rc);
  if (r->stat.version == id->rec_version) return;
  /* Written by someone else while this instance owns the identity: the
   * owner's record is the truth (a valid one included: an operator's edit
   * could name any session to fence). */
  struct zkw_record rec;
  bool valid = zkw_record_parse(r->data, r->data_len, &rec) == 0;
  memset(&rec, 0, sizeof rec);
  zkw_log_error("identity %s: registry record %s was %s under this instance (version %d, expected %d); "
                "writing this instance's record back",
                identity_name(id), id->node, valid ? "overwritten" : "corrupted", r->stat.version,
                id->rec_version);
  ZKW_METRIC_INC(registry_errors);
  id->rec_version = r->stat.version;
  write_back(id);
}

static void checked_owner(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping || id->state != ZKW_REG_OWNER || !id->rec_loaded) {
    id->checking = false;
    return;
  }
  if (r->rc == ZNONODE || (r->rc == ZOK && r->stat.ephemeralOwner != zkw_zk_session_id(id->zk))) {
    id->checking = false;
    return lost_owner(id, id->owner_node);
  }
  if (r->rc != ZOK) {
    id->checking = false;
    return broken(id, "cannot read owner node", r->rc);
  }
  int rc = zkw_zk_get(id->zk, id->node, false, checked_record, id);
  if (rc != ZOK) {
    id->checking = false;
    broken(id, "cannot read the record", rc);
  }
}

static void check_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  acl_check(id);
  if (id->stopping || id->checking || id->writing || id->state != ZKW_REG_OWNER || !id->rec_loaded ||
      !zkw_zk_connected(id->zk))
    return;
  id->check_gen = id->write_gen;
  id->checking = true;
  int rc = zkw_zk_exists(id->zk, id->owner_node, false, checked_owner, id);
  if (rc != ZOK) {
    id->checking = false;
    broken(id, "cannot read owner node", rc);
  }
}

/* ---- registry ACLs ----
 *
 * The record holds the JobManager's session id and password: whoever reads
 * it can re-attach that session and close it. A node created before
 * ZKWARDEN_REGISTRY_AUTH was set keeps its world ACL (NODEEXISTS is taken
 * as it is), so each pass reads the ACLs of the identity's nodes (record,
 * then owner) and, with credentials, makes a world one creator-only. The
 * shared parents (registry root, identities) hold nothing secret and stay
 * as they are: other identities' sidecars create their nodes there. */

static const char *acl_node(const struct zkw_identity *id) {
  return id->acl_step == 0 ? id->node : id->owner_node;
}

static void acl_visit(struct zkw_identity *id);

static void acl_pass_done(struct zkw_identity *id) {
  id->acl_checking = false;
  ZKW_METRIC_SET(registry_world_readable, id->acl_readable ? 1 : 0);
  if (!id->acl_exposed[0]) return;
  char session[200] = "No session was recorded there";
  if (id->rec_loaded && id->rec.session && id->rec.dead >= id->rec.incarnation)
    snprintf(session, sizeof session,
             "The recorded session 0x%" PRIx64 " (incarnation %" PRIu64
             ") has ended; its password was readable",
             (uint64_t)id->rec.session, id->rec.incarnation);
  else if (id->rec_loaded && id->rec.session)
    snprintf(session, sizeof session,
             "The recorded session 0x%" PRIx64 " (incarnation %" PRIu64
             ") is exposed: its password was readable; the next incarnation's fence closes it",
             (uint64_t)id->rec.session, id->rec.incarnation);
  zkw_log(id->acl_warned ? ZKW_LOG_INFO : ZKW_LOG_WARN,
          "identity %s: registry node(s) %s had a world ACL (readable by anyone who can reach the ensemble): "
          "made creator-only for ZKWARDEN_REGISTRY_AUTH. %s",
          identity_name(id), id->acl_exposed, session);
  id->acl_warned = true;
}

static void acl_not_fixed(struct zkw_identity *id, int rc) {
  id->acl_readable = true;
  ZKW_METRIC_INC(registry_errors);
  if (!id->acl_fix_failed)
    zkw_log_error("identity %s: registry node %s has a world ACL and cannot be made creator-only: %s; its "
                  "session password stays readable by anyone who can reach the ensemble until an operator "
                  "restricts it (setAcl)",
                  identity_name(id), acl_node(id), zkw_zk_error(rc));
  id->acl_fix_failed = true;
}

static void acl_set(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping) {
    id->acl_checking = false;
    return;
  }
  if (r->rc == ZOK) {
    size_t n = strlen(id->acl_exposed);
    snprintf(id->acl_exposed + n, sizeof id->acl_exposed - n, "%s%s", n ? ", " : "", acl_node(id));
  } else if (r->rc != ZNONODE && r->rc != ZBADVERSION) { /* gone or changed: the next pass looks again */
    acl_not_fixed(id, r->rc);
  }
  id->acl_step++;
  acl_visit(id);
}

static void acl_got(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping || (r->rc != ZOK && r->rc != ZNONODE)) {
    id->acl_checking = false; /* unknown this time: the next check asks again */
    return;
  }
  if (r->rc == ZOK && r->acl_world && id->srv->cfg->registry_auth[0]) {
    int rc = zkw_zk_set_acl_creator(id->zk, acl_node(id), r->stat.aversion, acl_set, id);
    if (rc == ZOK) return;
    acl_not_fixed(id, rc);
  } else if (r->rc == ZOK && r->acl_world_read) {
    id->acl_readable = true;
  }
  id->acl_step++;
  acl_visit(id);
}

static void acl_visit(struct zkw_identity *id) {
  if (id->acl_step > 1) return acl_pass_done(id);
  if (zkw_zk_get_acl(id->zk, acl_node(id), acl_got, id) != ZOK) id->acl_checking = false;
}

static void acl_check(struct zkw_identity *id) {
  if (id->stopping || id->acl_checking || id->state != ZKW_REG_OWNER || !id->zk || !zkw_zk_connected(id->zk))
    return;
  id->acl_checking = true;
  id->acl_step = 0;
  id->acl_readable = false;
  id->acl_exposed[0] = 0;
  acl_visit(id);
}

/* ---- fencing ---- */

static void fence_done(struct zkw_fence *f, enum zkw_fence_result result, void *arg);

/* True if the session is attached through this sidecar right now. */
static bool attached_here(const struct zkw_identity *id, int64_t session) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == session && s->phase == ZKW_PHASE_ACTIVE) return true;
  return false;
}

/* A superseded session that was still attached here (a hung JobManager):
 * its connection goes too, so the old process learns at once. */
static void close_superseded(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == session && s->phase != ZKW_PHASE_CLOSING)
      zkw_session_close(s, ZKW_LOG_INFO, "superseded: incarnation %" PRIu64 " was fenced by a newer one",
                        incarnation);
}

static bool start_fence(struct zkw_identity *id, int64_t session, const uint8_t passwd[16],
                        uint64_t incarnation, void *orphan) {
  /* An orphan that was re-attached meanwhile is not an orphan. */
  if (orphan && attached_here(id, session)) return false;
  struct zkw_fence *f = &id->fence;
  zkw_config_upstream_list(id->srv->cfg, f->hosts, sizeof f->hosts);
  f->session_id = session;
  memcpy(f->passwd, passwd, sizeof f->passwd);
  f->timeout_ms = (int)id->srv->cfg->fence_timeout_ms;
  f->auth = id->srv->cfg->registry_auth[0] ? id->srv->cfg->registry_auth : NULL;
  id->fence_incarnation = incarnation;
  if (zkw_fence_start(id->srv->loop, f, fence_done, orphan) != 0) {
    memset(f->passwd, 0, sizeof f->passwd);
    return false;
  }
  id->fencing = true;
  return true;
}

/* Remembers the current record's session as the one to fence, if it may
 * still be alive: before a new incarnation overwrites it. */
static void capture_previous(struct zkw_identity *id) {
  const struct zkw_record *r = &id->rec;
  if (!id->rec_loaded || r->session == 0 || r->dead >= r->incarnation) return;
  if (id->prev.incarnation >= r->incarnation) return; /* already captured */
  id->prev.session = r->session;
  memcpy(id->prev.passwd, r->passwd, sizeof id->prev.passwd);
  id->prev.incarnation = r->incarnation;
  id->prev.deadline_ms = now_ms() + (uint64_t)(r->timeout > 0 ? r->timeout : 60000) + 2000;
  id->prev.pending = true;
}

/* Fences the previous incarnation's session if it may still be alive. */
static void fence_previous(struct zkw_identity *id) {
  if (id->state != ZKW_REG_OWNER || !id->rec_loaded) return;
  capture_previous(id);
  if (!id->prev.pending || id->prev.incarnation <= id->rec.dead ||
      (zkw_identity_observing(id) && id->prev.incarnation <= id->would_dead)) {
    id->prev.pending = false;
    release_waiting(id);
    return;
  }
  if (zkw_identity_observing(id)) {
    /* Observe: the JobManager waits for the old session as it would direct. */
    char why[80];
    snprintf(why, sizeof why, "superseded by incarnation %" PRIu64, id->rec.incarnation + 1);
    would_fence(id, ZKW_HISTORY_FENCE, id->prev.session, id->prev.incarnation, id->rec.timeout, why);
    cancel_orphan(id, id->prev.session);
    id->prev.pending = false;
    memset(id->prev.passwd, 0, sizeof id->prev.passwd);
    release_waiting(id);
    return;
  }
  if (id->fencing) return;             /* fence_done comes back here */
  cancel_orphan(id, id->prev.session); /* fenced here, not a second time as an orphan */
  if (!start_fence(id, id->prev.session, id->prev.passwd, id->prev.incarnation, NULL)) {
    id->prev.pending = false;
    release_waiting(id);
  } else if (id->waiting && !uv_is_active((uv_handle_t *)&id->fence_timer)) {
    uv_timer_start(&id->fence_timer, fence_timeout_cb, id->srv->cfg->fence_timeout_ms, 0);
  }
}

static void retry_fence_cb(uv_timer_t *t) {
  fence_previous(t->data);
}

static void orphan_fenced(struct zkw_orphan *o, enum zkw_fence_result result);

static void fence_done(struct zkw_fence *f, enum zkw_fence_result result, void *arg) {
  struct zkw_identity *id = (struct zkw_identity *)((char *)f - offsetof(struct zkw_identity, fence));
  id->fencing = false;
  if (arg) {
    orphan_fenced(arg, result);
  } else {
    uint64_t inc = id->fence_incarnation;
    if (result == ZKW_FENCE_FAILED) {
      ZKW_METRIC_INC(fence_failures);
      zkw_log_warn("identity %s: fencing session 0x%" PRIx64 " of incarnation %" PRIu64 " failed: %s",
                   identity_name(id), (uint64_t)f->session_id, inc, f->detail);
      zkw_history_failed(ZKW_HISTORY_FENCE, NULL, "fence failed", f->session_id, identity_name(id), inc);
      if (now_ms() < id->prev.deadline_ms && !id->stopping)
        uv_timer_start(&id->retry_timer, retry_fence_cb, FENCE_RETRY_MS, 0);
      else
        id->prev.pending = false; /* by now the server has expired it */
    } else {
      if (result == ZKW_FENCE_CLOSED) ZKW_METRIC_INC(fences);
      zkw_log_info("identity %s: previous session 0x%" PRIx64 " of incarnation %" PRIu64 " fenced: %s",
                   identity_name(id), (uint64_t)f->session_id, inc, zkw_fence_result_name(result));
      zkw_history_add(ZKW_HISTORY_FENCE, NULL, zkw_fence_result_name(result), f->session_id,
                      identity_name(id), inc);
      id->prev.pending = false;
      memset(id->prev.passwd, 0, sizeof id->prev.passwd);
      note_dead(id, f->session_id, inc);
      write_dead(id, inc);
      close_superseded(id, f->session_id, inc);
    }
    release_waiting(id);
  }
  if (!id->stopping && id->waiting) fence_previous(id);
}

/* ---- orphans ---- */

static void orphan_closed(uv_handle_t *h) {
  free(h->data);
}

static void orphan_free(struct zkw_orphan *o) {
  for (struct zkw_orphan **p = &o->id->orphans; *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  memset(o->passwd, 0, sizeof o->passwd);
  uv_close((uv_handle_t *)&o->timer, orphan_closed);
}

/* Re-attaches that waited for an orphan fence go on. */
static void resume_fence_waiters(struct zkw_identity *id) {
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (zkw_sc(s)->wait_fence) {
      zkw_sc(s)->wait_fence = false;
      zkw_session_resume(s);
    }
}

static void orphan_fenced(struct zkw_orphan *o, enum zkw_fence_result result) {
  struct zkw_identity *id = o->id;
  if (result == ZKW_FENCE_CANCELLED) {
    zkw_log_info("identity %s: orphaned session 0x%" PRIx64 " re-attached before its fence began: not fenced",
                 identity_name(id), (uint64_t)o->session_id);
  } else if (result == ZKW_FENCE_FAILED) {
    ZKW_METRIC_INC(fence_failures);
    zkw_log_warn("identity %s: fencing orphaned session 0x%" PRIx64 " failed: %s", identity_name(id),
                 (uint64_t)o->session_id, id->fence.detail);
  } else {
    if (result == ZKW_FENCE_CLOSED) ZKW_METRIC_INC(orphans_fenced);
    zkw_log_info("identity %s: orphaned session 0x%" PRIx64 " (incarnation %" PRIu64 ") fenced: %s",
                 identity_name(id), (uint64_t)o->session_id, o->incarnation, zkw_fence_result_name(result));
    note_dead(id, o->session_id, o->incarnation);
    if (o->incarnation == id->rec.incarnation && o->session_id == id->rec.session)
      write_dead(id, o->incarnation);
    else
      flush_dead(id);
  }
  if (result != ZKW_FENCE_CANCELLED)
    (result == ZKW_FENCE_FAILED ? zkw_history_failed : zkw_history_add)(
        ZKW_HISTORY_ORPHAN_FENCE, NULL, zkw_fence_result_name(result), o->session_id, identity_name(id),
        o->incarnation);
  orphan_free(o);
  resume_fence_waiters(id);
}

static void orphan_timer_cb(uv_timer_t *t) {
  struct zkw_orphan *o = t->data;
  struct zkw_identity *id = o->id;
  if (id->stopping) return;
  if (id->fencing) { /* one fence at a time: try again shortly */
    uv_timer_start(&o->timer, orphan_timer_cb, 200, 0);
    return;
  }
  if (zkw_identity_observing(id)) {
    if (!attached_here(id, o->session_id)) {
      char why[120];
      snprintf(why, sizeof why, "dropped without closeSession, not re-attached in %u ms",
               id->srv->cfg->orphan_grace_ms);
      would_fence(id, ZKW_HISTORY_ORPHAN_FENCE, o->session_id, o->incarnation, o->timeout_ms, why);
      if (o->incarnation == id->rec.incarnation && o->session_id == id->rec.session)
        id->would_dead = o->incarnation; /* as write_dead: the next incarnation has nothing to fence */
    }
    orphan_free(o);
    return;
  }
  zkw_log_info("identity %s: session 0x%" PRIx64 " was not re-attached within %u ms; fencing it",
               identity_name(id), (uint64_t)o->session_id, id->srv->cfg->orphan_grace_ms);
  if (!start_fence(id, o->session_id, o->passwd, o->incarnation, o)) orphan_free(o);
}

/* The session is back: its orphan entry goes. Returns true when its fence
 * is already under way (then asked to cancel; orphan_fenced ends it). */
static bool cancel_orphan(struct zkw_identity *id, int64_t session_id) {
  for (struct zkw_orphan *o = id->orphans; o; o = o->next)
    if (o->session_id == session_id && !uv_is_closing((uv_handle_t *)&o->timer)) {
      if (id->fencing && id->fence.arg == o) {
        zkw_fence_cancel(&id->fence);
        return true;
      }
      orphan_free(o);
      return false;
    }
  return false;
}

/* ---- session hooks ---- */

int zkw_identity_on_connect_request(struct zkw_session *s, const struct zkw_connect_req *req) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled || req->session_id == 0) return ZKW_FORWARD;
  if (cancel_orphan(id, req->session_id)) {
    /* Its orphan fence is under way: asked not to begin, and the re-attach
     * waits for its word, so that the fence never closes a session that is
     * attached again (if it had connected already, the session is closed and
     * the client learns so from the server). */
    zkw_slog(s, ZKW_LOG_INFO,
             "identity %s: session 0x%" PRIx64 " re-attaches while its orphan fence is under way: "
             "the fence is cancelled if it has not begun, the re-attach waits for it",
             identity_name(id), (uint64_t)req->session_id);
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
               identity_name(id), (uint64_t)req->session_id);
      id->superseded_alive_ms = now_ms();
    }
  return ZKW_FORWARD;
}

void zkw_identity_on_connect_response(struct zkw_session *s, const struct zkw_connect_resp *resp) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled || resp->timeout <= 0 || resp->session_id == 0) return;
  if (id->rec_loaded && id->rec.session == resp->session_id && id->rec.dead < id->rec.incarnation)
    zkw_sc(s)->incarnation = id->rec.incarnation; /* the current incarnation re-attached */
}

/* The recorded session, attached here before the record was known (a
 * re-attach through a restarted sidecar): it is the current incarnation. */
static void claim_recorded_session(struct zkw_identity *id) {
  if (!id->rec_loaded || id->rec.session == 0 || id->rec.dead >= id->rec.incarnation) return;
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == id->rec.session && s->phase == ZKW_PHASE_ACTIVE && !zkw_sc(s)->incarnation) {
      zkw_sc(s)->incarnation = id->rec.incarnation;
      if (zkw_sc(s)->id_list == ZKW_ID_WAITING) {
        list_remove(&id->waiting, s);
        zkw_sc(s)->id_list = ZKW_ID_NONE;
        release_hold(s);
      }
    }
}

bool zkw_identity_on_jm_request(struct zkw_session *s) {
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
    if (id->rec.session != 0 && id->rec.dead < id->rec.incarnation && attached_here(id, id->rec.session)) {
      /* The current incarnation's session is still attached: a hung
       * JobManager and its replacement. But if a client we superseded came
       * back alive just now, this is that client's new session: two live
       * JobManagers share this sidecar, each re-opening a session when the
       * other's is fenced. Do not play that game. */
      bool shared =
          id->rec.session == id->shared_with ||
          (id->superseded_alive_ms && now_ms() - id->superseded_alive_ms < SHARED_SIDECAR_WINDOW_MS);
      if (shared) {
        id->shared_with = id->rec.session; /* and so while that session stays attached */
        zkw_slog(s, ZKW_LOG_ERROR,
                 "identity %s: CONFLICT: a client whose session was superseded is alive and acts as the "
                 "JobManager in a new session while session 0x%" PRIx64
                 " of the current incarnation is attached: two JobManagers share this sidecar. This "
                 "session is relayed as a plain client, nothing is fenced.",
                 identity_name(id), (uint64_t)id->rec.session);
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
           identity_name(id));
  zkw_sc(s)->hold_jm = true;
  zkw_session_ref(s);
  list_append(&id->waiting, s, ZKW_ID_WAITING);
  if (!uv_is_active((uv_handle_t *)&id->fence_timer))
    uv_timer_start(&id->fence_timer, fence_timeout_cb, id->srv->cfg->fence_timeout_ms, 0);
  fence_previous(id);
  return zkw_sc(s)->hold_jm;
}

void zkw_identity_on_session_closed(struct zkw_session *s) {
  struct zkw_identity *id = s->srv->policy;
  if (!id || id->disabled) return;
  /* Leave the lists (a write in flight keeps its reference until it ends).
   * The caller is closing s: it is freed once its handles are gone. */
  if (zkw_sc(s)->id_list == ZKW_ID_WAITING) list_remove(&id->waiting, s);
  if (zkw_sc(s)->id_list == ZKW_ID_WRITERS) list_remove(&id->writers, s);
  if (zkw_sc(s)->id_list == ZKW_ID_WAITING || zkw_sc(s)->id_list == ZKW_ID_WRITERS) {
    zkw_sc(s)->id_list = ZKW_ID_NONE;
    zkw_session_unref(s); /* not yet closing: s stays */
  }
  zkw_sc(s)->hold_jm = false;
  /* An orphan: the JobManager's connection went without closeSession. */
  if (id->stopping || s->srv->stopping || s->close_sent || !zkw_sc(s)->incarnation || s->session_id == 0 ||
      id->srv->cfg->orphan_grace_ms == 0 || id->state != ZKW_REG_OWNER ||
      zkw_sc(s)->incarnation != id->rec.incarnation || s->session_id != id->rec.session)
    return;
  struct zkw_orphan *o = zkw_calloc(1, sizeof *o);
  if (!o) return;
  o->id = id;
  o->session_id = s->session_id;
  memcpy(o->passwd, s->passwd, sizeof o->passwd);
  o->incarnation = zkw_sc(s)->incarnation;
  o->timeout_ms = s->timeout;
  uv_timer_init(id->srv->loop, &o->timer);
  o->timer.data = o;
  o->next = id->orphans;
  id->orphans = o;
  uv_timer_start(&o->timer, orphan_timer_cb, id->srv->cfg->orphan_grace_ms, 0);
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
             identity_name(id));
    zkw_session_ref(s);
    list_append(&id->writers, s, ZKW_ID_WRITERS);
  }
  if (id->writers) {
    /* Fence the previous incarnation first, in the background. */
    fence_previous(id);
  }
}

/* ---- start and stop ---- */

static void on_registry_event(void *arg, int type, int state, const char *path) {
  struct zkw_identity *id = arg;
  if (id->stopping) return;
  if (type == ZOO_SESSION_EVENT) {
    if (state == ZOO_CONNECTED_STATE) {
      if (id->state != ZKW_REG_OWNER)
        claim(id);
      else if (!id->rec_loaded)
        load_record(id);
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      zkw_log_warn("identity %s: registry session expired; claiming the identity again", identity_name(id));
      set_state(id, ZKW_REG_CONNECTING, "registry session expired");
      id->rec_loaded = false;
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      broken(id, "authentication", ZAUTHFAILED);
    }
    return;
  }
  if (type == ZOO_DELETED_EVENT && id->wait.active && strcmp(path, id->wait.path) == 0)
    return latch_gone(id, now_ms() - id->wait.since_ms);
  if (type == ZOO_DELETED_EVENT && strcmp(path, id->owner_node) == 0 &&
      (id->state == ZKW_REG_CLAIMING || id->state == ZKW_REG_CONFLICT))
    claim(id);
  else if (strcmp(path, id->owner_node) == 0 && id->state == ZKW_REG_CONFLICT)
    claim(id); /* re-arm the watch */
}

/* Opens the registry session; when that fails (out of memory, a host list
 * libzookeeper refuses), tries again with a growing delay: the sidecar
 * relays meanwhile, and /readyz says why. */
static void open_registry(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  const struct zkw_config *cfg = id->srv->cfg;
  char hosts[4096];
  zkw_config_upstream_list(cfg, hosts, sizeof hosts);
  int rc = zkw_zk_open(&id->zk, id->srv->loop, hosts, REGISTRY_SESSION_MS,
                       cfg->registry_auth[0] ? cfg->registry_auth : NULL, on_registry_event, id);
  if (rc == 0) {
    id->open_retry_ms = 0;
    return;
  }
  id->zk = NULL;
  id->open_retry_ms = id->open_retry_ms ? id->open_retry_ms * 2 : REGISTRY_RETRY_MS;
  if (id->open_retry_ms > OPEN_RETRY_MAX_MS) id->open_retry_ms = OPEN_RETRY_MAX_MS;
  zkw_log_error("identity %s: cannot start the registry session: %s; trying again in %u ms", cfg->identity,
                uv_strerror(rc), id->open_retry_ms);
  set_state(id, ZKW_REG_BROKEN, "cannot start the registry session");
  if (!id->stopping) uv_timer_start(&id->claim_timer, open_registry, id->open_retry_ms, 0);
}

int zkw_identity_start(struct zkw_identity *id, struct zkw_server *srv) {
  const struct zkw_config *cfg = srv->cfg;
  memset(id, 0, sizeof *id);
  id->srv = srv;
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
  set_state(id, ZKW_REG_CONNECTING, "registry session connecting");
  uuid_t u;
  uuid_generate(u);
  uuid_unparse_lower(u, id->instance);
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

void zkw_identity_stop(struct zkw_identity *id) {
  if (id->stopping || id->disabled) return;
  id->stopping = true;
  release_waiting(id);
  while (id->writers) {
    release_hold(list_pop(&id->writers));
  }
  /* An orphan being fenced is freed when its fence reports (the work
   * request keeps the loop running until then). */
  for (struct zkw_orphan *o = id->orphans, *next; o; o = next) {
    next = o->next;
    if (!(id->fencing && id->fence.arg == o)) orphan_free(o);
  }
  uv_timer_t *timers[] = {&id->claim_timer, &id->fence_timer, &id->retry_timer, &id->sweep_timer,
                          &id->check_timer};
  for (int i = 0; i < 5; i++)
    if (timers[i]->loop && !uv_is_closing((uv_handle_t *)timers[i])) uv_close((uv_handle_t *)timers[i], NULL);
  if (id->zk) zkw_zk_close_handle(id->zk);
}

void zkw_identity_finish(struct zkw_identity *id) {
  if (id->zk) zkw_zk_close(id->zk);
  id->zk = NULL;
  memset(&id->rec, 0, sizeof id->rec);
}
