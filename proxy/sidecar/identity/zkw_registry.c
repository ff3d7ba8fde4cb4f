/* zkw_registry.c: the identity's registry: the claim (the owner node, a
 * conflict with another live sidecar), the record (load, write, write back,
 * the dead list) and the owner's periodic check, plus the two lists of
 * sessions that wait on the registry (waiting for the fence, writers).
 *
 * It is in the sidecar's lowest room (identity/): it calls neither the
 * fencing (fencing/zkw_fencing.c) nor the session hooks (zkw_incarnation.c);
 * when the record is loaded it tells them through id->on_record_loaded. The
 * registry ACLs are zkw_regacl.c. Everything runs on the loop thread; a session referenced by
 * a pending registry step holds a reference (zkw_session_ref), so it is
 * never freed under a callback. */
#include "zkw_registry.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_fault.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_pair.h"
#include "zkw_regacl.h"
#include "zkw_session.h"

/* How often the owner checks that its owner node and record are still as it
 * wrote them (deleted, overwritten or made unreadable by someone else). */
#define REGISTRY_CHECK_MS 2000

static void write_next(struct zkw_identity *id);
static void claim_recorded_session(struct zkw_identity *id);
static void check_cb(uv_timer_t *t);
static void write_back(struct zkw_identity *id);
static bool with_extras(const struct zkw_identity *id, struct zkw_record *rec);

void zkw_registry_set_state(struct zkw_identity *id, enum zkw_reg_state st, const char *why) {
  id->state = st;
  /* Cut to fit (the reason is for logs and /readyz only). */
  size_t n = why ? strnlen(why, sizeof id->why - 1) : 0;
  if (n) memcpy(id->why, why, n);
  id->why[n] = 0;
}

static void claim_again_cb(uv_timer_t *t) {
  zkw_registry_claim(t->data);
}

static void reload_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  /* Back to the owner state, to read the record again. */
  if (id->state == ZKW_REG_BROKEN && zkw_zk_connected(id->zk)) zkw_registry_claim(id);
}

/* A registry step failed: report it, relay on without identity features,
 * and retry later. */
void zkw_registry_broken(struct zkw_identity *id, const char *what, int rc) {
  char why[256];
  snprintf(why, sizeof why, "registry %s: %s", what, zkw_zk_error(rc));
  if (id->state != ZKW_REG_BROKEN || strcmp(why, id->why) != 0)
    zkw_log_error("identity %s: %s (record %s); relaying without fencing or reclaim until it recovers",
                  zkw_identity_name(id), why, id->node);
  ZKW_METRIC_INC(registry_errors);
  zkw_registry_set_state(id, ZKW_REG_BROKEN, why);
  id->rec_loaded = false;
  zkw_registry_release_waiting(id);
  uv_timer_start(&id->claim_timer, claim_again_cb, ZKW_REGISTRY_RETRY_MS, 0);
}

/* ---- session lists and holds ---- */

void zkw_registry_list_remove(struct zkw_session **head, struct zkw_session *s) {
  for (struct zkw_session **p = head; *p; p = &zkw_sc(*p)->id_next)
    if (*p == s) {
      *p = zkw_sc(s)->id_next;
      zkw_sc(s)->id_next = NULL;
      return;
    }
}

void zkw_registry_list_append(struct zkw_session **head, struct zkw_session *s, enum zkw_id_list which) {
  zkw_sc(s)->id_list = which;
  struct zkw_session **p = head;
  while (*p)
    p = &zkw_sc(*p)->id_next;
  zkw_sc(s)->id_next = NULL;
  *p = s;
}

/* Takes the first session off an identity list. */
struct zkw_session *zkw_registry_list_pop(struct zkw_session **head) {
  struct zkw_session *s = *head;
  *head = zkw_sc(s)->id_next;
  zkw_sc(s)->id_next = NULL;
  zkw_sc(s)->id_list = ZKW_ID_NONE;
  return s;
}

/* Lets a held request go on (unrecorded: adopted once the record can be
 * written). */
