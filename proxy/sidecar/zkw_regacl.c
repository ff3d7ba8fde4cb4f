/* zkw_regacl.c: the registry's ACLs. The identity's record and owner node
 * are made creator-only when ZKWARDEN_REGISTRY_AUTH is set; a world ACL
 * left from a sidecar that ran without credentials is reported (at start
 * and at each owner's check). A leaf under zkw_registry.c. */
#include "zkw_regacl.h"

#include <inttypes.h>
#include <string.h>

#include "zkw_idtrees.h"
#include "zkw_log.h"
#include "zkw_metrics.h"

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
          zkw_identity_name(id), id->acl_exposed, session);
  id->acl_warned = true;
}

static void acl_not_fixed(struct zkw_identity *id, int rc) {
  id->acl_readable = true;
  ZKW_METRIC_INC(registry_errors);
  if (!id->acl_fix_failed)
    zkw_log_error("identity %s: registry node %s has a world ACL and cannot be made creator-only: %s; its "
                  "session password stays readable by anyone who can reach the ensemble until an operator "
                  "restricts it (setAcl)",
                  zkw_identity_name(id), acl_node(id), zkw_zk_error(rc));
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

/* The record node had a world ACL although credentials are set (written
 * before they were): the dead sessions read from it, not seen ending by
 * this process, are forgotten (anyone could have written them), so that
 * no write carries them on. */
static void distrust_record(struct zkw_identity *id) {
  int kept = 0, gone = 0;
  for (int i = 0; i < id->dead.ndead; i++) {
    if (id->dead.dead_sessions[i].observed)
      id->dead.dead_sessions[kept++] = id->dead.dead_sessions[i];
    else
      gone++;
  }
  id->dead.ndead = kept;
  if (!gone) return;
  id->dead_dirty = true;
  zkw_log_warn("identity %s: %d dead session(s) read from registry record %s, which had a world ACL (anyone "
               "could have written them), are forgotten: their ephemerals are not deleted",
               zkw_identity_name(id), gone, id->node);
}

static void acl_got(void *arg, const struct zkw_zk_result *r) {
  struct zkw_identity *id = arg;
  if (id->stopping || (r->rc != ZOK && r->rc != ZNONODE)) {
    id->acl_checking = false; /* unknown this time: the next check asks again */
    return;
  }
  if (id->acl_step == 0) {
    /* The record: dead sessions read from it count only while it is
     * creator-only; those read while anyone could write it are forgotten. */
    id->record_restricted = id->srv->cfg->registry_auth[0] && (r->rc == ZNONODE || !r->acl_world);
    if (r->rc == ZOK && r->acl_world && id->srv->cfg->registry_auth[0]) distrust_record(id);
    if (zkw_idtrees_distrust(id)) id->scope_dirty = true; /* not creator-only: its trees are not read */
    if (r->rc == ZNONODE && zkw_idtrees_forget_record(id))
      id->scope_dirty = true; /* the record read is gone: whoever wrote it, its trees are not read */
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

void zkw_regacl_check(struct zkw_identity *id) {
  if (id->stopping || id->acl_checking || id->state != ZKW_REG_OWNER || !id->zk || !zkw_zk_connected(id->zk))
    return;
  id->acl_checking = true;
  id->acl_step = 0;
  id->acl_readable = false;
  id->acl_exposed[0] = 0;
  acl_visit(id);
}
