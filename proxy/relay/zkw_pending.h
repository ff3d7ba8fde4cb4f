/* zkw_pending.h: the requests of one session that await their reply, in order.
 *
 * ZooKeeper answers a connection's requests in the order it received them,
 * and the Java and C clients check it. Every forwarded request that gets an
 * ordered reply (positive xids and setWatches' -8) is pushed here; every reply
 * must match the oldest entry. Auth (100) and SASL (102) are answered from the
 * server's network thread and may overtake: their entries may be matched out
 * of order. Pings (-2) and auth with xid -4 are counted by the session, not
 * queued, since their replies carry fixed xids. A small ring lives inside the
 * struct; it grows on the heap only for deep pipelines.
 *
 * An entry may be *owned*: a request zkwarden wrote itself on the session's
 * upstream connection (zkw_inband.h). It is matched by position like any
 * other; the match reports its owner so that the reply goes to zkwarden and
 * never to the client. A client's entry carries flags: the policy's mark (a
 * request whose reply the policy rewrites, however many such requests are in
 * flight), a kept request, a barrier, a barrier's replay (zkw_replies.h). */
#ifndef ZKW_PENDING_H
#define ZKW_PENDING_H

#include <stdbool.h>
#include <stdint.h>

struct zkw_pending_entry {
  int32_t xid;
  int32_t op;
  uint64_t t0;   /* when the request was read (ns, uv_hrtime), for latency metrics */
  void *owned;   /* NULL: the client's request; else zkwarden's own (zkw_inband) */
  uint8_t flags; /* ZKW_PENDING_* */
};

/* A client request's flags: the policy marked it (ZKW_MARK, zkw_hooks.h:
 * its reply is told so); its copy is kept (ZKW_KEEP, zkw_replies.h); it is a
 * barrier (ZKW_BARRIER, kept too); it is a barrier's replay. */
#define ZKW_PENDING_MARK    1u
#define ZKW_PENDING_BARRIER 2u
#define ZKW_PENDING_REPLAY  4u
#define ZKW_PENDING_KEPT    8u

#define ZKW_PENDING_INLINE 8

struct zkw_pending {
  struct zkw_pending_entry *ring;
  uint32_t cap; /* power of two */
  uint32_t head;
  uint32_t count;
  uint64_t now;       /* t0 given to entries pushed: the session stamps it once per read batch */
  uint64_t last_t0;   /* t0 of the entry the last successful zkw_pending_match removed */
  void *last_owned;   /* and its owner (NULL for the client's requests) */
  uint8_t last_flags; /* and its flags */
  struct zkw_pending_entry inline_ring[ZKW_PENDING_INLINE];
};

void zkw_pending_init(struct zkw_pending *p);
void zkw_pending_free(struct zkw_pending *p);
int zkw_pending_push(struct zkw_pending *p, int32_t xid, int32_t op) __attribute__((warn_unused_result));
/* Pushes a client request with its flags (ZKW_PENDING_*). */
int zkw_pending_push_flags(struct zkw_pending *p, int32_t xid, int32_t op, uint8_t flags)
    __attribute__((warn_unused_result));
/* Pushes a request of zkwarden's own (owned != NULL). */
int zkw_pending_push_owned(struct zkw_pending *p, int32_t xid, int32_t op, void *owned)
    __attribute__((warn_unused_result));
/* True if an entry has this xid, or this opcode (op_only: xid ignored). */
bool zkw_pending_has(const struct zkw_pending *p, int32_t xid, int32_t op, bool op_only);
/* Matches a reply's xid. Returns 0 and the request's opcode in *op, having
 * removed the entry; -1 if the xid is not the oldest entry's nor that of an
 * auth/SASL request that may overtake. *expected gets the oldest xid (or 0). */
int zkw_pending_match(struct zkw_pending *p, int32_t xid, int32_t *op, int32_t *expected)
    __attribute__((warn_unused_result));
/* The i-th oldest entry (0 = oldest); i < count. */
struct zkw_pending_entry zkw_pending_at(const struct zkw_pending *p, uint32_t i);

#endif
