/* zkw_identity.h: this sidecar's JobManager identity, its registry record,
 * incarnations, fencing and orphaned sessions (docs/how-it-works.md: Identities, tags
 * and reclaim; The registry).
 *
 * The registry lives in ZooKeeper under ZKWARDEN_REGISTRY_ROOT:
 *   <root>/identities/<identity>        the record (zkw_record.h), persistent
 *   <root>/identities/<identity>/owner  ephemeral of the sidecar instance that
 *                                       owns the identity; data: its instance id
 * Only the owner fences, writes the record and reclaims. A new sidecar whose
 * predecessor died waits for the old owner node to go (its registry session
 * expires within seconds); one that still exists after twice that session's
 * timeout belongs to a live sidecar: an identity conflict, reported and
 * counted, and nothing is fenced or reclaimed while it lasts.
 *
 * A session's first request that acts as the JobManager (an ephemeral create
 * under the lock roots: zkw_acts_as_jobmanager) starts a new incarnation:
 * the request is held while the previous incarnation's session is fenced
 * (bounded by ZKWARDEN_FENCE_TIMEOUT_MS, then retried in the background) and
 * the new session is recorded, then forwarded. Every other session is a
 * plain client: never fenced, never fencing. */
#ifndef ZKW_IDENTITY_H
#define ZKW_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_codec.h"
#include "zkw_fence.h"
#include "zkw_record.h"
#include "zkw_relay.h"
#include "zkw_zk.h"

struct zkw_server;
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
  int32_t config_xid; /* an outstanding getData of /zookeeper/config, or 0 */
  bool wait_fence;    /* its re-attach waits for an orphan fence of its session to report */
  int32_t jm_xid;     /* observe mode: the request that began the incarnation, until its reply */
};

static inline struct zkw_sc_session *zkw_sc(struct zkw_session *s) {
  return (struct zkw_sc_session *)zkw_session_policy(s);
}
static inline const struct zkw_sc_session *zkw_sc_c(const struct zkw_session *s) {
  return (const struct zkw_sc_session *)zkw_session_policy_c(s);
}

struct zkw_identity {
  struct zkw_server *srv;
  /* A new incarnation began (its record is written): zkw_sidecar.c starts a
   * sweep soon. */
  void (*on_incarnation)(struct zkw_identity *id);
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
  /* Registry ACLs (at start and at each check): a world ACL on the record
   * or owner node is made creator-only when ZKWARDEN_REGISTRY_AUTH is set. */
  bool acl_checking;     /* a pass is in flight */
  int acl_step;          /* 0: the record node, 1: the owner node */
  bool acl_readable;     /* this pass: a node anyone may read stays so */
  bool acl_warned;       /* the exposed nodes were reported (once) */
  bool acl_fix_failed;   /* a setACL failure was reported (once) */
  char acl_exposed[960]; /* this pass: the nodes made creator-only */

  uv_timer_t claim_timer; /* conflict bound while claiming; retry when broken */
  uv_timer_t fence_timer; /* bound on holding ConnectRequests while fencing */
  uv_timer_t retry_timer; /* background fence retry */
  uv_timer_t sweep_timer;
  struct zkw_session *waiting; /* requests beginning an incarnation, held for the fence (via id_next) */
  struct zkw_session *writers; /* sessions waiting for their record write (via id_next) */

  bool fencing;
  struct zkw_fence fence; /* the one fence in flight */
  uint64_t fence_incarnation;
  struct { /* the superseded session still to fence */
    bool pending;
    int64_t session;
    uint8_t passwd[16];
    uint64_t incarnation;
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
  bool stopping;
};

/* Starts the registry session and the claim. Returns 0 or an error (logged;
 * the proxy then relays without identity features). */
int zkw_identity_start(struct zkw_identity *id, struct zkw_server *srv) __attribute__((warn_unused_result));
/* Stops timers and handles (the loop can end); zkw_identity_finish after
 * the loop closes the registry session, which removes the owner node. */
void zkw_identity_stop(struct zkw_identity *id);
void zkw_identity_finish(struct zkw_identity *id);

const char *zkw_identity_state_name(enum zkw_reg_state state);
/* True when the registry is usable (owner); else why explains. */
bool zkw_identity_ready(const struct zkw_identity *id, const char **why);

/* Session hooks, all on the loop thread. */
/* A valid ConnectRequest arrived: a re-attach cancels the session's orphan
 * fence, and a superseded session re-attaching is noted (two live
 * JobManagers on one sidecar). */
int zkw_identity_on_connect_request(struct zkw_session *s, const struct zkw_connect_req *req);
/* The server answered the ConnectRequest: the recorded session re-attached
 * is the current incarnation again. */
void zkw_identity_on_connect_response(struct zkw_session *s, const struct zkw_connect_resp *resp);
/* The session sent its first request that acts as the JobManager
 * (zkw_acts_as_jobmanager): its incarnation begins. Returns true if the
 * request must be held (hold_jm) while the previous incarnation is fenced
 * and this one recorded; zkw_session_resume follows. False: forward it now
 * (tagged if its incarnation was set, as a plain client otherwise). */
bool zkw_identity_on_jm_request(struct zkw_session *s);
/* Observe mode: the request that began the session's incarnation created
 * `path` (its leader latch, usually). */
void zkw_identity_on_jm_created(struct zkw_session *s, struct zkw_bytes path);
/* The session's client connection is closing. */
void zkw_identity_on_session_closed(struct zkw_session *s);

/* ZKWARDEN_MODE=observe: nothing is fenced or deleted; each such action is
 * recorded as a would-action (zkw_history_would) instead. */
bool zkw_identity_observing(const struct zkw_identity *id);
/* Observe mode: a fence of this session would have been done. */
bool zkw_identity_would_have_fenced(const struct zkw_identity *id, int64_t session);

/* Staleness (used by reclaim and sweep): the current incarnation of this
 * identity when known, else 0. */
uint64_t zkw_identity_current(const struct zkw_identity *id);
/* A session of this identity that zkwarden saw end (fence, orphan fence,
 * expiry), or NULL: an ephemeral it still owns is a zombie. */
const struct zkw_dead_session *zkw_identity_dead_session(const struct zkw_identity *id, int64_t session);

#endif
