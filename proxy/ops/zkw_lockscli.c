/* zkw_lockscli.c: `zkwarden locks [--json] [--all] [--reclaim [--dry-run]]`.
 *
 * Walks the identity's own trees (the trees in the registry record of
 * ZKWARDEN_IDENTITY, marked untrusted unless the record is trusted as the
 * sidecar trusts it, zkw_regtrust.h; and ZKWARDEN_SWEEP_TREES), or with
 * --all every ZKWARDEN_LOCK_ROOTS. Reads the ensemble directly (ZKWARDEN_UPSTREAM, with
 * ZKWARDEN_REGISTRY_AUTH where set: the daemon's configuration) through its own zkw_zk session on its own
 * loop, prints the lock report (zkw_locks.h), and with --reclaim deletes the stale locks under the sweep's
 * rules, and only where the verdict is trusted (not found only under an untrusted tree, its identity's
 * record trusted): each one is read again just before, and deleted only if it is still the same node (czxid),
 * still tagged the same way, still stale by zkw_lock_why_not_stale (this command's session is the asking
 * session), and with the version just read.
 *
 * With ZKWARDEN_UPSTREAM_TLS=on it uses the daemon's TLS settings (CA, client
 * certificate, server name): libzookeeper_mt has no TLS, so its session goes
 * through an internal relay on 127.0.0.1 as the daemon's own sessions do
 * (zkw_server_start_relay_only); it never speaks plaintext to the ensemble. */
#include "zkw_lockscli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_locks.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_record.h"
#include "zkw_regtrust.h"
#include "zkw_server.h"
#include "zkw_text.h"
#include "zkw_tls.h"

#define CLI_CONNECT_MS 15000

struct cli {
  uv_loop_t loop;
  uv_timer_t timer;
  struct zkw_zk *zk;
  const struct zkw_config *cfg;
  bool json, reclaim, dry_run, all;
  bool started, finished;
  int status; /* exit status */
  struct zkw_locks_walk *walk;
  struct zkw_locks_report *rep;
  struct zkw_buf out;
  /* --reclaim */
  size_t next;  /* next lock of the report to consider */
  int inflight; /* rereads and deletes */
  size_t deleted, skipped;
  bool first_result;
  /* The own trees: the identity's record, read with the registry's ACLs. */
  int step; /* enum own_step */
  char ids[300], node[600];
  char trust[ZKW_REGTRUST_WHY_MAX + 320]; /* why the record is not trusted ("": it is) */
  struct Stat rec_stat;
  struct zkw_treeset rec_trees;
};

enum own_step { OWN_ROOT_ACL, OWN_IDS_ACL, OWN_RECORD, OWN_RECORD_ACL, OWN_WALK };

static void cli_finish(struct cli *c, int status) {
  if (c->finished) return;
  c->finished = true;
  if (status > c->status) c->status = status;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, NULL);
  zkw_zk_close_handle(c->zk);
  zkw_tls_stop();
}

static void out_flush(struct cli *c) {
  if (c->out.len) fwrite(c->out.data, 1, c->out.len, stdout);
  zkw_buf_release(&c->out);
  fflush(stdout);
}

/* One line of the reclaim's outcome (table) or one JSON element. */
static void reclaim_result(struct cli *c, const struct zkw_lock_entry *e, const char *what, const char *why) {
  const char *identity = zkw_locks_identity_of(c->rep, e);
  int rc;
  if (c->json) {
    rc = zkw_text_printf(&c->out, "%s{\"path\":", c->first_result ? "" : ",");
    if (!rc) rc = zkw_text_json_string(&c->out, e->path, SIZE_MAX);
    if (!rc) rc = zkw_text_printf(&c->out, ",\"result\":\"%s\",\"why\":", what);
    if (!rc) rc = why ? zkw_text_json_string(&c->out, why, 200) : zkw_text_printf(&c->out, "null");
    if (!rc) rc = zkw_text_printf(&c->out, ",\"identity\":");
    if (!rc) rc = zkw_text_json_string(&c->out, identity, ZKW_IDENTITY_MAX);
    if (!rc)
      rc = zkw_text_printf(&c->out, ",\"incarnation\":%" PRIu64 ",\"session\":\"0x%" PRIx64 "\"}",
                           e->incarnation, (uint64_t)e->owner);
  } else {
    rc = zkw_text_printf(&c->out, "%s %s (identity %s, incarnation %" PRIu64 ", session 0x%" PRIx64 ")%s%s\n",
                         what, e->path, identity, e->incarnation, (uint64_t)e->owner, why ? ": " : "",
                         why ? why : "");
  }
  c->first_result = false;
  if (rc) c->status = 1;
}

