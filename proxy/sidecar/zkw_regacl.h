/* zkw_regacl.h: the registry's ACLs (zkw_regacl.c). */
#ifndef ZKW_REGACL_H
#define ZKW_REGACL_H

#include "zkw_idstate.h"

/* One pass over the identity's record and owner node: a world ACL is made
 * creator-only when ZKWARDEN_REGISTRY_AUTH is set, else reported
 * (zkwarden_registry_world_readable). At most one pass at a time. */
void zkw_regacl_check(struct zkw_identity *id);

#endif
