/* zkw_health.c: the upstream readiness probe and zkw_server_ready.
 *
 * One probe at a time, on the event loop: for each server of
 * ZKWARDEN_UPSTREAM in order, resolve (names only), connect (bounded by
 * ZKWARDEN_CONNECT_TIMEOUT_MS), send "srvr", read the answer until the
 * server closes (bounded in size and time), and judge it. The first server
 * that is reachable ends the probe. With ZKWARDEN_UPSTREAM_TLS=on the probe
 * speaks TLS, verified like every upstream connection (ZooKeeper's secure
 * port answers four-letter words over TLS): a server whose certificate is
 * refused is not reachable, with OpenSSL's reason. Name resolution is bounded by the
 * resolver's own timeouts (a getaddrinfo cannot be abandoned safely); until
 * a probe completes, the previous result stands. When probes run: see
 * ZKW_HEALTH_REPROBE_MS in zkw_health.h.
 *
 * The same machinery watches for servers coming back: a server the relay
 * lost (zkw_upstream_down) gets `srvr` (every ZKW_HEALTH_RETURN_MS at first,
 * less often later: zkw_health.h) until it answers as serving; then the
 * relay learns it is back (zkw_upstream_back), and a session that moves
 * prefers it (it has been restarted already).
 *
 * And it asks versions: the sweep sets its watch (addWatch, ZooKeeper 3.6+)
 * on the JobManager's connection only once the server that connection is on
 * said it is 3.6 or newer, so that server gets `srvr` at the address the
 * connection went to (zkw_sweepwatch_version_wanted), at the next tick. */
#include "zkw_health.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_session.h"
#include "zkw_sidecar.h"
#include "zkw_sweepwatch.h"
#include "zkw_tls.h"
#include "zkw_upstream.h"

enum probe_state { IDLE, RESOLVING, CONNECTING, HANDSHAKING, TALKING, CLOSING };

static struct {
  struct zkw_server *srv;
  bool started, stopping;
  uv_timer_t timer; /* next probe, or the current attempt's deadline */
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_getaddrinfo_t gai;
  uv_write_t wreq;
  enum probe_state state;
  bool tcp_open;
  struct zkw_tls_conn *tls; /* ZKWARDEN_UPSTREAM_TLS=on */
  struct zkw_buf plain;     /* its decrypted answer */
  bool success;             /* the current attempt found a reachable server */
  int handles;              /* open handles and requests of the probe */
  uint32_t idx;             /* server being tried */
  bool returning;           /* this probe watches lost servers for their return (not readiness) */
  bool versioning;          /* this probe asks the version of the JobManager's server for the sweep */
  uint64_t version_gen;     /* the sweep's number for that question */
  uint64_t next_ready_ns;   /* when the readiness check is due again */
  uint64_t return_at_ms[ZKW_MAX_UPSTREAMS]; /* uv_now() of each server's last return probe */
  char name[300];
  char answer[1024];
  size_t answer_len;
  /* Result of the last complete probe. */
  bool probed;        /* a probe has completed */
  uint64_t probed_ns; /* when */
  uint64_t losses;    /* upstream losses counted when that probe started */
  bool ok;
  char why[600];
  char failures[512]; /* reasons gathered during the current probe */
} health;

static void attempt(void);
static void schedule(uint64_t ms);
static void deadline_cb(uv_timer_t *t);
static void next_tick(void);

static uint64_t interval_ns(void) {
  return (uint64_t)ZKW_HEALTH_INTERVAL_MS * 1000000u;
}

/* Connections to upstream servers lost or failed, ever. */
static uint64_t upstream_losses(void) {
  return zkw_metrics.connections_closed[ZKW_CLOSE_UPSTREAM_CLOSED] +
         zkw_metrics.connections_closed[ZKW_CLOSE_UPSTREAM_UNREACHABLE] +
         zkw_metrics.upstream_connect_failures;
}

static bool passive_fresh(uint64_t now) {
  return zkw_session_upstream_seen_ns() && now - zkw_session_upstream_seen_ns() < interval_ns();
}

static void set_result(bool ok, const char *why) {
  bool was = health.ok, had = health.probed;
  health.probed = true;
  health.probed_ns = uv_hrtime();
  health.ok = ok;
  snprintf(health.why, sizeof health.why, "%s", ok ? "" : why);
  ZKW_METRIC_SET(upstream_reachable, ok ? 1 : 0);
  if (had && was != ok) {
    if (ok)
      zkw_log_info("upstream reachable again");
    else
      zkw_log_warn("not ready: %s", why);
  }
}

