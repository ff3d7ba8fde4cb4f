/* zkw_session.h: one JobManager connection and its upstream connection.
 *
 * A session relays frames between the client (the JM's ZooKeeper client) and
 * one upstream ZooKeeper server. It parses every frame in both directions
 * with protocol/: the handshake (ConnectRequest/Response, or a four-letter
 * word relayed raw), then requests and replies, each reply matched to its
 * request (zkw_pending). It records the session id, negotiated timeout and
 * password (in memory only; never logged). Frames are forwarded unchanged,
 * in batches, without copying when the peer socket takes them at once.
 * Either side closing or misbehaving closes both, with one log line. */
#ifndef ZKW_SESSION_H
#define ZKW_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_buf.h"
#include "zkw_log.h"
#include "zkw_pending.h"

struct zkw_server;
struct zkw_session;
struct zkw_tls_conn;

enum zkw_phase {
  ZKW_PHASE_HANDSHAKE,  /* waiting for the client's first frame */
  ZKW_PHASE_CONNECTING, /* ConnectRequest forwarded, waiting for the response */
  ZKW_PHASE_ACTIVE,     /* session established: requests and replies */
  ZKW_PHASE_RAW,        /* four-letter word: bytes relayed as they are */
  ZKW_PHASE_CLOSING,
};

/* One socket of the pair. */
struct zkw_side {
  uv_tcp_t tcp;
  struct zkw_session *s;
  const char *name;      /* "client" or "upstream" */
  struct zkw_buf in;     /* read, not yet forwarded (at most a partial frame after processing) */
  struct zkw_buf out;    /* waiting to be written */
  struct zkw_buf flight; /* handed to uv_write */
  uv_write_t wreq;
  struct zkw_tls_conn *tls; /* upstream with ZKWARDEN_UPSTREAM_TLS: in is plaintext, out/flight ciphertext */
  bool open;                /* tcp initialised and not yet closed */
  bool connected;
  bool reading;
  bool paused; /* reading stopped because the peer's output is full */
  bool writing;
};

struct zkw_session {
  struct zkw_server *srv;
  struct zkw_session *prev, *next;
  uint64_t conn;
  bool internal; /* accepted by the internal relay (zkw_server.h): its lines are logged at debug */
  char peer[64];
  enum zkw_phase phase;
  struct zkw_side client, upstream;

  /* Upstream connection attempts. */
  uv_timer_t timer; /* client handshake, upstream connect, ConnectResponse, then close-flush bounds */
  uv_connect_t connect_req;
  uv_getaddrinfo_t resolve_req;
  bool resolving;
  bool upstream_started; /* the client's handshake arrived and connecting began */
  uint32_t up_first, up_tried;
  uint32_t up_idx;          /* index in ZKWARDEN_UPSTREAM of the current upstream */
  uint32_t up_suspects;     /* bit i: upstream i was suspect when connecting began */
  uint64_t up_last_read_ms; /* uv_now() of the upstream's last bytes (or its connect) */
  uint32_t up_handshake_ms; /* bound on the wait for the ConnectResponse */
  char up_name[300];        /* host:port of the current upstream, for logs */

  /* The ZooKeeper session, from the handshake. */
  int64_t session_id;
  int32_t timeout;
  uint8_t passwd[16];
  uint8_t passwd_len;
  bool read_only;
  bool close_sent;     /* client sent closeSession */
  uint8_t close_class; /* enum zkw_close_class (zkw_metrics.h): set before zkw_session_close */

  struct zkw_pending pending;
  uint32_t pings; /* pings awaiting their -2 reply */
  uint32_t auths; /* auth packets (xid -4) awaiting their reply */

  /* Identity (zkw_identity.c). A session is a plain client until it acts
   * as the JobManager (zkw_acts_as_jobmanager); then its incarnation begins. */
  bool response_seen;   /* the ConnectResponse has been handled */
  bool acts_as_jm;      /* it sent a request that begins an incarnation */
  bool hold_jm;         /* that request waits for the fence and the registry write */
  bool plain_conflict;  /* acted as the JobManager in an identity conflict: stays plain */
  uint64_t incarnation; /* recorded incarnation; 0: a plain client (no tags, no reclaim) */
  struct zkw_session *id_next;
  int id_list; /* enum zkw_id_list */

