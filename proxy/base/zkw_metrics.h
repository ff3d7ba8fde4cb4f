/* zkw_metrics.h: every metric of zkwarden, listed once.
 *
 * ZKW_METRICS is the one list. From it come the fields of struct zkw_metrics,
 * the Prometheus text exposition (# HELP, # TYPE and the samples, see
 * zkw_metrics_render) and the Markdown table printed by
 * `zkwarden --list-metrics` (docs/metrics.md is checked against it).
 * Per-opcode families are generated from ZKW_OPCODES (protocol/zkw_ops.h).
 *
 * Counting is a plain add on the one event-loop thread, no locks, no atomics:
 *
 *   ZKW_METRIC_INC(fences);                 counters without labels
 *   ZKW_METRIC_SET(identity_incarnation, i); gauges
 *   zkw_metrics_request(op), zkw_metrics_reply(op),
 *   zkw_metrics_latency(op, ns)              per-opcode families
 *
 * Gauges marked "(computed)" in their help are filled from the live sessions
 * just before each scrape (zkw_admin.c); the others are set where they
 * change. */
#ifndef ZKW_METRICS_H
#define ZKW_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "zkw_buf.h"
#include "zkw_ops.h"

/* Why a client connection closed (label reason= of
 * zkwarden_connections_closed_total). A session records its class in
 * close_class before calling zkw_session_close; OTHER when none was set,
 * SHUTDOWN whenever zkwarden itself is stopping. */
#define ZKW_CLOSE_CLASSES(X)                                                                                 \
  X(OTHER, "other")                                                                                          \
  X(CLIENT_CLOSED, "client_closed")                                                                          \
  X(UPSTREAM_CLOSED, "upstream_closed")                                                                      \
  X(IO_ERROR, "io_error")                                                                                    \
  X(PROTOCOL_ERROR, "protocol_error")                                                                        \
  X(HANDSHAKE_TIMEOUT, "handshake_timeout")                                                                  \
  X(UPSTREAM_UNREACHABLE, "upstream_unreachable")                                                            \
  X(SHUTDOWN, "shutdown")                                                                                    \
  X(LIMIT, "limit")

/* clang-format off */
enum zkw_close_class {
#define ZKW_X_CLOSE(name, str) ZKW_CLOSE_##name,
  ZKW_CLOSE_CLASSES(ZKW_X_CLOSE)
#undef ZKW_X_CLOSE
  ZKW_CLOSE_COUNT
};
/* clang-format on */

/* Why a reclaim or sweep step could not do its work (label reason= of
 * zkwarden_reclaim_failures_total), from the ZooKeeper error it got. */
#define ZKW_RECLAIM_FAILURES(X)                                                                              \
  X(NOAUTH, "noauth")                                                                                        \
  X(NONODE, "nonode")                                                                                        \
  X(BADVERSION, "bad_version")                                                                               \
  X(CONNECTION_LOSS, "connection_loss")                                                                      \
  X(TIMEOUT, "timeout")                                                                                      \
  X(OTHER, "other")

/* clang-format off */
enum zkw_reclaim_failure {
#define ZKW_X_RFAIL(name, str) ZKW_RFAIL_##name,
  ZKW_RECLAIM_FAILURES(ZKW_X_RFAIL)
#undef ZKW_X_RFAIL
  ZKW_RFAIL_COUNT
};
/* clang-format on */

/* The kinds of action zkwarden takes on an identity's behalf (the kind of a
 * /v1/reclaims row and of an audit line; label kind= of
 * zkwarden_would_actions_total). X(name, "kind as shown") */
#define ZKW_ACTION_KINDS(X)                                                                                  \
  X(RECLAIM_CREATE, "reclaim_at_create")                                                                     \
  X(RECLAIM_DELETE, "reclaim_at_delete")                                                                     \
  X(SWEEP, "sweep")                                                                                          \
  X(FENCE, "fence")                                                                                          \
  X(ORPHAN_FENCE, "orphan_fence")                                                                            \
  X(ZOMBIE, "zombie")                                                                                        \
  X(SESSION_MOVE, "session_move")                                                                            \
  X(SWEEP_INCOMPLETE, "sweep_incomplete")

