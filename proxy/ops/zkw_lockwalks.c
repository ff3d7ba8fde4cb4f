/* zkw_lockwalks.c: the admin endpoint's lock walks (see zkw_lockwalks.h):
 * their session, one walk at a time by scope, the report's reuse, and the
 * requests waiting for them. zkw_admin.c renders the answers. */
#include "zkw_lockwalks.h"

#include <stddef.h>
#include <string.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_locks.h"
#include "zkw_metrics.h"
#include "zkw_owntrees.h"
#include "zkw_server.h"
#include "zkw_sidecar.h"

static struct {
  struct zkw_server *srv;
  zkw_lockwalk_answer answer;
  bool stopping;
  struct zkw_zk *zk; /* opened at the first walk, closed by zkw_lockwalks_finish */
  bool connected;
  uv_timer_t timer;                    /* bound on the wait for zk to connect */
  uv_timer_t expire;                   /* frees rep once it answers no more requests */
  bool timer_open;                     /* both initialised */
  struct zkw_locks_walk *walk;         /* the one in flight */
  bool walk_all;                       /* its scope: every lock root (else the own trees) */
  struct zkw_locks_report *rep;        /* the last one's report */
  uint64_t rep_at;                     /* uv_now when it ended */
  struct zkw_lockwalk_waiter *waiters; /* newest first */
} walks;

void zkw_lockwalks_setup(struct zkw_server *srv, zkw_lockwalk_answer answer) {
  walks.srv = srv;
  walks.answer = answer;
  walks.stopping = false;
}

