/* zkw_keeper_proc.c: the keeper's system calls (zkw_keeper_proc.h):
 * its configuration and log, listening sockets, the journal memfd, signals
 * through a signalfd, and the worker's fork and exec. */
#include "zkw_keeper_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "zkw_addr.h"
#include "zkw_fault.h"
#include "zkw_handover.h"
#include "zkw_log.h"

#define FAIL_HERE(kind, detail, code)                                                                        \
  (ZKW_FAULT_AT(kind, ZKW_FAULT_WHERE, detail) ? (errno = zkw_fault_code(code), true) : false)

static sigset_t saved_mask; /* the mask before zkw_keeper_signals: the worker's */

int64_t zkw_keeper_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int zkw_keeper_tcp_listen(const struct sockaddr_storage *ss, const char *what) {
  if (FAIL_HERE(socket, what, EMFILE)) return -errno;
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || FAIL_HERE(bind, what, EADDRINUSE) ||
      bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int zkw_keeper_journal(void) {
  if (FAIL_HERE(memfd, "journal", EMFILE)) return -errno;
  int fd = memfd_create("zkwarden-journal", MFD_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

int zkw_keeper_signals(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);
  if (sigprocmask(SIG_BLOCK, &set, &saved_mask) != 0) return -errno;
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &saved_mask, NULL);
    return -e;
  }
  return fd;
}

void zkw_keeper_env_free(char **env, int n) {
  for (int i = 0; i < n; i++)
    free(env[i]);
  free(env);
}

/* One line of an environment file into "KEY=VALUE" (malloc'd), NULL for a
 * blank line or a comment; *bad when it is neither nor KEY=VALUE, *oom when
 * it is one that could not be kept. */
static char *env_line(char *line, bool *bad, bool *oom) {
  *bad = *oom = false;
  while (*line == ' ' || *line == '\t')
    line++;
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
    line[--n] = 0;
  if (!n || line[0] == '#' || line[0] == ';') return NULL;
  char *eq = strchr(line, '=');
  size_t kl = eq ? (size_t)(eq - line) : 0;
  while (kl && (line[kl - 1] == ' ' || line[kl - 1] == '\t'))
    kl--;
  for (size_t i = 0; i < kl; i++)
    if (!(line[i] == '_' || (line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= 'a' && line[i] <= 'z') ||
          (i && line[i] >= '0' && line[i] <= '9')))
      kl = 0;
  if (!kl) {
    *bad = true;
    return NULL;
  }
  char *v = eq + 1;
  while (*v == ' ' || *v == '\t')
    v++;
  size_t vl = strlen(v);
  if (vl >= 2 && (v[0] == '"' || v[0] == '\'') && v[vl - 1] == v[0]) {
    v++;
    vl -= 2;
  }
  char *out = malloc(kl + vl + 2);
  if (!out) {
    *oom = true;
    return NULL;
  }
  memcpy(out, line, kl);
  out[kl] = '=';
  memcpy(out + kl + 1, v, vl);
  out[kl + 1 + vl] = 0;
  return out;
}

int zkw_keeper_env_read(const struct zkw_keeper_cmd *cmd, char ***out, char *err, size_t errlen) {
  *out = NULL;
  if (!cmd->env_file) return 0;
  FILE *f = fopen(cmd->env_file, "re");
  if (!f) {
    snprintf(err, errlen, "cannot read the environment file %s: %s", cmd->env_file, strerror(errno));
    return -1;
  }
  char **env = NULL, line[4096];
  int n = 0, lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    bool bad, oom;
    char *kv = env_line(line, &bad, &oom);
    if (bad || oom) {
      if (oom)
        snprintf(err, errlen, "%s:%d: out of memory", cmd->env_file, lineno);
      else
        snprintf(err, errlen, "%s:%d: expected KEY=VALUE, a blank line or a # comment", cmd->env_file,
                 lineno);
      rc = -1;
      break;
    }
    if (!kv) continue;
    char **grown = realloc(env, sizeof *env * (size_t)(n + 1));
    if (!grown) {
      free(kv);
      snprintf(err, errlen, "%s: out of memory", cmd->env_file);
      rc = -1;
      break;
    }
    env = grown;
    env[n++] = kv;
  }
  fclose(f);
  if (rc) {
    zkw_keeper_env_free(env, n);
    return -1;
  }
  *out = env;
  return n;
}

