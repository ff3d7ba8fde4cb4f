/* zkw_identity.h: the state of this sidecar's JobManager identity (struct
 * zkw_identity: its registry, fences, orphans, sweep and the sweep's watch:
 * what lives per identity, none of it in a file's own variables) and the sidecar's block of each
 * session (struct zkw_sc_session), and what the rest asks of the identity
 * (zkw_identity.c: its state, current incarnation, mode and dead sessions).
 *
 * The bottom of the sidecar's rooms (sidecar/identity/, below fencing/ and
 * cleanup/): every room reads the struct through this header, so none has to
 * include another's to see it; each room's files change only their own
 * fields. It includes nothing of the sidecar above this room: the fence in
 * flight is proxy/client/'s zkw_fenceconn, the sweep's state plain data. */
#ifndef ZKW_IDENTITY_H
#define ZKW_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "zkw_codec.h"
#include "zkw_fenceconn.h"
#include "zkw_record.h"
#include "zkw_regtrust.h"
#include "zkw_relay.h"
#include "zkw_treeset.h"
#include "zkw_server.h"
#include "zkw_zk.h"

struct zkw_session;

#define ZKW_REG_STATES(X)                                                                                    \
  X(CONNECTING, "connecting")                                                                                \
  X(CLAIMING, "waiting for the previous sidecar instance")                                                   \
  X(OWNER, "owner")                                                                                          \
  X(CONFLICT, "conflict")                                                                                    \
  X(BROKEN, "unusable")

enum zkw_reg_state {
#define ZKW_X_REG(name, str) ZKW_REG_##name,
  ZKW_REG_STATES(ZKW_X_REG)
#undef ZKW_X_REG
};

struct zkw_orphan;
struct zkw_reclaim;

#define ZKW_SUPERSEDED_KEPT 8

/* Which identity list a session is on (zkw_sc_session.id_list). */
enum zkw_id_list { ZKW_ID_NONE, ZKW_ID_WAITING, ZKW_ID_WRITERS, ZKW_ID_WRITING };

/* The sidecar's block of each session (zkw_hooks.h session_size). A session
 * is a plain client until it acts as the JobManager
 * (zkw_acts_as_jobmanager); then its incarnation begins. */
struct zkw_sc_session {
  bool acts_as_jm;      /* it sent a request that begins an incarnation */
  bool hold_jm;         /* that request waits for the fence and the registry write */
  bool plain_conflict;  /* acted as the JobManager in an identity conflict: stays plain */
  uint64_t incarnation; /* recorded incarnation; 0: a plain client (no tags, no reclaim) */
  struct zkw_session *id_next;
  int id_list;        /* enum zkw_id_list */
  bool wait_fence;    /* its re-attach waits for an orphan fence of its session to report */
  int32_t jm_xid;     /* observe mode: the request that began the incarnation, until its reply */
  bool silent_server; /* observe mode: its server went silent (a move not made), and has not answered since */
  bool would_moved;   /* observe mode: the move not made is reported (once per connection) */
  struct zkw_reclaim *reclaims; /* reclaims at create of its locks under way (zkw_reclaim.c) */
  uint64_t saved_incarnation;   /* what the journal holds for a successor (zkw_sidecar.c) */
  bool saved_conflict;
};

static inline struct zkw_sc_session *zkw_sc(struct zkw_session *s) {
  return (struct zkw_sc_session *)zkw_session_policy(s);
}
static inline const struct zkw_sc_session *zkw_sc_c(const struct zkw_session *s) {
  return (const struct zkw_sc_session *)zkw_session_policy_c(s);
}

/* What the sweep (cleanup/zkw_sweep.c) keeps between its passes. */
struct zkw_sweep_pass;          /* one pass, the sweep's own */
#define ZKW_SWEEP_BURST_SLOTS 5 /* the JobManager's requests are counted per 100 ms, the last 500 ms */

/* A node to read: getData (a lock, or a node the watch kept) or
 * getChildren2 (a node to list). */
struct zkw_sweep_item {
  char *path;
  bool read;
};

