/* zkw_keeper_proc.h: what the keeper asks of the system: its listening
 * sockets, the journal's memfd, its signals, and starting a worker (fork and
 * exec with the environment the worker needs). Kept apart from the keeper's
 * loop (zkw_keeper.c) so that the loop is only the handover's bookkeeping.
 * Each call has its failure point (zkw_fault.h) in the test build. */
#ifndef ZKW_KEEPER_PROC_H
#define ZKW_KEEPER_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "zkw_handover.h"

/* The log as zkwarden's: ZKWARDEN_LOG_LEVEL, _FORMAT, _FILE. Returns 0 or
 * -1 (a line on stderr). */
int zkw_keeper_log_setup(void) __attribute__((warn_unused_result));

/* What the keeper holds of its own; -1 when not open. */
struct zkw_keeper_fds {
  int listen, admin, journal, sig, ho; /* ZKWARDEN_LISTEN, _ADMIN_LISTEN, the memfd, the signalfd, handover */
  struct zkw_handover_addr addr;       /* the handover socket's */
};
/* Reads ZKWARDEN_LISTEN, ZKWARDEN_ADMIN_LISTEN and ZKWARDEN_KEEPER_SOCKET
 * and opens every descriptor of f (worker: the path --spawn runs, or NULL,
 * for the log line). Returns 0, 1 (one could not be had) or 2 (a bad
 * value), logged; what opened stays in f for zkw_keeper_close. */
int zkw_keeper_open(struct zkw_keeper_fds *f, const char *worker) __attribute__((warn_unused_result));
void zkw_keeper_close(struct zkw_keeper_fds *f);

/* A TCP listening socket on ss (SO_REUSEADDR, CLOEXEC, nonblocking, backlog
 * 1024: what zkwarden's own listener does); what names it for the failure
 * points. Returns the fd or a negative errno. */
int zkw_keeper_tcp_listen(const struct sockaddr_storage *ss, const char *what)
    __attribute__((warn_unused_result));
/* The journal: an empty memfd (MFD_CLOEXEC); the worker sizes it. Returns
 * the fd or a negative errno. */
int zkw_keeper_journal(void) __attribute__((warn_unused_result));

/* Blocks SIGCHLD, SIGTERM, SIGINT, SIGHUP and SIGUSR2 and returns a
 * signalfd reading them (nonblocking, CLOEXEC), or a negative errno. */
int zkw_keeper_signals(void) __attribute__((warn_unused_result));

/* The worker's command line and its environment file. */
struct zkw_keeper_cmd {
  char **argv;             /* argv[0] is the path executed (the binary on disk, each time) */
  const char *env_file;    /* KEY=VALUE lines read at each start, or NULL */
  const char *socket_name; /* the handover socket's name: the worker's ZKWARDEN_KEEPER_SOCKET */
};

/* Reads cmd->env_file (when set) into a list of "KEY=VALUE" strings: lines
 * of KEY=VALUE, blank lines and # comments, a value optionally in matching
 * quotes (as systemd's EnvironmentFile). Returns the count (0 without a
 * file) or -1 with why in err. *out is freed with zkw_keeper_env_free. */
int zkw_keeper_env_read(const struct zkw_keeper_cmd *cmd, char ***out, char *err, size_t errlen);
void zkw_keeper_env_free(char **env, int n);

/* Applies the environment file to this process's own environment (the
 * keeper's start). Returns 0 or -1 with why in err. */
int zkw_keeper_env_apply(const struct zkw_keeper_cmd *cmd, char *err, size_t errlen);

/* Starts the worker: fork, then in the child the signal mask of before
 * zkw_keeper_signals, the environment file's variables, ZKWARDEN_KEEPER=on,
 * ZKWARDEN_KEEPER_SOCKET, ZKWARDEN_TAKEOVER=on or off, and execv. Returns
 * the child's pid, or a negative errno with why in err; *config_error says
 * whether the cause is the configuration (the environment file, or an exec
 * that fails: the child reports it before it exits 127) rather than the
 * system (fork). */
pid_t zkw_keeper_spawn(const struct zkw_keeper_cmd *cmd, bool takeover, bool *config_error, char *err,
                       size_t errlen);

/* A child's wait status as text ("exited with status 2", "killed by
 * signal 9"). */
void zkw_keeper_status_text(int status, char *out, size_t len);
/* Milliseconds on the monotonic clock. */
int64_t zkw_keeper_now_ms(void);

#endif
