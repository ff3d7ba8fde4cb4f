/* main.c: command line, configuration and the event loop of the zkwarden
 * daemon: it wires the relay (zkw_server) to the sidecar policy
 * (zkw_sidecar_hooks) and the operations (zkw_admin), the hand-over between
 * zkwarden processes (zkw_keeperlink, zkw_takeover), and owns SIGTERM and
 * SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "zkw_admin.h"
#include "zkw_buf.h"
#include "zkw_config.h"
#include "zkw_fault.h"
#include "zkw_history.h"
#include "zkw_journal.h"
#include "zkw_keeperlink.h"
#include "zkw_lockscli.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_quiesce.h"
#include "zkw_recover.h"
#include "zkw_server.h"
#include "zkw_sidecar.h"
#include "zkw_takeover.h"
#include "zkw_tls.h"

static const char *env(const char *name) {
  return getenv(name);
}

static struct zkw_server srv;
static struct zkw_identity identity;
static uv_signal_t sig_term, sig_int;

/* Stop serving (SIGTERM, SIGINT, or the keeper's STOP); the loop ends once
 * every session is gone. */
static void link_stop(void *arg, const char *why) {
  (void)arg;
  zkw_log_info("%s: closing %llu connection(s) and exiting", why, (unsigned long long)srv.session_count);
  zkw_admin_stop();
  zkw_server_stop(&srv);
}

/* Bound on a hand-over's wait for the replies in flight (zkw_quiesce.h). */
#define QUIESCE_MS 1000

/* The hand-over (zkw_keeperlink.h): stop taking connections (the keeper or
 * the successor keeps the listening socket) and reading clients, and let
 * the requests in flight be answered, within a bound. The journal is
 * committed as it goes (zkw_journal.h): the successor takes each durable
 * connection up from it, as after a crash, and answers what is still in
 * flight with CONNECTIONLOSS. */
static void link_quiesce(void *arg, void (*done)(int status)) {
  (void)arg;
  zkw_server_stop_accepting(&srv);
  zkw_quiesce_start(&srv, QUIESCE_MS, done);
}

/* The successor did not take over: serve on. */
static void link_resume(void *arg) {
  (void)arg;
  zkw_quiesce_cancel(&srv);
  if (zkw_server_resume_accepting(&srv) != 0) zkw_keeperlink_run_stop("cannot accept again");
}

/* The successor (or the keeper) has the sockets and the journal: end at
 * once, as a crash would, so that nothing is closed for good: no session
 * closed (its journal slot stays as the successor reads it), no client
 * socket shut, the registry session left for the successor to re-attach. */
static void link_handed_over(void *arg) {
  (void)arg;
  zkw_log_info("handed over: exiting at once (%llu connection(s) open; the durable ones and the journal are "
               "the keeper's or the successor's now)",
               (unsigned long long)srv.session_count);
  zkw_fault_report();
  fflush(NULL);
  _exit(0);
}

/* The keeper's duplicates of the durable connections (zkw_server's adopt
 * and forget). */
static int link_adopt(struct zkw_server *s, int fd, uint32_t *slot) {
  (void)s;
  return zkw_keeperlink_adopt(fd, slot);
}

static void link_forget(struct zkw_server *s, uint32_t slot) {
  (void)s;
  zkw_keeperlink_forget(slot);
}

/* An inherited connection, taken up from the journal (zkw_recover.h), which
 * owns fd either way and forgets the slot of one it closes. */
static bool link_recover(void *arg, uint32_t slot, int fd, int journal_fd) {
  (void)arg, (void)journal_fd;
  if (!srv.journal) return false; /* closed and forgotten by the link */
  (void)zkw_recover_session(&srv, slot, fd);
  return true;
}

static const struct zkw_keeperlink_ops link_ops = {NULL, link_quiesce, link_handed_over, link_stop,
                                                   link_resume};

/* SIGTERM/SIGINT. With a keeper, SIGTERM is this process's own end (a
 * container restart, an upgrade): the keeper keeps the connections for the
 * next one. The signal handles do not keep the loop alive (closed after it
 * ends). */
static void on_signal(uv_signal_t *h, int signum) {
  (void)h;
  if (signum == SIGTERM && zkw_keeperlink_mode() == ZKW_LINK_KEEPER && !zkw_keeperlink_ending()) {
    zkw_log_info("received SIGTERM: handing the connections back to the keeper and exiting");
    if (zkw_keeperlink_quiesce()) return;
  }
  zkw_keeperlink_run_stop(signum == SIGTERM ? "received SIGTERM" : "received SIGINT");
}

static void signals_start(uv_loop_t *loop) {
  uv_signal_init(loop, &sig_term);
  uv_signal_init(loop, &sig_int);
  uv_signal_start(&sig_term, on_signal, SIGTERM);
  uv_signal_start(&sig_int, on_signal, SIGINT);
  uv_unref((uv_handle_t *)&sig_term);
  uv_unref((uv_handle_t *)&sig_int);
}

