/* zkw_pending.c: the ring of outstanding requests and reply matching. */
#include "zkw_fault.h"
#include "zkw_pending.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_ops.h"

void zkw_pending_init(struct zkw_pending *p) {
  p->ring = p->inline_ring;
  p->cap = ZKW_PENDING_INLINE;
  p->head = p->count = 0;
  p->now = p->last_t0 = 0;
  p->last_owned = NULL;
  p->last_flags = 0;
}

void zkw_pending_free(struct zkw_pending *p) {
  if (p->ring != p->inline_ring) free(p->ring);
  zkw_pending_init(p);
}

struct zkw_pending_entry zkw_pending_at(const struct zkw_pending *p, uint32_t i) {
  return p->ring[(p->head + i) & (p->cap - 1)];
}

static int push(struct zkw_pending *p, struct zkw_pending_entry e) {
  if (p->count == p->cap) {
    if (p->cap >= (1u << 30)) return -ENOMEM;
    struct zkw_pending_entry *n = zkw_malloc(sizeof *n * p->cap * 2);
    if (!n) return -ENOMEM;
    for (uint32_t i = 0; i < p->count; i++)
      n[i] = zkw_pending_at(p, i);
    if (p->ring != p->inline_ring) free(p->ring);
    p->ring = n;
    p->cap *= 2;
    p->head = 0;
  }
  p->ring[(p->head + p->count) & (p->cap - 1)] = e;
  p->count++;
  return 0;
}

int zkw_pending_push_owned(struct zkw_pending *p, int32_t xid, int32_t op, void *owned) {
  return push(p, (struct zkw_pending_entry){xid, op, p->now, owned, 0});
}

int zkw_pending_push_flags(struct zkw_pending *p, int32_t xid, int32_t op, uint8_t flags) {
  return push(p, (struct zkw_pending_entry){xid, op, p->now, NULL, flags});
}

int zkw_pending_push(struct zkw_pending *p, int32_t xid, int32_t op) {
  return zkw_pending_push_flags(p, xid, op, 0);
}

bool zkw_pending_has(const struct zkw_pending *p, int32_t xid, int32_t op, bool op_only) {
  for (uint32_t i = 0; i < p->count; i++) {
    struct zkw_pending_entry e = zkw_pending_at(p, i);
    if (op_only ? e.op == op : e.xid == xid) return true;
  }
  return false;
}

int zkw_pending_match(struct zkw_pending *p, int32_t xid, int32_t *op, int32_t *expected) {
  *expected = p->count ? zkw_pending_at(p, 0).xid : 0;
  for (uint32_t i = 0; i < p->count; i++) {
    struct zkw_pending_entry e = zkw_pending_at(p, i);
    if (e.xid != xid) continue;
    if (i > 0 && e.op != ZKW_OP_AUTH && e.op != ZKW_OP_SASL) return -1;
    *op = e.op;
    p->last_t0 = e.t0;
    p->last_owned = e.owned;
    p->last_flags = e.flags;
    /* Close the gap: shift the i entries before it one step towards the tail. */
    for (uint32_t j = i; j > 0; j--)
      p->ring[(p->head + j) & (p->cap - 1)] = p->ring[(p->head + j - 1) & (p->cap - 1)];
    p->head = (p->head + 1) & (p->cap - 1);
    p->count--;
    return 0;
  }
  return -1;
}
