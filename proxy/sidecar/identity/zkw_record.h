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
 *   dead_sessions=0x100000882350000:1:1764775200000,...
 *   tree=/flink/cluster-a
 *   dead=2
 *
 * `dead` is the highest incarnation known to be gone (fenced, expired or
 * closed). `dead_sessions` (absent when empty; records written before it
 * existed parse with an empty list) holds the last ZKW_RECORD_DEAD_MAX
 * sessions zkwarden saw end, oldest first, as session:incarnation:epoch-ms
 * (when zkwarden saw it end): an ephemeral still owned by one of them is a
 * zombie (zkw_reclaim.h), once proven dead (zkw_registry.h). `tree` (one line
 * per tree, none when empty) lists the identity's own trees (zkw_treeset.h):
 * what its sweep reads. Older versions ignore the lines they do not know.
 * The password lets its holder close the session, which is why the
 * node carries a digest ACL when ZKWARDEN_REGISTRY_AUTH is set. An empty
 * node is a record with incarnation 0. Pure functions: no I/O. */
#ifndef ZKW_RECORD_H
#define ZKW_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_treeset.h"

#define ZKW_RECORD_DEAD_MAX 8
/* Room for a formatted record: its fields, the dead list and every tree. */
#define ZKW_RECORD_TEXT_MAX (1024 + ZKW_TREESET_TREES_MAX * (ZKW_TREESET_PATH_MAX + 8))

/* A session zkwarden saw end (closed by a fence, or expired). */
struct zkw_dead_session {
  int64_t session;
  uint64_t incarnation;
  uint64_t ended_ms; /* epoch ms */
  bool observed;     /* seen ending by this process (not stored: a record's entries are not) */
  bool trusted;      /* read from a record only zkwarden could write (zkw_regtrust.h; not stored) */
};

struct zkw_record {
  uint64_t incarnation;
  int64_t session;
  uint8_t passwd[16];
  int32_t timeout;
  char instance[40];
  uint64_t dead;
  int ndead; /* dead_sessions: entries used, oldest first */
  struct zkw_dead_session dead_sessions[ZKW_RECORD_DEAD_MAX];
  struct zkw_treeset trees; /* the identity's own trees, as written (not checked against the lock roots) */
};

/* Adds a session to the record's dead list (kept once; the oldest entry
 * goes when the list is full). Returns true if the list changed. */
bool zkw_record_add_dead(struct zkw_record *r, const struct zkw_dead_session *d);
/* The dead-list entry of a session, or NULL. */
const struct zkw_dead_session *zkw_record_find_dead(const struct zkw_record *r, int64_t session);
/* Drops the entries that ended more than max_age_ms before now_ms (epoch
 * ms). Returns how many went. */
int zkw_record_age_dead(struct zkw_record *r, uint64_t now_ms, uint64_t max_age_ms);

/* Returns the length written, or -1 if cap is too small. */
int zkw_record_format(const struct zkw_record *r, char *out, size_t cap);
/* Returns 0, or -1 if data is not a well-formed record (len 0 gives the
 * empty record). */
int zkw_record_parse(const char *data, int len, struct zkw_record *r);

#endif