void zkw_registry_release_hold(struct zkw_session *s) {
  if (zkw_sc(s)->hold_jm) {
    zkw_sc(s)->hold_jm = false;
    if (s->phase != ZKW_PHASE_CLOSING) zkw_session_resume(s);
  }
  zkw_session_unref(s);
}

/* The fence is done, failed or timed out: every request held for it goes on
 * to the record write if the registry can take it now, else on its way. */
void zkw_registry_release_waiting(struct zkw_identity *id) {
  uv_timer_stop(&id->fence_timer);
  bool record = id->state == ZKW_REG_OWNER && id->rec_loaded && !id->stopping;
  while (id->waiting) {
    struct zkw_session *s = zkw_registry_list_pop(&id->waiting);
    if (record && s->phase != ZKW_PHASE_CLOSING)
      zkw_registry_list_append(&id->writers, s, ZKW_ID_WRITERS); /* keeps its reference and its hold */
    else
      zkw_registry_release_hold(s);
  }
  if (record) write_next(id);
}

/* ---- registry paths and claim ---- */

static void created_identity_node(void *arg, const struct zkw_zk_result *r);

static void created_identities(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS)
    return zkw_registry_broken(id, "cannot create identities node", r->rc);
  int rc = zkw_zk_create(id->zk, id->node, "", 0, false, created_identity_node, id);
  if (rc != ZOK) zkw_registry_broken(id, "cannot create identity node", rc);
}

static void created_root(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return zkw_registry_broken(id, "cannot create root node", r->rc);
  int rc = zkw_zk_create(id->zk, id->root_identities, "", 0, false, created_identities, id);
  if (rc != ZOK) zkw_registry_broken(id, "cannot create identities node", rc);
}

static void owner_created(void *arg, const struct zkw_zk_result *r);

static void created_identity_node(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc != ZOK && r->rc != ZNODEEXISTS)
    return zkw_registry_broken(id, "cannot create identity node", r->rc);
  int rc =
      zkw_zk_create(id->zk, id->owner_node, id->instance, (int)strlen(id->instance), true, owner_created, id);
  if (rc != ZOK) zkw_registry_broken(id, "cannot create owner node", rc);
}

static void became_owner(struct zkw_identity *id) {
  uv_timer_stop(&id->claim_timer);
  if (id->state == ZKW_REG_CONFLICT)
    zkw_log_info("identity %s: the other sidecar instance is gone; this instance owns the identity now",
                 zkw_identity_name(id));
  zkw_registry_set_state(id, ZKW_REG_OWNER, NULL);
  uv_timer_start(&id->check_timer, check_cb, REGISTRY_CHECK_MS, REGISTRY_CHECK_MS);
  zkw_registry_load_record(id);
}

static void conflict_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  if (id->state != ZKW_REG_CLAIMING) return;
  zkw_log_error("identity %s: CONFLICT: the identity is held by another live sidecar instance (%s); two "
                "JobManagers are configured with one identity. This instance (%s) will not fence or reclaim.",
                zkw_identity_name(id), id->why, id->instance);
  ZKW_METRIC_INC(identity_conflicts);
  char why[sizeof id->why];
  snprintf(why, sizeof why, "identity conflict: %.200s", id->why);
  zkw_registry_set_state(id, ZKW_REG_CONFLICT, why);
  zkw_registry_release_waiting(id);
}

static void owner_read(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc == ZNONODE) return zkw_registry_claim(id); /* gone meanwhile */
  if (r->rc != ZOK) return zkw_registry_broken(id, "cannot read owner node", r->rc);
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
               zkw_identity_name(id), why);
  zkw_registry_set_state(id, ZKW_REG_CLAIMING, why);
  /* A live holder keeps its node; a dead one loses it within its session
   * timeout. Twice our own registry timeout bounds the wait. */
  int bound = 2 * (zkw_zk_timeout(id->zk) > 0 ? zkw_zk_timeout(id->zk) : ZKW_REGISTRY_SESSION_MS) + 1000;
  uv_timer_start(&id->claim_timer, conflict_cb, (uint64_t)bound, 0);
}

