/* zkw_regacl.c: the registry's ACLs and the trust in the record. With
 * ZKWARDEN_REGISTRY_AUTH the registry root, identities, the identity's
 * record and owner node are made zkwarden-only (zkw_regtrust.h); a world ACL
 * left from a sidecar that ran without credentials is reported (at start
 * and at each owner's check); the record's content, read by zkw_registry.c,
 * is judged here. A leaf under zkw_registry.c: what it must write is done
 * through id->on_trust. */
#include "zkw_regacl.h"

#include <inttypes.h>
#include <string.h>

#include "zkw_owntrees.h"
#include "zkw_log.h"
#include "zkw_metrics.h"

/* ---- registry ACLs ----
 *
 * The record holds the JobManager's session id and password: whoever reads
 * it can re-attach that session and close it. Its dead sessions and trees
 * make the sweep delete: whoever can write it, or delete it and create
 * another (CREATE and DELETE on identities), could make zkwarden delete
 * another cluster's nodes. A node created before ZKWARDEN_REGISTRY_AUTH was
 * set keeps its world ACL (NODEEXISTS is taken as it is), so each pass reads
 * the ACLs (root, identities, record, owner) and, with credentials, makes
 * every node anyone else can change zkwarden-only. Then a sidecar with other
 * credentials cannot create its record under this root: each set of
 * credentials has a root of its own (docs/secured.md). */

enum { STEP_ROOT, STEP_IDENTITIES, STEP_RECORD, STEP_OWNER, STEP_DONE };

static bool have_auth(const struct zkw_identity *id) {
  return id->srv->cfg->registry_auth[0] != 0;
}

static const char *acl_node(const struct zkw_identity *id) {
  switch (id->acl_step) {
  case STEP_ROOT:
    return id->srv->cfg->registry_root;
  case STEP_IDENTITIES:
    return id->root_identities;
  case STEP_RECORD:
    return id->node;
  default:
    return id->owner_node;
  }
}

/* The fault points' names (zkw_zk_get_acl). */
static const char *acl_what(const struct zkw_identity *id, bool set) {
  if (id->acl_step <= STEP_IDENTITIES) return set ? "setacl-parent" : "acl-parent";
  if (id->acl_step == STEP_RECORD) return set ? "setacl-record" : "acl-record";
  return set ? "setacl-owner" : "acl-owner";
}

static void acl_visit(struct zkw_identity *id);

static void acl_next(struct zkw_identity *id) {
  id->acl_step++;
  acl_visit(id);
}

static void acl_pass_done(struct zkw_identity *id) {
  id->acl_checking = false;
  id->parents_trusted = have_auth(id) && !id->acl_parent_open;
  ZKW_METRIC_SET(registry_world_readable, id->acl_readable ? 1 : 0);
  ZKW_METRIC_SET(registry_untrusted, id->record_why[0] ? 1 : 0);
  if (id->acl_exposed[0]) {
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
            "identity %s: registry node(s) %s had a world ACL (readable by anyone who can reach the "
            "ensemble): made creator-only for ZKWARDEN_REGISTRY_AUTH. %s",
            zkw_identity_name(id), id->acl_exposed, session);
    id->acl_warned = true;
  }
  /* A load after this pass's record step: judged by a pass of its own. */
  if (id->record_trust == ZKW_TRUST_PENDING && id->rec_loaded && !id->stopping) zkw_regacl_check(id);
}

static void acl_not_fixed(struct zkw_identity *id, int rc) {
  if (id->acl_step == STEP_RECORD || id->acl_step == STEP_OWNER) id->acl_readable = true;
  ZKW_METRIC_INC(registry_errors);
  if (!id->acl_fix_failed)
    zkw_log_error("identity %s: registry node %s can be changed by someone other than zkwarden's registry "
                  "identity and cannot be made creator-only (zkwarden-only): %s; until an operator restricts "
                  "it (setAcl: ZKWARDEN_REGISTRY_AUTH's digest id alone), %s",
                  zkw_identity_name(id), acl_node(id), zkw_zk_error(rc),
                  id->acl_step <= STEP_RECORD
                      ? "the registry records under it are not trusted (nothing they name is deleted), and a "
                        "readable record's session password stays readable"
                      : "its owner claim can be removed by others");
  id->acl_fix_failed = true;
}

