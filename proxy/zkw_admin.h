/* zkw_admin.h: the admin HTTP endpoint on ZKWARDEN_ADMIN_LISTEN.
 *
 * HTTP/1.1 (keep-alive, pipelining) parsed by llhttp, on the proxy's own
 * event loop. GET only:
 *   /healthz       200 "ok" while the process serves
 *   /readyz        200 "ready", or 503 with a one-line reason (zkw_health.h)
 *   /metrics       Prometheus text format 0.0.4 (zkw_metrics.h)
 *   /v1/sessions   JSON: the client connections and their sessions
 *   /v1/reclaims   JSON: the last reclaim actions (zkw_history.h)
 * Other paths get 404, other methods on these paths 405. A malformed request
 * gets 400, a request head over ZKW_ADMIN_HEAD_MAX bytes 431, a URL over
 * ZKW_ADMIN_URL_MAX bytes 414, a body over ZKW_ADMIN_BODY_MAX bytes 413; each
 * closes that admin connection only. At most ZKW_ADMIN_MAX_CONNS admin
 * connections are open at once; more are answered 503 and closed.
 *
 * The module also owns SIGHUP: it reopens ZKWARDEN_LOG_FILE. */
#ifndef ZKW_ADMIN_H
#define ZKW_ADMIN_H

struct zkw_server;

#define ZKW_ADMIN_MAX_CONNS  256
#define ZKW_ADMIN_HEAD_MAX   8192 /* request line and headers */
#define ZKW_ADMIN_URL_MAX    1024
#define ZKW_ADMIN_BODY_MAX   1024              /* GET bodies are read and ignored up to this */
#define ZKW_ADMIN_OUT_MAX    (4 * 1024 * 1024) /* unsent responses before the connection is closed */
#define ZKW_ADMIN_REQUEST_MS 10000             /* a request must arrive whole within this */
#define ZKW_ADMIN_IDLE_MS    60000             /* an idle keep-alive connection is closed after this */

/* Binds ZKWARDEN_ADMIN_LISTEN and starts the readiness checks and the
 * SIGHUP handler. Returns 0 or a negative libuv error (logged). */
int zkw_admin_start(struct zkw_server *srv) __attribute__((warn_unused_result));
/* Stops accepting, closes every admin connection and the module's handles.
 * Called by zkw_server_stop; idempotent. */
void zkw_admin_stop(void);

#endif
