/* zkw_config.h: configuration from the environment (12-factor).
 *
 * ZKW_CONFIG_VARS is the one list of variables: environment name, default,
 * parser and help text. Parsing, validation messages, --help, --list-config
 * (docs/configuration.md) and --check-config are generated from it. */
#ifndef ZKW_CONFIG_H
#define ZKW_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "zkw_addr.h"
#include "zkw_handover.h"
#include "zkw_lockrule.h"
#include "zkw_log.h"

#define ZKW_MAX_UPSTREAMS 16
/* ZKWARDEN_SWEEP_TREES: at most this many (an identity's scope holds them
 * beside the trees it learns, zkw_treeset.h). */
#define ZKW_SWEEP_TREES_MAX 8

/* X(field, environment variable, default (NULL: required), parser, min, max, help) */
#define ZKW_CONFIG_VARS(X)                                                                                   \
  X(upstream, "ZKWARDEN_UPSTREAM", NULL, hostports, 0, 0,                                                    \
    "ZooKeeper ensemble, host:port,host:port,... (required)")                                                \
  X(listen, "ZKWARDEN_LISTEN", ZKW_DEFAULT_LISTEN, listen_addr, 0, 0,                                        \
    "address the JobManager connects to, ip:port or [ipv6]:port")                                            \
  X(admin_listen, "ZKWARDEN_ADMIN_LISTEN", ZKW_DEFAULT_ADMIN_LISTEN, admin_addr, 0, 0,                       \
    "admin HTTP endpoint (/healthz /readyz /metrics /v1/...), ip:port or [ipv6]:port")                       \
  X(admin_remote, "ZKWARDEN_ADMIN_REMOTE", "probes", admin_remote, 0, 0,                                     \
    "probes: from other hosts only /metrics /healthz /readyz answer (the rest on loopback); all: every "     \
    "path")                                                                                                  \
  X(max_frame, "ZKWARDEN_MAX_FRAME", "1048575", uint, 8, 0x7fffffff,                                         \
    "largest frame accepted from a client, bytes (ZooKeeper's jute.maxbuffer)")                              \
  X(max_reply_frame, "ZKWARDEN_MAX_REPLY_FRAME", "67108864", uint, 16, 0x7fffffff,                           \
    "largest frame accepted from the server, bytes (big getChildren replies)")                               \
  X(connect_timeout_ms, "ZKWARDEN_CONNECT_TIMEOUT_MS", "2000", uint, 1, 600000,                              \
    "bound on one TCP connect to an upstream server, ms; then the next one is tried")                        \
  X(handshake_timeout_ms, "ZKWARDEN_HANDSHAKE_TIMEOUT_MS", "10000", uint, 1, 600000,                         \
    "a client that sends no ConnectRequest (or four-letter word) within this many ms is closed")             \
  X(max_clients, "ZKWARDEN_MAX_CLIENTS", "256", uint, 1, 1000000,                                            \
    "client connections served at once; a newcomer beyond it first displaces the oldest connection that "    \
    "has sent no handshake, else it is accepted, closed and counted")                                        \
  X(max_buffered, "ZKWARDEN_MAX_BUFFERED_BYTES", "268435456", uint, 1048576, 0x7fffffff,                     \
    "bound on the bytes zkwarden buffers for all connections together: over it, a connection holding more "  \
    "than its share (the bound over the connections open) stops being read at its next frame boundary "      \
    "until the buffers drain under three quarters of it (zkwarden_buffered_bytes)")                          \
  X(durable_sessions, "ZKWARDEN_DURABLE_SESSIONS", "64", uint, 0, 4096,                                      \
    "client connections whose state zkwarden keeps in its journal so that its successor (after a crash, an " \
    "upgrade, a restart) takes them over without the client noticing; connections beyond it are served as "  \
    "before (a crash ends them); 0: none")                                                                   \
  X(upstream_tls, "ZKWARDEN_UPSTREAM_TLS", "off", onoff, 0, 0,                                               \
    "on: every connection to the ensemble is verified TLS (never plaintext); off: plaintext")                \
  X(tls_ca_file, "ZKWARDEN_TLS_CA_FILE", "", pem_file, 0, 0,                                                 \
    "PEM bundle of the CAs the servers' certificates are verified against; empty: the system store")         \
  X(tls_cert_file, "ZKWARDEN_TLS_CERT_FILE", "", pem_file, 0, 0,                                             \
    "PEM client certificate (chain) for servers with ssl.clientAuth=need; empty: none")                      \
  X(tls_key_file, "ZKWARDEN_TLS_KEY_FILE", "", key_file, 0, 0,                                               \
    "PEM private key of ZKWARDEN_TLS_CERT_FILE (unencrypted)")                                               \
  X(tls_server_name, "ZKWARDEN_TLS_SERVER_NAME", "", server_name, 0, 0,                                      \
    "name verified in every server's certificate and sent as SNI; empty: each server's host as written")     \
  X(mode, "ZKWARDEN_MODE", "sidecar", mode, 0, 0,                                                            \
    "sidecar: one JobManager's identity, tags, fencing and reclaim; observe: identity and tags, fencing "    \
    "and deletes only reported as would-actions; relay: a plain transparent proxy")                          \
  X(identity, "ZKWARDEN_IDENTITY", "$HOSTNAME", identity, 0, 0,                                              \
    "stable JobManager identity, e.g. the StatefulSet pod name: 1-128 of [A-Za-z0-9._-]")                    \
  X(registry_root, "ZKWARDEN_REGISTRY_ROOT", "/zkwarden", znode, 0, 0, "registry root znode")                \
  X(registry_auth, "ZKWARDEN_REGISTRY_AUTH", "", auth, 0, 0,                                                 \
    "digest credentials user:password for the registry ACL (secret; empty: world ACL with a warning)")       \
  X(registry_auth_file, "ZKWARDEN_REGISTRY_AUTH_FILE", "", auth_file, 0, 0,                                  \
    "file holding user:password, instead of ZKWARDEN_REGISTRY_AUTH")                                         \
  X(lock_roots, "ZKWARDEN_LOCK_ROOTS", "/flink", lock_roots, 0, 0,                                           \
    "comma list of znode paths under which the lock rule applies")                                           \
  X(fence_timeout_ms, "ZKWARDEN_FENCE_TIMEOUT_MS", "3000", uint, 1, 600000,                                  \
    "bound on fencing before the request beginning an incarnation goes on, ms (fencing goes on after)")      \
  X(orphan_grace_ms, "ZKWARDEN_ORPHAN_GRACE_MS", "2500", uint, 0, 86400000,                                  \
    "grace before a session whose JobManager connection dropped without closeSession is fenced, ms; 0 "      \
    "disables. A live Java client comes back 1-2 s after a drop (1 s, then a random 0-1 s), so a standby "   \
    "JobManager leads this long after its leader's crash")                                                   \
  X(sweep_interval_s, "ZKWARDEN_SWEEP_INTERVAL_S", "300", uint, 0, 86400,                                    \
    "periodic sweep of this identity's stale locks, s; 0 disables")                                          \
  X(session_move, "ZKWARDEN_SESSION_MOVE", "on", onoff, 0, 0,                                                \
    "on: when the server a session is on goes away or goes silent, zkwarden moves the session to another "   \
    "server while its client stays connected (off: the client's connection is dropped, as direct)")          \
  X(zombie_move, "ZKWARDEN_ZOMBIE_MOVE", "off", onoff, 0, 0,                                                 \
    "on: after a zombie served by one server alone, later connections try that server last for 10 min")      \
  X(sweep_trees, "ZKWARDEN_SWEEP_TREES", "", sweep_trees, 0, 0,                                              \
    "comma list of this JobManager's own trees, each below a lock root (e.g. /flink/<cluster-id>): the "     \
    "sweep and the lock report read them first, besides the trees learned from its creates; at most 8; "     \
    "empty: learned only")                                                                                   \
  X(sweep_max_nodes, "ZKWARDEN_SWEEP_MAX_NODES", "200000", uint, 100, 100000000,                             \
    "nodes one sweep pass reads at most; a pass that reaches it says so and the next pass goes on from "     \
    "there")                                                                                                 \
  X(sweep_watch, "ZKWARDEN_SWEEP_WATCH", "on", onoff, 0, 0,                                                  \
    "on: a periodic sweep reads only what changed since the last pass, told by a persistent recursive "      \
    "watch on the own trees (ZooKeeper 3.6+; older servers: walks); off: every pass walks them")             \
  X(keeper, "ZKWARDEN_KEEPER", "off", onoff, 0, 0,                                                           \
    "on: zkwarden-keeper holds the listening sockets and a duplicate of every client connection, so that "   \
    "a crash or an upgrade of this process does not close them (zkwarden-keeper --spawn sets it; in "        \
    "Kubernetes set it in the zkwarden container beside a keeper container); off: zkwarden holds them")      \
  X(keeper_socket, "ZKWARDEN_KEEPER_SOCKET", "", socket_name, 0, 0,                                          \
    "name of the handover socket (abstract unix socket) where the keeper, or a zkwarden without one, "       \
    "answers `zkwarden --takeover` and `zkwarden upgrade`; empty: zkwarden/ followed by ZKWARDEN_LISTEN")    \
  X(takeover, "ZKWARDEN_TAKEOVER", "off", onoff, 0, 0,                                                       \
    "on: start as the successor of the zkwarden that serves (as `zkwarden --takeover`); the keeper sets it " \
    "for a planned restart")                                                                                 \
  X(log_level, "ZKWARDEN_LOG_LEVEL", "info", log_level, 0, 0, "error, warn, info or debug")                  \
  X(log_format, "ZKWARDEN_LOG_FORMAT", "text", log_format, 0, 0, "text or json")                             \
  X(log_file, "ZKWARDEN_LOG_FILE", "", log_file, 0, 0,                                                       \
    "file the log is appended to (SIGHUP reopens it); empty: stderr")                                        \
  X(audit_file, "ZKWARDEN_AUDIT_FILE", "", audit_file, 0, 0,                                                 \
    "file every action, done or would-be, is appended to as one JSON line (SIGHUP reopens it); empty: none")