static void reclaim_pump(struct cli *c);

struct reread {
  struct cli *c;
  size_t index;
};

static void deleted_cb(void *arg, const struct zkw_zk_result *r) {
  struct reread *a = arg;
  struct cli *c = a->c;
  const struct zkw_lock_entry *e = &c->rep->locks[a->index];
  free(a);
  c->inflight--;
  if (r->rc == ZOK) {
    c->deleted++;
    reclaim_result(c, e, "deleted", NULL);
  } else {
    c->skipped++;
    if (r->rc != ZNONODE && r->rc != ZBADVERSION) c->status = 1;
    reclaim_result(c, e, "not deleted", zkw_zk_error(r->rc));
  }
  reclaim_pump(c);
}

/* Why the node as read now may not be deleted as the stale lock e, or NULL. */
static const char *still_stale(struct cli *c, const struct zkw_lock_entry *e, const struct zkw_zk_result *r) {
  if (r->rc == ZNONODE) return "gone meanwhile";
  if (r->rc != ZOK) return zkw_zk_error(r->rc);
  if (r->stat.czxid != e->czxid) return "re-created meanwhile";
  struct zkw_tag tag;
  struct zkw_bytes data = {(const uint8_t *)r->data, r->data ? r->data_len : -1};
  bool tagged = zkw_tag_parse(data, &tag) == 0;
  if (tagged &&
      (e->id < 0 || strcmp(tag.identity, c->rep->ids[e->id].name) != 0 || tag.incarnation != e->incarnation))
    return "its tag changed meanwhile";
  uint64_t current = e->id >= 0 ? c->rep->ids[e->id].current : 0;
  return zkw_lock_why_not_stale(tagged ? &tag : NULL, r->stat.ephemeralOwner, zkw_zk_session_id(c->zk),
                                current);
}

static void reread_cb(void *arg, const struct zkw_zk_result *r) {
  struct reread *a = arg;
  struct cli *c = a->c;
  const struct zkw_lock_entry *e = &c->rep->locks[a->index];
  c->inflight--;
  const char *why = still_stale(c, e, r);
  if (why) {
    c->skipped++;
    reclaim_result(c, e, "not deleted", why);
    free(a);
  } else if (c->dry_run) {
    reclaim_result(c, e, "would delete", NULL);
    free(a);
  } else if (zkw_zk_delete(c->zk, e->path, r->stat.version, deleted_cb, a) == ZOK) {
    c->inflight++;
  } else {
    c->skipped++;
    c->status = 1;
    reclaim_result(c, e, "not deleted", "the delete could not be sent");
    free(a);
  }
  reclaim_pump(c);
}

static void reclaim_pump(struct cli *c) {
  struct zkw_locks_report *r = c->rep;
  while (c->inflight < ZKW_LOCKS_WINDOW && c->next < r->nlocks) {
    size_t i = c->next++;
    if (r->locks[i].why) continue; /* not stale: never touched */
    if (r->locks[i].untrusted) {   /* stale by what someone else could have written */
      c->skipped++;
      reclaim_result(c, &r->locks[i], "not deleted", r->locks[i].untrusted);
      continue;
    }
    struct reread *a = malloc(sizeof *a);
    if (a) *a = (struct reread){c, i};
    if (a && zkw_zk_get(c->zk, r->locks[i].path, false, reread_cb, a) == ZOK) {
      c->inflight++;
      continue;
    }
    free(a);
    c->skipped++;
    c->status = 1;
    reclaim_result(c, &r->locks[i], "not deleted", "the read could not be sent");
  }
  if (c->inflight || c->next < r->nlocks) return;
  int rc = c->json
               ? zkw_text_printf(&c->out, "],\"deleted\":%zu,\"not_deleted\":%zu}}\n", c->deleted, c->skipped)
               : zkw_text_printf(&c->out, "\nreclaim%s: %zu deleted, %zu not deleted\n",
                                 c->dry_run ? " (dry run: nothing deleted)" : "", c->deleted, c->skipped);
  if (rc) c->status = 1;
  out_flush(c);
  cli_finish(c, 0);
}

