/* zkw_log.c: formatting of log lines (text or JSON) with a UTC timestamp. */
#include "zkw_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum zkw_log_level zkw_log_level = ZKW_LOG_INFO;
static enum zkw_log_format log_format = ZKW_LOG_TEXT;
static FILE *log_file; /* NULL: stderr */
static const char *log_path;

static const char *const level_names[] = {
#define ZKW_X_LVL(name, str) str,
    ZKW_LOG_LEVELS(ZKW_X_LVL)
#undef ZKW_X_LVL
};

void zkw_log_setup(enum zkw_log_level level, enum zkw_log_format format) {
  zkw_log_level = level;
  log_format = format;
}

/* The FILE stays the same for the life of the process; a reopen swaps the
 * descriptor under it (dup3), so a line being written by another thread
 * never sees a closed stream. */
int zkw_log_open(const char *path) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return -errno;
  if (log_file) {
    fflush(log_file);
    int rc = dup3(fd, fileno(log_file), O_CLOEXEC);
    int e = errno;
    close(fd);
    if (rc < 0) return -e;
  } else {
    FILE *f = fdopen(fd, "a");
    if (!f) {
      int e = errno;
      close(fd);
      return -e;
    }
    setvbuf(f, NULL, _IOLBF, 0); /* whole lines, at once */
    log_file = f;
  }
  log_path = path;
  return 0;
}

int zkw_log_reopen(void) {
  return log_path ? zkw_log_open(log_path) : 0;
}

const char *zkw_log_level_name(enum zkw_log_level level) {
  return level_names[level];
}

/* Appends s to out as a JSON string body (no quotes). */
static size_t json_escape(char *out, size_t cap, const char *s) {
  size_t n = 0;
  for (; *s && n + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)c;
    } else if (c < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
    } else {
      out[n++] = (char)c;
    }
  }
  out[n] = 0;
  return n;
}

void zkw_log_at(enum zkw_log_level level, const struct zkw_log_ctx *ctx, const char *fmt, ...) {
  char msg[1024], ts[40], line[2560];
  struct timespec now;
  struct tm tm;
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + tl, sizeof ts - tl, ".%03ldZ", now.tv_nsec / 1000000);

  if (log_format == ZKW_LOG_JSON) {
    char esc[2048], peer[160] = "";
    json_escape(esc, sizeof esc, msg);
    int n = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\"", ts, level_names[level]);
    if (ctx && ctx->conn) {
      if (ctx->peer) json_escape(peer, sizeof peer, ctx->peer);
      n +=
          snprintf(line + n, sizeof line - (size_t)n, ",\"conn\":%llu,\"session\":\"0x%llx\",\"peer\":\"%s\"",
                   (unsigned long long)ctx->conn, (unsigned long long)ctx->session, peer);
    }
    snprintf(line + n, sizeof line - (size_t)n, ",\"msg\":\"%s\"}", esc);
  } else if (ctx && ctx->conn) {
    snprintf(line, sizeof line, "%s %s conn=%llu session=0x%llx peer=%s %s", ts, level_names[level],
             (unsigned long long)ctx->conn, (unsigned long long)ctx->session, ctx->peer ? ctx->peer : "-",
             msg);
  } else {
    snprintf(line, sizeof line, "%s %s %s", ts, level_names[level], msg);
  }
  fprintf(log_file ? log_file : stderr, "%s\n", line);
}
