/* zkw_locks.h: the lock report of `zkwarden locks` and GET /v1/locks.
 *
 * A walk lists every node under the paths it is given (by default the
 * identity's own trees, zkw_treeset.h, as the sweep reads them; on demand
 * every ZKWARDEN_LOCK_ROOTS) through a zkw_zk session
 * (the CLI's own, or the daemon's registry session), reads every node whose
 * name is a UUID (a lock by the lock rule, zkw_lockrule.h) and the registry
 * record of every identity named in a tag or listed in the registry, with at
 * most ZKW_LOCKS_WINDOW reads in flight. Each lock then gets the verdict of
 * zkw_lock_why_not_stale, the rule reclaim and sweeps use, in the same words.
 * Nodes that cannot be read (NOAUTH under creator ACLs, ...) are listed as
 * unreadable with the error, never guessed at.
 *
 * The state node a lock guards is its parent (Flink up to 1.14:
 * <state>/<uuid>), or its grandparent when the parent is called `locks`
 * (Flink 1.15 and later: <state>/locks/<uuid>). Flink cannot delete a state
 * node while any lock is under it; the report says which ones only reclaim
 * would free, and which are held and why.
 *
 * A verdict rests on the registry only as far as the registry is trusted
 * (zkw_regtrust.h): each identity's record is read with its ACL, and the
 * registry's root and identities nodes with theirs; an identity whose
 * record someone other than zkwarden's registry identity can change (or
 * every one, without ZKWARDEN_REGISTRY_AUTH) is marked so, and so is each
 * lock whose verdict rests on it or that was found under a tree from an
 * untrusted source (a record's trees, zkw_owntrees.h): `zkwarden locks
 * --reclaim` acts on none of them.
 *
 * A lock whose owner session is in some identity's dead list (its record's
 * dead_sessions: a sidecar saw that session end) is also a ZOMBIE: the
 * ensemble kept it after its session ended (zkw_reclaim.h). The report
 * names the identity whose sidecar saw it end, and when; the verdict on
 * staleness stays as it is (a zombie is deleted by that identity's sweep).
 *
 * The walk never blocks: results arrive through the zkw_zk callbacks on the
 * loop, and done is called once, on the loop. */
#ifndef ZKW_LOCKS_H
#define ZKW_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_buf.h"
#include "zkw_lockrule.h"
#include "zkw_record.h"
#include "zkw_regtrust.h"
#include "zkw_treeset.h"
#include "zkw_zk.h"

#define ZKW_LOCKS_WINDOW    64      /* reads in flight */
#define ZKW_LOCKS_MAX_NODES 2000000 /* nodes visited before the walk stops (truncated) */

struct zkw_lock_entry {
  char *path;
  char *state;          /* the state node it guards */
  int id;               /* index into the report's identities; -1: untagged */
  uint64_t incarnation; /* from the tag */
  int64_t owner;        /* ephemeralOwner (0: persistent) */
  int64_t czxid;
  int32_t version;
  const char *why;       /* not stale: why (zkw_lock_why_not_stale); NULL: stale */
  int zombie_of;         /* index into the identities of the one that saw its owner end; -1: not a zombie */
  uint64_t ended_ms;     /* zombie: when that sidecar saw the owner session end (epoch ms) */
  bool under_untrusted;  /* found under a tree from an untrusted source only */
  const char *untrusted; /* why its verdict is not to be acted on, or NULL */
};

struct zkw_locks_identity {
  char name[ZKW_IDENTITY_MAX + 1];
  uint64_t current;   /* current incarnation from the registry record (0: unknown) */
  const char *record; /* "ok", or why the record gives no incarnation */
  size_t locks, stale;
  size_t zombies; /* locks owned by a session of this identity's dead list */
  int ndead;
  struct zkw_dead_session dead[ZKW_RECORD_DEAD_MAX]; /* the record's dead list */
  bool trusted;                           /* only zkwarden's registry identity can change the record */
  char trust[ZKW_REGTRUST_WHY_MAX + 320]; /* why it is not trusted ("" when it is) */
  struct Stat rec_stat, acl_stat;         /* the record and its ACL as read (the walk's) */
  bool acl_read;
};

struct zkw_locks_unreadable {
  char *path;
  int rc; /* the ZooKeeper error */
};

struct zkw_locks_report {
  struct zkw_lock_entry *locks; /* sorted by state node, then path */
  size_t nlocks, capl;
  struct zkw_locks_identity *ids; /* sorted by name once done */
  size_t nids, capi;
  struct zkw_locks_unreadable *unreadable;
  size_t nunreadable, capu;
  size_t visited;
  size_t stale, untagged, zombies;
  size_t untrusted;                                /* locks whose verdict is not to be acted on */
  bool have_auth;                                  /* the walk's session has ZKWARDEN_REGISTRY_AUTH */
  char registry_trust[ZKW_REGTRUST_WHY_MAX + 320]; /* why the registry's parents are not trusted ("") */
  char untrusted_roots[1024];                      /* the paths walked from an untrusted source */
  bool truncated;
  int64_t asking_session; /* the verdicts' asking session (0: none) */
  double seconds;         /* the walk's duration */
  char roots[1024];       /* the paths walked, comma-separated */
  bool all;               /* every lock root (else the own trees) */
};

struct zkw_locks_walk;
typedef void (*zkw_locks_done)(void *arg, struct zkw_locks_report *rep);

/* What a walk reads. */
struct zkw_locks_opts {
  const struct zkw_lock_roots *roots;     /* the paths walked */
  const struct zkw_lock_roots *untrusted; /* more paths walked, from an untrusted source: what is found
                                           * there and not under roots is marked so; or NULL */
  bool all;                               /* roots are every lock root (else the own trees) */
  bool have_auth;                         /* zk authenticates with ZKWARDEN_REGISTRY_AUTH */
  const char *registry_root;
  int64_t asking_session; /* the verdicts' asking session (0: none) */
};

/* Starts a walk. On success *out is the walk and done(arg, report) follows
 * once (the report is the caller's to free with zkw_locks_report_free).
 * Returns 0, or -1 if nothing could be sent (the session is not usable). */
int zkw_locks_walk_start(struct zkw_zk *zk, const struct zkw_locks_opts *o, zkw_locks_done done, void *arg,
                         struct zkw_locks_walk **out) __attribute__((warn_unused_result));
/* The trees as lock roots (the paths a walk is given). */
void zkw_locks_tree_roots(const struct zkw_treeset *trees, struct zkw_lock_roots *out);
/* done will not be called; the walk frees itself once its reads are back. */
void zkw_locks_walk_cancel(struct zkw_locks_walk *w);
void zkw_locks_report_free(struct zkw_locks_report *rep);

/* Renderings; each appends to b and returns 0 or -ENOMEM. */
int zkw_locks_render_json(const struct zkw_locks_report *rep, struct zkw_buf *b)
    __attribute__((warn_unused_result));
int zkw_locks_render_table(const struct zkw_locks_report *rep, struct zkw_buf *b)
    __attribute__((warn_unused_result));
/* The summary (one row per identity, and the counts) as HTML table rows. */
int zkw_locks_render_html_summary(const struct zkw_locks_report *rep, struct zkw_buf *b)
    __attribute__((warn_unused_result));

/* Name of the identity of a lock ("" when untagged). */
const char *zkw_locks_identity_of(const struct zkw_locks_report *rep, const struct zkw_lock_entry *e);

#endif