static void owner_created(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (r->rc == ZOK) return became_owner(id);
  if (r->rc == ZNODEEXISTS) {
    int rc = zkw_zk_get(id->zk, id->owner_node, true, owner_read, id);
    if (rc != ZOK) zkw_registry_broken(id, "cannot read owner node", rc);
    return;
  }
  zkw_registry_broken(id, "cannot create owner node", r->rc);
}

void zkw_registry_claim(struct zkw_identity *id) {
  if (id->stopping || !zkw_zk_connected(id->zk)) return;
  int rc = zkw_zk_create(id->zk, id->srv->cfg->registry_root, "", 0, false, created_root, id);
  if (rc != ZOK) zkw_registry_broken(id, "cannot create root node", rc);
}

/* ---- the record ---- */

/* The recorded session, attached here before the record was known (a
 * re-attach through a restarted sidecar): it is the current incarnation. */
static void claim_recorded_session(struct zkw_identity *id) {
  if (!id->rec_loaded || id->rec.session == 0 || id->rec.dead >= id->rec.incarnation) return;
  for (struct zkw_session *s = zkw_session_first(id->srv); s; s = zkw_session_next(s))
    if (s->session_id == id->rec.session && s->phase == ZKW_PHASE_ACTIVE && !zkw_sc(s)->incarnation) {
      zkw_sc(s)->incarnation = id->rec.incarnation;
      if (zkw_sc(s)->id_list == ZKW_ID_WAITING) {
        zkw_registry_list_remove(&id->waiting, s);
        zkw_sc(s)->id_list = ZKW_ID_NONE;
        zkw_registry_release_hold(s);
      }
    }
}

/* Remembers the current record's session as the one to fence, if it may
 * still be alive: before a new incarnation overwrites it. */
void zkw_registry_capture_previous(struct zkw_identity *id) {
  const struct zkw_record *r = &id->rec;
  if (!id->rec_loaded || r->session == 0 || r->dead >= r->incarnation) return;
  if (id->prev.incarnation >= r->incarnation) return; /* already captured */
  id->prev.session = r->session;
  memcpy(id->prev.passwd, r->passwd, sizeof id->prev.passwd);
  id->prev.incarnation = r->incarnation;
  id->prev.timeout_ms = r->timeout;
  id->prev.deadline_ms = zkw_identity_now_ms() + (uint64_t)(r->timeout > 0 ? r->timeout : 60000) + 2000;
  id->prev.pending = true;
}

/* Dead sessions older than ZKW_DEAD_SESSION_MAX_AGE_MS are forgotten. */
static void age_dead(struct zkw_identity *id) {
  if (zkw_record_age_dead(&id->dead, zkw_identity_epoch_ms(), ZKW_DEAD_SESSION_MAX_AGE_MS) > 0)
    id->dead_dirty = true;
}

