/* zkw_buf.h: byte buffers for socket I/O, backed by a pool of fixed chunks.
 *
 * A session holds buffer memory only while bytes are in it: an empty buffer
 * is released, and chunk-sized blocks go back to a small free list instead of
 * to malloc, so relaying frames does not allocate per frame and idle sessions
 * cost no buffer memory. Buffers larger than a chunk (big frames) are plain
 * heap blocks, freed when they empty. Single-threaded: the libuv loop only. */
#ifndef ZKW_BUF_H
#define ZKW_BUF_H

#include <stddef.h>
#include <stdint.h>

#define ZKW_BUF_CHUNK (16 * 1024)

struct zkw_buf {
  uint8_t *data;
  size_t len; /* bytes held, from data[0] */
  size_t cap;
};

/* Makes room for at least `extra` more bytes. Returns 0 or -ENOMEM. */
int zkw_buf_reserve(struct zkw_buf *b, size_t extra) __attribute__((warn_unused_result));
int zkw_buf_append(struct zkw_buf *b, const void *p, size_t n) __attribute__((warn_unused_result));
/* Drops the first n bytes; releases the memory when the buffer empties. */
void zkw_buf_consume(struct zkw_buf *b, size_t n);
/* Gives the memory back (to the pool if it is a chunk). */
void zkw_buf_release(struct zkw_buf *b);
/* Frees the pool's idle chunks (at exit, for leak checkers). */
void zkw_buf_pool_drain(void);
/* Chunks currently idle in the pool. */
size_t zkw_buf_pool_idle(void);
/* Bytes of the buffers in use (their capacity), all of them together. */
size_t zkw_buf_held(void);

#endif