static void walk_done(void *arg, struct zkw_locks_report *rep) {
  struct cli *c = arg;
  c->walk = NULL;
  c->rep = rep;
  if (c->finished) return;
  int rc = c->json ? zkw_locks_render_json(rep, &c->out) : zkw_locks_render_table(rep, &c->out);
  if (rc) {
    fprintf(stderr, "zkwarden locks: out of memory\n");
    return cli_finish(c, 1);
  }
  if (!c->reclaim) {
    out_flush(c);
    return cli_finish(c, 0);
  }
  if (c->json) {
    c->out.len -= 2; /* the report's closing "}\n": the reclaim goes inside */
    rc =
        zkw_text_printf(&c->out, ",\"reclaim\":{\"dry_run\":%s,\"results\":[", c->dry_run ? "true" : "false");
  } else {
    rc = zkw_text_printf(&c->out, "\n%s\n", c->dry_run ? "RECLAIM (dry run)" : "RECLAIM");
  }
  if (rc) return cli_finish(c, 1);
  c->first_result = true;
  reclaim_pump(c);
}

static void walk_roots(struct cli *c, const struct zkw_lock_roots *roots,
                       const struct zkw_lock_roots *untrusted) {
  struct zkw_locks_opts o = {roots,
                             untrusted,
                             c->all,
                             c->cfg->registry_auth[0] != 0,
                             c->cfg->registry_root,
                             zkw_zk_session_id(c->zk)};
  if (zkw_locks_walk_start(c->zk, &o, walk_done, c, &c->walk) != 0) {
    fprintf(stderr, "zkwarden locks: cannot read the ensemble\n");
    cli_finish(c, 1);
  }
}

/* The own trees: ZKWARDEN_SWEEP_TREES, and the identity's record's (each
 * below a lock root, as the sidecar takes them), marked untrusted when the
 * record is not trusted (zkw_regtrust.h): shown, never acted on. */
static void own_walk(struct cli *c) {
  struct zkw_treeset trusted = {0}, untrusted = {0};
  for (int i = 0; i < c->cfg->sweep_trees.count; i++)
    (void)zkw_treeset_add(&trusted, &c->cfg->lock_roots, c->cfg->sweep_trees.root[i]);
  for (int i = 0; i < c->rec_trees.count; i++)
    (void)zkw_treeset_add(c->trust[0] ? &untrusted : &trusted, &c->cfg->lock_roots, c->rec_trees.tree[i]);
  if (untrusted.count) {
    char list[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX];
    zkw_treeset_format(&untrusted, list, sizeof list);
    fprintf(stderr,
            "zkwarden locks: the trees %s of the registry record of %s are read and marked untrusted: the "
            "record is not trusted (%s), so anyone could have written them; --reclaim acts on nothing found "
            "only there (ZKWARDEN_SWEEP_TREES names trees to trust)\n",
            list, c->cfg->identity, c->trust);
  }
  if (!trusted.count && !untrusted.count)
    fprintf(stderr,
            "zkwarden locks: no own tree of identity %s is known (its JobManager created nothing under "
            "the lock roots yet); --all walks every lock root\n",
            c->cfg->identity);
  struct zkw_lock_roots roots, uroots;
  zkw_locks_tree_roots(&trusted, &roots);
  zkw_locks_tree_roots(&untrusted, &uroots);
  walk_roots(c, &roots, &uroots);
}

static void own_next(struct cli *c);

/* A registry node's ACL (the root, identities, then the record's). */
static void own_acl(void *arg, const struct zkw_zk_result *r) {
  struct cli *c = arg;
  char buf[ZKW_REGTRUST_WHY_MAX];
  const char *why = zkw_regtrust_why(r, true, buf, sizeof buf);
  if (c->step == OWN_RECORD_ACL && !why && !zkw_regtrust_same(&r->stat, &c->rec_stat))
    why = "it changed while it was read";
  if (why && !c->trust[0] && c->step == OWN_RECORD_ACL)
    snprintf(c->trust, sizeof c->trust, "%s", why);
  else if (why && !c->trust[0])
    snprintf(c->trust, sizeof c->trust, "the registry node %.300s: %.199s",
             c->step == OWN_ROOT_ACL ? c->cfg->registry_root : c->ids, why);
  c->step++;
  own_next(c);
}