static void record_loaded(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->state != ZKW_REG_OWNER) return;
  struct zkw_record rec;
  bool rewrite = false;
  if (r->rc == ZNONODE) {
    memset(&rec, 0, sizeof rec);
    id->rec_version = -1;
  } else if (r->rc != ZOK) {
    return zkw_registry_broken(id, "cannot read the record", r->rc);
  } else if (zkw_record_parse(r->data, r->data_len, &rec) != 0 && id->rec_known) {
    /* This instance knows the record: the owner's copy is written back. */
    zkw_log_error(
        "identity %s: registry record %s is corrupt; writing this instance's record (incarnation %" PRIu64
        ") back",
        zkw_identity_name(id), id->node, id->rec.incarnation);
    ZKW_METRIC_INC(registry_errors);
    id->rec_version = r->stat.version;
    rec = id->rec;
    rewrite = true;
  } else if (zkw_record_parse(r->data, r->data_len, &rec) != 0) {
    if (!id->corrupt_logged)
      zkw_log_error(
          "identity %s: registry record %s is corrupt; relaying without fencing or reclaim (delete the "
          "node to start the identity afresh)",
          zkw_identity_name(id), id->node);
    if (!id->corrupt_logged) ZKW_METRIC_INC(registry_errors);
    id->corrupt_logged = true;
    zkw_registry_set_state(id, ZKW_REG_BROKEN, "registry record corrupt");
    id->rec_loaded = false;
    zkw_registry_release_waiting(id);
    uv_timer_start(&id->claim_timer, reload_cb, ZKW_REGISTRY_RETRY_MS, 0);
    return;
  } else {
    id->rec_version = r->stat.version;
  }
  /* What it names is used for nothing until its ACL is judged (zkw_regacl.c). */
  zkw_regacl_loaded(id, r->rc == ZOK && !rewrite ? &r->stat : NULL);
  id->corrupt_logged = false;
  /* Keep the newest we know: a record deleted, emptied or corrupted under
   * us is written back. */
  bool behind = rewrite || (id->rec_known && rec.incarnation < id->rec.incarnation);
  /* The dead list: what the record knows (an earlier instance) and what
   * this instance saw. */
  for (int i = 0; i < rec.ndead; i++)
    zkw_record_add_dead(&id->dead, &rec.dead_sessions[i]);
  age_dead(id);
  if (zkw_owntrees_loaded(id, &rec.trees)) id->scope_dirty = true; /* what the record lacks is written */
  if (!behind) id->rec = rec;
  if (with_extras(id, &id->rec)) id->dead_dirty = true;
  id->rec_loaded = id->rec_known = true;
  memset(&rec, 0, sizeof rec);
  ZKW_METRIC_SET(identity_incarnation, (int64_t)id->rec.incarnation);
  zkw_log_info("identity %s: owned by this instance (%s); incarnation %" PRIu64 ", session 0x%" PRIx64
               ", dead up to %" PRIu64,
               zkw_identity_name(id), id->instance, id->rec.incarnation, (uint64_t)id->rec.session,
               id->rec.dead);
  if (behind) write_back(id); /* write_next follows it */
  claim_recorded_session(id);
  if (id->on_record_loaded) id->on_record_loaded(id); /* zkw_incarnation.c: fence, adopt */
  write_next(id);
  zkw_regacl_check(id);
}

void zkw_registry_load_record(struct zkw_identity *id) {
  if (id->state != ZKW_REG_OWNER) return;
  int rc = zkw_zk_get(id->zk, id->node, false, record_loaded, id);
  if (rc != ZOK) zkw_registry_broken(id, "cannot read the record", rc);
}

struct record_write {
  struct zkw_identity *id;
  struct zkw_session *s; /* the session being recorded, or NULL */
  struct zkw_record rec;
  char text[ZKW_RECORD_TEXT_MAX];
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
    zkw_registry_release_hold(s);
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
                  zkw_identity_name(id), zkw_zk_error(r->rc));
    ZKW_METRIC_INC(registry_errors);
    if (r->rc == ZNONODE)
      id->rec_version = -1;
    else
      zkw_registry_load_record(id);
    return finish_write(w, false);
  }
  if (r->rc != ZOK) {
    zkw_registry_broken(id, "cannot write the record", r->rc);
    return finish_write(w, false);
  }
  uint64_t dead = id->rec.dead; /* a fence may have ended meanwhile */
  id->rec = w->rec;
  if (dead > id->rec.dead && dead < id->rec.incarnation) {
    id->rec.dead = dead;
    id->dead_dirty = true;
  }
  if (with_extras(id, &id->rec)) id->dead_dirty = true;
  id->rec_known = true;
  id->rewrite_pending = false; /* what the record holds is this instance's */
  id->write_gen++;
  id->rec_version = w->created ? 0 : r->stat.version;
  ZKW_METRIC_SET(identity_incarnation, (int64_t)id->rec.incarnation);
  if (s && zkw_sc(s)->incarnation == id->rec.incarnation) {
    zkw_slog(s, ZKW_LOG_INFO, "identity %s: incarnation %" PRIu64 " begins", zkw_identity_name(id),
             id->rec.incarnation);
    if (id->on_incarnation) id->on_incarnation(id);
  }
  finish_write(w, true);
}