static void signals_stop(uv_loop_t *loop) {
  uv_close((uv_handle_t *)&sig_term, NULL);
  uv_close((uv_handle_t *)&sig_int, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* zkwarden's own ZooKeeper sessions say goodbye (blocking; under TLS on a
 * thread while the loop serves the internal relay). */
static void finish_sessions(void *id) {
  zkw_admin_finish();
  zkw_sidecar_finish(id);
}

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: zkwarden [--takeover | --check-config | --list-config | --list-metrics | --help | --version]\n"
      "       zkwarden locks [--json] [--reclaim [--dry-run]]   (zkwarden locks --help)\n"
      "       zkwarden upgrade   (restart the running zkwarden onto the binary on disk)\n"
      "--takeover: start as the successor of the running zkwarden (the same environment), which\n"
      "hands over its listening sockets and connections and exits.\n"
      "A ZooKeeper proxy sidecar for Flink JobManagers; configured by environment.\n\n");
  zkw_config_help(out);
}

int main(int argc, char **argv) {
  bool check_only = false, takeover = false;
  if (argc > 1 && strcmp(argv[1], "locks") == 0) return zkw_locks_cli(argc - 2, argv + 2);
  if (argc > 1 && strcmp(argv[1], "upgrade") == 0) return zkw_upgrade_cli(argc - 2, argv + 2);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("zkwarden %s\n", ZKW_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--list-metrics") == 0) {
      zkw_metrics_list_markdown(stdout);
      return 0;
    } else if (strcmp(argv[i], "--list-config") == 0) {
      zkw_config_list_markdown(stdout);
      return 0;
    } else if (strcmp(argv[i], "--check-config") == 0) {
      check_only = true;
    } else if (strcmp(argv[i], "--takeover") == 0) {
      takeover = true;
    } else {
      fprintf(stderr, "zkwarden: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }

  static struct zkw_config cfg;
  char err[512];
  if (zkw_config_load(&cfg, env, err, sizeof err) != 0) {
    fprintf(stderr, "zkwarden: %s\n", err);
    return 2;
  }
  if (check_only) {
    zkw_config_print(&cfg, stdout);
    return 0;
  }
  zkw_log_setup(cfg.log_level, cfg.log_format);
  if (cfg.log_file) {
    int lrc = zkw_log_open(cfg.log_file);
    if (lrc) {
      fprintf(stderr, "zkwarden: ZKWARDEN_LOG_FILE=\"%s\" cannot be opened: %s\n", cfg.log_file,
              strerror(-lrc));
      return 2;
    }
  }
  if (zkw_fault_init() != 0) return 2;
  int arc = zkw_history_audit_open(cfg.audit_file);
  if (arc) {
    fprintf(stderr, "zkwarden: ZKWARDEN_AUDIT_FILE=\"%s\" cannot be opened: %s\n", cfg.audit_file,
            strerror(-arc));
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN); /* until the admin module handles it (log reopen) */
  zkw_metrics_init();

  uv_loop_t *loop = uv_default_loop();
  if (zkw_tls_start(loop, &cfg) != 0) return 2; /* logged */
  /* With a keeper, or taking over: the listening sockets and connections. */
  if (zkw_keeperlink_open(&cfg, takeover) != 0) return 1; /* logged */
  if (zkw_server_start(&srv, loop, &cfg, &zkw_sidecar_hooks, &identity) != 0) return 1;
  if (cfg.durable_sessions) {
    bool recovered = false;
    int jrc = zkw_journal_open(&srv.journal, zkw_keeperlink_inherited()->journal_fd, cfg.durable_sessions,
                               &recovered);
    if (jrc)
      zkw_log_warn("no journal (%s): a crash of this process ends every client connection", strerror(-jrc));
  }
  srv.adopt = link_adopt;
  srv.forget = link_forget;
  int started = zkw_keeperlink_start(loop, &link_ops);
  signals_start(loop);
  /* Without a usable registry the proxy still relays: the error is logged. */
  if (zkw_sidecar_start(&identity, &srv) != 0) zkw_log_warn("relaying without identity features");
  if (!started) started = zkw_admin_start(&srv);
  /* The inherited client connections, taken up from the journal; the
   * previous process's slots that nobody holds any more are free again. */
  zkw_keeperlink_recover(link_recover, NULL);
  zkw_journal_forget_previous(srv.journal);
  if (!started) started = zkw_takeover_start(loop);
  if (started != 0) zkw_server_stop(&srv); /* logged; the loop below only closes handles */
  uv_run(loop, UV_RUN_DEFAULT);
  /* Closing the registry session removes this instance's owner node at once. */
  zkw_server_finish(&srv, finish_sessions, &identity);
  /* Last: the keeper or the successor sees this process gone. */
  zkw_takeover_close();
  zkw_keeperlink_close();
  zkw_quiesce_close();
  signals_stop(loop);
  int rc = uv_loop_close(loop);
  zkw_journal_close(srv.journal);
  zkw_buf_pool_drain();
  zkw_fault_report();
  zkw_history_audit_close();
  if (rc) {
    zkw_log_error("event loop closed with handles still open: %s", uv_strerror(rc));
    return 1;
  }
  if (started != 0) return 1;
  zkw_log_info("stopped");
  return 0;
}
