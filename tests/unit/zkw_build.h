/* zkw_build.h: small big-endian frame builders for the unit tests.
 *
 * Fixtures are written field by field with these helpers, independently of
 * protocol/'s own writer, so that a bug in zkw_wr_* cannot hide itself by
 * producing the bytes the decoder expects. */
#ifndef ZKW_BUILD_H
#define ZKW_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLD_CAP 8192

struct bld {
  uint8_t b[BLD_CAP];
  size_t n;
};

static inline void b_init(struct bld *b) {
  b->n = 0;
}
static inline void b_u8(struct bld *b, uint8_t v) {
  if (b->n >= BLD_CAP) abort();
  b->b[b->n++] = v;
}
static inline void b_raw(struct bld *b, const void *p, size_t n) {
  if (b->n + n > BLD_CAP) abort();
  if (n) memcpy(b->b + b->n, p, n);
  b->n += n;
}
static inline void b_u32(struct bld *b, uint32_t u) {
  for (int s = 24; s >= 0; s -= 8)
    b_u8(b, (uint8_t)(u >> s));
}
static inline void b_i32(struct bld *b, int32_t v) {
  b_u32(b, (uint32_t)v);
}
static inline void b_i64(struct bld *b, int64_t v) {
  uint64_t u = (uint64_t)v;
  b_u32(b, (uint32_t)(u >> 32));
  b_u32(b, (uint32_t)u);
}
static inline void b_bool(struct bld *b, int v) {
  b_u8(b, (uint8_t)v);
}
/* ustring; NULL writes the null string (-1). */
static inline void b_str(struct bld *b, const char *s) {
  if (!s) {
    b_i32(b, -1);
    return;
  }
  size_t n = strlen(s);
  b_i32(b, (int32_t)n);
  b_raw(b, s, n);
}
static inline void b_buf(struct bld *b, const void *p, int32_t n) {
  b_i32(b, n);
  if (n > 0) b_raw(b, p, (size_t)n);
}
/* A Stat whose fields are derived from seed (see check_stat in the tests). */
static inline void b_stat(struct bld *b, int seed) {
  b_i64(b, 0x100000001LL + seed);           /* czxid */
  b_i64(b, 0x100000002LL + seed);           /* mzxid */
  b_i64(b, 1700000000000LL + seed);         /* ctime */
  b_i64(b, -1700000000001LL - seed);        /* mtime (negative to test sign) */
  b_i32(b, 3 + seed);                       /* version */
  b_i32(b, -1 - seed);                      /* cversion */
  b_i32(b, 7);                              /* aversion */
  b_i64(b, (int64_t)0x8000000000000000ULL); /* ephemeralOwner: INT64_MIN */
  b_i32(b, 5);                              /* dataLength */
  b_i32(b, 2 + seed);                       /* numChildren */
  b_i64(b, INT64_MAX - seed);               /* pzxid */
}
static inline void b_acl(struct bld *b, int32_t perms, const char *scheme, const char *id) {
  b_i32(b, perms);
  b_str(b, scheme);
  b_str(b, id);
}
/* Frames: b_frame() reserves the length, b_end() patches it. */
static inline void b_frame(struct bld *b) {
  b_init(b);
  b_i32(b, 0);
}
static inline void b_end(struct bld *b) {
  uint32_t n = (uint32_t)(b->n - 4);
  b->b[0] = (uint8_t)(n >> 24);
  b->b[1] = (uint8_t)(n >> 16);
  b->b[2] = (uint8_t)(n >> 8);
  b->b[3] = (uint8_t)n;
}
static inline void b_req(struct bld *b, int32_t xid, int32_t type) {
  b_frame(b);
  b_i32(b, xid);
  b_i32(b, type);
}
static inline void b_rep(struct bld *b, int32_t xid, int64_t zxid, int32_t err) {
  b_frame(b);
  b_i32(b, xid);
  b_i64(b, zxid);
  b_i32(b, err);
}
static inline void b_mhdr(struct bld *b, int32_t type, int done, int32_t err) {
  b_i32(b, type);
  b_bool(b, done);
  b_i32(b, err);
}
static inline void b_mend(struct bld *b) {
  b_mhdr(b, -1, 1, -1);
}

#endif