/* Writes the record for the next session waiting for one, or a pending
 * change of `dead`. One write at a time. */
static void write_next(struct zkw_identity *id) {
  if (id->writing || id->state != ZKW_REG_OWNER || !id->rec_loaded || id->stopping) return;
  if (!id->writers) return zkw_registry_flush_dead(id);
  struct zkw_session *s = zkw_registry_list_pop(&id->writers);
  if (s->session_id == id->rec.session) { /* already the current incarnation */
    zkw_sc(s)->incarnation = id->rec.incarnation;
    zkw_registry_release_hold(s);
    write_next(id);
    return;
  }
  zkw_sc(s)->id_list = ZKW_ID_WRITING;
  struct record_write *w = zkw_calloc(1, sizeof *w);
  if (!w) {
    zkw_slog(s, ZKW_LOG_ERROR, "identity %s: out of memory writing the registry record: relayed unrecorded",
             zkw_identity_name(id));
    write_ended(id, s, false);
    return;
  }
  zkw_registry_capture_previous(id);
  w->id = id;
  w->s = s;
  w->rec = id->rec;
  w->rec.incarnation = id->rec.incarnation + 1;
  w->rec.session = s->session_id;
  memcpy(w->rec.passwd, s->passwd, sizeof w->rec.passwd);
  w->rec.timeout = s->timeout;
  snprintf(w->rec.instance, sizeof w->rec.instance, "%s", id->instance);
  with_extras(id, &w->rec);
  id->dead_dirty = id->scope_dirty = false; /* this write carries the dead list and the trees */
  zkw_sc(s)->incarnation = w->rec.incarnation;
  w->len = zkw_record_format(&w->rec, w->text, sizeof w->text);
  id->writing = true;
  int rc = w->len < 0 ? ZBADARGUMENTS : send_write(w);
  if (rc != ZOK) {
    zkw_registry_broken(id, "cannot write the record", rc);
    finish_write(w, false);
  }
}

/* Copies the identity's dead list and own trees into a record about to be
 * written. Returns true if the record's dead list changed. With credentials
 * a dead session read from the record is written only once the record was
 * judged trusted (zkw_regacl.c): a write of zkwarden's must not make what
 * anyone could have written look trusted. */
static bool with_extras(const struct zkw_identity *id, struct zkw_record *rec) {
  bool all = !id->srv->cfg->registry_auth[0];
  struct zkw_record keep = {0};
  for (int i = 0; i < id->dead.ndead; i++) {
    const struct zkw_dead_session *d = &id->dead.dead_sessions[i];
    if (all || d->observed || d->trusted) keep.dead_sessions[keep.ndead++] = *d;
  }
  bool changed = rec->ndead != keep.ndead;
  for (int i = 0; i < keep.ndead && !changed; i++) { /* what the record keeps of each */
    const struct zkw_dead_session *a = &rec->dead_sessions[i], *b = &keep.dead_sessions[i];
    changed = a->session != b->session || a->incarnation != b->incarnation || a->ended_ms != b->ended_ms;
  }
  rec->ndead = keep.ndead;
  memcpy(rec->dead_sessions, keep.dead_sessions, sizeof rec->dead_sessions);
  zkw_owntrees_for_record(id, &rec->trees);
  return changed;
}

/* A change of `dead` alone (after a fence). */
static void dead_written(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->writing = false;
  id->write_gen++;
  if (r->rc == ZOK) {
    id->rec_version = r->stat.version;
    id->rewrite_pending = false;
  } else if (r->rc == ZBADVERSION)
    zkw_registry_load_record(id);
  write_next(id);
}

