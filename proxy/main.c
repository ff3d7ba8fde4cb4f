/* main.c: command line, configuration and the event loop of the zkwarden daemon. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "zkw_admin.h"
#include "zkw_buf.h"
#include "zkw_config.h"
#include "zkw_locks.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_tls.h"

static const char *env(const char *name) {
  return getenv(name);
}

static void usage(FILE *out) {
  fprintf(out, "usage: zkwarden [--check-config | --list-metrics | --help | --version]\n"
               "       zkwarden locks [--json] [--reclaim [--dry-run]]   (zkwarden locks --help)\n"
               "A ZooKeeper proxy sidecar for Flink JobManagers; configured by environment.\n\n");
  zkw_config_help(out);
}

int main(int argc, char **argv) {
  bool check_only = false;
  if (argc > 1 && strcmp(argv[1], "locks") == 0) return zkw_locks_cli(argc - 2, argv + 2);
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
    } else if (strcmp(argv[i], "--check-config") == 0) {
      check_only = true;
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
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN); /* until the admin module handles it (log reopen) */
  zkw_metrics_init();

  uv_loop_t *loop = uv_default_loop();
  if (zkw_tls_start(loop, &cfg) != 0) return 2; /* logged */
  static struct zkw_server srv;
  if (zkw_server_start(&srv, loop, &cfg) != 0) return 1;
  int started = zkw_admin_start(&srv);
  if (started != 0) zkw_server_stop(&srv); /* logged; the loop below only closes handles */
  uv_run(loop, UV_RUN_DEFAULT);
  /* Closing the registry session removes this instance's owner node at once. */
  zkw_server_finish(&srv);
  int rc = uv_loop_close(loop);
  zkw_buf_pool_drain();
  if (rc) {
    zkw_log_error("event loop closed with handles still open: %s", uv_strerror(rc));
    return 1;
  }
  if (started != 0) return 1;
  zkw_log_info("stopped");
  return 0;
}
