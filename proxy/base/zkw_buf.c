/* zkw_buf.c: the chunk pool and buffer growth. */
#include "zkw_fault.h"
#include "zkw_buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Idle chunks kept for reuse; beyond this they go back to malloc. */
#define POOL_MAX 256

static void *pool[POOL_MAX];
static size_t pool_n;
static size_t held; /* capacity of the buffers in use (not the idle pool) */

static void *chunk_get(void) {
  return pool_n ? pool[--pool_n] : zkw_malloc(ZKW_BUF_CHUNK);
}

static void block_put(void *p, size_t cap) {
  if (cap == ZKW_BUF_CHUNK && pool_n < POOL_MAX)
    pool[pool_n++] = p;
  else
    free(p);
}

int zkw_buf_reserve(struct zkw_buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return 0;
  size_t need = b->len + extra;
  if (need < b->len) return -ENOMEM;
  size_t cap = ZKW_BUF_CHUNK;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) return -ENOMEM;
    cap *= 2;
  }
  uint8_t *p = cap == ZKW_BUF_CHUNK ? chunk_get() : zkw_malloc(cap);
  if (!p) return -ENOMEM;
  if (b->data) {
    memcpy(p, b->data, b->len);
    block_put(b->data, b->cap);
  }
  held += cap - b->cap;
  b->data = p;
  b->cap = cap;
  return 0;
}

int zkw_buf_append(struct zkw_buf *b, const void *p, size_t n) {
  int rc = zkw_buf_reserve(b, n);
  if (rc) return rc;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void zkw_buf_consume(struct zkw_buf *b, size_t n) {
  if (n >= b->len) {
    zkw_buf_release(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}

void zkw_buf_release(struct zkw_buf *b) {
  if (b->data) block_put(b->data, b->cap);
  held -= b->cap;
  b->data = NULL;
  b->len = b->cap = 0;
}

void zkw_buf_pool_drain(void) {
  while (pool_n)
    free(pool[--pool_n]);
}

size_t zkw_buf_pool_idle(void) {
  return pool_n;
}

size_t zkw_buf_held(void) {
  return held;
}
