/* zkw_inband.h: requests of zkwarden's own on a session's upstream connection.
 *
 * Reclaim and sweep read and delete locks "in-band": on the JobManager's own
 * connection, so that they run with exactly its identity and ACL rights
 * (digest, SASL DIGEST-MD5, Kerberos) and zkwarden never needs its
 * credentials. A request is encoded here, written on the session's upstream
 * connection and pushed on the session's pending ring as an owned entry
 * (zkw_pending.h). Its reply is matched by position like the client's and
 * handed to the callback, never forwarded: the server answers in order, so
 * taking replies out leaves the order of the client's own replies intact,
 * and a consumed reply's zxid is never seen by the client, whose later
 * replies carry higher ones.
 *
 * Xids: positive, counted from ZKW_INBAND_XID_BASE (0x7fff0000) and skipping
 * any xid outstanding in the ring. The Java client counts its xids up from
 * 1 and the C client from time(0) (below 0x7fff0000 until 2038), so the
 * client does not use these soon; and since replies are matched by position,
 * even a client xid equal to one of ours outstanding later would match right.
 * Watches: never set (watch=0), so no notification reaches the client
 * without a watcher of its own.
 *
 * A request is written only once the session can take it: established,
 * upstream connected, no auth (xid -4) or SASL (102) reply outstanding, and
 * the client has had a reply other than SASL on this connection (a ping,
 * an auth or a request: clients hold all of these until their SASL exchange
 * is over). Until then requests wait here in order. A request unanswered after a third of the session
 * timeout gets ZOPERATIONTIMEOUT (the JobManager's client gives up at two
 * thirds); when the session closes, every outstanding request gets
 * ZCONNECTIONLOSS. Callbacks run on the loop thread with the same result
 * struct as the registry session's (zkw_zk.h). */
#ifndef ZKW_INBAND_H
#define ZKW_INBAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_zk_result.h"

#define ZKW_INBAND_XID_BASE 0x7fff0000

struct zkw_session;
struct zkw_request;

/* Queue a request on s; cb follows exactly once (unless 0 is not returned).
 * Returns 0, -ENOMEM, -ENAMETOOLONG or -ENOTCONN (the session is closing). */
int zkw_inband_get(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
int zkw_inband_children(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
int zkw_inband_delete(struct zkw_session *s, const char *path, int version, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* getChildren2: the children and the node's Stat (has_stat). */
int zkw_inband_children2(struct zkw_session *s, const char *path, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* addWatch (ZooKeeper 3.6+: an older server closes the connection): mode 0
 * persistent, 1 persistent recursive. Its notifications come to the
 * connection like any other (zkw_hooks.h on_notification). */
int zkw_inband_add_watch(struct zkw_session *s, const char *path, int32_t mode, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* removeWatches (opcode 18): type 1 children, 2 data, 3 any (ZooKeeper 3.6+:
 * also a persistent or persistent recursive watch; 3.9 adds 4 persistent and
 * 5 persistent recursive alone). Removes this connection's watches of that
 * type on path, the client's own included; NOWATCHER when there is none. */
int zkw_inband_remove_watches(struct zkw_session *s, const char *path, int32_t type, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Any request (req decoded from a client's frame, or built): encoded
 * again with an xid of zkwarden's own. The test build's replay_create
 * mutation (zkw_mutate.h) sends a client's create a second time with it. */
int zkw_inband_request(struct zkw_session *s, const struct zkw_request *req, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* A create the client sent (request: its frame body, RequestHeader and
 * CreateRequest: create or create2, its xid replaced by one of zkwarden's):
 * the same node, data, ACL and flags, owned by the client's session. */
int zkw_inband_create(struct zkw_session *s, const uint8_t *request, size_t len, zkw_zk_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* One multi: delete path at version, then the create of request (as
 * zkw_inband_create): the node replaced at once, never missing in between.
 * The result's rc is ZOK, or the error of the sub-op that failed
 * (failed_op: 0 the delete, 1 the create); nothing is changed then. */
int zkw_inband_replace(struct zkw_session *s, const char *path, int version, const uint8_t *request,
                       size_t len, zkw_zk_cb cb, void *arg) __attribute__((warn_unused_result));

/* Relay hooks (zkw_session.c). */
/* A reply for the client (opcode op, not a notification) arrived: may make
 * waiting requests sendable. */
void zkw_inband_client_reply(struct zkw_session *s, int32_t op);
/* The reply to an owned entry (body: the frame after its length). Returns 0
 * or a negative codec error (the reply is malformed). */
int zkw_inband_reply(struct zkw_session *s, void *owned, const uint8_t *body, size_t len, int32_t op);
/* The upstream connection went away and the session moves (zkw_move.h):
 * the requests written on it, and the watch requests (addWatch,
 * removeWatches) still waiting, which were meant for that server alone, get
 * ZCONNECTIONLOSS on a later turn of the loop; the other waiting ones go out
 * once zkw_inband_resume is called. */
void zkw_inband_connection_lost(struct zkw_session *s);
void zkw_inband_resume(struct zkw_session *s);
/* The session is closing: outstanding callbacks get ZCONNECTIONLOSS. */
void zkw_inband_session_closed(struct zkw_session *s);

#endif
