/* zkw_wire.h: jute primitives over a bounded byte range.
 *
 * The reader never reads past the range it was given: a field that would
 * cross the end, a length below -1 or above the range, or a negative vector
 * count sets a sticky error, and every later read returns zero values. The
 * caller checks zkw_rd_status() once at the end. The writer appends to a
 * caller-owned fixed buffer the same way and never allocates. */
#ifndef ZKW_WIRE_H
#define ZKW_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Status codes of the codec. 0 is success, ZKW_AGAIN asks for more bytes,
 * negative values are errors; zkw_strerror names them. */
enum zkw_status {
  ZKW_OK = 0,
  ZKW_AGAIN = 1,            /* frame incomplete: read more */
  ZKW_E_TRUNCATED = -1,     /* a field runs past the end of its frame */
  ZKW_E_LENGTH = -2,        /* negative or oversized string/buffer length or count */
  ZKW_E_FRAME_SHORT = -3,   /* frame length below the minimum for its direction */
  ZKW_E_FRAME_LONG = -4,    /* frame length above the configured cap */
  ZKW_E_OPCODE = -5,        /* opcode unknown or not valid from a client */
  ZKW_E_MULTI = -6,         /* multi without end marker, bad or mixed sub-op */
  ZKW_E_CONNECT = -7,       /* ConnectRequest/Response of impossible size */
  ZKW_E_NOSPACE = -8,       /* encoder: output buffer too small */
  ZKW_E_VALUE = -9,         /* a field holds a value the protocol forbids */
};

const char *zkw_strerror(int status);

/* A string or buffer inside a frame. len -1 means null; p then is NULL. */
struct zkw_bytes {
  const uint8_t *p;
  int32_t len;
};

/* A vector inside a frame: its count and the bytes of its elements. */
struct zkw_vec {
  int32_t count; /* -1 = null vector */
  const uint8_t *p;
  size_t len;
};

struct zkw_rd {
  const uint8_t *p;
  size_t len;
  size_t off;
  int err;
};

static inline void zkw_rd_init(struct zkw_rd *r, const uint8_t *p, size_t len) {
  r->p = p;
  r->len = len;
  r->off = 0;
  r->err = ZKW_OK;
}

static inline size_t zkw_rd_left(const struct zkw_rd *r) { return r->err ? 0 : r->len - r->off; }
static inline int zkw_rd_status(const struct zkw_rd *r) { return r->err; }
static inline void zkw_rd_fail(struct zkw_rd *r, int err) {
  if (!r->err) r->err = err;
}

static inline uint32_t zkw_load_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t zkw_load_be64(const uint8_t *p) {
  return ((uint64_t)zkw_load_be32(p) << 32) | zkw_load_be32(p + 4);
}
static inline void zkw_store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static inline void zkw_store_be64(uint8_t *p, uint64_t v) {
  zkw_store_be32(p, (uint32_t)(v >> 32));
  zkw_store_be32(p + 4, (uint32_t)v);
}

int32_t zkw_rd_int(struct zkw_rd *r);
int64_t zkw_rd_long(struct zkw_rd *r);
bool zkw_rd_bool(struct zkw_rd *r);
struct zkw_bytes zkw_rd_bytes(struct zkw_rd *r); /* ustring and buffer alike */
/* Reads a vector count and skips its elements with skip(); fails on counts
 * that cannot fit in what is left (every element takes >= min_elem bytes). */
struct zkw_vec zkw_rd_vec(struct zkw_rd *r, void (*skip)(struct zkw_rd *), size_t min_elem);
void zkw_rd_skip_string(struct zkw_rd *r);
void zkw_rd_skip_acl(struct zkw_rd *r);
void zkw_rd_skip_client_info(struct zkw_rd *r);
void zkw_rd_skip(struct zkw_rd *r, size_t n);

/* Iterates the elements of a vector read above. */
struct zkw_bytes zkw_vec_string_at(struct zkw_rd *it); /* it over vec.p/len */

/* One ACL entry: {int perms, Id{scheme, id}}. */
struct zkw_acl {
  int32_t perms;
  struct zkw_bytes scheme;
  struct zkw_bytes id;
};
struct zkw_acl zkw_rd_acl(struct zkw_rd *r);

/* ClientInfo (whoAmI reply element). */
struct zkw_client_info {
  struct zkw_bytes auth_scheme;
  struct zkw_bytes user;
};
struct zkw_client_info zkw_rd_client_info(struct zkw_rd *r);

/* Stat: 68 bytes. */
struct zkw_stat {
  int64_t czxid, mzxid, ctime, mtime;
  int32_t version, cversion, aversion;
  int64_t ephemeral_owner;
  int32_t data_length, num_children;
  int64_t pzxid;
};
#define ZKW_STAT_SIZE 68
struct zkw_stat zkw_rd_stat(struct zkw_rd *r);

/* Writer over a fixed caller buffer; sticky ZKW_E_NOSPACE on overflow. */
struct zkw_wr {
  uint8_t *p;
  size_t cap;
  size_t len;
  int err;
};
static inline void zkw_wr_init(struct zkw_wr *w, uint8_t *p, size_t cap) {
  w->p = p;
  w->cap = cap;
  w->len = 0;
  w->err = ZKW_OK;
}
void zkw_wr_int(struct zkw_wr *w, int32_t v);
void zkw_wr_long(struct zkw_wr *w, int64_t v);
void zkw_wr_bool(struct zkw_wr *w, bool v);
void zkw_wr_bytes(struct zkw_wr *w, struct zkw_bytes b); /* len -1 writes null */
void zkw_wr_raw(struct zkw_wr *w, const void *p, size_t n);
void zkw_wr_stat(struct zkw_wr *w, const struct zkw_stat *s);

#endif