/* A list of items (a pass's stack, what it reads again). */
struct zkw_sweep_items {
  struct zkw_sweep_item *v;
  size_t n, cap;
};

/* What decides whether a pass may read only what changed: it must see the
 * same incarnation, session, trees and dead sessions as the last walk. */
struct zkw_sweep_basis {
  uint64_t incarnation;
  int64_t session;
  struct zkw_treeset trees;
  int ndead;
  int64_t dead[ZKW_RECORD_DEAD_MAX];
  bool proven[ZKW_RECORD_DEAD_MAX];
};

struct zkw_sweeper {
  struct zkw_sweep_pass *current;
  uint64_t jm_request_ms;                /* the JobManager's last request (monotonic) */
  uint32_t burst[ZKW_SWEEP_BURST_SLOTS]; /* its requests per slot, the last SWEEP_QUIET_MS */
  uint64_t burst_slot;                   /* the slot of jm_request_ms */
  uint64_t first_since;                  /* a new incarnation's first pass waits since then; 0: none waits */
  bool began;                            /* a pass was asked for in this process */
  /* The walk begun last, with walked_basis, read every tree: each node it
   * did not read is in left (past the bound, or to read again). */
  bool walked;
  struct zkw_sweep_basis walked_basis;
  struct zkw_sweep_items left; /* what the last pass left to the next (with left_basis): read first */
  struct zkw_sweep_basis left_basis;
};

/* What the sweep's watch (cleanup/zkw_sweepwatch.c) knows: where it is set,
 * what changed below it since the last pass, and which servers take it. */
struct zkw_sweepwatch_kept; /* one path kept, the watch's own */
struct zkw_sweepwatch {
  uint64_t conn;    /* the connection the watch is set on (0: none) */
  uint64_t move_t0; /* its last move then: a move drops the watch */
  struct zkw_treeset asked, armed;
  unsigned gen;  /* bumped when the watch is dropped: late replies are ignored */
  bool spoiled;  /* something may have been missed since it was set */
  bool overflow; /* more than ZKW_SWEEPWATCH_MAX paths: forgotten */
  struct zkw_sweepwatch_kept **bucket;
  uint32_t nbuckets;
  size_t count;
  uint32_t refused; /* bit i: server i answered addWatch with UNIMPLEMENTED */
  /* The server of the JobManager's connection (zkw_sweepwatch_arm's s):
   * the connection (conn, move_t0), its server's address as connected, and
   * that server's version, from a `srvr` asked after `since`, so from the
   * very server process that holds the connection. */
  struct {
    uint64_t conn, move_t0;
    uint64_t gen; /* numbers the connections asked about: an answer names its own */
    uint32_t idx;
    struct sockaddr_storage addr;
    uint64_t since_ms, asked_ms; /* noted then (the connection was up); last asked then */
    int verdict;
  } server;
  void (*ask)(void); /* the probe's loop, asked to ask at once */
};

struct zkw_identity {
  struct zkw_server *srv;
  /* The record is loaded (zkw_registry.c): zkw_incarnation.c fences for a
   * waiting request and records the sessions that acted as the JobManager. */
  void (*on_record_loaded)(struct zkw_identity *id);
  /* A new incarnation began (its record is written): zkw_sidecar.c starts a
   * sweep soon. */
  void (*on_incarnation)(struct zkw_identity *id);
  /* zkw_regacl.c judged the record, or made an ACL zkwarden-only: what the
   * record must now hold is written (zkw_registry_flush_dead). */
  void (*on_trust)(struct zkw_identity *id);
  bool disabled;          /* ZKWARDEN_MODE=relay */
  struct zkw_zk *zk;      /* NULL until the registry session opened */
  uint32_t open_retry_ms; /* delay before opening it again, after a failure */
  enum zkw_reg_state state;
  char why[256]; /* when not the owner: why, for logs and /readyz */
  char instance[40];
  char root_identities[300], node[450], owner_node[470];

