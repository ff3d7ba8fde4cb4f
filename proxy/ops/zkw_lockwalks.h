/* zkw_lockwalks.h: the lock walks of the admin endpoint (zkw_lockwalks.c):
 * the lock reports (zkw_locks.h) that GET /v1/locks and the status page
 * answer with.
 *
 * One walk runs at a time, on a ZooKeeper session of its own (opened at the
 * first walk, so that its reads never queue before the registry's
 * requests), of one scope: the identity's own trees (the sweep's, and its
 * record's trees that are not trusted, marked so), or every lock root
 * (/v1/locks?all=1). Requests that come meanwhile wait for it (or
 * for the next walk, of their scope); a report answers every request of its
 * scope for ZKW_ADMIN_WALK_REUSE_MS after its walk ended. A waiting request
 * is answered through the callback given at setup. */
#ifndef ZKW_LOCKWALKS_H
#define ZKW_LOCKWALKS_H

#include <stdbool.h>

#define ZKW_ADMIN_WALK_REUSE_MS   5000  /* a lock report answers the requests of this long after its walk */
#define ZKW_ADMIN_WALK_WAIT_MS    10000 /* bound on the wait for the walks' session to connect */
#define ZKW_ADMIN_WALK_SESSION_MS 10000 /* the walks' session timeout */

struct zkw_server;
struct zkw_locks_report;

/* A request's place in the wait for a walk (embedded in the request). */
struct zkw_lockwalk_waiter {
  bool waiting; /* it waits for a walk */
  bool page;    /* it is for the status page (else /v1/locks) */
  bool all;     /* every lock root (else the own trees) */
  struct zkw_lockwalk_waiter *next;
};

/* Answers a waiter with a report, or NULL and why there is none. */
typedef void (*zkw_lockwalk_answer)(struct zkw_lockwalk_waiter *w, const struct zkw_locks_report *rep,
                                    const char *why);

void zkw_lockwalks_setup(struct zkw_server *srv, zkw_lockwalk_answer answer);
/* Queues w for a report of its scope, starting a walk (and its session) if
 * none runs; answers at once with a report still fresh. Returns NULL, or
 * why no report can come (w is not queued then). */
const char *zkw_lockwalks_start(struct zkw_lockwalk_waiter *w, bool page, bool all);
/* w waits no more (its connection is closing); the walk goes on. */
void zkw_lockwalks_cancel(struct zkw_lockwalk_waiter *w);
/* The endpoint stops: the walk in flight is cancelled, the handles closed,
 * the waiters forgotten (their connections are closing). */
void zkw_lockwalks_stop(void);
/* After the loop ended (blocking): closes the walks' session, if any. */
void zkw_lockwalks_finish(void);

#endif
