/* zkw_regacl.h: the registry's ACLs and the trust in the record
 * (zkw_regacl.c, the rule: zkw_regtrust.h). */
#ifndef ZKW_REGACL_H
#define ZKW_REGACL_H

#include "zkw_identity.h"

/* One pass over the registry root, identities, the identity's record and
 * owner node: with ZKWARDEN_REGISTRY_AUTH each is made zkwarden-only if
 * anyone else can change it (a world ACL left by a sidecar that ran without
 * credentials, an `ip` or another user's entry), a world-readable one is
 * reported (zkwarden_registry_world_readable), and the record loaded last
 * gets its verdict (id->record_trust). At most one pass at a time; a load
 * judged by none is judged by a pass right after. */
void zkw_regacl_check(struct zkw_identity *id);
/* The record was read (stat: as read; NULL when nothing was, or this
 * instance's own copy is written back): its content is used for nothing
 * (dead sessions, trees) until a pass judges it. */
void zkw_regacl_loaded(struct zkw_identity *id, const struct Stat *stat);

#endif