  struct zkw_record rec; /* valid when rec_loaded */
  int rec_version;       /* of the record node; -1: absent */
  bool rec_loaded;
  /* rec holds this instance's last known record; it survives a registry
   * outage, so that a record deleted or corrupted under the owner is
   * written back instead of restarting the identity at incarnation 0. */
  bool rec_known;
  bool writing;           /* a record write is in flight */
  unsigned write_gen;     /* bumped by every record write: stale checks are ignored */
  uv_timer_t check_timer; /* while the owner: the owner node and record still as written? */
  bool checking;          /* a check is in flight */
  unsigned check_gen;     /* write_gen when it was sent */
  bool corrupt_logged;    /* the corrupt record was reported (once, not at every retry) */
  /* Registry ACLs and trust (zkw_regacl.c, at each load and each check):
   * with ZKWARDEN_REGISTRY_AUTH the registry root, identities, the record
   * and the owner node are made zkwarden-only; the record's content is
   * trusted (zkw_regtrust.h) only as read under such ACLs. */
  bool acl_checking;     /* a pass is in flight */
  int acl_step;          /* enum in zkw_regacl.c: root, identities, record, owner */
  bool acl_readable;     /* this pass: a node anyone may read stays so */
  bool acl_warned;       /* the exposed nodes were reported (once) */
  bool acl_fix_failed;   /* a setACL failure was reported (once) */
  char acl_exposed[960]; /* this pass: the nodes made creator-only */
  /* This pass: why a parent was not zkwarden-only when read ("": it was),
   * and whether one stays so (not made zkwarden-only). */
  char acl_pass_why[ZKW_REGTRUST_WHY_MAX + 320];
  bool acl_parent_open;
  /* The node being made zkwarden-only: who else could change it, and
   * whether it was world-readable. */
  char acl_fix_why[ZKW_REGTRUST_WHY_MAX];
  bool acl_readable_node;
  /* The last pass left root and identities zkwarden-only: other identities'
   * records may be trusted (zkw_reclaim.c). */
  bool parents_trusted;
  /* The record content loaded last: its verdict, the Stat it was read with
   * (the ACL judged must be of that node and ACL version), and whether it
   * was read before zkwarden's own write after an ACL repair. */
  enum zkw_trust record_trust;
  struct Stat loaded_stat;
  bool loaded_before_rewrite;
  /* An ACL was made zkwarden-only: what was written before may be anyone's,
   * so nothing read is trusted until zkwarden's next record write lands. */
  bool rewrite_pending;
  char record_why[ZKW_REGTRUST_WHY_MAX + 320]; /* why the record is not trusted now ("": it is) */

  uv_timer_t claim_timer; /* conflict bound while claiming; retry when broken */
  uv_timer_t fence_timer; /* bound on holding ConnectRequests while fencing */
  uv_timer_t retry_timer; /* background fence retry */
  uv_timer_t sweep_timer;
  struct zkw_session *waiting; /* requests beginning an incarnation, held for the fence (via id_next) */
  struct zkw_session *writers; /* sessions waiting for their record write (via id_next) */

  bool fencing;
  struct zkw_fenceconn fence; /* the one fence in flight */
  uint64_t fence_incarnation;
  struct { /* the superseded session still to fence */
    bool pending;
    int64_t session;
    uint8_t passwd[16];
    uint64_t incarnation;
    int timeout_ms;       /* its negotiated timeout, for the fence's ConnectRequest */
    uint64_t deadline_ms; /* the server has expired it by then: stop retrying */
  } prev;

