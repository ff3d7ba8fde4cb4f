/* zkw_admin.h: the admin HTTP endpoint on ZKWARDEN_ADMIN_LISTEN.
 *
 * HTTP/1.1 (keep-alive, pipelining) parsed by llhttp, on the proxy's own
 * event loop. GET only:
 *   /healthz       200 "ok" while the process serves
 *   /readyz        200 "ready", or 503 with a one-line reason (zkw_health.h)
 *   /metrics       Prometheus text format 0.0.4 (zkw_metrics.h)
 *   /v1/sessions   JSON: the client connections and their sessions
 *   /v1/reclaims   JSON: the last reclaim actions (zkw_history.h)
 *   /v1/locks      JSON: the lock report (zkw_locks.h), read through the
 *                  registry session without blocking the loop
 *   /              the status page: plain HTML, no external assets
 * The answers of /v1/locks (of the own trees; ?all=1: of every lock root)
 * and / wait for a lock walk (zkw_lockwalks.h); they close the connection
 * (what was pipelined behind them is not read).
 * From a peer that is not on loopback only /healthz, /readyz and /metrics
 * answer (what the kubelet and Prometheus need); the rest, which walks the
 * tree or names sessions, gets 403 unless ZKWARDEN_ADMIN_REMOTE=all.
 * Other paths get 404, other methods on these paths 405. A malformed request
 * gets 400, a request head over ZKW_ADMIN_HEAD_MAX bytes 431, a URL over
 * ZKW_ADMIN_URL_MAX bytes 414, a body over ZKW_ADMIN_BODY_MAX bytes 413; each
 * closes that admin connection only, and so does the answer to a request
 * that asks for an Upgrade or a CONNECT tunnel. At most ZKW_ADMIN_MAX_CONNS admin
 * connections are open at once; more are answered 503 and closed.
 *
 * The module also owns SIGHUP: it reopens ZKWARDEN_LOG_FILE. */
#ifndef ZKW_ADMIN_H
#define ZKW_ADMIN_H

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_buf.h"
#include "zkw_lockwalks.h"

struct zkw_server;

#define ZKW_ADMIN_MAX_CONNS  256
#define ZKW_ADMIN_HEAD_MAX   8192 /* request line and headers */
#define ZKW_ADMIN_URL_MAX    1024
#define ZKW_ADMIN_BODY_MAX   1024              /* GET bodies are read and ignored up to this */
#define ZKW_ADMIN_OUT_MAX    (4 * 1024 * 1024) /* unsent responses before the connection is closed */
#define ZKW_ADMIN_REQUEST_MS 10000             /* a request must arrive whole within this */
#define ZKW_ADMIN_IDLE_MS    60000             /* an idle keep-alive connection is closed after this */

/* Binds ZKWARDEN_ADMIN_LISTEN (or takes the listening socket a keeper or a
 * predecessor handed over, zkw_keeperlink.h) and starts the readiness
 * checks and the SIGHUP handler. Returns 0 or a negative libuv error
 * (logged). */
int zkw_admin_start(struct zkw_server *srv) __attribute__((warn_unused_result));
/* Stops accepting, closes every admin connection and the module's handles.
 * Called by zkw_server_stop; idempotent. */
void zkw_admin_stop(void);
/* After the loop ended (blocking, as zkw_sidecar_finish): closes the walks'
 * ZooKeeper session if one was opened. */
void zkw_admin_finish(void);

/* ---- one admin connection's HTTP, without its socket ----
 * zkw_admin.c's socket code feeds each connection's bytes to
 * zkw_admin_http_feed and writes what lands in out; the fuzz target
 * (tests/fuzz/fuzz_admin.c) drives the same functions with no socket. */
struct zkw_admin_http {
  llhttp_t parser;
  struct zkw_buf out; /* responses the writer has not taken yet */
  size_t held;        /* response bytes the writer holds besides out (it keeps this current) */
  /* Called after each response is appended to out (may be NULL): the writer
   * takes what it can. Nonzero means the connection is closing: parse no more. */
  int (*flush)(struct zkw_admin_http *h);
  void *data;         /* the writer's */
  uint64_t begun;     /* requests begun so far (the writer's timers watch these two) */
  uint64_t completed; /* requests parsed whole so far */
  bool in_request;    /* a request has begun and is not complete */
  bool done;          /* the last response is in out: close once it is written */
  bool failed;        /* out of memory or the flush failed: close at once */
  int err_status;     /* set by a parser callback that refuses the request */
  size_t head_bytes;  /* request line and headers so far */
  size_t body_bytes;
  size_t url_len;
  char url[ZKW_ADMIN_URL_MAX + 1];
  bool remote;                     /* the peer is not on loopback (ZKWARDEN_ADMIN_REMOTE applies) */
  struct zkw_lockwalk_waiter walk; /* the last request waits for a lock walk (zkw_lockwalks.h) */
};

/* Makes the request handling answer about srv (zkw_admin_start calls it). */
void zkw_admin_http_setup(struct zkw_server *srv);
void zkw_admin_http_init(struct zkw_admin_http *h);
/* Parses n more bytes and appends the answers to h->out. Returns 0 (then
 * h->done says whether the connection is to close once out is written), or
 * -1 when it must close at once (h->failed). Bytes after done are ignored. */
int zkw_admin_http_feed(struct zkw_admin_http *h, const char *data, size_t n)
    __attribute__((warn_unused_result));
/* The deadline of the request underway (h->in_request) passed: appends a 408
 * and sets done. Returns 0 or -1 as zkw_admin_http_feed. */
int zkw_admin_http_timeout(struct zkw_admin_http *h) __attribute__((warn_unused_result));
/* Frees out (the parser holds no memory). */
void zkw_admin_http_release(struct zkw_admin_http *h);

#endif