/* Ends the probe with its overall result and waits for the next tick. */
static void probe_done(bool ok) {
  char why[sizeof health.why];
  snprintf(why, sizeof why, "no upstream server reachable: %s", health.failures);
  set_result(ok, why);
  health.state = IDLE;
  next_tick();
}

/* ---- servers coming back ---- */

/* How often a server down since its loss `age` ms ago is probed. */
static uint64_t return_every_ms(uint64_t age) {
  return age < ZKW_HEALTH_RETURN_FAST_MS   ? ZKW_HEALTH_RETURN_MS
         : age < ZKW_HEALTH_RETURN_LONG_MS ? ZKW_HEALTH_RETURN_SLOW_MS
                                           : ZKW_HEALTH_REPROBE_MS;
}

/* The next down server from i on whose probe is due, or -1. */
static int next_down(uint32_t i) {
  const struct zkw_server *srv = health.srv;
  uint64_t now = uv_now(srv->loop);
  for (; i < (uint32_t)srv->cfg->upstream_count; i++)
    if (zkw_upstream_down(srv, (int)i) &&
        now - health.return_at_ms[i] >= return_every_ms(now - zkw_upstream_lost_ms(srv, (int)i)))
      return (int)i;
  return -1;
}

/* Waits for the next tick (see ZKW_HEALTH_RETURN_MS): a server lost is
 * watched from then on; the readiness check runs when due. */
static void next_tick(void) {
  const struct zkw_server *srv = health.srv;
  uint64_t now = uv_now(srv->loop), ms = ZKW_HEALTH_RETURN_SLOW_MS;
  for (int i = 0; i < srv->cfg->upstream_count; i++)
    if (zkw_upstream_down(srv, i) && now - zkw_upstream_lost_ms(srv, i) < ZKW_HEALTH_RETURN_FAST_MS)
      ms = ZKW_HEALTH_RETURN_MS;
  schedule(ms);
}

/* The return probe tries server idx (from next_down), or ends. */
static bool return_next(int idx) {
  if (idx < 0) {
    health.returning = false;
    health.state = IDLE;
    next_tick();
    return false;
  }
  health.returning = true;
  health.idx = (uint32_t)idx;
  health.success = false;
  health.return_at_ms[idx] = uv_now(health.srv->loop);
  attempt();
  return true;
}

static void note_failure(const char *what) {
  size_t n = strlen(health.failures);
  snprintf(health.failures + n, sizeof health.failures - n, "%s%s %s", n ? "; " : "", health.name, what);
}

static void closed_cb(uv_handle_t *hd) {
  (void)hd;
  health.handles--;
  if (health.stopping) return;
  /* The attempt is over: the end of the probe, or the next server. */
  health.state = IDLE;
  if (health.versioning) { /* answered in finish_talk, or not at all: the sweep asks again later */
    health.versioning = false;
    return_next(next_down(0));
    return;
  }
  if (health.returning) {
    /* A server in read-only mode answers, but does not serve a session. */
    if (health.success && !strstr(health.answer, "Mode: read-only")) {
      zkw_log_info("upstream %s serves again", health.name);
      zkw_upstream_back(health.srv, (int)health.idx);
    }
    return_next(next_down(health.idx + 1));
    return;
  }
  if (health.success) {
    probe_done(true);
    return;
  }
  health.idx++;
  attempt();
}

static void drop_tls(void) {
  zkw_tls_conn_free(health.tls);
  health.tls = NULL;
  zkw_buf_release(&health.plain);
}

/* Ends the current attempt: closes its socket, then goes on in closed_cb. */
static void attempt_over(const char *failure) {
  uv_timer_stop(&health.timer);
  if (failure && !health.versioning) note_failure(failure);
  if (health.tls && health.state == HANDSHAKING) ZKW_METRIC_INC(tls_handshake_failures);
  drop_tls();
  health.state = CLOSING;
  if (health.tcp_open) {
    health.tcp_open = false;
    uv_close((uv_handle_t *)&health.tcp, closed_cb);
  } else {
    health.handles++;
    closed_cb(NULL);
  }
}

/* Judges the server's answer to srvr. Returns NULL if it is serving. */
static const char *judge(void) {
  health.answer[health.answer_len] = 0;
  if (strstr(health.answer, "not currently serving requests")) return "is not serving requests (no quorum?)";
  if (strstr(health.answer, "Mode:")) return NULL;
  if (strstr(health.answer, "not in the whitelist") || strstr(health.answer, "not executed")) return NULL;
  if (health.answer_len == 0) return "closed without answering srvr";
  return "gave an unexpected answer to srvr";
}