/* How a session move ended (label outcome= of zkwarden_session_moves_total,
 * zkw_move.c). X(name, "outcome as shown") */
#define ZKW_MOVE_OUTCOMES(X)                                                                                 \
  X(MOVED, "moved")                                                                                          \
  X(EXPIRED, "expired")                                                                                      \
  X(TIMED_OUT, "timed_out")                                                                                  \
  X(FAILED, "failed")                                                                                        \
  X(NOT_MOVABLE, "not_movable")

/* Why a session whose server went away could not move (label reason= of
 * zkwarden_session_moves_refused_total, zkw_move.c). X(name, "reason as shown") */
#define ZKW_NOT_MOVABLE_REASONS(X)                                                                           \
  X(FENCED, "fenced")                                                                                        \
  X(SASL, "sasl")                                                                                            \
  X(READ_ONLY, "read_only")                                                                                  \
  X(AUTH_NOT_KEPT, "auth_not_kept")                                                                          \
  X(AUTH_OUTSTANDING, "auth_outstanding")                                                                    \
  X(WATCHES_NOT_KEPT, "watches_not_kept")                                                                    \
  X(NO_TIME, "no_time")

/* clang-format off */
enum zkw_not_movable {
#define ZKW_X_NMOVE(name, str) ZKW_NMOVE_##name,
  ZKW_NOT_MOVABLE_REASONS(ZKW_X_NMOVE)
#undef ZKW_X_NMOVE
  ZKW_NMOVE_COUNT
};
/* clang-format on */

/* clang-format off */
enum zkw_move_outcome {
#define ZKW_X_MOVE(name, str) ZKW_MOVE_##name,
  ZKW_MOVE_OUTCOMES(ZKW_X_MOVE)
#undef ZKW_X_MOVE
  ZKW_MOVE_OUTCOME_COUNT
};
/* clang-format on */

/* clang-format off */
enum zkw_action_kind {
#define ZKW_X_AKIND(name, str) ZKW_ACTION_##name,
  ZKW_ACTION_KINDS(ZKW_X_AKIND)
#undef ZKW_X_AKIND
  ZKW_ACTION_KIND_COUNT
};
/* clang-format on */

/* Direction of relayed bytes and of decode errors (label direction=). */
enum zkw_direction { ZKW_DIR_CLIENT_TO_UPSTREAM, ZKW_DIR_UPSTREAM_TO_CLIENT, ZKW_DIR_COUNT };

/* Upper bounds of the latency histogram buckets: nanoseconds and the `le`
 * label as written (+Inf is implicit). */
#define ZKW_LATENCY_BUCKETS(X)                                                                               \
  X(100000, "0.0001")                                                                                        \
  X(250000, "0.00025")                                                                                       \
  X(500000, "0.0005")                                                                                        \
  X(1000000, "0.001")                                                                                        \
  X(2500000, "0.0025")                                                                                       \
  X(5000000, "0.005")                                                                                        \
  X(10000000, "0.01")                                                                                        \
  X(25000000, "0.025")                                                                                       \
  X(50000000, "0.05")                                                                                        \
  X(100000000, "0.1")                                                                                        \
  X(250000000, "0.25")                                                                                       \
  X(500000000, "0.5")                                                                                        \
  X(1000000000, "1")                                                                                         \
  X(2500000000, "2.5")                                                                                       \
  X(5000000000, "5")                                                                                         \
  X(10000000000, "10")

enum {
#define ZKW_X_BUCKET(ns, le) +1
  ZKW_LATENCY_BOUNDS = 0 ZKW_LATENCY_BUCKETS(ZKW_X_BUCKET)
#undef ZKW_X_BUCKET
};

struct zkw_histogram {
  uint64_t bucket[ZKW_LATENCY_BOUNDS + 1]; /* per bucket, not cumulative; last is +Inf */
  uint64_t count;
  uint64_t sum_ns;
};

