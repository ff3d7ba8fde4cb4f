/* zkw_history.c: the ring of recent reclaim actions and its JSON view. */
#include "zkw_history.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "zkw_text.h"

static struct zkw_history_entry ring[ZKW_HISTORY_SIZE];
static uint64_t total; /* entries ever added; the next goes to ring[total % SIZE] */

static const char *const kind_names[ZKW_HISTORY_KIND_COUNT] = {
#define ZKW_X_HKIND(name, str) str,
    ZKW_HISTORY_KINDS(ZKW_X_HKIND)
#undef ZKW_X_HKIND
};

const char *zkw_history_kind_name(enum zkw_history_kind kind) {
  return (unsigned)kind < ZKW_HISTORY_KIND_COUNT ? kind_names[kind] : "unknown";
}

/* Copies s into dst[cap], cutting at a UTF-8 boundary. */
static void copy_text(char *dst, size_t cap, const char *s) {
  size_t n = s ? strnlen(s, cap - 1) : 0;
  if (s && n == cap - 1 && s[n] != 0) {
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
      n--;
  }
  if (n) memcpy(dst, s, n);
  dst[n] = 0;
}

void zkw_history_add(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                     const char *identity, uint64_t incarnation) {
  struct zkw_history_entry *e = &ring[total % ZKW_HISTORY_SIZE];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  e->time_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  e->kind = kind;
  e->session_id = session_id;
  e->incarnation = incarnation;
  copy_text(e->path, sizeof e->path, path);
  copy_text(e->reason, sizeof e->reason, reason);
  copy_text(e->identity, sizeof e->identity, identity);
  total++;
}

uint64_t zkw_history_total(void) {
  return total;
}

const struct zkw_history_entry *zkw_history_newest(unsigned i) {
  uint64_t held = total < ZKW_HISTORY_SIZE ? total : ZKW_HISTORY_SIZE;
  return i < held ? &ring[(total - 1 - i) % ZKW_HISTORY_SIZE] : NULL;
}

void zkw_history_time(const struct zkw_history_entry *e, char *out, size_t cap) {
  time_t sec = (time_t)(e->time_ms / 1000);
  struct tm tm;
  gmtime_r(&sec, &tm);
  size_t tl = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + tl, cap - tl, ".%03dZ", (int)(e->time_ms % 1000));
}

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

int zkw_history_render_json(struct zkw_buf *out, unsigned limit) {
  uint64_t held = total < ZKW_HISTORY_SIZE ? total : ZKW_HISTORY_SIZE;
  if (limit < held) held = limit;
  TRY(zkw_text_printf(out, "{\"capacity\":%d,\"total\":%llu,\"reclaims\":[", ZKW_HISTORY_SIZE,
                      (unsigned long long)total));
  for (uint64_t i = 0; i < held; i++) {
    const struct zkw_history_entry *e = zkw_history_newest((unsigned)i);
    char ts[40];
    zkw_history_time(e, ts, sizeof ts);
    TRY(zkw_text_printf(out, "%s{\"time\":\"%s\",\"time_ms\":%lld,\"kind\":\"%s\",\"path\":", i ? "," : "",
                        ts, (long long)e->time_ms, zkw_history_kind_name(e->kind)));
    TRY(zkw_text_json_string(out, e->path, sizeof e->path));
    TRY(zkw_text_printf(out, ",\"reason\":"));
    TRY(zkw_text_json_string(out, e->reason, sizeof e->reason));
    TRY(zkw_text_printf(out, ",\"session\":\"0x%llx\",\"identity\":", (unsigned long long)e->session_id));
    TRY(zkw_text_json_string(out, e->identity, sizeof e->identity));
    TRY(zkw_text_printf(out, ",\"incarnation\":%llu}", (unsigned long long)e->incarnation));
  }
  TRY(zkw_text_printf(out, "]}\n"));
  return 0;
}