void zkw_registry_flush_dead(struct zkw_identity *id) {
  if (!id->dead_dirty && !id->scope_dirty) return;
  /* The record read is being judged: the verdict writes what it must. */
  if (id->record_trust == ZKW_TRUST_PENDING && id->srv->cfg->registry_auth[0]) return;
  if (id->writing || id->rec_version < 0 || id->writers || id->state != ZKW_REG_OWNER || !id->rec_loaded ||
      id->stopping)
    return; /* the next record write carries it */
  id->dead_dirty = id->scope_dirty = false;
  with_extras(id, &id->rec);
  char text[ZKW_RECORD_TEXT_MAX];
  int len = zkw_record_format(&id->rec, text, sizeof text);
  if (len < 0) return;
  id->writing = true;
  int rc = zkw_zk_set(id->zk, id->node, text, len, id->rec_version, dead_written, id);
  memset(text, 0, sizeof text);
  if (rc != ZOK) {
    id->writing = false;
    id->dead_dirty = id->scope_dirty = true;
  }
}

void zkw_registry_write_dead(struct zkw_identity *id, uint64_t dead) {
  if (dead > id->rec.dead) {
    id->rec.dead = dead;
    id->dead_dirty = true;
  }
  zkw_registry_flush_dead(id);
}

/* zkwarden saw a session of this identity end (it closed it, or the server
 * no longer knew it): an ephemeral it still owns later is a zombie. */
void zkw_registry_note_dead(struct zkw_identity *id, int64_t session, uint64_t incarnation) {
  struct zkw_dead_session d = {session, incarnation, zkw_identity_epoch_ms(), true, false};
  struct zkw_dead_session *known = (struct zkw_dead_session *)zkw_record_find_dead(&id->dead, session);
  if (known)
    known->observed = true; /* listed by the record, and now seen here */
  else if (zkw_record_add_dead(&id->dead, &d))
    id->dead_dirty = true;
}

void zkw_registry_learn_tree(struct zkw_identity *id, uint64_t incarnation, struct zkw_bytes path) {
  uint64_t current = zkw_identity_current(id);
  if (!current || incarnation != current) return; /* a superseded incarnation's trees are not learned */
  enum zkw_treeset_change c = zkw_owntrees_learn(id, current, path);
  if (c == ZKW_TREESET_CHANGED) {
    char trees[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX];
    zkw_treeset_format(&id->scope, trees, sizeof trees);
    zkw_log_info("identity %s: incarnation %" PRIu64
                 "'s own trees (read by the sweep and the lock report): %s",
                 zkw_identity_name(id), current, trees);
    id->scope_dirty = true;
    zkw_registry_flush_dead(id);
  } else if (c == ZKW_TREESET_FULL && !id->scope_full_logged) {
    id->scope_full_logged = true;
    zkw_log_warn("identity %s: the JobManager creates ephemerals under more than %d separate trees; %.*s is "
                 "not swept (reclaim at create and delete still covers it): name it in ZKWARDEN_SWEEP_TREES "
                 "(at most %d; a tree named there is always read, and what the JobManager creates below it "
                 "is not learned, so it takes no room)",
                 zkw_identity_name(id), ZKW_TREESET_LEARNED_MAX, (int)path.len, (const char *)path.p,
                 ZKW_SWEEP_TREES_MAX);
  }
}

void zkw_registry_trees_walked(struct zkw_identity *id, uint64_t incarnation,
                               const struct zkw_treeset *walked) {
  int gone = zkw_owntrees_walked(id, incarnation, walked);
  if (!gone) return;
  char trees[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX];
  struct zkw_treeset own;
  (void)zkw_owntrees_of(id, &own);
  zkw_treeset_format(&own, trees, sizeof trees);
  zkw_log_info(
      "identity %s: %d tree(s) of earlier incarnations retired after a whole walk of incarnation %" PRIu64
      "; own trees now %s",
      zkw_identity_name(id), gone, incarnation, trees);
  id->scope_dirty = true;
  zkw_registry_flush_dead(id);
}