/* The identity's record: its trees. */
static void own_record(void *arg, const struct zkw_zk_result *r) {
  struct cli *c = arg;
  struct zkw_record rec;
  if (r->rc == ZOK && zkw_record_parse(r->data, r->data_len, &rec) == 0) {
    c->rec_trees = rec.trees;
    c->rec_stat = r->stat;
    c->step++;
  } else {
    if (r->rc != ZNONODE)
      fprintf(stderr,
              "zkwarden locks: cannot read the registry record of %s (%s): its own trees are unknown\n",
              c->cfg->identity, r->rc == ZOK ? "corrupt" : zkw_zk_error(r->rc));
    c->step = OWN_WALK; /* nothing read to trust */
  }
  memset(&rec, 0, sizeof rec); /* it holds the session password */
  own_next(c);
}

static void own_next(struct cli *c) {
  int rc = ZOK;
  switch (c->step) {
  case OWN_ROOT_ACL:
    rc = zkw_zk_get_acl(c->zk, c->cfg->registry_root, "acl-report", own_acl, c);
    break;
  case OWN_IDS_ACL:
    rc = zkw_zk_get_acl(c->zk, c->ids, "acl-report", own_acl, c);
    break;
  case OWN_RECORD:
    rc = zkw_zk_get(c->zk, c->node, false, own_record, c);
    break;
  case OWN_RECORD_ACL:
    if (!c->cfg->registry_auth[0]) {
      c->step++;
      return own_next(c);
    }
    rc = zkw_zk_get_acl(c->zk, c->node, "acl-report", own_acl, c);
    break;
  default:
    return own_walk(c);
  }
  if (rc != ZOK) {
    fprintf(stderr, "zkwarden locks: cannot read the ensemble\n");
    cli_finish(c, 1);
  }
}

static void synced(void *arg, const struct zkw_zk_result *r) {
  struct cli *c = arg;
  (void)r; /* a failed sync only means the reads may lag a little */
  if (c->all) return walk_roots(c, &c->cfg->lock_roots, NULL);
  const char *root = strcmp(c->cfg->registry_root, "/") ? c->cfg->registry_root : "";
  snprintf(c->ids, sizeof c->ids, "%s/identities", root);
  snprintf(c->node, sizeof c->node, "%s/%s", c->ids, c->cfg->identity);
  /* The record's trees are trusted as the sidecar's are (zkw_regtrust.h):
   * the registry's parents, the record, then its ACL. */
  if (!c->cfg->registry_auth[0]) snprintf(c->trust, sizeof c->trust, "%s", ZKW_REGTRUST_NO_AUTH);
  c->step = c->cfg->registry_auth[0] ? OWN_ROOT_ACL : OWN_RECORD;
  own_next(c);
}

static void on_event(void *arg, int type, int state, const char *path) {
  struct cli *c = arg;
  (void)path;
  if (type != ZOO_SESSION_EVENT || c->finished) return;
  if (state == ZOO_AUTH_FAILED_STATE) {
    fprintf(stderr, "zkwarden locks: the ensemble refused ZKWARDEN_REGISTRY_AUTH\n");
    return cli_finish(c, 1);
  }
  if (state == ZOO_EXPIRED_SESSION_STATE && c->started) {
    fprintf(stderr, "zkwarden locks: the session expired during the walk\n");
    return cli_finish(c, 1);
  }
  if (state != ZOO_CONNECTED_STATE || c->started) return;
  c->started = true;
  uv_timer_stop(&c->timer);
  /* The server may lag the leader: catch up first. */
  if (zkw_zk_sync(c->zk, "/", synced, c) != ZOK) synced(c, NULL);
}

static void connect_timeout(uv_timer_t *t) {
  struct cli *c = t->data;
  char hosts[4096];
  zkw_config_upstream_list(c->cfg, hosts, sizeof hosts);
  fprintf(stderr, "zkwarden locks: no ZooKeeper session with %s (ZKWARDEN_UPSTREAM) within %d s\n", hosts,
          CLI_CONNECT_MS / 1000);
  cli_finish(c, 1);
}

static void cli_usage(FILE *out) {
  fprintf(out, "usage: zkwarden locks [--json] [--all] [--reclaim [--dry-run]]\n"
               "Lists every lock in the own trees of ZKWARDEN_IDENTITY (its registry record's, and\n"
               "ZKWARDEN_SWEEP_TREES): the state node it guards, its identity, incarnation and session,\n"
               "and whether it is stale (and if not, why not), with a summary per identity first.\n"
               "What rests on a registry record someone other than zkwarden could have written (any\n"
               "record, without ZKWARDEN_REGISTRY_AUTH) is marked not trusted; --reclaim leaves it.\n"
               "Configured by the daemon's environment (zkwarden --help).\n"
               "  --json      the report as JSON (the same as GET /v1/locks)\n"
               "  --all       every lock under ZKWARDEN_LOCK_ROOTS (every cluster's)\n"
               "  --reclaim   delete the stale locks now, under the sweep's rules\n"
               "  --dry-run   with --reclaim: say what would be deleted, delete nothing\n");
}