/* X(field, type, labels, name, help)
 *   type:   COUNTER, GAUGE or HISTOGRAM
 *   labels: NONE; OP (op="<opcode name from ZKW_OPCODES>"); CLOSE
 *           (reason="<ZKW_CLOSE_CLASSES>"); RFAIL (reason="<ZKW_RECLAIM_FAILURES>"); KIND
 *           (kind="<ZKW_ACTION_KINDS>"); MOVE (outcome="<ZKW_MOVE_OUTCOMES>"); NMOVE
 *           (reason="<ZKW_NOT_MOVABLE_REASONS>"); MSEC (none: counted in
 * milliseconds, shown in seconds); DIR (direction= "client_to_upstream"|"upstream_to_client"); BUILD
 * (version=) Help texts are one line without backslashes (they are written verbatim). */
#define ZKW_METRICS(X)                                                                                       \
  X(build_info, GAUGE, BUILD, "zkwarden_build_info", "Always 1; the version label is the zkwarden version.") \
  X(start_time, GAUGE, NONE, "zkwarden_start_time_seconds",                                                  \
    "Start time of the process, seconds since the Unix epoch.")                                              \
  X(connections_accepted, COUNTER, NONE, "zkwarden_connections_accepted_total",                              \
    "Client connections accepted on ZKWARDEN_LISTEN.")                                                       \
  X(connections_active, GAUGE, NONE, "zkwarden_connections_active",                                          \
    "Client connections open now (computed).")                                                               \
  X(connections_closed, COUNTER, CLOSE, "zkwarden_connections_closed_total",                                 \
    "Client connections closed, by reason class.")                                                           \
  X(connections_refused, COUNTER, NONE, "zkwarden_connections_refused_total",                                \
    "Client connections closed as soon as accepted: ZKWARDEN_MAX_CLIENTS reached, or out of memory.")        \
  X(sessions_established, COUNTER, NONE, "zkwarden_sessions_established_total",                              \
    "ConnectResponses granting a session (new or re-attached) relayed to clients.")                          \
  X(sessions_rejected, COUNTER, NONE, "zkwarden_sessions_rejected_total",                                    \
    "ConnectResponses refusing a session (expired or invalid) relayed to clients.")                          \
  X(sessions_active, GAUGE, NONE, "zkwarden_sessions_active",                                                \
    "Client connections with an established ZooKeeper session now (computed).")                              \
  X(plain_client_sessions, GAUGE, NONE, "zkwarden_plain_client_sessions",                                    \
    "Established sessions that are not the JobManager's incarnation (CLI, TaskManagers, zkCli, "             \
    "monitoring).")                                                                                          \
  X(requests, COUNTER, OP, "zkwarden_requests_total", "Requests received from clients, by opcode.")          \
  X(replies, COUNTER, OP, "zkwarden_replies_total",                                                          \
    "Replies relayed to clients, by the opcode of their request.")                                           \
  X(request_duration, HISTOGRAM, OP, "zkwarden_request_duration_seconds",                                    \
    "Time from reading a client request to reading its reply from the server, by opcode (pings and "         \
    "xid -4 auth excluded).")                                                                                \
  X(watch_events, COUNTER, NONE, "zkwarden_watch_events_total", "Watch notifications relayed to clients.")   \
  X(outstanding_requests, GAUGE, NONE, "zkwarden_outstanding_requests",                                      \
    "Requests awaiting their reply, all connections (computed).")                                            \
  X(bytes, COUNTER, DIR, "zkwarden_relayed_bytes_total", "Bytes relayed, by direction.")                     \
  X(buffered_bytes, GAUGE, NONE, "zkwarden_buffered_bytes",                                                  \
    "Bytes zkwarden buffers now, all connections together (computed: the capacity of its buffers in use; "   \
    "past ZKWARDEN_MAX_BUFFERED_BYTES reads stop at frame boundaries, so it stays under that bound plus "    \
    "the frame each connection is reading or writing).")                                                     \
  X(buffer_cap_pauses, COUNTER, NONE, "zkwarden_buffer_cap_pauses_total",                                    \
    "Times a connection stopped being read because all buffers together passed "                             \
    "ZKWARDEN_MAX_BUFFERED_BYTES (logged at warn when it begins).")                                          \
  X(decode_errors, COUNTER, DIR, "zkwarden_decode_errors_total",                                             \
    "Frames that failed to parse or to match a request (each closes its connection), by direction.")         \
  X(upstream_connect_failures, COUNTER, NONE, "zkwarden_upstream_connect_failures_total",                    \
    "Failed attempts to reach an upstream server (resolve, connect, timeout).")                              \
  X(upstream_failovers, COUNTER, NONE, "zkwarden_upstream_failovers_total",                                  \
    "Connections that reached an upstream server only after another one failed.")                            \
  X(upstream_reachable, GAUGE, NONE, "zkwarden_upstream_reachable",                                          \
    "1 while an upstream server answers (the upstream condition of /readyz), else 0.")                       \
  X(tls_handshakes, COUNTER, NONE, "zkwarden_tls_handshakes_total",                                          \
    "TLS handshakes with an upstream server that verified and completed (ZKWARDEN_UPSTREAM_TLS=on).")        \
  X(tls_handshake_failures, COUNTER, NONE, "zkwarden_tls_handshake_failures_total",                          \
    "TLS handshakes with an upstream server that failed (verification, protocol or connection lost).")       \
  X(tls_reloads, COUNTER, NONE, "zkwarden_tls_reloads_total",                                                \
    "TLS CA, certificate and key re-read into a new context (SIGHUP or a change of the files).")             \
  X(tls_reload_failures, COUNTER, NONE, "zkwarden_tls_reload_failures_total",                                \
    "TLS reloads that failed (the previous context stays in use).")                                          \
  X(tls_cert_expiry, GAUGE, NONE, "zkwarden_tls_cert_expiry_timestamp_seconds",                              \
    "notAfter of the TLS client certificate in use, seconds since the Unix epoch; 0 when none or TLS off.")  \
  X(identity_incarnation, GAUGE, NONE, "zkwarden_identity_incarnation",                                      \
    "Current incarnation number of this JobManager identity (0 until known).")                               \
  X(ready, GAUGE, NONE, "zkwarden_ready",                                                                    \
    "1 while GET /readyz answers 200 (upstream reachable, registry usable), else 0 (computed).")             \
  X(fences, COUNTER, NONE, "zkwarden_fences_total", "Superseded sessions closed on the server (fenced).")    \
  X(fence_failures, COUNTER, NONE, "zkwarden_fence_failures_total",                                          \
    "Fencing attempts that failed or timed out.")                                                            \
  X(reclaims_create, COUNTER, NONE, "zkwarden_reclaims_at_create_total",                                     \
    "Lock creates that got NODEEXISTS on a stale lock whose JobManager then got its own lock in-band (the "  \
    "stale lock replaced by it, or the create made again where the stale lock went meanwhile); the "         \
    "JobManager had the server's NODEEXISTS: for Flink, the lock is held.")                                  \
  X(reclaims_delete, COUNTER, NONE, "zkwarden_reclaims_at_delete_total",                                     \
    "Deletes replayed after deleting the stale locks that caused NOTEMPTY.")                                 \
  X(barrier_waits, COUNTER, NONE, "zkwarden_lock_delete_waits_total",                                        \
    "Deletes under the lock roots with a further request of the client's waiting behind them: it goes to "   \
    "the server only once the client has the delete's answer (after a reclaim at delete, if one runs), so "  \
    "the server executes a session's requests in its order.")                                                \
  X(stale_locks_swept, COUNTER, NONE, "zkwarden_stale_locks_swept_total",                                    \
    "Stale locks of this identity deleted by a sweep.")                                                      \
  X(zombie_ephemerals, COUNTER, NONE, "zkwarden_zombie_ephemerals_total",                                    \
    "Zombies found in the own trees: ephemerals whose owner, a session of this identity, is proven dead "    \
    "(deleted, or reported when one server alone serves it); each is logged at warn and shown in "           \
    "/v1/reclaims.")                                                                                         \
  X(reclaim_failures, COUNTER, RFAIL, "zkwarden_reclaim_failures_total",                                     \
    "Reclaim and sweep steps (reads, deletes) that could not do their work, by reason; each is logged at "   \
    "warn and shown in /v1/reclaims.")                                                                       \
  X(sweep_full_passes, COUNTER, NONE, "zkwarden_sweep_full_passes_total",                                    \
    "Sweep passes that walked this identity's own trees (after a new incarnation, when no watch tells what " \
    "changed, or going on from an incomplete pass).")                                                        \
  X(sweep_change_passes, COUNTER, NONE, "zkwarden_sweep_change_passes_total",                                \
    "Periodic sweep passes that read only the nodes created in the own trees since the last pass (its "      \
    "persistent recursive watch, ZooKeeper 3.6+).")                                                          \
  X(sweep_reads, COUNTER, NONE, "zkwarden_sweep_reads_total",                                                \
    "Reads the sweep sent to the ensemble, in-band on the JobManager's connection (one per node visited).")  \
  X(sweep_last_reads, GAUGE, NONE, "zkwarden_sweep_last_pass_reads",                                         \
    "Reads of the last sweep pass that ended.")                                                              \
  X(sweep_incomplete, COUNTER, NONE, "zkwarden_sweep_incomplete_total",                                      \
    "Sweep passes that could not finish: stopped at ZKWARDEN_SWEEP_MAX_NODES, a node not read or a "         \
    "candidate not settled (a read or delete failed), or cut short; what each left is read by the next "     \
    "pass, and its line (sweep done ...; incomplete) is logged at warn.")                                    \
  X(sweep_left, GAUGE, NONE, "zkwarden_sweep_paths_left",                                                    \
    "Paths the last sweep pass left to the next one (past ZKWARDEN_SWEEP_MAX_NODES, or to read again after " \
    "a read or delete failed); 0 once a pass finished. Earlier incarnations' trees retire only at 0.")       \
  X(own_trees, GAUGE, NONE, "zkwarden_own_trees",                                                            \
    "This identity's own trees, which the sweep and the lock report read (ZKWARDEN_SWEEP_TREES, the trees "  \
    "its JobManager's creates show, and a trusted registry record's).")                                      \
  X(zombies_unproven, COUNTER, NONE, "zkwarden_zombies_unproven_total",                                      \
    "Ephemerals whose owner the registry record lists as dead but zkwarden could not prove dead (record "    \
    "writable by anyone, the session attached or current): never deleted, each logged once.")                \
  X(orphans_fenced, COUNTER, NONE, "zkwarden_orphans_fenced_total",                                          \
    "Abandoned sessions fenced after ZKWARDEN_ORPHAN_GRACE_MS.")                                             \
  X(would_actions, COUNTER, KIND, "zkwarden_would_actions_total",                                            \
    "ZKWARDEN_MODE=observe: fences, deletes and session moves that sidecar mode would have done and "        \
    "observe mode only reported, by kind (each is logged and shown in /v1/reclaims with would true).")       \
  X(would_fence_wait_ms, COUNTER, MSEC, "zkwarden_would_fence_wait_seconds_total",                           \
    "ZKWARDEN_MODE=observe: how long superseded sessions' leader latches outlived the fences not done: "     \
    "the leadership wait of new JobManagers that sidecar mode would have saved.")                            \
  X(audit_write_failures, COUNTER, NONE, "zkwarden_audit_write_failures_total",                              \
    "Actions that could not be appended to ZKWARDEN_AUDIT_FILE (logged at error).")                          \
  X(identity_conflicts, COUNTER, NONE, "zkwarden_identity_conflicts_total",                                  \
    "Times another live sidecar held this identity's previous session (nothing was fenced).")                \
  X(registry_errors, COUNTER, NONE, "zkwarden_registry_errors_total",                                        \
    "Registry reads or writes that failed (missing, unreadable, corrupt or conflicting).")                   \
  X(registry_world_readable, GAUGE, NONE, "zkwarden_registry_world_readable",                                \
    "1 while a registry node of this identity (its record lets whoever reads it close the JobManager's "     \
    "session) is "                                                                                           \
    "readable without credentials (ZKWARDEN_REGISTRY_AUTH unset, or a world ACL not made creator-only).")    \
  X(registry_untrusted, GAUGE, NONE, "zkwarden_registry_untrusted",                                          \
    "1 while this identity's registry record, or a registry node above it, can be changed by someone "       \
    "other than zkwarden's registry identity (ZKWARDEN_REGISTRY_AUTH unset, or an ACL not made "             \
    "zkwarden-only): its dead sessions and trees then delete nothing.")                                      \
  X(untrusted_records, COUNTER, NONE, "zkwarden_untrusted_records_total",                                    \
    "Registry records read (this identity's at each load, other identities' by reclaim) that someone other " \
    "than zkwarden's registry identity can change: nothing they name was deleted; logged at warn once per "  \
    "change.")                                                                                               \
  X(lock_walks, COUNTER, NONE, "zkwarden_lock_walks_total",                                                  \
    "Walks of the lock roots started for GET / and /v1/locks (one at a time; a report answers 5 s of "       \
    "requests).")                                                                                            \
  X(session_moves, COUNTER, MOVE, "zkwarden_session_moves_total",                                            \
    "Sessions whose server went away or silent, by outcome: moved to another server with the client kept "   \
    "connected, expired on the ensemble, out of the client's time, failed (no server took it), or not "      \
    "movable (zkwarden_session_moves_refused_total says why); all but moved drop the client as direct.")     \
  X(session_move_duration, HISTOGRAM, NONE, "zkwarden_session_move_seconds",                                 \
    "Time from losing a session's server to the session confirmed and restored on another one.")             \
  X(session_moves_refused, COUNTER, NMOVE, "zkwarden_session_moves_refused_total",                           \
    "Sessions whose server went away and that could not move, by reason: fenced by zkwarden, SASL, "         \
    "read-only, an auth reply outstanding, watches not kept, the client's read timeout too close; and "      \
    "sessions marked unable to move when their auth packets passed the bound kept for a replay "             \
    "(auth_not_kept, counted then). Each is logged.")                                                        \
  X(recovered_sessions, COUNTER, NONE, "zkwarden_sessions_taken_over_total",                                 \
    "Client connections this process took over from the previous zkwarden process (a crash, an upgrade, "    \
    "a restart) with their session re-attached, the client kept connected.")                                 \
  X(recovered_dropped, COUNTER, NONE, "zkwarden_sessions_not_taken_over_total",                              \
    "Client connections the previous zkwarden process left that this one closed (not durable, or their "     \
    "state not whole: each logged with why); the client reconnects as after any crash.")                     \
  X(admin_requests, COUNTER, NONE, "zkwarden_admin_requests_total",                                          \
    "HTTP requests answered by the admin endpoint.")                                                         \
  X(admin_rejected, COUNTER, NONE, "zkwarden_admin_connections_rejected_total",                              \
    "Admin connections refused because the connection limit was reached.")

