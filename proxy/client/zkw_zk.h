/* zkw_zk.h: zkwarden's own ZooKeeper session, on libzookeeper_mt, bridged
 * to the libuv loop. In proxy/client/, below the policy: the registry
 * (sidecar/identity/), the lock report and `zkwarden locks` (ops/) share it;
 * its one call upward of base is zkw_tls_route (the relay's internal
 * plaintext relay under TLS).
 *
 * libzookeeper_mt calls completions and watchers on its own threads. Here
 * every completion copies its result into an operation record and queues it;
 * a uv_async_t wakes the loop, which runs the caller's callback. So the rest
 * of zkwarden only ever sees ZooKeeper results on the loop thread, and never
 * blocks the loop waiting for them. The session is re-created when it
 * expires. Used for the registry only: reclaim reads and deletes go in-band
 * on the JobManager's connection (zkw_inband.h). */
#ifndef ZKW_ZK_H
#define ZKW_ZK_H

#include <stdbool.h>
#include <uv.h>
#include <zookeeper/zookeeper.h>

#include "zkw_zk_result.h"

struct zkw_zk;

/* Session state changes and node watch events, on the loop thread.
 * type is ZOO_SESSION_EVENT for state changes (state ZOO_CONNECTED_STATE,
 * ZOO_EXPIRED_SESSION_STATE, ...), else a node event with its path. */
typedef void (*zkw_zk_event_cb)(void *arg, int type, int state, const char *path);

/* hosts: "h:p,h:p"; auth: "user:password" for the digest scheme or NULL. */
int zkw_zk_open(struct zkw_zk **out, uv_loop_t *loop, const char *hosts, int timeout_ms, const char *auth,
                zkw_zk_event_cb on_event, void *arg) __attribute__((warn_unused_result));
/* The same, re-attaching the session `session` (its password: 16 bytes) that
 * a predecessor process left open (zkw_journal.h); one that expired gives
 * way to a new session as usual. */
int zkw_zk_open_resumed(struct zkw_zk **out, uv_loop_t *loop, const char *hosts, int timeout_ms,
                        const char *auth, zkw_zk_event_cb on_event, void *arg, int64_t session,
                        const uint8_t *passwd) __attribute__((warn_unused_result));
/* The connected session's id and password (for a successor), or false. */
bool zkw_zk_client_id(const struct zkw_zk *zk, int64_t *id, uint8_t passwd[16]);
/* Closes the session (its ephemerals go at once) and frees everything.
 * Blocks briefly: call at shutdown, outside callbacks. Pending callbacks
 * are not called. */
void zkw_zk_close(struct zkw_zk *zk);
/* Closes the uv handle only (the loop can then end); call before zkw_zk_close. */
void zkw_zk_close_handle(struct zkw_zk *zk);

bool zkw_zk_connected(const struct zkw_zk *zk);
int64_t zkw_zk_session_id(const struct zkw_zk *zk);
int zkw_zk_timeout(const struct zkw_zk *zk);

/* Asynchronous operations; each returns ZOK or an immediate error (then cb is
 * not called). watch: set a watch whose event reaches on_event. */
int zkw_zk_get(struct zkw_zk *zk, const char *path, bool watch, zkw_zk_cb cb, void *arg);
int zkw_zk_exists(struct zkw_zk *zk, const char *path, bool watch, zkw_zk_cb cb, void *arg);
int zkw_zk_children(struct zkw_zk *zk, const char *path, zkw_zk_cb cb, void *arg);
int zkw_zk_create(struct zkw_zk *zk, const char *path, const char *data, int len, bool ephemeral,
                  zkw_zk_cb cb, void *arg);
int zkw_zk_set(struct zkw_zk *zk, const char *path, const char *data, int len, int version, zkw_zk_cb cb,
               void *arg);
int zkw_zk_delete(struct zkw_zk *zk, const char *path, int version, zkw_zk_cb cb, void *arg);
/* The node's ACL: r->acl_world, r->acl_world_read, r->stat.aversion, and
 * the judgement against the session's own digest id (acl_ours, acl_others,
 * acl_other: zkw_zk_result.h). what names the call's fault points (the
 * test build's ZKW_TEST_FAULT=zk:N@what), e.g. "acl-parent". */
int zkw_zk_get_acl(struct zkw_zk *zk, const char *path, const char *what, zkw_zk_cb cb, void *arg);
/* Makes the node creator-only (the session's credentials, all
 * permissions), if its ACL version is still aversion. ZINVALIDACL without
 * credentials. A creator ACL names every id the session is authenticated
 * as: its digest id, and under TLS with a client certificate the
 * certificate's x509 id too, which the JobManager's sessions through the
 * sidecar share. digest_only: the digest id alone (for a node whose ACL
 * already names it, acl_ours: so it is the id the server computes for these
 * credentials, and the session keeps its rights). what: as for
 * zkw_zk_get_acl. */
int zkw_zk_set_acl_creator(struct zkw_zk *zk, const char *path, int aversion, bool digest_only,
                           const char *what, zkw_zk_cb cb, void *arg);
int zkw_zk_sync(struct zkw_zk *zk, const char *path, zkw_zk_cb cb, void *arg);

const char *zkw_zk_error(int rc);
/* Log callback for libzookeeper handles (zookeeper_init2). */
void zkw_zk_client_log(const char *message);

#endif