static void finish_talk(void) {
  const char *bad = judge();
  struct zkw_identity *id = zkw_sidecar_identity(health.srv);
  if (health.versioning && id) zkw_sweepwatch_version_answer(id, health.version_gen, health.answer);
  if (!bad) {
    /* Reachable: close the socket, then end the probe successfully. */
    uv_timer_stop(&health.timer);
    health.state = CLOSING;
    health.success = true;
    health.tcp_open = false;
    drop_tls();
    uv_close((uv_handle_t *)&health.tcp, closed_cb);
    return;
  }
  attempt_over(bad);
}

static void alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  (void)hd, (void)suggested;
  size_t room = sizeof health.answer - 1 - health.answer_len;
  *buf = uv_buf_init(health.answer + health.answer_len, (unsigned)room);
}

static void tls_alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  (void)hd, (void)suggested;
  *buf = zkw_tls_read_buf();
}

static void send_srvr(void);

/* Ciphertext read: the handshake goes on, or the answer is decrypted into
 * health.answer. Returns the bytes of answer added, or -1 (attempt over). */
static ssize_t tls_input(const uv_buf_t *buf, size_t n) {
  char what[320];
  int rc = zkw_tls_feed(health.tls, buf->base, n);
  if (rc == 0 && health.state == HANDSHAKING) {
    rc = zkw_tls_handshake(health.tls);
    int wrc = zkw_tls_flush(health.tls, (uv_stream_t *)&health.tcp);
    if (rc == ZKW_TLS_ERROR) {
      zkw_tls_note(health.name, zkw_tls_conn_error(health.tls));
      snprintf(what, sizeof what, "TLS handshake failed: %s", zkw_tls_conn_error(health.tls));
      attempt_over(what);
      return -1;
    }
    if (wrc) rc = wrc;
    if (rc == ZKW_TLS_DONE) {
      health.state = TALKING;
      send_srvr();
      return health.state == TALKING ? 0 : -1;
    }
  } else if (rc == 0) {
    size_t before = health.plain.len;
    rc = zkw_tls_decrypt(health.tls, &health.plain);
    if (rc == ZKW_TLS_ERROR) {
      if (health.answer_len == 0) { /* TLS 1.3: refused after the handshake */
        ZKW_METRIC_INC(tls_handshake_failures);
        zkw_tls_note(health.name, zkw_tls_conn_error(health.tls));
      }
      snprintf(what, sizeof what, "TLS error: %s", zkw_tls_conn_error(health.tls));
      attempt_over(what);
      return -1;
    }
    size_t room = sizeof health.answer - 1 - health.answer_len, got = health.plain.len - before;
    if (got && health.answer_len == 0)
      zkw_tls_note(health.name, NULL); /* answered: our certificate taken too */
    if (got > room) got = room;
    memcpy(health.answer + health.answer_len, health.plain.data + before, got);
    health.plain.len = 0;
    if (rc == ZKW_TLS_CLOSED) {
      health.answer_len += got;
      finish_talk();
      return -1;
    }
    return rc < 0 ? rc : (ssize_t)got;
  }
  if (rc < 0) {
    attempt_over(uv_strerror(rc));
    return -1;
  }
  return 0;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)st;
  if (health.state != TALKING && health.state != HANDSHAKING) return;
  if (nread > 0 && health.tls) {
    nread = tls_input(buf, (size_t)nread);
    if (nread <= 0) return;
  }
  if (health.state == HANDSHAKING && nread < 0) {
    char what[128];
    snprintf(what, sizeof what, "TLS handshake failed: the server closed the connection (%s)",
             uv_strerror((int)nread));
    attempt_over(what);
    return;
  }
  if (nread > 0) {
    health.answer_len += (size_t)nread;
    if (health.answer_len >= sizeof health.answer - 1) finish_talk(); /* enough to judge */
    return;
  }
  if (nread == UV_EOF || nread == UV_ECONNRESET) {
    finish_talk();
  } else if (nread < 0) {
    char what[128];
    snprintf(what, sizeof what, "read failed (%s)", uv_strerror((int)nread));
    attempt_over(what);
  }
}