/* The child: its environment, then exec; an errno goes back on the pipe. */
static void child(const struct zkw_keeper_cmd *cmd, char **env, int n, bool takeover, bool fail_exec,
                  int report) {
  sigprocmask(SIG_SETMASK, &saved_mask, NULL);
  for (int i = 0; i < n; i++)
    putenv(env[i]);
#ifdef ZKW_FAULT_INJECTION
  /* The test build: the keeper's fault is its own, not its workers'. */
  unsetenv("ZKW_TEST_FAULT");
  unsetenv("ZKW_TEST_FAULT_PROCESS");
#endif
  setenv("ZKWARDEN_KEEPER", "on", 1);
  setenv("ZKWARDEN_KEEPER_SOCKET", cmd->socket_name, 1);
  setenv("ZKWARDEN_TAKEOVER", takeover ? "on" : "off", 1);
  int e;
  if (fail_exec)
    e = zkw_fault_code(ENOEXEC);
  else {
    execv(cmd->argv[0], cmd->argv);
    e = errno;
  }
  ssize_t w = write(report, &e, sizeof e);
  (void)w;
  _exit(127);
}

int zkw_keeper_env_apply(const struct zkw_keeper_cmd *cmd, char *err, size_t errlen) {
  char **env;
  int n = zkw_keeper_env_read(cmd, &env, err, errlen);
  if (n < 0) return -1;
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    char *eq = strchr(env[i], '=');
    *eq = 0;
    if (setenv(env[i], eq + 1, 1) != 0) {
      snprintf(err, errlen, "%s: cannot set %s: %s", cmd->env_file, env[i], strerror(errno));
      rc = -1;
    }
    *eq = '=';
  }
  zkw_keeper_env_free(env, n);
  return rc;
}

pid_t zkw_keeper_spawn(const struct zkw_keeper_cmd *cmd, bool takeover, bool *config_error, char *err,
                       size_t errlen) {
  char **env;
  *config_error = true;
  int n = zkw_keeper_env_read(cmd, &env, err, errlen);
  if (n < 0) return -EINVAL;
  *config_error = false;
  /* The exec's failure point is decided here: the child's count dies with it. */
  bool fail_exec = ZKW_FAULT_AT(exec, ZKW_FAULT_WHERE, "execv");
  int p[2];
  pid_t pid = -1;
  int e = 0;
  if (pipe2(p, O_CLOEXEC) != 0) {
    e = errno;
    snprintf(err, errlen, "cannot start %s: pipe: %s", cmd->argv[0], strerror(e));
  } else if (FAIL_HERE(fork, "fork", EAGAIN) || (pid = fork()) < 0) {
    e = errno;
    pid = -1;
    snprintf(err, errlen, "cannot start %s: fork: %s", cmd->argv[0], strerror(e));
    close(p[0]);
    close(p[1]);
  } else if (pid == 0) {
    close(p[0]);
    child(cmd, env, n, takeover, fail_exec, p[1]);
  } else {
    close(p[1]);
    int child_errno = 0;
    ssize_t r;
    do
      r = read(p[0], &child_errno, sizeof child_errno);
    while (r < 0 && errno == EINTR);
    close(p[0]);
    if (r == (ssize_t)sizeof child_errno) {
      /* exec failed: the child exits 127 at once; reaped here. */
      e = child_errno;
      *config_error = true;
      snprintf(err, errlen, "cannot execute %s: %s", cmd->argv[0], strerror(e));
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
      pid = -1;
    }
  }
  zkw_keeper_env_free(env, n);
  return pid > 0 ? pid : -(e ? e : EIO);
}

void zkw_keeper_status_text(int status, char *out, size_t len) {
  if (WIFEXITED(status))
    snprintf(out, len, "exited with status %d%s", WEXITSTATUS(status),
             WEXITSTATUS(status) == 2 ? " (a configuration error: its log says which)" : "");
  else if (WIFSIGNALED(status))
    snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(out, len, "ended (wait status %d)", status);
}