/* Storage of one row, by type and labels. */
#define ZKW_MSTORE_COUNTER_NONE(f)   uint64_t f;
#define ZKW_MSTORE_COUNTER_OP(f)     uint64_t f[ZKW_OP_COUNT];
#define ZKW_MSTORE_COUNTER_CLOSE(f)  uint64_t f[ZKW_CLOSE_COUNT];
#define ZKW_MSTORE_COUNTER_DIR(f)    uint64_t f[ZKW_DIR_COUNT];
#define ZKW_MSTORE_COUNTER_RFAIL(f)  uint64_t f[ZKW_RFAIL_COUNT];
#define ZKW_MSTORE_COUNTER_KIND(f)   uint64_t f[ZKW_ACTION_KIND_COUNT];
#define ZKW_MSTORE_COUNTER_MSEC(f)   uint64_t f;
#define ZKW_MSTORE_GAUGE_NONE(f)     int64_t f;
#define ZKW_MSTORE_GAUGE_BUILD(f)    int64_t f;
#define ZKW_MSTORE_COUNTER_MOVE(f)   uint64_t f[ZKW_MOVE_OUTCOME_COUNT];
#define ZKW_MSTORE_COUNTER_NMOVE(f)  uint64_t f[ZKW_NMOVE_COUNT];
#define ZKW_MSTORE_HISTOGRAM_OP(f)   struct zkw_histogram f[ZKW_OP_COUNT];
#define ZKW_MSTORE_HISTOGRAM_NONE(f) struct zkw_histogram f;

