/* zkw_regtrust.c: the registry's trust rule (zkw_regtrust.h): the verdict
 * on one ACL, and the report of the verdicts on records, said once per
 * change. */
#include "zkw_regtrust.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zkw_lockrule.h"
#include "zkw_log.h"

/* Permissions as zkCli prints them. */
static void perms_text(int perms, char out[6]) {
  int n = 0;
  if (perms & ZOO_PERM_CREATE) out[n++] = 'c';
  if (perms & ZOO_PERM_DELETE) out[n++] = 'd';
  if (perms & ZOO_PERM_READ) out[n++] = 'r';
  if (perms & ZOO_PERM_WRITE) out[n++] = 'w';
  if (perms & ZOO_PERM_ADMIN) out[n++] = 'a';
  out[n] = 0;
}

const char *zkw_regtrust_why(const struct zkw_zk_result *r, bool have_auth, char *buf, size_t cap) {
  if (!have_auth) return ZKW_REGTRUST_NO_AUTH;
  if (r->rc == ZNONODE) return "it is gone";
  if (r->rc != ZOK) {
    snprintf(buf, cap, "its ACL cannot be read: %s", zerror(r->rc));
    return buf;
  }
  if (r->acl_others & ~ZOO_PERM_READ) {
    char perms[6];
    perms_text(r->acl_others & ~ZOO_PERM_READ, perms);
    snprintf(buf, cap, "%s may change it (its ACL grants others %s)", r->acl_other, perms);
    return buf;
  }
  if (!r->acl_ours) return "its ACL does not give zkwarden's registry identity every permission";
  return NULL;
}

bool zkw_regtrust_same(const struct Stat *acl, const struct Stat *data) {
  return acl->czxid == data->czxid && acl->aversion == data->aversion;
}

/* The last verdict said per identity (a ring: an identity that falls out
 * is said again when next read, once). */
#define SAID_MAX 64
static struct {
  char identity[ZKW_IDENTITY_MAX + 1];
  uint32_t why; /* a hash of the reason; 0: trusted */
} said[SAID_MAX];
static unsigned said_next;

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; s && *s; s++)
    h = (h ^ (uint8_t)*s) * 16777619u;
  return h ? h : 1;
}

void zkw_regtrust_say(const char *identity, const char *node, const char *why) {
  uint32_t h = why ? hash(why) : 0;
  int k = -1;
  for (int i = 0; i < SAID_MAX && k < 0; i++)
    if (said[i].identity[0] && strcmp(said[i].identity, identity) == 0) k = i;
  if (k >= 0 && said[k].why == h) return;
  if (k < 0 && !why) return; /* trusted, and never said otherwise */
  if (k < 0) {
    k = (int)(said_next++ % SAID_MAX);
    snprintf(said[k].identity, sizeof said[k].identity, "%s", identity);
  }
  said[k].why = h;
  if (why)
    zkw_log_warn("registry record %s of identity %s is not trusted: %s; nothing it names (dead sessions, "
                 "trees, an incarnation that makes a lock stale) is deleted",
                 node, identity, why);
  else
    zkw_log_info("registry record %s of identity %s is trusted again: only zkwarden's registry identity can "
                 "change it",
                 node, identity);
}