/* The record written back after it was deleted, emptied or corrupted. */
static void written_back(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->writing = false;
  id->write_gen++;
  if (r->rc == ZOK) {
    id->rec_version = r->has_stat ? r->stat.version : 0;
    id->rewrite_pending = false;
    zkw_log_info("identity %s: registry record %s written back: incarnation %" PRIu64 ", session 0x%" PRIx64,
                 zkw_identity_name(id), id->node, id->rec.incarnation, (uint64_t)id->rec.session);
  } else if (r->rc == ZBADVERSION || r->rc == ZNONODE || r->rc == ZNODEEXISTS) {
    return zkw_registry_load_record(id); /* changed again meanwhile: look again */
  } else {
    return zkw_registry_broken(id, "cannot write the record back", r->rc);
  }
  write_next(id);
}

/* Writes this instance's record over what the registry holds (version
 * rec_version; created when absent). */
static void write_back(struct zkw_identity *id) {
  if (id->writing || !id->rec_known || id->state != ZKW_REG_OWNER) return;
  with_extras(id, &id->rec);
  id->dead_dirty = id->scope_dirty = false;
  char text[ZKW_RECORD_TEXT_MAX];
  int len = zkw_record_format(&id->rec, text, sizeof text);
  if (len < 0) return;
  id->writing = true;
  int rc = id->rec_version < 0 ? zkw_zk_create(id->zk, id->node, text, len, false, written_back, id)
                               : zkw_zk_set(id->zk, id->node, text, len, id->rec_version, written_back, id);
  memset(text, 0, sizeof text);
  if (rc != ZOK) {
    id->writing = false;
    zkw_registry_broken(id, "cannot write the record back", rc);
  }
}

/* ---- the owner's check ---- */

/* The owner node is gone or another session's: claim the identity again
 * (the record is written back once owned). */
static void lost_owner(struct zkw_identity *id, const char *what) {
  zkw_log_error("identity %s: registry %s was deleted or taken under this instance; claiming the identity "
                "again (fencing and reclaim wait until it is owned)",
                zkw_identity_name(id), what);
  ZKW_METRIC_INC(registry_errors);
  uv_timer_stop(&id->check_timer);
  zkw_registry_set_state(id, ZKW_REG_CONNECTING, "registry owner node lost; claiming the identity again");
  id->rec_loaded = false;
  zkw_registry_claim(id);
}

static void checked_record(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  id->checking = false;
  if (id->stopping || id->state != ZKW_REG_OWNER || !id->rec_loaded) return;
  if (id->writing || id->write_gen != id->check_gen) return; /* a write raced the check */
  if (r->rc == ZNONODE) return lost_owner(id, id->node);
  if (r->rc != ZOK) return zkw_registry_broken(id, "cannot read the record", r->rc);
  if (r->stat.version == id->rec_version) return;
  /* Written by someone else while this instance owns the identity: the
   * owner's record is the truth (a valid one included: an operator's edit
   * could name any session to fence). */
  struct zkw_record rec;
  bool valid = zkw_record_parse(r->data, r->data_len, &rec) == 0;
  memset(&rec, 0, sizeof rec);
  zkw_log_error("identity %s: registry record %s was %s under this instance (version %d, expected %d); "
                "writing this instance's record back",
                zkw_identity_name(id), id->node, valid ? "overwritten" : "corrupted", r->stat.version,
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
    return zkw_registry_broken(id, "cannot read owner node", r->rc);
  }
  int rc = zkw_zk_get(id->zk, id->node, false, checked_record, id);
  if (rc != ZOK) {
    id->checking = false;
    zkw_registry_broken(id, "cannot read the record", rc);
  }
}

static void check_cb(uv_timer_t *t) {
  struct zkw_identity *id = t->data;
  zkw_regacl_check(id);
  age_dead(id);
  zkw_registry_flush_dead(id);
  if (id->stopping || id->checking || id->writing || id->state != ZKW_REG_OWNER || !id->rec_loaded ||
      !zkw_zk_connected(id->zk))
    return;
  id->check_gen = id->write_gen;
  id->checking = true;
  int rc = zkw_zk_exists(id->zk, id->owner_node, false, checked_owner, id);
  if (rc != ZOK) {
    id->checking = false;
    zkw_registry_broken(id, "cannot read owner node", rc);
  }
}
