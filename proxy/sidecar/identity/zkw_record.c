/* zkw_record.c: formatting and parsing the registry record. */
#include "zkw_record.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_MAGIC "zkwarden-registry 1\n"

int zkw_record_format(const struct zkw_record *r, char *out, size_t cap) {
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", r->passwd[i]);
  int n = snprintf(out, cap,
                   RECORD_MAGIC "incarnation=%" PRIu64 "\nsession=0x%" PRIx64 "\npasswd=%s\ntimeout=%" PRId32
                                "\ninstance=%s\n",
                   r->incarnation, (uint64_t)r->session, hex, r->timeout, r->instance);
  memset(hex, 0, sizeof hex);
  if (n < 0 || (size_t)n >= cap) return -1;
  size_t used = (size_t)n;
  for (int i = 0; i < r->ndead && i < ZKW_RECORD_DEAD_MAX; i++) {
    const struct zkw_dead_session *d = &r->dead_sessions[i];
    n = snprintf(out + used, cap - used, "%s0x%" PRIx64 ":%" PRIu64 ":%" PRIu64,
                 i ? "," : "dead_sessions=", (uint64_t)d->session, d->incarnation, d->ended_ms);
    if (n < 0 || (size_t)n >= cap - used) return -1;
    used += (size_t)n;
    if (i + 1 == r->ndead) {
      if (used + 1 >= cap) return -1;
      out[used++] = '\n';
      out[used] = 0;
    }
  }
  for (int i = 0; i < r->trees.count && i < ZKW_TREESET_TREES_MAX; i++) {
    n = snprintf(out + used, cap - used, "tree=%s\n", r->trees.tree[i]);
    if (n < 0 || (size_t)n >= cap - used) return -1;
    used += (size_t)n;
  }
  n = snprintf(out + used, cap - used, "dead=%" PRIu64 "\n", r->dead);
  if (n < 0 || (size_t)n >= cap - used) return -1;
  return (int)(used + (size_t)n);
}

bool zkw_record_add_dead(struct zkw_record *r, const struct zkw_dead_session *d) {
  if (d->session == 0 || zkw_record_find_dead(r, d->session)) return false;
  if (r->ndead == ZKW_RECORD_DEAD_MAX) {
    memmove(&r->dead_sessions[0], &r->dead_sessions[1],
            (ZKW_RECORD_DEAD_MAX - 1) * sizeof r->dead_sessions[0]);
    r->ndead--;
  }
  r->dead_sessions[r->ndead++] = *d;
  return true;
}

int zkw_record_age_dead(struct zkw_record *r, uint64_t now_ms, uint64_t max_age_ms) {
  int kept = 0, gone = 0;
  for (int i = 0; i < r->ndead; i++) {
    if (r->dead_sessions[i].ended_ms + max_age_ms < now_ms)
      gone++;
    else
      r->dead_sessions[kept++] = r->dead_sessions[i];
  }
  r->ndead = kept;
  return gone;
}

const struct zkw_dead_session *zkw_record_find_dead(const struct zkw_record *r, int64_t session) {
  for (int i = 0; i < r->ndead; i++)
    if (r->dead_sessions[i].session == session) return &r->dead_sessions[i];
  return NULL;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Parses an unsigned decimal, or hex after "0x"; the whole value. */
static int parse_u64(const char *v, size_t n, uint64_t *out) {
  int base = 10;
  if (n > 2 && v[0] == '0' && v[1] == 'x') base = 16, v += 2, n -= 2;
  if (n == 0 || n > 20) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    int d = hexval(v[i]);
    if (d < 0 || d >= base) return -1;
    if (x > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -1;
    x = x * (uint64_t)base + (uint64_t)d;
  }
  *out = x;
  return 0;
}

/* dead_sessions: session:incarnation:ms entries separated by commas. */
static int parse_dead_list(const char *v, size_t n, struct zkw_record *r) {
  r->ndead = 0;
  const char *end = v + n;
  while (v < end) {
    const char *comma = memchr(v, ',', (size_t)(end - v));
    const char *e = comma ? comma : end;
    const char *c1 = memchr(v, ':', (size_t)(e - v));
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(e - c1 - 1)) : NULL;
    uint64_t session;
    struct zkw_dead_session d;
    if (!c2 || parse_u64(v, (size_t)(c1 - v), &session) ||
        parse_u64(c1 + 1, (size_t)(c2 - c1 - 1), &d.incarnation) ||
        parse_u64(c2 + 1, (size_t)(e - c2 - 1), &d.ended_ms))
      return -1;
    d.session = (int64_t)session;
    d.observed = false;
    d.trusted = false;
    zkw_record_add_dead(r, &d); /* more than ZKW_RECORD_DEAD_MAX: the newest are kept */
    v = comma ? comma + 1 : end;
  }
  return 0;
}

int zkw_record_parse(const char *data, int len, struct zkw_record *r) {
  memset(r, 0, sizeof *r);
  if (len <= 0) return 0;
  const size_t ml = sizeof RECORD_MAGIC - 1;
  if ((size_t)len < ml || memcmp(data, RECORD_MAGIC, ml) != 0) return -1;
  const char *p = data + ml, *end = data + len;
  unsigned seen = 0;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return -1;
    const char *eq = memchr(p, '=', (size_t)(nl - p));
    if (!eq) return -1;
    size_t kl = (size_t)(eq - p), vl = (size_t)(nl - eq - 1);
    const char *v = eq + 1;
    uint64_t x;
#define KEY(name) (kl == sizeof(name) - 1 && memcmp(p, name, kl) == 0)
    if (KEY("incarnation")) {
      if (parse_u64(v, vl, &r->incarnation)) return -1;
      seen |= 1;
    } else if (KEY("session")) {
      if (parse_u64(v, vl, &x)) return -1;
      r->session = (int64_t)x;
      seen |= 2;
    } else if (KEY("passwd")) {
      if (vl != 32) return -1;
      for (int i = 0; i < 16; i++) {
        int hi = hexval(v[2 * i]), lo = hexval(v[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        r->passwd[i] = (uint8_t)(hi << 4 | lo);
      }
      seen |= 4;
    } else if (KEY("timeout")) {
      if (parse_u64(v, vl, &x) || x > INT32_MAX) return -1;
      r->timeout = (int32_t)x;
      seen |= 8;
    } else if (KEY("instance")) {
      if (vl >= sizeof r->instance) return -1;
      memcpy(r->instance, v, vl);
      r->instance[vl] = 0;
      seen |= 16;
    } else if (KEY("dead_sessions")) {
      if (parse_dead_list(v, vl, r)) return -1;
    } else if (KEY("tree")) {
      /* An absolute path without a trailing '/'; others, and those past the
       * bound, are ignored (the registry checks each against the lock roots). */
      if (vl > 0 && vl < ZKW_TREESET_PATH_MAX && v[0] == '/' && (vl == 1 || v[vl - 1] != '/') &&
          r->trees.count < ZKW_TREESET_TREES_MAX) {
        memcpy(r->trees.tree[r->trees.count], v, vl);
        r->trees.tree[r->trees.count++][vl] = 0;
      }
    } else if (KEY("dead")) {
      if (parse_u64(v, vl, &r->dead)) return -1;
      seen |= 32;
    } /* unknown keys: written by a newer version, ignored */
#undef KEY
    p = nl + 1;
  }
  return seen == 63 ? 0 : -1;
}
