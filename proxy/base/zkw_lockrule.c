/* zkw_lockrule.c: the lock rule, lock roots, identities, the lock tag and
 * the staleness rule. */
#include "zkw_lockrule.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_ops.h"

#define TAG_MAGIC "zkwarden-lock 1 "

int zkw_lock_roots_parse(struct zkw_lock_roots *out, const char *list, char *why, size_t whylen) {
  out->count = 0;
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (out->count == ZKW_MAX_LOCK_ROOTS) {
      snprintf(why, whylen, "at most %d lock roots", ZKW_MAX_LOCK_ROOTS);
      return -1;
    }
    if (n == 0 || p[0] != '/' || n >= sizeof out->root[0] || (n > 1 && p[n - 1] == '/') ||
        memchr(p, ' ', n)) {
      snprintf(why, whylen,
               "a comma-separated list of absolute znode paths without trailing '/', e.g. /flink");
      return -1;
    }
    memcpy(out->root[out->count], p, n);
    out->root[out->count][n] = 0;
    out->count++;
    if (!comma) return 0;
    p = comma + 1;
  }
}

bool zkw_under_lock_roots(const struct zkw_lock_roots *roots, struct zkw_bytes path) {
  if (path.len <= 0) return false;
  for (int i = 0; i < roots->count; i++) {
    size_t rl = strlen(roots->root[i]);
    if (rl == 1) return true; /* "/" */
    if ((size_t)path.len >= rl && memcmp(path.p, roots->root[i], rl) == 0 &&
        ((size_t)path.len == rl || path.p[rl] == '/'))
      return true;
  }
  return false;
}

bool zkw_is_uuid(const uint8_t *s, size_t n) {
  if (n != 36) return false;
  for (size_t i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!isxdigit(s[i])) {
      return false;
    }
  }
  return true;
}

struct zkw_bytes zkw_path_last(struct zkw_bytes path) {
  if (path.len <= 0) return path;
  int32_t i = path.len;
  while (i > 0 && path.p[i - 1] != '/')
    i--;
  return (struct zkw_bytes){path.p + i, path.len - i};
}

bool zkw_is_lock_create(const struct zkw_lock_roots *roots, int32_t type, int32_t flags,
                        struct zkw_bytes path) {
  if (type != ZKW_OP_CREATE && type != ZKW_OP_CREATE2) return false;
  if (flags != ZKW_CREATE_EPHEMERAL) return false;
  struct zkw_bytes last = zkw_path_last(path);
  return last.len == 36 && zkw_is_uuid(last.p, 36) && zkw_under_lock_roots(roots, path);
}

static bool ephemeral_under_roots(const struct zkw_lock_roots *roots, int32_t type, int32_t flags,
                                  struct zkw_bytes path) {
  if (type != ZKW_OP_CREATE && type != ZKW_OP_CREATE2) return false;
  if (flags != ZKW_CREATE_EPHEMERAL && flags != ZKW_CREATE_EPHEMERAL_SEQUENTIAL) return false;
  return zkw_under_lock_roots(roots, path);
}

bool zkw_acts_as_jobmanager(const struct zkw_lock_roots *roots, const struct zkw_request *req) {
  if (req->type != ZKW_OP_MULTI) return ephemeral_under_roots(roots, req->type, req->op.flags, req->op.path);
  struct zkw_multi_iter it = zkw_multi_iter(req->op.ops);
  struct zkw_op_req op;
  while (zkw_multi_next_req(&it, &op) == ZKW_OK)
    if (ephemeral_under_roots(roots, op.type, op.flags, op.path)) return true;
  return false;
}

bool zkw_identity_valid(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n > ZKW_IDENTITY_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)id[i]) && id[i] != '.' && id[i] != '_' && id[i] != '-') return false;
  return true;
}

long zkw_tag_write(uint8_t *out, size_t cap, const char *identity, uint64_t incarnation, int64_t session_id,
                   struct zkw_bytes original) {
  char head[ZKW_TAG_MAX + 16];
  int hl =
      snprintf(head, sizeof head, TAG_MAGIC "identity=%s incarnation=%" PRIu64 " session=0x%" PRIx64 "%s\n",
               identity, incarnation, (uint64_t)session_id, original.len < 0 ? " null" : "");
  if (hl < 0 || (size_t)hl >= sizeof head) return -1;
  size_t olen = original.len > 0 ? (size_t)original.len : 0;
  if ((size_t)hl + olen > cap) return -1;
  memcpy(out, head, (size_t)hl);
  if (olen) memcpy(out + hl, original.p, olen);
  return (long)((size_t)hl + olen);
}

/* Reads "key=" then digits in the given base up to the next ' ' or '\n'. */
static int parse_field(const char **p, const char *end, const char *key, int base, uint64_t *v) {
  size_t kl = strlen(key);
  if ((size_t)(end - *p) < kl || memcmp(*p, key, kl) != 0) return -1;
  *p += kl;
  if (base == 16) {
    if (end - *p < 2 || (*p)[0] != '0' || (*p)[1] != 'x') return -1;
    *p += 2;
  }
  uint64_t x = 0;
  int digits = 0;
  while (*p < end && **p != ' ' && **p != '\n') {
    int d;
    char c = **p;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return -1;
    if (x > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -1;
    x = x * (uint64_t)base + (uint64_t)d;
    (*p)++;
    if (++digits > 20) return -1;
  }
  if (!digits) return -1;
  *v = x;
  return 0;
}

int zkw_tag_parse(struct zkw_bytes data, struct zkw_tag *tag) {
  const size_t ml = sizeof TAG_MAGIC - 1;
  if (data.len < (int32_t)ml || memcmp(data.p, TAG_MAGIC, ml) != 0) return -1;
  const uint8_t *nl = memchr(data.p, '\n', data.len < ZKW_TAG_MAX + 32 ? (size_t)data.len : ZKW_TAG_MAX + 32);
  if (!nl) return -1;
  const char *p = (const char *)data.p + ml, *end = (const char *)nl;
  if (end - p < 9 || memcmp(p, "identity=", 9) != 0) return -1;
  p += 9;
  const char *sp = memchr(p, ' ', (size_t)(end - p));
  if (!sp || sp == p || sp - p > ZKW_IDENTITY_MAX) return -1;
  memcpy(tag->identity, p, (size_t)(sp - p));
  tag->identity[sp - p] = 0;
  if (!zkw_identity_valid(tag->identity)) return -1;
  p = sp + 1;
  uint64_t sid;
  if (parse_field(&p, end, "incarnation=", 10, &tag->incarnation) != 0) return -1;
  if (p == end || *p++ != ' ') return -1;
  if (parse_field(&p, end, "session=", 16, &sid) != 0) return -1;
  tag->session_id = (int64_t)sid;
  bool null = false;
  if (p != end) {
    if (end - p != 5 || memcmp(p, " null", 5) != 0) return -1;
    null = true;
  }
  const uint8_t *body = nl + 1;
  int32_t blen = (int32_t)(data.p + data.len - body);
  if (null && blen != 0) return -1;
  tag->original = null ? (struct zkw_bytes){NULL, -1} : (struct zkw_bytes){body, blen};
  return 0;
}

const char *zkw_lock_why_not_stale(const struct zkw_tag *tag, int64_t owner, int64_t asking_session,
                                   uint64_t current) {
  if (!tag) return "not tagged by zkwarden";
  if (owner == 0) return "not an ephemeral";
  if (owner == asking_session) return "held by the asking session";
  if (current == 0) return "its identity's current incarnation is unknown";
  if (tag->incarnation >= current) return "held by its identity's current incarnation";
  return NULL;
}
