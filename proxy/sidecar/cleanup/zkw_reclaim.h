/* zkw_reclaim.h: stale locks in the way of a JobManager's lock create or
 * delete (sweeps: zkw_sweep.h).
 *
 * In the sidecar's top room, cleanup/ (reclaim, sweeps and their watch, and
 * what they share about a node, zkw_lockcheck.h): it stands on identity/ and
 * fencing/ through their named headers (zkw_identity.h, zkw_registry.h,
 * zkw_owntrees.h, zkw_record.h, zkw_regtrust.h; zkw_fencing.h) and offers
 * the sidecar's hooks zkw_reclaim.h, zkw_sweep.h and zkw_sweepwatch.h
 * (tests/check_layers.py).
 *
 * A stale lock is a node that carries zkwarden's tag (zkw_lockrule.h), is an
 * ephemeral owned by a session other than the asking session, and whose
 * incarnation is older than its identity's current incarnation (read from
 * the registry). Nothing else is ever deleted: not untagged nodes, state
 * nodes or `locks` containers, not a current incarnation's lock.
 *
 * At create: the JobManager's client gets the server's NODEEXISTS as it came
 * (to Flink: "I hold it"), and zkwarden makes that true: if the node in the
 * way is a stale lock, one multi on the JobManager's connection deletes it
 * and creates the JobManager's own (the create it sent, tagged) in its
 * place; if the node went meanwhile, the create is made again; unless the
 * JobManager deleted the lock since. Nothing waits for it, and the server
 * executes the JobManager's requests in its order.
 *
 * At delete: a delete under the lock roots is the relay's barrier
 * (zkw_replies.h): the JobManager's later requests wait, and its NOTEMPTY is
 * withheld while the stale locks in the way are deleted in-band; the delete
 * is then replayed and the JobManager sees the replay's reply. If anything
 * in the way is not a stale lock, or a step fails (logged at warn, counted,
 * recorded), the JobManager gets the reply it would have got anyway.
 *
 * Reads, deletes and creates go in-band on the JobManager's own connection
 * (zkw_inband.h), with its rights. Observe mode sends nothing there: it reads
 * through the registry session and only reports what it would do. */
#ifndef ZKW_RECLAIM_H
#define ZKW_RECLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_wire.h"

struct zkw_session;

/* NOTEMPTY on the JobManager's delete of path. withheld: the reply is the
 * session's withheld barrier (sidecar mode): zkw_session_replay or
 * zkw_session_deliver follows. Returns false if no reclaim can start (the
 * caller then forwards the reply). */
bool zkw_reclaim_at_delete(struct zkw_session *s, struct zkw_bytes path, bool withheld);
/* NODEEXISTS on the JobManager's lock create of path (request: its create,
 * RequestHeader + CreateRequest, as sent): the reply goes on; the reclaim
 * runs behind it. */
void zkw_reclaim_at_create(struct zkw_session *s, struct zkw_bytes path, const uint8_t *request, size_t len);
/* The JobManager sent a delete of path: a reclaim at create of that lock
 * does not create it again. */
void zkw_reclaim_on_delete(struct zkw_session *s, struct zkw_bytes path);

#endif