  int64_t superseded[ZKW_SUPERSEDED_KEPT]; /* sessions fenced while still attached */
  unsigned superseded_next;
  uint64_t superseded_alive_ms; /* when one of them last tried to re-attach */
  int64_t shared_with;          /* current session that another live JobManager was relayed beside */
  struct zkw_orphan *orphans;
  /* Sessions of this identity zkwarden saw end (its dead list, only the
   * list is used): merged from the record at load, written with every
   * record; dead_dirty: not yet written. */
  struct zkw_record dead;
  bool dead_dirty;
  /* ZKWARDEN_MODE=observe: sessions that a fence would have closed (a lock
   * of theirs in the way is the cost of that fence not done). */
  int64_t would_fenced[ZKW_SUPERSEDED_KEPT];
  unsigned would_fenced_next;
  uint64_t would_dead; /* the incarnation a would-fence ended (sidecar mode writes it as `dead`) */
  /* Observe mode: the first node the current incarnation created (its
   * leader latch), and the wait measured for a superseded session's latch
   * to go: the leadership wait that the fence not done would have saved. */
  int64_t latch_session;
  char latch_path[512];
  struct {
    bool active;
    int64_t session;
    uint64_t incarnation;
    uint64_t since_ms;
    char path[512];
  } wait;
  bool sweeping;
  bool sweep_again; /* a sweep was asked for while one ran */
  struct zkw_sweeper sweeper;
  struct zkw_sweepwatch sweepwatch;
  bool stopping;
  /* The identity's own trees (zkw_owntrees.h): learned from the creates of
   * incarnation scope_inc in this process; earlier incarnations' learned
   * here (trusted); the record's (swept only while trusted:
   * record_trust). Earlier ones are retired once the current incarnation
   * learned and walked. scope_dirty: the record does not hold them yet. */
  struct zkw_treeset scope;
  uint64_t scope_inc;
  struct zkw_treeset prev_trees;
  struct zkw_treeset rec_trees;
  bool rec_trees_warned; /* a record's trees were distrusted: said once at warn */
  bool scope_dirty;
  bool scope_full_logged; /* a tree could not be kept (the bound): said once per incarnation */
};

/* Dead sessions are forgotten this long after they ended (a day): their
 * ephemerals are zombies found by the sweeps of that day. */
#define ZKW_DEAD_SESSION_MAX_AGE_MS (24ULL * 3600 * 1000)

const char *zkw_identity_state_name(enum zkw_reg_state state);
/* True when the registry is usable (owner); else why explains. */
bool zkw_identity_ready(const struct zkw_identity *id, const char **why);
/* ZKWARDEN_MODE=observe: nothing is fenced or deleted; each such action is
 * recorded as a would-action (zkw_history_would) instead. */
bool zkw_identity_observing(const struct zkw_identity *id);
/* Staleness (used by reclaim and sweep): the current incarnation of this
 * identity when known, else 0. */
uint64_t zkw_identity_current(const struct zkw_identity *id);
/* A session of this identity that zkwarden saw end (fence, orphan fence,
 * expiry), or NULL: listed dead (for reports; deletes ask the next one). */
const struct zkw_dead_session *zkw_identity_dead_session(const struct zkw_identity *id, int64_t session);
/* The dead-list entry of a session proven dead, whose ephemerals may be
 * deleted as zombies, or NULL. Proven: zkwarden saw it end (this process;
 * or a sidecar of this identity, read from the record only when the record
 * was judged trusted: only zkwarden's registry identity can change it,
 * zkw_regtrust.h, zkw_regacl.c), within
 * ZKW_DEAD_SESSION_MAX_AGE_MS, and it is neither asking_session, nor the
 * current incarnation's session, nor attached through this sidecar now.
 * Listed but not proven: NULL with *why saying why (else *why is NULL). */
const struct zkw_dead_session *zkw_identity_proven_dead(const struct zkw_identity *id, int64_t session,
                                                        int64_t asking_session, const char **why);
/* True if the session is attached through this sidecar right now. */
bool zkw_identity_attached(const struct zkw_identity *id, int64_t session);

static inline const char *zkw_identity_name(const struct zkw_identity *id) {
  return id->srv->cfg->identity;
}

/* Monotonic milliseconds (deadlines and waits). */
static inline uint64_t zkw_identity_now_ms(void) {
  return uv_hrtime() / 1000000;
}

/* Wall-clock milliseconds since the epoch (when a session was seen to end:
 * kept in the record, read by other processes). */
static inline uint64_t zkw_identity_epoch_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

#endif