struct zkw_metrics {
#define ZKW_X_FIELD(field, type, labels, name, help) ZKW_MSTORE_##type##_##labels(field)
  ZKW_METRICS(ZKW_X_FIELD)
#undef ZKW_X_FIELD
};

/* The process's metrics. Only the event-loop thread touches them. */
extern struct zkw_metrics zkw_metrics;

#define ZKW_METRIC_INC(field)    ((void)(zkw_metrics.field++))
#define ZKW_METRIC_SET(field, v) ((void)(zkw_metrics.field = (v)))

extern const uint64_t zkw_latency_bounds_ns[ZKW_LATENCY_BOUNDS];

static inline void zkw_histogram_observe(struct zkw_histogram *h, uint64_t ns) {
  unsigned i = 0;
  while (i < ZKW_LATENCY_BOUNDS && ns > zkw_latency_bounds_ns[i])
    i++;
  h->bucket[i]++;
  h->count++;
  h->sum_ns += ns;
}

static inline void zkw_metrics_request(int32_t op) {
  int i = zkw_op_index(op);
  if (i >= 0) zkw_metrics.requests[i]++;
}

/* A frame from the server: a reply to op, or a watch notification. */
static inline void zkw_metrics_reply(int32_t op) {
  if (op == ZKW_OP_NOTIFICATION) {
    zkw_metrics.watch_events++;
    return;
  }
  int i = zkw_op_index(op);
  if (i >= 0) zkw_metrics.replies[i]++;
}

