/* zkw_record.h: the registry record of one identity, as stored in ZooKeeper
 * at <ZKWARDEN_REGISTRY_ROOT>/identities/<identity>.
 *
 * Text, one field per line, so operators can read it with zkCli `get`:
 *
 *   zkwarden-registry 1
 *   incarnation=3
 *   session=0x100000882350001
 *   passwd=<32 hex digits>
 *   timeout=20000
 *   instance=<uuid of the sidecar instance that recorded it>
 *   dead=2
 *
 * `dead` is the highest incarnation known to be gone (fenced, expired or
 * closed). The password lets its holder close the session, which is why the
 * node carries a digest ACL when ZKWARDEN_REGISTRY_AUTH is set. An empty
 * node is a record with incarnation 0. Pure functions: no I/O. */
#ifndef ZKW_RECORD_H
#define ZKW_RECORD_H

#include <stddef.h>
#include <stdint.h>

struct zkw_record {
  uint64_t incarnation;
  int64_t session;
  uint8_t passwd[16];
  int32_t timeout;
  char instance[40];
  uint64_t dead;
};

/* Returns the length written, or -1 if cap is too small. */
int zkw_record_format(const struct zkw_record *r, char *out, size_t cap);
/* Returns 0, or -1 if data is not a well-formed record (len 0 gives the
 * empty record). */
int zkw_record_parse(const char *data, int len, struct zkw_record *r);

#endif