static const char *cli_env(const char *name) {
  return getenv(name);
}

static void cli_nothing(void *arg) {
  (void)arg;
}

/* Closes the session (blocking; on a thread while the loop serves the
 * internal relay under TLS). */
static void cli_close_zk(void *arg) {
  struct cli *c = arg;
  zkw_zk_close(c->zk);
  c->zk = NULL;
}

int zkw_locks_cli(int argc, char **argv) {
  static struct cli c; /* static: the loop's handles live in it */
  memset(&c, 0, sizeof c);
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      c.json = true;
    } else if (strcmp(argv[i], "--all") == 0) {
      c.all = true;
    } else if (strcmp(argv[i], "--reclaim") == 0) {
      c.reclaim = true;
    } else if (strcmp(argv[i], "--dry-run") == 0) {
      c.dry_run = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      cli_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "zkwarden locks: unknown argument '%s'\n", argv[i]);
      cli_usage(stderr);
      return 2;
    }
  }
  if (c.dry_run && !c.reclaim) {
    fprintf(stderr, "zkwarden locks: --dry-run goes with --reclaim\n");
    return 2;
  }
  static struct zkw_config cfg;
  char err[512];
  if (zkw_config_load(&cfg, cli_env, err, sizeof err) != 0) {
    fprintf(stderr, "zkwarden locks: %s\n", err);
    return 2;
  }
  c.cfg = &cfg;
  if (cfg.observe && c.reclaim && !c.dry_run) {
    /* A pod adopting zkwarden in observe mode deletes nothing, by hand either. */
    fprintf(stderr, "zkwarden locks: ZKWARDEN_MODE=observe: --reclaim deletes nothing here (as --dry-run); "
                    "with ZKWARDEN_MODE=sidecar it deletes\n");
    c.dry_run = true;
  }
  zkw_log_setup(cfg.log_level < ZKW_LOG_WARN ? cfg.log_level : ZKW_LOG_WARN, cfg.log_format);
  char hosts[4096];
  zkw_config_upstream_list(&cfg, hosts, sizeof hosts);
  if (uv_loop_init(&c.loop) != 0) return 1;
  static struct zkw_server relay; /* TLS: the internal relay; its loop is c.loop */
  memset(&relay, 0, sizeof relay);
  if (cfg.upstream_tls) {
    zkw_metrics_init();
    if (zkw_tls_start(&c.loop, &cfg) != 0) { /* logged; never plaintext instead */
      uv_loop_close(&c.loop);
      return 2;
    }
    if (zkw_server_start_relay_only(&relay, &c.loop, &cfg) != 0) { /* logged */
      zkw_tls_stop();
      uv_run(&c.loop, UV_RUN_DEFAULT);
      zkw_tls_free();
      uv_loop_close(&c.loop);
      return 1;
    }
  }
  uv_timer_init(&c.loop, &c.timer);
  c.timer.data = &c;
  int rc = zkw_zk_open(&c.zk, &c.loop, hosts, 10000, cfg.registry_auth[0] ? cfg.registry_auth : NULL,
                       on_event, &c);
  if (rc != 0) {
    fprintf(stderr, "zkwarden locks: cannot start a ZooKeeper client: %s\n", uv_strerror(rc));
    uv_close((uv_handle_t *)&c.timer, NULL);
    zkw_tls_stop();
    uv_run(&c.loop, UV_RUN_DEFAULT);
    if (cfg.upstream_tls) zkw_server_finish(&relay, cli_nothing, NULL);
    uv_loop_close(&c.loop);
    return 1;
  }
  uv_timer_start(&c.timer, connect_timeout, CLI_CONNECT_MS, 0);
  uv_run(&c.loop, UV_RUN_DEFAULT);
  if (cfg.upstream_tls)
    zkw_server_finish(&relay, cli_close_zk, &c); /* the closeSession goes through the relay */
  else
    cli_close_zk(&c);
  zkw_locks_report_free(c.rep);
  zkw_buf_release(&c.out);
  zkw_buf_pool_drain();
  memset(cfg.registry_auth, 0, sizeof cfg.registry_auth);
  if (uv_loop_close(&c.loop) != 0) return 1;
  return c.status;
}