static void write_cb(uv_write_t *req, int status) {
  (void)req;
  health.handles--;
  if (health.stopping || health.state != TALKING) return;
  if (status < 0) {
    char what[128];
    snprintf(what, sizeof what, "write failed (%s)", uv_strerror(status));
    attempt_over(what);
  }
}

static void connect_cb(uv_connect_t *req, int status) {
  (void)req;
  health.handles--;
  if (health.stopping || health.state != CONNECTING) return;
  if (status < 0) {
    char what[128];
    snprintf(what, sizeof what, "%s", uv_strerror(status));
    attempt_over(what);
    return;
  }
  health.answer_len = 0;
  int rc;
  if (zkw_tls_enabled()) {
    /* srvr goes once the server's certificate is verified. */
    health.state = HANDSHAKING;
    rc = zkw_tls_conn_new(&health.tls, health.srv->cfg->upstream[health.idx].host);
    if (rc == 0) rc = uv_read_start((uv_stream_t *)&health.tcp, tls_alloc_cb, read_cb);
    if (rc == 0 && zkw_tls_handshake(health.tls) == ZKW_TLS_ERROR) rc = UV_EPROTO;
    if (rc == 0) rc = zkw_tls_flush(health.tls, (uv_stream_t *)&health.tcp);
  } else {
    health.state = TALKING;
    rc = uv_read_start((uv_stream_t *)&health.tcp, alloc_cb, read_cb);
    if (rc == 0) send_srvr();
  }
  if (rc) {
    char what[128];
    snprintf(what, sizeof what, "%s", uv_strerror(rc));
    attempt_over(what);
  }
}

/* Writes the four-letter word (encrypted under TLS). */
static void send_srvr(void) {
  static char word[] = "srvr";
  int rc;
  if (health.tls) {
    rc = zkw_tls_encrypt(health.tls, (const uint8_t *)word, 4) ? UV_EPROTO : 0;
    if (rc == 0) rc = zkw_tls_flush(health.tls, (uv_stream_t *)&health.tcp);
  } else {
    uv_buf_t b = uv_buf_init(word, 4);
    rc = uv_write(&health.wreq, (uv_stream_t *)&health.tcp, &b, 1, write_cb);
    if (rc == 0) health.handles++;
  }
  if (rc) {
    char what[128];
    snprintf(what, sizeof what, "%s", uv_strerror(rc));
    attempt_over(what);
  }
}

static void connect_addr(const struct sockaddr *addr) {
  int rc = uv_tcp_init(health.srv->loop, &health.tcp);
  if (rc) {
    attempt_over(uv_strerror(rc));
    return;
  }
  health.handles++;
  health.tcp_open = true;
  health.state = CONNECTING;
  /* Bounds the connect and then the answer; name resolution has its own. */
  uv_timer_start(&health.timer, deadline_cb, health.srv->cfg->connect_timeout_ms, 0);
  rc = uv_tcp_connect(&health.creq, &health.tcp, addr, connect_cb);
  if (rc) {
    attempt_over(uv_strerror(rc));
    return;
  }
  health.handles++;
}

static void resolve_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  (void)req;
  health.handles--;
  if (health.stopping || health.state != RESOLVING) {
    if (res) uv_freeaddrinfo(res);
    return;
  }
  if (status < 0 || !res) {
    char what[128];
    snprintf(what, sizeof what, "cannot be resolved (%s)", uv_strerror(status));
    if (res) uv_freeaddrinfo(res);
    attempt_over(what);
    return;
  }
  connect_addr(res->ai_addr);
  uv_freeaddrinfo(res);
}

/* The sweep wants a version: a probe's loop that waits for its next tick
 * asks at once. */
static void version_kick(void) {
  if (health.started && !health.stopping && health.state == IDLE) schedule(0);
}

/* The sweep waits for the version of the JobManager's server: `srvr` at
 * the address its connection went to. False when none is wanted. */
static bool version_probe(void) {
  struct sockaddr_storage addr;
  uint32_t idx;
  uint64_t gen;
  struct zkw_identity *id = zkw_sidecar_identity(health.srv);
  if (!id || !zkw_sweepwatch_version_wanted(id, uv_now(health.srv->loop), &addr, &idx, &gen) ||
      idx >= (uint32_t)health.srv->cfg->upstream_count)
    return false;
  const struct zkw_hostport *hp = &health.srv->cfg->upstream[idx];
  snprintf(health.name, sizeof health.name, "%s:%s", hp->host, hp->port);
  health.versioning = true;
  health.returning = false;
  health.version_gen = gen;
  health.idx = idx; /* under TLS: the name its certificate must carry */
  health.success = false;
  connect_addr((const struct sockaddr *)&addr);
  return true;
}

