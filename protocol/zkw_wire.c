/* zkw_wire.c: the jute primitives (int, long, bool, ustring/buffer, vector,
 * Stat, ACL, ClientInfo) over a bounded range, and the fixed-buffer writer.
 *
 * All bounds checks of the codec live here: every read first checks what is
 * left of the range, so no caller can read past a frame. Errors are sticky
 * (the first one wins) and reads after an error return zero values. Loads
 * are byte-wise (no unaligned access) and signed values are converted from
 * their unsigned wire form, never shifted. */
#include "zkw_wire.h"

#include <string.h>

const char *zkw_strerror(int status) {
  switch (status) {
  case ZKW_OK:
    return "ok";
  case ZKW_AGAIN:
    return "incomplete frame";
  case ZKW_E_TRUNCATED:
    return "field runs past the end of the frame";
  case ZKW_E_LENGTH:
    return "bad string, buffer or vector length";
  case ZKW_E_FRAME_SHORT:
    return "frame too short";
  case ZKW_E_FRAME_LONG:
    return "frame too long";
  case ZKW_E_OPCODE:
    return "unknown or invalid opcode";
  case ZKW_E_MULTI:
    return "malformed multi";
  case ZKW_E_CONNECT:
    return "connect message of impossible size";
  case ZKW_E_NOSPACE:
    return "output buffer too small";
  case ZKW_E_VALUE:
    return "value not allowed by the protocol";
  default:
    return "unknown status";
  }
}

/* Two's complement conversion without implementation-defined behaviour. */
static int32_t to_i32(uint32_t u) {
  return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - (uint32_t)INT32_MAX - 1u) + INT32_MIN;
}
static int64_t to_i64(uint64_t u) {
  return u <= INT64_MAX ? (int64_t)u : (int64_t)(u - (uint64_t)INT64_MAX - 1u) + INT64_MIN;
}

/* Returns the next n bytes and advances, or NULL (and a sticky error). */
static const uint8_t *take(struct zkw_rd *r, size_t n) {
  static const uint8_t empty[1];
  if (r->err) return NULL;
  if (!r->p) {
    if (n) r->err = ZKW_E_TRUNCATED;
    return n ? NULL : empty;
  }
  if (r->len - r->off < n) {
    r->err = ZKW_E_TRUNCATED;
    return NULL;
  }
  const uint8_t *p = r->p + r->off;
  r->off += n;
  return p;
}

int32_t zkw_rd_int(struct zkw_rd *r) {
  const uint8_t *p = take(r, 4);
  return p ? to_i32(zkw_load_be32(p)) : 0;
}

int64_t zkw_rd_long(struct zkw_rd *r) {
  const uint8_t *p = take(r, 8);
  return p ? to_i64(zkw_load_be64(p)) : 0;
}

/* Java reads any non-zero byte as true; so do we. */
bool zkw_rd_bool(struct zkw_rd *r) {
  const uint8_t *p = take(r, 1);
  return p ? *p != 0 : false;
}

struct zkw_bytes zkw_rd_bytes(struct zkw_rd *r) {
  struct zkw_bytes b = {NULL, -1};
  int32_t len = zkw_rd_int(r);
  if (r->err) return b;
  if (len == -1) return b;
  if (len < -1) {
    zkw_rd_fail(r, ZKW_E_LENGTH);
    return b;
  }
  const uint8_t *p = take(r, (size_t)len);
  if (!p) return b;
  b.p = p;
  b.len = len;
  return b;
}

struct zkw_vec zkw_rd_vec(struct zkw_rd *r, void (*skip)(struct zkw_rd *), size_t min_elem) {
  struct zkw_vec v = {-1, NULL, 0};
  int32_t count = zkw_rd_int(r);
  if (r->err || count == -1) return v;
  size_t left = r->len - r->off;
  if (count < -1 || (min_elem && (size_t)count > left / min_elem)) {
    zkw_rd_fail(r, ZKW_E_LENGTH);
    return v;
  }
  size_t start = r->off;
  for (int32_t i = 0; i < count && !r->err; i++)
    skip(r);
  if (r->err) return v;
  v.count = count;
  v.p = r->p + start;
  v.len = r->off - start;
  return v;
}

