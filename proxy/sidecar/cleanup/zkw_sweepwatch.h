/* zkw_sweepwatch.h: what changed in the own trees since the last sweep
 * pass, told by the ensemble itself (zkw_sweepwatch.c), so that a periodic
 * pass reads what changed and not the whole tree.
 *
 * A persistent recursive watch (addWatch mode 1, ZooKeeper 3.6+) on each own
 * tree, set in-band on the JobManager's connection before a full walk of
 * them: from then on the server notifies that connection of every node
 * created, deleted or changed below the trees. zkwarden answers those
 * notifications alone: one is passed to the JobManager only when a watch of
 * its own asked for it (its watch table, zkw_watches.h), else dropped; the
 * paths created or changed are kept (a bounded set) for the next pass.
 *
 * The watch is only as good as its connection: it is not used once the
 * session moved to another server or the JobManager reconnected (a new
 * connection), once the JobManager set, removed or replaced a watch on a
 * tree's own path (ZooKeeper up to 3.8 keeps one watch mode per path and
 * connection), or once the set overflowed (then the watch is also removed
 * in-band, removeWatches type any, where the JobManager does not watch the
 * tree's own path itself, so that the rest of the interval's changes stop
 * coming); the next pass then walks the trees again and sets it again. An older server (3.5) closes a
 * connection that sends addWatch, so the watch is set on a connection only once the server it is on has
 * said it is 3.6 or newer: its own `srvr` answer, asked at the connection's address after the connection
 * began (the readiness probe's loop asks it, zkw_sweepwatch_version_wanted), and never on a server that
 * refused it; until then, and where it is not, every pass is a walk. Observe mode sets no watch. */
#ifndef ZKW_SWEEPWATCH_H
#define ZKW_SWEEPWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "zkw_codec.h"
#include "zkw_treeset.h"

struct zkw_identity;

struct zkw_session;

#define ZKW_SWEEPWATCH_MAX 16384 /* paths kept between passes; more: the next pass walks */

/* The readiness probe's loop (zkw_health.c) asks, at each of its ticks
 * (now: uv_now), whether a server's version is wanted: true with the
 * address of the server the JobManager's connection is on (as connected),
 * its index in ZKWARDEN_UPSTREAM (for TLS: the name to verify) and the
 * number to give back with the answer. Asked again after a probe that got no
 * answer, at most every 10 s. */
bool zkw_sweepwatch_version_wanted(struct zkw_identity *id, uint64_t now, struct sockaddr_storage *addr,
                                   uint32_t *idx, uint64_t *gen);
/* That server's answer to `srvr` (NULL or empty: none). */
void zkw_sweepwatch_version_answer(struct zkw_identity *id, uint64_t gen, const char *answer);
/* ask is called when a version becomes wanted (NULL: none), so that the
 * probe's loop asks at once rather than at its next tick (zkw_health.c sets
 * it: the call goes up through this pointer). */
void zkw_sweepwatch_on_ask(struct zkw_identity *id, void (*ask)(void));
/* True while the version of s's server is asked and not answered, for at
 * most 2 s after it was first wanted: the first walk on a connection waits
 * for it, so that it can set the watch. */
bool zkw_sweepwatch_answer_due(const struct zkw_session *s, uint64_t now);

/* The sweep will read on s: if the version of its server is not known for
 * this connection yet, it is asked now (the readiness probe's next tick), so
 * that the walk may set the watch. */
void zkw_sweepwatch_ask(const struct zkw_session *s);
/* Before a walk of trees on s: the watch is set on each tree not yet
 * watched there (in-band, ahead of the walk's reads), and what was kept is
 * forgotten (the walk reads it all). False when no watch can be had here
 * (an older or unknown server, or a request that could not be sent). */
bool zkw_sweepwatch_arm(struct zkw_session *s, const struct zkw_treeset *trees);
/* True while every tree of trees is watched on s and nothing was missed
 * since it was set: a pass may read only what the watch kept. */
bool zkw_sweepwatch_complete(const struct zkw_session *s, const struct zkw_treeset *trees);
/* Hands over the paths kept since the last call (the caller frees each and
 * the array; *n may be 0). Returns 0, or -ENOMEM (nothing handed over, the
 * watch counts as not complete). */
int zkw_sweepwatch_take(struct zkw_identity *id, char ***paths, size_t *n)
    __attribute__((warn_unused_result));
/* A notification on a session: ZKW_FORWARD, or ZKW_DROP when only the
 * watch asked for it (zkw_hooks.h on_notification). */
int zkw_sweepwatch_on_notification(struct zkw_session *s, const struct zkw_watcher_event *ev);
/* A request of the JobManager: one that sets, removes or replaces a watch
 * on a tree's own path spoils the watch. */
void zkw_sweepwatch_on_request(const struct zkw_session *s, const struct zkw_request *req);
/* Forgets everything (the identity stops). */
void zkw_sweepwatch_reset(struct zkw_identity *id);

#endif