/* A tick: the readiness check when due (a probe when passive evidence does
 * not answer), else a version the sweep waits for, else a return probe when
 * a server is down. */
static void tick(void) {
  uint64_t now = uv_hrtime();
  if (now >= health.next_ready_ns) {
    health.next_ready_ns = now + interval_ns();
    uint64_t losses = upstream_losses();
    bool lost = losses != health.losses;
    if (!lost && passive_fresh(now)) {
      set_result(true, "");
    } else if (!(!lost && health.probed && health.ok &&
                 now - health.probed_ns < (uint64_t)ZKW_HEALTH_REPROBE_MS * 1000000u)) {
      health.losses = losses;
      health.returning = false;
      health.idx = 0;
      health.success = false;
      health.failures[0] = 0;
      attempt();
      return;
    }
  }
  if (version_probe()) return;
  return_next(next_down(0));
}

static void deadline_cb(uv_timer_t *t) {
  (void)t;
  if (health.state == IDLE) {
    tick();
    return;
  }
  attempt_over(health.state == CONNECTING    ? "connect timed out"
               : health.state == HANDSHAKING ? "TLS handshake timed out"
                                             : "did not answer srvr in time");
}

static void schedule(uint64_t ms) {
  if (!health.stopping) uv_timer_start(&health.timer, deadline_cb, ms, 0);
}

/* Tries server health.idx, or ends the probe when every server failed (or when
 * finish_talk marked success). */
static void attempt(void) {
  const struct zkw_config *cfg = health.srv->cfg;
  if (health.idx >= (uint32_t)cfg->upstream_count) {
    probe_done(false);
    return;
  }
  const struct zkw_hostport *hp = &cfg->upstream[health.idx];
  snprintf(health.name, sizeof health.name, "%s:%s", hp->host, hp->port);
  struct sockaddr_storage addr;
  if (zkw_hostport_numeric(hp, &addr)) {
    connect_addr((struct sockaddr *)&addr);
    return;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  health.state = RESOLVING;
  int rc = uv_getaddrinfo(health.srv->loop, &health.gai, resolve_cb, hp->host, hp->port, &hints);
  if (rc) {
    char what[128];
    snprintf(what, sizeof what, "cannot be resolved (%s)", uv_strerror(rc));
    attempt_over(what);
    return;
  }
  health.handles++;
}

int zkw_health_start(struct zkw_server *srv) {
  memset(&health, 0, sizeof health);
  health.srv = srv;
  snprintf(health.why, sizeof health.why, "the first upstream check has not completed yet");
  int rc = uv_timer_init(srv->loop, &health.timer);
  if (rc) return rc;
  health.handles = 1;
  health.started = true;
  struct zkw_identity *id = zkw_sidecar_identity(srv);
  if (id) zkw_sweepwatch_on_ask(id, version_kick);
  schedule(0);
  return 0;
}

static void timer_closed_cb(uv_handle_t *hd) {
  (void)hd;
  health.handles--;
}

void zkw_health_stop(void) {
  if (!health.started || health.stopping) return;
  health.stopping = true;
  struct zkw_identity *id = zkw_sidecar_identity(health.srv);
  if (id) zkw_sweepwatch_on_ask(id, NULL);
  uv_close((uv_handle_t *)&health.timer, timer_closed_cb);
  if (health.state == RESOLVING) uv_cancel((uv_req_t *)&health.gai);
  if (health.tcp_open) {
    health.tcp_open = false;
    uv_close((uv_handle_t *)&health.tcp, closed_cb);
  }
  drop_tls();
}

bool zkw_server_ready(struct zkw_server *srv, char *why, size_t len) {
  if (srv->stopping) {
    snprintf(why, len, "zkwarden is shutting down");
    return false;
  }
  /* Passive evidence counts when it is newer than the last verdict. */
  bool upstream_ok = (health.probed && health.ok) ||
                     (passive_fresh(uv_hrtime()) && zkw_session_upstream_seen_ns() > health.probed_ns);
  if (!upstream_ok) {
    snprintf(why, len, "%s", health.why);
    return false;
  }
  const char *id_why = NULL;
  if (!zkw_identity_ready(zkw_sidecar_identity(srv), &id_why)) {
    snprintf(why, len, "registry not usable: %s", id_why);
    return false;
  }
  snprintf(why, len, "ready");
  return true;
}
