/* zkw_health.h: readiness of zkwarden (GET /readyz).
 *
 * zkwarden is ready when an upstream ZooKeeper server answers, and when its
 * registry is usable (this instance owns its identity: zkw_identity_ready).
 * The upstream part is known two ways:
 * - passively: any reply or ConnectResponse read from an upstream server in
 *   the last probe interval (zkw_session_upstream_seen_ns, kept by the relay);
 * - actively: when nothing was read from upstream for a probe interval, a
 *   probe connects to the servers of ZKWARDEN_UPSTREAM in turn and sends the
 *   four-letter word `srvr` (on ZooKeeper's default whitelist). A server that
 *   answers with its mode counts as reachable; one that answers "not currently
 *   serving requests" (no quorum) does not; one that refuses `srvr` because
 *   of its whitelist is reachable but its quorum state is unknown.
 * The result is cached: /readyz never waits on the network. */
#ifndef ZKW_HEALTH_H
#define ZKW_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct zkw_server;

/* How often readiness is re-checked, and the freshness window of passive
 * evidence. A probe runs at a tick only when there is no fresh passive
 * evidence and either the last probe failed, or it is older than
 * ZKW_HEALTH_REPROBE_MS, or connections to upstream servers were lost or
 * failed since (counted in zkw_metrics). An idle sidecar thus sends one
 * `srvr` every 30 s (ZooKeeper logs each at info), and a dead server is
 * noticed within a tick of its sessions dropping. */
#define ZKW_HEALTH_INTERVAL_MS 5000
#define ZKW_HEALTH_REPROBE_MS  30000
/* A server the relay lost is probed until it serves again: every
 * ZKW_HEALTH_RETURN_MS for ZKW_HEALTH_RETURN_FAST_MS after its loss (a
 * restart takes seconds), then every ZKW_HEALTH_RETURN_SLOW_MS until
 * ZKW_HEALTH_RETURN_LONG_MS, then every ZKW_HEALTH_REPROBE_MS (a server that
 * stays down). The probe's timer ticks every ZKW_HEALTH_RETURN_MS while a
 * server lost that recently is down, else every ZKW_HEALTH_RETURN_SLOW_MS
 * (so that a new loss is watched within a second). */
#define ZKW_HEALTH_RETURN_MS      250
#define ZKW_HEALTH_RETURN_FAST_MS 30000
#define ZKW_HEALTH_RETURN_SLOW_MS 1000
#define ZKW_HEALTH_RETURN_LONG_MS (10 * 60 * 1000)

/* Starts the periodic check (the first probe runs at once). Returns 0 or a
 * negative libuv error. */
int zkw_health_start(struct zkw_server *srv) __attribute__((warn_unused_result));
/* Stops probing and closes the probe's handles. Idempotent. */
void zkw_health_stop(void);

/* True when zkwarden is ready to serve a JobManager: not shutting down, an
 * upstream server is reachable, and the registry is usable. Otherwise false,
 * with a one-line reason in why (e.g. "no upstream server reachable:
 * 10.0.0.1:2181 connection refused", "registry not usable: ..."). */
bool zkw_server_ready(struct zkw_server *srv, char *why, size_t len);

#endif