  /* Lock barrier (zkw_reclaim.c): after a lock create or a delete under the
   * lock roots is forwarded, later client frames wait for its reply, so that
   * a reclaim and the replay happen with nothing else in flight. */
  bool barrier;
  bool barrier_is_create;
  bool barrier_replayed;
  int32_t barrier_xid, barrier_op;
  struct zkw_buf barrier_frame; /* the forwarded request, for the replay */
  struct zkw_buf held_reply;    /* its NODEEXISTS/NOTEMPTY, withheld while reclaiming */
  int32_t config_xid;           /* an outstanding getData of /zookeeper/config, or 0 */
  struct zkw_buf scratch;       /* a rewritten frame on its way out */
  bool processing;              /* inside process(): resume afterwards, not now */
  bool resume_pending;

  /* zkwarden's own requests on this connection (zkw_inband.c). */
  struct zkw_inband *inband; /* NULL until the first one */
  bool inband_ok;            /* the client has had a reply other than SASL: its SASL is over */

  int handles; /* open handles and requests; freed when it reaches 0 while closing */
};

/* Re-runs the frame processing of both sides after a hold was lifted. */
void zkw_session_resume(struct zkw_session *s);
/* The reclaim for the barrier request ended: replay it (the JobManager gets
 * the replay's reply) or forward the withheld reply. */
void zkw_session_reclaim_done(struct zkw_session *s, bool replay);

/* Writes a frame of zkwarden's own to the upstream (zkw_inband.c). Returns 0
 * or a negative libuv error. */
int zkw_session_send_upstream(struct zkw_session *s, const uint8_t *frame, size_t len)
    __attribute__((warn_unused_result));

/* Takes a new client connection from the listener. */
void zkw_session_accept(struct zkw_server *srv);
/* Closes both sides (flushing what is already queued, briefly) and logs the
 * reason once at the given level. Safe to call more than once. */
void zkw_session_close(struct zkw_session *s, enum zkw_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees the session if it is closing and its last handle is gone. Every
 * handle close callback and request callback calls it after `handles--`. */
void zkw_session_maybe_free(struct zkw_session *s);

/* Upstream connection (zkw_upstream.c): tries the servers in turn from a
 * rotating start, each bounded by ZKWARDEN_CONNECT_TIMEOUT_MS, and calls
 * zkw_session_upstream_ready when one accepts. */
void zkw_upstream_connect(struct zkw_session *s);
void zkw_session_upstream_ready(struct zkw_session *s);
/* The current upstream went silent: later connections try it after the others
 * for for_ms (or until it answers a handshake again). */
void zkw_upstream_suspect(struct zkw_session *s, uint64_t for_ms);
/* The current upstream answered a handshake: no longer suspect. */
void zkw_upstream_answered(struct zkw_session *s);

/* Log context for lines about this session. */
static inline struct zkw_log_ctx zkw_session_log_ctx(const struct zkw_session *s) {
  return (struct zkw_log_ctx){s->conn, s->session_id, s->peer};
}
/* The level a session's line is logged at: zkwarden's own sessions through
 * the internal relay (libzookeeper reconnecting every few ms while no server
 * can be used) log at debug; /readyz, the probe's line and the metrics say why. */
static inline enum zkw_log_level zkw_session_level(const struct zkw_session *s, enum zkw_log_level level) {
  return s->internal ? ZKW_LOG_DEBUG : level;
}
#define zkw_slog(s, level, ...)                                                                              \
  do {                                                                                                       \
    enum zkw_log_level lvl_ = zkw_session_level((s), (level));                                               \
    if (lvl_ <= zkw_log_level) {                                                                             \
      struct zkw_log_ctx ctx_ = zkw_session_log_ctx(s);                                                      \
      zkw_log_at(lvl_, &ctx_, __VA_ARGS__);                                                                  \
    }                                                                                                        \
  } while (0)

#endif