static void acl_set(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping) {
    id->acl_checking = false;
    return;
  }
  if (r->rc == ZOK) {
    /* Whatever was written under the ACL made restricted may be anyone's:
     * nothing read is trusted until this instance wrote the record again,
     * which it does at once. */
    id->rewrite_pending = true;
    id->dead_dirty = true;
    if (id->acl_readable_node && id->acl_step >= STEP_RECORD) {
      size_t n = strlen(id->acl_exposed);
      snprintf(id->acl_exposed + n, sizeof id->acl_exposed - n, "%s%s", n ? ", " : "", acl_node(id));
    } else {
      zkw_log_warn("identity %s: registry node %s could be changed by someone other than zkwarden's registry "
                   "identity (%s): made zkwarden-only%s",
                   zkw_identity_name(id), acl_node(id), id->acl_fix_why,
                   id->acl_step <= STEP_IDENTITIES ? ", so that no one else can delete a record under it and "
                                                     "create another"
                                                   : "");
    }
    if (id->on_trust) id->on_trust(id);
  } else {
    if (r->rc != ZNONODE && r->rc != ZBADVERSION)
      acl_not_fixed(id, r->rc); /* else the next pass looks again */
    if (id->acl_step <= STEP_IDENTITIES) id->acl_parent_open = true;
  }
  acl_next(id);
}

/* Makes the node of this step zkwarden-only (why: who else can change it);
 * false if that could not even be sent. */
static bool acl_fix(struct zkw_identity *id, const struct zkw_zk_result *r, const char *why) {
  snprintf(id->acl_fix_why, sizeof id->acl_fix_why, "%s", why);
  id->acl_readable_node = r->acl_world_read;
  /* Creator-only; once the ACL names zkwarden's digest id (so that is the
   * id the server computes for its credentials), that id alone: a creator
   * ACL made under TLS with a client certificate also names the
   * certificate's x509 id, which every session through the sidecar has. */
  int rc = zkw_zk_set_acl_creator(id->zk, acl_node(id), r->stat.aversion, r->acl_ours, acl_what(id, true),
                                  acl_set, id);
  if (rc == ZOK) return true;
  acl_not_fixed(id, rc);
  if (id->acl_step <= STEP_IDENTITIES) id->acl_parent_open = true;
  return false;
}

/* The record's dead sessions not seen ending here and not trusted before
 * are forgotten: anyone could have written them. Without credentials they
 * stay, carried on as read (nothing from the registry is trusted then, and
 * the lock report shows them). */
static void distrust_dead(struct zkw_identity *id, const char *why) {
  if (!have_auth(id)) return;
  int kept = 0, gone = 0;
  for (int i = 0; i < id->dead.ndead; i++) {
    const struct zkw_dead_session *d = &id->dead.dead_sessions[i];
    if (d->observed || d->trusted)
      id->dead.dead_sessions[kept++] = *d;
    else
      gone++;
  }
  id->dead.ndead = kept;
  if (!gone) return;
  id->dead_dirty = true;
  zkw_log_warn("identity %s: %d dead session(s) read from registry record %s are forgotten: the record is "
               "not trusted (%s), so anyone could have written them; their ephemerals are not deleted",
               zkw_identity_name(id), gone, id->node, why);
}

/* The verdict on the content loaded last (why: NULL when trusted). */
static void judge_load(struct zkw_identity *id, const char *why) {
  if (!why) {
    id->record_trust = ZKW_TRUST_TRUSTED;
    for (int i = 0; i < id->dead.ndead; i++)
      if (!id->dead.dead_sessions[i].observed && !id->dead.dead_sessions[i].trusted) {
        id->dead.dead_sessions[i].trusted = true;
        id->dead_dirty = true; /* held back from writes while not judged */
      }
    if (zkw_owntrees_judged(id, NULL)) id->scope_dirty = true;
  } else {
    id->record_trust = ZKW_TRUST_UNTRUSTED;
    ZKW_METRIC_INC(untrusted_records);
    distrust_dead(id, why);
    if (zkw_owntrees_judged(id, why)) id->scope_dirty = true;
  }
  if (id->on_trust) id->on_trust(id);
}

