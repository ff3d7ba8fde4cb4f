/* zkw_reclaim.h: deleting stale locks at create and at delete (sweeps:
 * zkw_sweep.h).
 *
 * A stale lock is a node that carries zkwarden's tag (zkw_lockrule.h), is an
 * ephemeral owned by a session other than the asking session, and whose
 * incarnation is older than its identity's current incarnation (read from
 * the registry). Nothing else is ever deleted: not untagged nodes, state
 * nodes or `locks` containers, not a current incarnation's lock.
 *
 * Reclaim at create and at delete run while the JobManager's lock request's
 * NODEEXISTS / NOTEMPTY reply is withheld (the barrier, zkw_replies.h): the
 * replies after it are held in order, while its later requests go on. Reads and
 * deletes go in-band on the JobManager's own connection (zkw_inband.h), with
 * its rights; the JobManager's request is then replayed and the JobManager
 * sees the reply of the replay. If anything in the way is not a stale lock,
 * or a step fails (logged at warn, counted, recorded), the JobManager gets
 * the reply it would have got anyway. */
#ifndef ZKW_RECLAIM_H
#define ZKW_RECLAIM_H

#include <stdbool.h>

#include "zkw_wire.h"

struct zkw_session;

/* Starts reclaiming for the withheld reply of the session's barrier request:
 * is_create: NODEEXISTS on the lock create of `path`; else NOTEMPTY on the
 * delete of `path`. Returns false if no reclaim can start (the caller then
 * forwards the reply); else zkw_session_replay or zkw_session_deliver follows. */
bool zkw_reclaim_start(struct zkw_session *s, bool is_create, struct zkw_bytes path);

#endif
