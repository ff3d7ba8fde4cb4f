/* zkw_watches.h: the watches one client connection has on its server, as
 * the ZooKeeper client itself keeps them, so that a session moved to another
 * server (zkw_move.h) can re-arm them with setWatches.
 *
 * A watch is set by a successful read with the watch flag (getData: data;
 * getChildren(2): child; exists: data, or exist when the node is missing)
 * and by addWatch (persistent, persistent recursive); it is gone when its
 * notification is relayed (persistent ones stay) or removeWatches succeeds.
 * A read's path is kept from the request to its reply only when the watch
 * flag is set, so reads without it cost one test. A table that cannot grow
 * (out of memory) is marked lost: the session can then no longer move. */
#ifndef ZKW_WATCHES_H
#define ZKW_WATCHES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_buf.h"
#include "zkw_codec.h"

enum {
  ZKW_WATCH_DATA = 1,
  ZKW_WATCH_EXIST = 2,
  ZKW_WATCH_CHILD = 4,
  ZKW_WATCH_PERSISTENT = 8,
  ZKW_WATCH_RECURSIVE = 16,
  ZKW_WATCH_KINDS = 5,
};

struct zkw_watch;
struct zkw_armed;

struct zkw_watches {
  struct zkw_watch **bucket;                 /* NULL until the first watch */
  uint32_t nbuckets;                         /* power of two */
  uint32_t count;                            /* paths with at least one kind */
  struct zkw_armed *armed_head, *armed_tail; /* watch requests awaiting their reply, in order */
  bool lost;                                 /* an allocation failed: the table is incomplete */
  uint32_t gen;                              /* bumped by every change of the table (zkw_journal.c) */
};

/* A request the client sent upstream. Cheap unless it sets or removes a watch. */
void zkw_watches_request(struct zkw_watches *w, const struct zkw_request *req);
/* The reply to the client's request xid (op, err from its header). */
void zkw_watches_reply(struct zkw_watches *w, int32_t xid, int32_t err);
/* A notification relayed to the client. */
void zkw_watches_event(struct zkw_watches *w, const struct zkw_watcher_event *ev);
/* The connection went away: requests awaiting their reply set nothing. */
void zkw_watches_lost_replies(struct zkw_watches *w);
/* Appends the setWatches frames (xid -8; setWatches2 when a persistent watch
 * is kept) that re-arm every watch at relative_zxid, each under 128 KB as the
 * Java client sends them. Returns the number of frames (0 without watches),
 * or -ENOMEM. */
int zkw_watches_encode(const struct zkw_watches *w, int64_t relative_zxid, struct zkw_buf *out)
    __attribute__((warn_unused_result));
/* Loads setWatches frames (zkw_watches_encode's) into the table. Returns 0,
 * or -1 (a frame that does not decode, or out of memory). */
int zkw_watches_load(struct zkw_watches *w, const uint8_t *frames, size_t len)
    __attribute__((warn_unused_result));
/* The kinds kept for a path (0: none). */
unsigned zkw_watches_kinds(const struct zkw_watches *w, const char *path, size_t len);
void zkw_watches_free(struct zkw_watches *w);

#endif