void zkw_rd_skip_string(struct zkw_rd *r) {
  (void)zkw_rd_bytes(r);
}
void zkw_rd_skip_acl(struct zkw_rd *r) {
  (void)zkw_rd_acl(r);
}
void zkw_rd_skip_client_info(struct zkw_rd *r) {
  (void)zkw_rd_client_info(r);
}
void zkw_rd_skip(struct zkw_rd *r, size_t n) {
  (void)take(r, n);
}

struct zkw_bytes zkw_vec_string_at(struct zkw_rd *it) {
  return zkw_rd_bytes(it);
}

struct zkw_acl zkw_rd_acl(struct zkw_rd *r) {
  struct zkw_acl a;
  a.perms = zkw_rd_int(r);
  a.scheme = zkw_rd_bytes(r);
  a.id = zkw_rd_bytes(r);
  return a;
}

struct zkw_client_info zkw_rd_client_info(struct zkw_rd *r) {
  struct zkw_client_info c;
  c.auth_scheme = zkw_rd_bytes(r);
  c.user = zkw_rd_bytes(r);
  return c;
}

struct zkw_stat zkw_rd_stat(struct zkw_rd *r) {
  struct zkw_stat s;
  memset(&s, 0, sizeof s);
  if (r->err) return s;
  if (r->len - r->off < ZKW_STAT_SIZE) {
    r->err = ZKW_E_TRUNCATED;
    return s;
  }
  s.czxid = zkw_rd_long(r);
  s.mzxid = zkw_rd_long(r);
  s.ctime = zkw_rd_long(r);
  s.mtime = zkw_rd_long(r);
  s.version = zkw_rd_int(r);
  s.cversion = zkw_rd_int(r);
  s.aversion = zkw_rd_int(r);
  s.ephemeral_owner = zkw_rd_long(r);
  s.data_length = zkw_rd_int(r);
  s.num_children = zkw_rd_int(r);
  s.pzxid = zkw_rd_long(r);
  return s;
}

/* Reserves n bytes of output, or NULL (and a sticky ZKW_E_NOSPACE). */
static uint8_t *reserve(struct zkw_wr *w, size_t n) {
  if (w->err) return NULL;
  if (w->cap - w->len < n) {
    w->err = ZKW_E_NOSPACE;
    return NULL;
  }
  uint8_t *p = w->p + w->len;
  w->len += n;
  return p;
}

void zkw_wr_int(struct zkw_wr *w, int32_t v) {
  uint8_t *p = reserve(w, 4);
  if (p) zkw_store_be32(p, (uint32_t)v);
}

void zkw_wr_long(struct zkw_wr *w, int64_t v) {
  uint8_t *p = reserve(w, 8);
  if (p) zkw_store_be64(p, (uint64_t)v);
}

void zkw_wr_bool(struct zkw_wr *w, bool v) {
  uint8_t *p = reserve(w, 1);
  if (p) *p = v ? 1 : 0;
}

void zkw_wr_bytes(struct zkw_wr *w, struct zkw_bytes b) {
  if (w->err) return;
  if (b.len < -1 || (b.len > 0 && !b.p)) {
    w->err = ZKW_E_VALUE;
    return;
  }
  zkw_wr_int(w, b.len);
  if (b.len > 0) zkw_wr_raw(w, b.p, (size_t)b.len);
}

void zkw_wr_raw(struct zkw_wr *w, const void *p, size_t n) {
  if (w->err) return;
  if (!n) return;
  if (!p) {
    w->err = ZKW_E_VALUE;
    return;
  }
  uint8_t *dst = reserve(w, n);
  if (dst) memcpy(dst, p, n);
}

void zkw_wr_stat(struct zkw_wr *w, const struct zkw_stat *s) {
  zkw_wr_long(w, s->czxid);
  zkw_wr_long(w, s->mzxid);
  zkw_wr_long(w, s->ctime);
  zkw_wr_long(w, s->mtime);
  zkw_wr_int(w, s->version);
  zkw_wr_int(w, s->cversion);
  zkw_wr_int(w, s->aversion);
  zkw_wr_long(w, s->ephemeral_owner);
  zkw_wr_int(w, s->data_length);
  zkw_wr_int(w, s->num_children);
  zkw_wr_long(w, s->pzxid);
}