struct zkw_config {
  struct zkw_hostport upstream[ZKW_MAX_UPSTREAMS];
  int upstream_count;
  struct sockaddr_storage listen;
  struct sockaddr_storage admin_listen;
  uint32_t max_frame;
  uint32_t max_reply_frame;
  uint32_t connect_timeout_ms;
  uint32_t handshake_timeout_ms;
  uint32_t max_clients;
  uint32_t max_buffered;
  uint32_t durable_sessions;
  bool upstream_tls;
  bool session_move;
  bool zombie_move;
  bool sweep_watch;
  bool keeper;   /* ZKWARDEN_KEEPER=on: a keeper holds the sockets (zkw_keeperlink.h) */
  bool takeover; /* ZKWARDEN_TAKEOVER=on: start as the successor of the running zkwarden */
  char keeper_socket[ZKW_HANDOVER_NAME_MAX + 1]; /* "": zkwarden/<ZKWARDEN_LISTEN> */
  const char *tls_ca_file;                       /* "" when unset, like the other paths */
  const char *tls_cert_file;
  const char *tls_key_file;
  char tls_server_name[256];
  bool relay_only;       /* ZKWARDEN_MODE=relay: no identity features at all */
  bool observe;          /* ZKWARDEN_MODE=observe: no fence and no delete, each reported as a would-action */
  bool admin_remote_all; /* ZKWARDEN_ADMIN_REMOTE=all: every admin path answers non-loopback peers */
  char identity[ZKW_IDENTITY_MAX + 1];
  char registry_root[256];
  char registry_auth[256]; /* secret: never printed or logged */
  struct zkw_lock_roots lock_roots;
  struct zkw_lock_roots sweep_trees; /* count 0: none named; at most ZKW_SWEEP_TREES_MAX */
  uint32_t sweep_max_nodes;
  uint32_t fence_timeout_ms;
  uint32_t orphan_grace_ms;
  uint32_t sweep_interval_s;
  enum zkw_log_level log_level;
  enum zkw_log_format log_format;
  const char *log_file;   /* NULL: stderr */
  const char *audit_file; /* NULL: no audit trail */
  /* The text each variable was resolved from, for --check-config. */
#define ZKW_X_RAW(field, env, def, parser, lo, hi, help) const char *raw_##field;
  ZKW_CONFIG_VARS(ZKW_X_RAW)
#undef ZKW_X_RAW
};

/* Reads every variable through getenv_fn (getenv in production). On a bad
 * value writes one line naming the variable, the value and what is allowed
 * into err and returns -1. */
int zkw_config_load(struct zkw_config *cfg, const char *(*getenv_fn)(const char *), char *err, size_t errlen)
    __attribute__((warn_unused_result));
void zkw_config_print(const struct zkw_config *cfg, FILE *out);
/* ZKWARDEN_UPSTREAM as "host:port,host:port" (libzookeeper's host string). */
void zkw_config_upstream_list(const struct zkw_config *cfg, char *out, size_t cap);
/* The address of a numeric host:port (IPv4 or IPv6); false for a name,
 * which has to be resolved. */
bool zkw_hostport_numeric(const struct zkw_hostport *hp, struct sockaddr_storage *out);
void zkw_config_help(FILE *out);
/* The configuration reference as a markdown table (`zkwarden --list-config`,
 * docs/configuration.md is checked against it). */
void zkw_config_list_markdown(FILE *out);

#endif
