/* zkw_log.h: one line per event, text or JSON, to stderr or to the file
 * ZKWARDEN_LOG_FILE (appended; zkw_log_reopen reopens it, on SIGHUP).
 *
 * Lines about a client connection carry its connection number, session id
 * and peer through zkw_slog (see zkw_session.h). Nothing secret is ever passed
 * here: session passwords stay in zkw_session and are never formatted. */
#ifndef ZKW_LOG_H
#define ZKW_LOG_H

#include <stdint.h>

#define ZKW_LOG_LEVELS(X)                                                                                    \
  X(ERROR, "error")                                                                                          \
  X(WARN, "warn")                                                                                            \
  X(INFO, "info")                                                                                            \
  X(DEBUG, "debug")

enum zkw_log_level {
#define ZKW_X_LVL(name, str) ZKW_LOG_##name,
  ZKW_LOG_LEVELS(ZKW_X_LVL)
#undef ZKW_X_LVL
};

enum zkw_log_format { ZKW_LOG_TEXT, ZKW_LOG_JSON };

extern enum zkw_log_level zkw_log_level;

void zkw_log_setup(enum zkw_log_level level, enum zkw_log_format format);
/* Sends the log to path (appending) instead of stderr. Returns 0 or a
 * negative errno; on error the log stays where it was. */
int zkw_log_open(const char *path) __attribute__((warn_unused_result));
/* Reopens the log file (after rotation). 0 (also when logging to stderr) or
 * a negative errno, in which case the old file stays in use. */
int zkw_log_reopen(void) __attribute__((warn_unused_result));
const char *zkw_log_level_name(enum zkw_log_level level);

/* Context printed before the message; conn 0 means none. */
struct zkw_log_ctx {
  uint64_t conn;
  int64_t session;
  const char *peer;
};

#define ZKW_PRINTF(a, b) __attribute__((format(printf, a, b)))
void zkw_log_at(enum zkw_log_level level, const struct zkw_log_ctx *ctx, const char *fmt, ...)
    ZKW_PRINTF(3, 4);

#define zkw_log(level, ...)                                                                                  \
  do {                                                                                                       \
    if ((level) <= zkw_log_level) zkw_log_at((level), NULL, __VA_ARGS__);                                    \
  } while (0)
#define zkw_log_error(...) zkw_log(ZKW_LOG_ERROR, __VA_ARGS__)
#define zkw_log_warn(...)  zkw_log(ZKW_LOG_WARN, __VA_ARGS__)
#define zkw_log_info(...)  zkw_log(ZKW_LOG_INFO, __VA_ARGS__)
#define zkw_log_debug(...) zkw_log(ZKW_LOG_DEBUG, __VA_ARGS__)

#endif