void zkw_lockwalks_cancel(struct zkw_lockwalk_waiter *w) {
  if (!w->waiting) return;
  for (struct zkw_lockwalk_waiter **p = &walks.waiters; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  w->next = NULL;
  w->waiting = false;
}

/* Every waiter of the scope (all: every lock root, else the own trees) gets
 * rep (or why). */
static void answer_all(bool all, const struct zkw_locks_report *rep, const char *why) {
  for (struct zkw_lockwalk_waiter **p = &walks.waiters; *p;) {
    struct zkw_lockwalk_waiter *w = *p;
    if (w->all != all) {
      p = &w->next;
      continue;
    }
    *p = w->next;
    w->next = NULL;
    w->waiting = false;
    walks.answer(w, rep, why);
  }
}

/* The report of a big tree is big: not kept past its reuse. */
static void walk_expire(uv_timer_t *t) {
  (void)t;
  zkw_locks_report_free(walks.rep);
  walks.rep = NULL;
}

static void walk_begin(void);

static void walk_done(void *arg, struct zkw_locks_report *rep) {
  (void)arg;
  walks.walk = NULL;
  zkw_locks_report_free(walks.rep);
  walks.rep = rep;
  walks.rep_at = uv_now(walks.srv->loop);
  if (walks.timer_open) uv_timer_start(&walks.expire, walk_expire, ZKW_ADMIN_WALK_REUSE_MS, 0);
  answer_all(walks.walk_all, rep, rep ? NULL : "out of memory");
  walk_begin(); /* the requests for the other scope */
}

/* A walk for the oldest waiter's scope: the own trees (those the sweep
 * reads), or every lock root. */
static void walk_begin(void) {
  if (walks.walk || !walks.waiters || walks.stopping) return;
  struct zkw_lockwalk_waiter *oldest = walks.waiters;
  while (oldest->next)
    oldest = oldest->next;
  bool all = oldest->all;
  const struct zkw_config *cfg = walks.srv->cfg;
  struct zkw_lock_roots own, untrusted = {0};
  if (!all) { /* the sweep's, and the record's that are not trusted (shown, marked so) */
    struct zkw_treeset trees;
    const struct zkw_identity *id = zkw_sidecar_identity(walks.srv);
    zkw_owntrees_of(id, &trees);
    zkw_locks_tree_roots(&trees, &own);
    zkw_owntrees_untrusted(id, &trees);
    zkw_locks_tree_roots(&trees, &untrusted);
  }
  walks.walk_all = all;
  struct zkw_locks_opts o = {all ? &cfg->lock_roots : &own, &untrusted,         all,
                             cfg->registry_auth[0] != 0,    cfg->registry_root, 0};
  if (zkw_locks_walk_start(walks.zk, &o, walk_done, NULL, &walks.walk) != 0) {
    walks.walk = NULL;
    answer_all(false, NULL, "the lock walk's session refused the reads");
    return answer_all(true, NULL, "the lock walk's session refused the reads");
  }
  ZKW_METRIC_INC(lock_walks);
}

static void walk_wait_timeout(uv_timer_t *t) {
  (void)t;
  if (walks.walk) return;
  answer_all(false, NULL, "the lock walk's ZooKeeper session did not connect");
  answer_all(true, NULL, "the lock walk's ZooKeeper session did not connect");
}

static void walk_zk_event(void *arg, int type, int state, const char *path) {
  (void)arg, (void)path;
  if (type != ZOO_SESSION_EVENT) return;
  walks.connected = state == ZOO_CONNECTED_STATE;
  if (walks.connected && walks.timer_open) uv_timer_stop(&walks.timer);
  if (walks.connected && !walks.stopping) walk_begin();
}

const char *zkw_lockwalks_start(struct zkw_lockwalk_waiter *w, bool page, bool all) {
  struct zkw_identity *id = zkw_sidecar_identity(walks.srv);
  if (walks.srv->cfg->relay_only) return "relay mode (ZKWARDEN_MODE=relay) keeps no registry session";
  if (!id || !id->zk || !zkw_zk_connected(id->zk)) return "the registry session is not connected";
  w->page = page;
  w->all = all;
  if (walks.rep && walks.rep->all == all && !walks.walk &&
      uv_now(walks.srv->loop) - walks.rep_at < ZKW_ADMIN_WALK_REUSE_MS) {
    walks.answer(w, walks.rep, NULL);
    return NULL;
  }
  if (!walks.zk) {
    const struct zkw_config *cfg = walks.srv->cfg;
    char hosts[4096];
    zkw_config_upstream_list(cfg, hosts, sizeof hosts);
    if (!walks.timer_open) {
      if (uv_timer_init(walks.srv->loop, &walks.timer) != 0) return "out of memory";
      if (uv_timer_init(walks.srv->loop, &walks.expire) != 0) {
        uv_close((uv_handle_t *)&walks.timer, NULL);
        return "out of memory";
      }
      walks.timer_open = true;
    }
    if (zkw_zk_open(&walks.zk, walks.srv->loop, hosts, ZKW_ADMIN_WALK_SESSION_MS,
                    cfg->registry_auth[0] ? cfg->registry_auth : NULL, walk_zk_event, NULL) != 0) {
      walks.zk = NULL;
      return "cannot start the lock walk's ZooKeeper session";
    }
  }
  w->waiting = true;
  w->next = walks.waiters; /* newest first: the oldest is the last */
  walks.waiters = w;
  if (walks.connected)
    walk_begin();
  else if (!uv_is_active((uv_handle_t *)&walks.timer))
    uv_timer_start(&walks.timer, walk_wait_timeout, ZKW_ADMIN_WALK_WAIT_MS, 0);
  return NULL;
}

void zkw_lockwalks_stop(void) {
  walks.stopping = true;
  if (walks.walk) zkw_locks_walk_cancel(walks.walk); /* it frees itself and its report */
  walks.walk = NULL;
  walks.waiters = NULL; /* their connections are closing */
  if (walks.timer_open) {
    uv_close((uv_handle_t *)&walks.timer, NULL);
    uv_close((uv_handle_t *)&walks.expire, NULL);
  }
  walks.timer_open = false;
  if (walks.zk) zkw_zk_close_handle(walks.zk);
}

void zkw_lockwalks_finish(void) {
  if (walks.zk) zkw_zk_close(walks.zk);
  walks.zk = NULL;
  walks.connected = false;
  zkw_locks_report_free(walks.rep);
  walks.rep = NULL;
}