/* ---- the keeper's start ---- */

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

int zkw_keeper_log_setup(void) {
  const char *level = env_or("ZKWARDEN_LOG_LEVEL", "info"), *format = env_or("ZKWARDEN_LOG_FORMAT", "text");
  int l = -1;
  for (int i = ZKW_LOG_ERROR; i <= ZKW_LOG_DEBUG; i++)
    if (strcmp(level, zkw_log_level_name((enum zkw_log_level)i)) == 0) l = i;
  if (l < 0 || (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)) {
    fprintf(stderr, "zkwarden-keeper: ZKWARDEN_LOG_LEVEL or ZKWARDEN_LOG_FORMAT is not valid: expected "
                    "error, warn, info or debug, and text or json\n");
    return -1;
  }
  zkw_log_setup((enum zkw_log_level)l, strcmp(format, "json") == 0 ? ZKW_LOG_JSON : ZKW_LOG_TEXT);
  const char *file = env_or("ZKWARDEN_LOG_FILE", NULL);
  int rc = file ? zkw_log_open(file) : 0;
  if (rc) {
    fprintf(stderr, "zkwarden-keeper: ZKWARDEN_LOG_FILE=\"%s\" cannot be opened: %s\n", file, strerror(-rc));
    return -1;
  }
  return 0;
}

int zkw_keeper_open(struct zkw_keeper_fds *f, const char *worker) {
  const char *listen = env_or("ZKWARDEN_LISTEN", ZKW_DEFAULT_LISTEN);
  const char *admin = env_or("ZKWARDEN_ADMIN_LISTEN", ZKW_DEFAULT_ADMIN_LISTEN);
  struct sockaddr_storage ls, as;
  const char *bad = zkw_addr_parse(listen, &ls)  ? "ZKWARDEN_LISTEN"
                    : zkw_addr_parse(admin, &as) ? "ZKWARDEN_ADMIN_LISTEN"
                                                 : NULL;
  if (bad) {
    zkw_log_error("keeper: %s=\"%s\" is not valid: expected a numeric ip:port or [ipv6]:port", bad,
                  getenv(bad));
    return 2;
  }
  if (zkw_handover_addr(&f->addr, getenv("ZKWARDEN_KEEPER_SOCKET"), listen) != 0) {
    zkw_log_error("keeper: ZKWARDEN_KEEPER_SOCKET is longer than %d characters", ZKW_HANDOVER_NAME_MAX);
    return 2;
  }
  f->ho = zkw_handover_listen(&f->addr);
  if (f->ho < 0) {
    zkw_log_error("keeper: cannot listen on the handover socket %s: %s%s", f->addr.name, strerror(-f->ho),
                  f->ho == -EADDRINUSE ? " (another keeper or zkwarden holds it)" : "");
    return 1;
  }
  f->listen = zkw_keeper_tcp_listen(&ls, "listen");
  if (f->listen < 0) {
    zkw_log_error("keeper: cannot listen on %s (ZKWARDEN_LISTEN): %s", listen, strerror(-f->listen));
    return 1;
  }
  f->admin = zkw_keeper_tcp_listen(&as, "admin");
  if (f->admin < 0) {
    zkw_log_error("keeper: cannot listen on %s (ZKWARDEN_ADMIN_LISTEN): %s", admin, strerror(-f->admin));
    return 1;
  }
  f->journal = zkw_keeper_journal();
  if (f->journal < 0) {
    zkw_log_error("keeper: cannot create the journal (memfd_create): %s", strerror(-f->journal));
    return 1;
  }
  f->sig = zkw_keeper_signals();
  if (f->sig < 0) {
    zkw_log_error("keeper: cannot take its signals (signalfd): %s", strerror(-f->sig));
    return 1;
  }
  zkw_log_info("zkwarden-keeper %s holding %s and %s, handover socket %s%s%s", ZKW_VERSION, listen, admin,
               f->addr.name, worker ? ", worker " : ": waiting for workers", worker ? worker : "");
  return 0;
}

void zkw_keeper_close(struct zkw_keeper_fds *f) {
  int *fds[] = {&f->listen, &f->admin, &f->journal, &f->sig, &f->ho};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
}