static inline void zkw_metrics_latency(int32_t op, uint64_t ns) {
  int i = zkw_op_index(op);
  if (i >= 0) zkw_histogram_observe(&zkw_metrics.request_duration[i], ns);
}

/* A ConnectResponse relayed: granted (timeout > 0) or refused. */
static inline void zkw_metrics_session(int granted) {
  if (granted)
    zkw_metrics.sessions_established++;
  else
    zkw_metrics.sessions_rejected++;
}

static inline void zkw_metrics_bytes(int from_client, uint64_t n) {
  zkw_metrics.bytes[from_client ? ZKW_DIR_CLIENT_TO_UPSTREAM : ZKW_DIR_UPSTREAM_TO_CLIENT] += n;
}

static inline void zkw_metrics_decode_error(int from_client) {
  zkw_metrics.decode_errors[from_client ? ZKW_DIR_CLIENT_TO_UPSTREAM : ZKW_DIR_UPSTREAM_TO_CLIENT]++;
}

static inline void zkw_metrics_closed(int close_class) {
  zkw_metrics.connections_closed[close_class >= 0 && close_class < ZKW_CLOSE_COUNT ? close_class : 0]++;
}

/* Sets the constant gauges (build_info, start_time). Called once at start. */
void zkw_metrics_init(void);
/* Appends the Prometheus text exposition (format 0.0.4) of every metric to
 * out. Returns 0 or -ENOMEM. */
int zkw_metrics_render(struct zkw_buf *out) __attribute__((warn_unused_result));
/* Prints the Markdown table of every metric (name, type, labels, help). */
void zkw_metrics_list_markdown(FILE *out);
/* The label value of a reclaim failure reason ("other" if out of range). */
const char *zkw_reclaim_failure_name(int f);
/* The label value of a reason a session could not move ("unknown" if out of range). */
const char *zkw_not_movable_name(int reason);
/* The name of an action kind ("unknown" if out of range). */
const char *zkw_action_kind_name(int kind);

#endif
