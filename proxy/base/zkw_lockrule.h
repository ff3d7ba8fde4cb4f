/* zkw_lockrule.h: which creates are Flink lock nodes, and the tag they get.
 *
 * The lock rule (docs/how-it-works.md: Identities, tags and reclaim): an
 * EPHEMERAL (flags exactly 1) create whose last path component is a
 * canonical UUID, under one of ZKWARDEN_LOCK_ROOTS. This
 * matches every Flink layout from 1.7 to 2.x (`<state>/<uuid>` and
 * `<state>/locks/<uuid>`) and none of Flink's leader or latch nodes (those
 * are `connection_info`, or EPHEMERAL_SEQUENTIAL with a `_c_` prefix).
 *
 * The tag wraps a lock's data in a one-line text header that operators can
 * read with zkCli `get`, followed by the JobManager's original bytes:
 *
 *   zkwarden-lock 1 identity=<id> incarnation=<n> session=0x<hex>\n<original>
 *
 * A null original is written `... null\n`. Pure functions: no I/O. */
#ifndef ZKW_LOCKRULE_H
#define ZKW_LOCKRULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_codec.h"
#include "zkw_wire.h"

#define ZKW_MAX_LOCK_ROOTS 16
#define ZKW_IDENTITY_MAX   128
#define ZKW_TAG_MAX        (64 + ZKW_IDENTITY_MAX)

struct zkw_lock_roots {
  int count;
  char root[ZKW_MAX_LOCK_ROOTS][256];
};

/* Parses "/flink,/other"; each root absolute, no trailing slash (except "/").
 * Returns 0 or -1 with a reason in why. */
int zkw_lock_roots_parse(struct zkw_lock_roots *out, const char *list, char *why, size_t whylen)
    __attribute__((warn_unused_result));
/* True if path is one of the roots or below one (component boundary). */
bool zkw_under_lock_roots(const struct zkw_lock_roots *roots, struct zkw_bytes path);
/* True if s is a canonical UUID: 8-4-4-4-12 hex digits (either case). */
bool zkw_is_uuid(const uint8_t *s, size_t n);
/* The last path component. */
struct zkw_bytes zkw_path_last(struct zkw_bytes path);
/* The lock rule for one create (opcode 1 or 15, or a multi sub-op). */
bool zkw_is_lock_create(const struct zkw_lock_roots *roots, int32_t type, int32_t flags,
                        struct zkw_bytes path);

/* The incarnation trigger (the one place that defines it): true if the
 * request creates an EPHEMERAL or EPHEMERAL_SEQUENTIAL node under one of the
 * lock roots, as create (1) or create2 (15), or as such a create inside a
 * multi (14). Only a JobManager does that: its leader latch
 * (`_c_<uuid>-latch-<seq>`), a leader's `connection_info`, its lock nodes.
 * The Flink CLI, TaskManagers, the operator, zkCli and monitoring read, or
 * write elsewhere: their sessions stay plain clients. */
bool zkw_acts_as_jobmanager(const struct zkw_lock_roots *roots, const struct zkw_request *req);

/* An identity: 1-128 of [A-Za-z0-9._-]. */
bool zkw_identity_valid(const char *id);

struct zkw_tag {
  char identity[ZKW_IDENTITY_MAX + 1];
  uint64_t incarnation;
  int64_t session_id;
  struct zkw_bytes original; /* points into the tagged data; len -1 = null */
};

/* Writes the tag of `original` into out (capacity cap); returns the tagged
 * length or -1 if it does not fit. */
long zkw_tag_write(uint8_t *out, size_t cap, const char *identity, uint64_t incarnation, int64_t session_id,
                   struct zkw_bytes original);
/* Parses tagged data. Returns 0 (tag filled) or -1 if data is not a
 * well-formed tag. */
int zkw_tag_parse(struct zkw_bytes data, struct zkw_tag *tag);

/* The staleness rule, shared by reclaim, sweeps and `zkwarden locks`: why a
 * lock node is not a stale lock, in the words every report uses, or NULL if
 * it is one. tag: the node's tag, NULL if it has none; owner: its
 * ephemeralOwner (0: not an ephemeral); asking_session: the session on whose
 * behalf the question is asked (0: none); current: the current incarnation
 * of the tag's identity from the registry (0: unknown). */
const char *zkw_lock_why_not_stale(const struct zkw_tag *tag, int64_t owner, int64_t asking_session,
                                   uint64_t current);

#endif
