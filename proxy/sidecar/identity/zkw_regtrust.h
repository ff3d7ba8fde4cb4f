/* zkw_regtrust.h: which registry nodes zkwarden trusts (zkw_regtrust.c).
 *
 * A record's content (its dead sessions, its trees, another identity's
 * incarnation) can make zkwarden delete. It is trusted only when no one but
 * zkwarden's registry identity (the digest id ZKWARDEN_REGISTRY_AUTH
 * authenticates as) can write it, delete it or change its ACL: its own ACL
 * names that identity with every permission and grants anyone else READ at
 * most, and so do the registry's parents (<root> and <root>/identities),
 * since whoever may create and delete there may delete the record and
 * create another. `world`, `ip`, another `digest` or `sasl` id, `x509`, all
 * count as someone else. Without ZKWARDEN_REGISTRY_AUTH nothing is trusted.
 * The verdict goes with the content it was read with: the ACL and the
 * content must be of the same node (czxid) under the same ACL (aversion).
 *
 * Used by the identity's own record (zkw_regacl.c), reclaim's reads of other
 * identities' records (zkw_reclaim.c) and the lock report (zkw_locks.c). A
 * leaf: it calls nothing of the identity. */
#ifndef ZKW_REGTRUST_H
#define ZKW_REGTRUST_H

#include <stdbool.h>
#include <stddef.h>

#include "zkw_zk_result.h"

/* What is known of a record's content read from the registry. */
enum zkw_trust {
  ZKW_TRUST_PENDING = 0, /* read, its ACL not judged yet: used for nothing */
  ZKW_TRUST_TRUSTED,
  ZKW_TRUST_UNTRUSTED,
};

#define ZKW_REGTRUST_NO_AUTH "ZKWARDEN_REGISTRY_AUTH is unset: anyone who can reach the ensemble may write it"
#define ZKW_REGTRUST_WHY_MAX 200

/* Why the node whose ACL r holds (a get_acl result of a session with
 * ZKWARDEN_REGISTRY_AUTH when have_auth) can be changed by someone other
 * than zkwarden's registry identity, written to buf; NULL when only that
 * identity can. */
const char *zkw_regtrust_why(const struct zkw_zk_result *r, bool have_auth, char *buf, size_t cap);
/* True when an ACL read (acl) and a content read (data) are of the same
 * node under the same ACL, so that the ACL's verdict holds for the content. */
bool zkw_regtrust_same(const struct Stat *acl, const struct Stat *data);
/* The sidecar's verdict on the record of identity (at node; why: NULL when
 * trusted), logged when it changed since the last one said for that
 * identity: at warn when it is not trusted, at info when trusted again. */
void zkw_regtrust_say(const char *identity, const char *node, const char *why);

#endif
