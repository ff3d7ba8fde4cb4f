/* zkw_history.c: the ring of recent actions, its JSON view, the
 * would-actions of observe mode and the audit file. */
#include "zkw_history.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zkw_log.h"
#include "zkw_text.h"

static struct zkw_history_entry ring[ZKW_HISTORY_SIZE];
static uint64_t total; /* entries ever added; the next goes to ring[total % SIZE] */
static uint64_t would_total;

static struct {
  int fd; /* -1: no audit file */
  char *path;
  bool failing; /* the last write failed (logged once per run of failures) */
} audit = {.fd = -1};

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

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

/* The fields of one entry after "time", as JSON members (no braces). */
static int render_fields(struct zkw_buf *out, const struct zkw_history_entry *e) {
  char ts[40];
  zkw_history_time(e, ts, sizeof ts);
  TRY(zkw_text_printf(
      out, "\"time\":\"%s\",\"time_ms\":%lld,\"kind\":\"%s\",\"done\":%s,\"would\":%s,\"path\":", ts,
      (long long)e->time_ms, zkw_history_kind_name(e->kind), e->done ? "true" : "false",
      e->would ? "true" : "false"));
  TRY(zkw_text_json_string(out, e->path, sizeof e->path));
  if (e->version >= 0)
    TRY(zkw_text_printf(out, ",\"version\":%d", (int)e->version));
  else
    TRY(zkw_text_printf(out, ",\"version\":null"));
  TRY(zkw_text_printf(out, ",\"reason\":"));
  TRY(zkw_text_json_string(out, e->reason, sizeof e->reason));
  TRY(zkw_text_printf(out, ",\"session\":\"0x%llx\",\"identity\":", (unsigned long long)e->session_id));
  TRY(zkw_text_json_string(out, e->identity, sizeof e->identity));
  TRY(zkw_text_printf(out, ",\"incarnation\":%llu", (unsigned long long)e->incarnation));
  return 0;
}

/* Appends the entry to the audit file as one line, in one write(2). */
static void audit_append(const struct zkw_history_entry *e) {
  if (audit.fd < 0) return;
  struct zkw_buf b = {0};
  int err = ENOMEM;
  if (zkw_text_printf(&b, "{") == 0 && render_fields(&b, e) == 0 && zkw_text_printf(&b, "}\n") == 0) {
    ssize_t n = write(audit.fd, b.data, b.len);
    err = n == (ssize_t)b.len ? 0 : n < 0 ? errno : EIO;
  }
  zkw_buf_release(&b);
  if (err) {
    ZKW_METRIC_INC(audit_write_failures);
    if (!audit.failing)
      zkw_log_error("ZKWARDEN_AUDIT_FILE %s: cannot append an action (%s %s): %s", audit.path,
                    zkw_history_kind_name(e->kind), e->path, strerror(err));
  } else if (audit.failing) {
    zkw_log_info("ZKWARDEN_AUDIT_FILE %s: appending again", audit.path);
  }
  audit.failing = err != 0;
}

static void add_entry(const struct zkw_action *a, bool done, bool would) {
  struct zkw_history_entry *e = &ring[total % ZKW_HISTORY_SIZE];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  e->time_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  e->kind = a->kind;
  e->session_id = a->session_id;
  e->incarnation = a->incarnation;
  e->version = a->version;
  e->done = done;
  e->would = would;
  copy_text(e->path, sizeof e->path, a->path);
  copy_text(e->reason, sizeof e->reason, a->reason);
  copy_text(e->identity, sizeof e->identity, a->identity);
  total++;
  audit_append(e);
}

void zkw_history_add(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                     const char *identity, uint64_t incarnation) {
  struct zkw_action a = {kind, path, -1, reason, session_id, identity, incarnation};
  add_entry(&a, true, false);
}

void zkw_history_failed(enum zkw_history_kind kind, const char *path, const char *reason, int64_t session_id,
                        const char *identity, uint64_t incarnation) {
  struct zkw_action a = {kind, path, -1, reason, session_id, identity, incarnation};
  add_entry(&a, false, false);
}

void zkw_history_record(const struct zkw_action *a) {
  add_entry(a, true, false);
}

void zkw_history_would(const struct zkw_action *a) {
  if ((unsigned)a->kind < ZKW_HISTORY_KIND_COUNT) zkw_metrics.would_actions[a->kind]++;
  would_total++;
  zkw_log_info("observe: would %s: path %s, session 0x%" PRIx64 ", identity %s, incarnation %" PRIu64
               ": %s (not done: ZKWARDEN_MODE=observe)",
               zkw_history_kind_name(a->kind), a->path && *a->path ? a->path : "-", (uint64_t)a->session_id,
               a->identity && *a->identity ? a->identity : "-", a->incarnation, a->reason ? a->reason : "");
  add_entry(a, false, true);
}

uint64_t zkw_history_would_total(void) {
  return would_total;
}

static int audit_open_fd(const char *path) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  return fd < 0 ? -errno : fd;
}

int zkw_history_audit_open(const char *path) {
  zkw_history_audit_close();
  if (!path || !*path) return 0;
  int fd = audit_open_fd(path);
  if (fd < 0) return fd;
  if (!(audit.path = strdup(path))) {
    close(fd);
    return -ENOMEM;
  }
  audit.fd = fd;
  audit.failing = false;
  return 0;
}

int zkw_history_audit_reopen(void) {
  if (audit.fd < 0) return 0;
  int fd = audit_open_fd(audit.path);
  if (fd < 0) return fd;
  close(audit.fd);
  audit.fd = fd;
  audit.failing = false;
  return 0;
}

void zkw_history_audit_close(void) {
  if (audit.fd >= 0) close(audit.fd);
  audit.fd = -1;
  free(audit.path);
  audit.path = NULL;
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

int zkw_history_render_json(struct zkw_buf *out, unsigned limit) {
  uint64_t held = total < ZKW_HISTORY_SIZE ? total : ZKW_HISTORY_SIZE;
  if (limit < held) held = limit;
  TRY(zkw_text_printf(out, "{\"capacity\":%d,\"total\":%llu,\"would_total\":%llu,\"reclaims\":[",
                      ZKW_HISTORY_SIZE, (unsigned long long)total, (unsigned long long)would_total));
  for (uint64_t i = 0; i < held; i++) {
    const struct zkw_history_entry *e = zkw_history_newest((unsigned)i);
    TRY(zkw_text_printf(out, "%s{", i ? "," : ""));
    TRY(render_fields(out, e));
    TRY(zkw_text_printf(out, "}"));
  }
  TRY(zkw_text_printf(out, "]}\n"));
  return 0;
}