/* The record's step: the content loaded last is judged (its ACL as read
 * now, of the same node and ACL version, and the parents' in this pass), and
 * the record's state now is reported. */
static void record_acl(struct zkw_identity *id, const struct zkw_zk_result *r, const char *why) {
  const char *now = why ? why : id->acl_pass_why[0] ? id->acl_pass_why : NULL;
  bool judging = id->record_trust == ZKW_TRUST_PENDING && id->rec_loaded;
  if (judging && r->rc == ZOK) {
    if (now)
      judge_load(id, now);
    else if (!zkw_regtrust_same(&r->stat, &id->loaded_stat))
      judge_load(id, "its ACL changed, or the node was deleted and created again, while it was read");
    else if (id->loaded_before_rewrite)
      judge_load(id, "it was read after an ACL of the registry was made zkwarden-only, before zkwarden "
                     "wrote it again");
    else
      judge_load(id, NULL);
  } else if (judging) { /* ZNONODE */
    judge_load(id, "it was deleted after it was read");
  }
  if (!now && id->rewrite_pending)
    now = "not yet written by zkwarden since an ACL of the registry was made "
          "zkwarden-only";
  if (r->rc == ZNONODE && have_auth(id)) now = NULL; /* nothing there to distrust: zkwarden writes it */
  snprintf(id->record_why, sizeof id->record_why, "%s", now ? now : "");
  zkw_regtrust_say(zkw_identity_name(id), id->node, now);
}

static void acl_got(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping || (r->rc != ZOK && r->rc != ZNONODE)) {
    id->acl_checking = false; /* unknown this time: the next check asks again */
    return;
  }
  char buf[ZKW_REGTRUST_WHY_MAX];
  const char *why = zkw_regtrust_why(r, have_auth(id), buf, sizeof buf);
  if (id->acl_step <= STEP_IDENTITIES) {
    if (!why) return acl_next(id);
    if (r->rc == ZNONODE) { /* the claim creates it again */
      id->acl_parent_open = true;
      if (!id->acl_pass_why[0])
        snprintf(id->acl_pass_why, sizeof id->acl_pass_why, "the registry node %.300s is gone", acl_node(id));
      return acl_next(id);
    }
    if (!id->acl_pass_why[0])
      snprintf(id->acl_pass_why, sizeof id->acl_pass_why, "the registry node %.300s: %.199s", acl_node(id),
               why);
    if (!acl_fix(id, r, why)) acl_next(id);
    return;
  }
  if (id->acl_step == STEP_RECORD) record_acl(id, r, why);
  if (r->rc == ZOK && why && have_auth(id)) {
    if (acl_fix(id, r, why)) return;
  } else if (r->rc == ZOK && r->acl_world_read) {
    id->acl_readable = true;
  }
  acl_next(id);
}

static void acl_visit(struct zkw_identity *id) {
  if (id->acl_step >= STEP_DONE) return acl_pass_done(id);
  if (zkw_zk_get_acl(id->zk, acl_node(id), acl_what(id, false), acl_got, id) != ZOK) id->acl_checking = false;
}

void zkw_regacl_check(struct zkw_identity *id) {
  if (id->stopping || id->acl_checking || id->state != ZKW_REG_OWNER || !id->zk || !zkw_zk_connected(id->zk))
    return;
  id->acl_checking = true;
  /* Without credentials nothing is trusted and the parents stay as they
   * are: only the identity's own nodes are read (world-readable?). */
  id->acl_step = have_auth(id) ? STEP_ROOT : STEP_RECORD;
  id->acl_readable = false;
  id->acl_exposed[0] = 0;
  id->acl_pass_why[0] = 0;
  id->acl_parent_open = false;
  acl_visit(id);
}

void zkw_regacl_loaded(struct zkw_identity *id, const struct Stat *stat) {
  if (!stat) {
    id->record_trust = ZKW_TRUST_TRUSTED; /* nothing read: the content is this instance's */
    return;
  }
  id->record_trust = ZKW_TRUST_PENDING;
  id->loaded_stat = *stat;
  id->loaded_before_rewrite = id->rewrite_pending;
}
