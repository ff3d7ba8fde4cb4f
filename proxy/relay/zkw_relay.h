/* zkw_relay.h: the relay's data: a session (one client connection and its
 * upstream connection) and the server (listener and session list).
 *
 * Types only, shared by the relay's modules (zkw_pair, zkw_upstream,
 * zkw_inband, zkw_session, zkw_server); a policy reads them through the
 * getters at the end and acts through the back-channel (zkw_session.h,
 * zkw_pair.h). */
#ifndef ZKW_RELAY_H
#define ZKW_RELAY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_buf.h"
#include "zkw_config.h"
#include "zkw_hooks.h"
#include "zkw_jref.h"
#include "zkw_log.h"
#include "zkw_pending.h"
#include "zkw_watches.h"

/* Sizes of a session's names, with the NUL (bounds for their readers). */
#define ZKW_SESSION_PEER_MAX     64
#define ZKW_SESSION_UPSTREAM_MAX 300

struct zkw_server;
struct zkw_session;
struct zkw_tls_conn;
struct zkw_inband;

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
  bool capped; /* reading stopped because all buffers together passed ZKWARDEN_MAX_BUFFERED_BYTES */
  bool writing;
  int lost;            /* upstream: a write met this socket error; later writes are dropped (zkw_pair.c) */
  uint64_t resumed_ms; /* uv_now() when reading last resumed after a pause */
};

struct zkw_session {
  struct zkw_server *srv;
  struct zkw_session *prev, *next;
  uint64_t conn;
  bool internal; /* accepted by the internal relay (zkw_server.h): its lines are logged at debug */
  char peer[ZKW_SESSION_PEER_MAX];
  enum zkw_phase phase;
  struct zkw_side client, upstream;

  /* Upstream connection attempts. */
  uv_timer_t timer; /* client handshake, upstream connect, ConnectResponse; once established a deferred
                       upstream loss (zkw_pair.c); a move's attempts (zkw_move.c); the close-flush bound */
  uv_connect_t connect_req;
  uv_getaddrinfo_t resolve_req;
  bool resolving;
  bool upstream_started; /* the client's handshake arrived and connecting began */
  uint32_t up_first, up_tried;
  uint32_t up_idx;                         /* index in ZKWARDEN_UPSTREAM of the current upstream */
  uint8_t up_order[ZKW_MAX_UPSTREAMS];     /* the order of this round's attempts (zkw_upstream.c) */
  uint32_t up_suspects;                    /* bit i: upstream i was suspect when connecting began */
  uint64_t up_last_read_ms;                /* uv_now() of the upstream's last bytes (or its connect) */
  uint32_t up_handshake_ms;                /* bound on the wait for the ConnectResponse */
  void (*up_ready)(struct zkw_session *s); /* zkw_upstream_connect's callbacks */
  void (*up_exhausted)(struct zkw_session *s);
  char up_name[ZKW_SESSION_UPSTREAM_MAX]; /* host:port of the current upstream, for logs */

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

  bool response_seen; /* the ConnectResponse has been handled */

  /* Kept requests and the barrier (zkw_hooks.h ZKW_KEEP, ZKW_BARRIER;
   * zkw_replies.h). A barrier in flight or withheld keeps the client's later
   * requests back (barrier_wait); its reply may be withheld until the policy
   * replays the request or delivers the reply. */
  bool barrier;              /* a barrier's reply is withheld (held_reply) */
  bool barrier_wait;         /* a barrier is in flight or withheld: the client's next request waits */
  bool barrier_wait_counted; /* a request of the client's waited behind this barrier (metrics) */
  bool barrier_replayed;     /* the withheld barrier's request was sent again: its reply is the replay's */
  bool barrier_lost;    /* a move took the withheld barrier: answered first at the restore (zkw_move.c) */
  uint32_t barrier_gen; /* numbers the barrier replies given to the policy: its replay or deliver names the
                           one it means */
  uint32_t kept;        /* kept requests whose reply has not come yet */
  int32_t barrier_xid, barrier_op;
  struct zkw_buf kept_frames; /* copies of the kept requests in flight, in order */
  struct zkw_buf kept_frame;  /* the request whose reply the policy is given (or the withheld barrier's) */
  struct zkw_buf held_reply;  /* the barrier's reply, withheld (ZKW_WITHHOLD) */
  struct zkw_buf scratch;     /* a replaced frame on its way out */
  bool held;                  /* the policy holds a client request (ZKW_HOLD) until zkw_session_resume */
  bool processing;            /* inside process(): resume afterwards, not now */
  bool resume_pending;

  /* Moving the session to another server (zkw_move.h). */
  uv_timer_t guard;           /* while active: the silence check; while moving: the client's time */
  struct zkw_watches watches; /* what setWatches re-arms */
  uint8_t *auth_frames;       /* the client's auth packets (xid -4), for the replay: never logged */
  size_t auth_len;
  uint32_t auth_count;
  int64_t last_zxid;             /* the highest zxid the client has seen */
  bool ro_requested;             /* its ConnectRequest asked for read-only */
  bool sasl;                     /* it ran a SASL exchange, which cannot be replayed */
  bool unmovable;                /* an auth packet could not be kept */
  bool no_move;                  /* the policy closes this session elsewhere (zkw_session_forbid_move) */
  bool moving;                   /* the upstream connection is being replaced; client frames wait */
  bool move_answered;            /* the new server confirmed the session */
  bool move_counted;             /* the move's outcome is counted */
  bool move_recovery;            /* the move re-attaches a session taken over from the journal */
  uint32_t move_from;            /* index in ZKWARDEN_UPSTREAM of the server it left */
  uint32_t move_auths;           /* replayed auth packets awaiting their reply */
  uint32_t move_watches;         /* setWatches frames awaiting their reply */
  uint32_t move_lost;            /* requests answered with CONNECTIONLOSS */
  uint32_t move_tries;           /* connections that did not confirm the session */
  uint32_t move_failed;          /* bit i: upstream i took a connection of this move and did not serve it */
  uint32_t move_first_ms;        /* the wait before the first attempt */
  uint64_t move_t0;              /* uv_hrtime() when the move began */
  uint64_t move_refused_at;      /* when the server went quiet, of the silence a move was refused for */
  uint64_t outstanding_since_ms; /* uv_now() when a request or ping became outstanding after none */
  bool outstanding;              /* as of the last frame batch */
  void (*resume)(struct zkw_session *s); /* zkw_session_resume, for the move's end */

  /* zkwarden's own requests on this connection (zkw_inband.c). */
  struct zkw_inband *inband; /* NULL until the first one */
  bool inband_ok;            /* the client has had a reply other than SASL: its SASL is over */

  /* Set at accept (zkw_session.c): the frame loop's read callback and what
   * the session's modules do when it closes. */
  uv_read_cb on_read;
  void (*on_closing)(struct zkw_session *s);
  void (*on_upstream_lost)(struct zkw_session *s, int rc); /* a write met a socket error (zkw_pair.c) */

  struct zkw_jref jr; /* its slot in the journal (zkw_journal.h), if it is durable */

  int handles; /* open handles and references; freed when it reaches 0 while closing */
  /* Then the policy's block of hooks->session_size bytes (zkw_session_policy). */
};

struct zkw_server {
  uv_loop_t *loop;
  const struct zkw_config *cfg;
  uv_tcp_t listener;
  const struct zkw_hooks *hooks; /* NULL: every frame forwarded unchanged */
  void *policy;                  /* the policy's context (the sidecar: its zkw_identity), or NULL */
  struct zkw_session *sessions;  /* doubly linked, newest first */
  uint64_t session_count;        /* in the list, closing ones too */
  uint64_t sessions_open;        /* in the list and not closing: what ZKWARDEN_MAX_CLIENTS bounds */
  /* Refused connections (zkw_server.c): a line per burst, and a retry of
   * the pending accept when even refusing it needs memory there is not. */
  uv_timer_t accept_retry;
  uint64_t refused_line_ms, refused_since_line;
  uint64_t next_conn;     /* connection numbers for logs, from 1 */
  uint32_t next_upstream; /* round-robin start for the next connection */
  /* uv_now() until which each upstream is tried after the others: it took a
   * connection (or a handshake) and went silent (zkw_upstream_suspect). */
  uint64_t up_suspect_until[ZKW_MAX_UPSTREAMS];
  /* uv_now() when each upstream was last lost (a close, reset, silence or
   * failed connect) and when it was last seen serving after that (a session
   * confirmed there, or the health probe's srvr): a move prefers the server
   * that came back most recently (zkw_upstream.h). 0: never. */
  uint64_t up_lost_ms[ZKW_MAX_UPSTREAMS];
  uint64_t up_back_ms[ZKW_MAX_UPSTREAMS];
  uint64_t rng;    /* the move's random choice among the other servers */
  uint32_t capped; /* sides not read because the buffers passed ZKWARDEN_MAX_BUFFERED_BYTES (zkw_pair.h) */
  uv_timer_t cap_timer; /* while some are: looks again (buffers that drain elsewhere, the admin's) */
  bool stopping;
  int listener_closing; /* the listener's handles still closing (zkw_server_stop_accepting) */
  int reopen_fd;        /* zkw_server_resume_accepting while they close: the socket, or -1 */
  /* The internal relay (ZKWARDEN_UPSTREAM_TLS=on, sidecar mode): a second
   * zkw_server on 127.0.0.1:<ephemeral port> in relay mode, whose sessions
   * are zkwarden's own libzookeeper sessions (registry, fences) on their way
   * to the TLS ensemble. Its policy context is NULL (no identity, tag or
   * reclaim) and they do not keep the loop alive; the relay stops after the registry session is
   * closed (zkw_server_finish). */
  struct zkw_journal *journal; /* what a successor needs (zkw_journal.h); NULL: nothing is durable */
  /* A durable connection accepted, or closed: the keeper holds (or lets go
   * of) a duplicate of its socket (zkw_keeperlink.h); NULL without one. */
  int (*adopt)(struct zkw_server *srv, int fd, uint32_t *slot); /* 0: *slot its number */
  void (*forget)(struct zkw_server *srv, uint32_t slot);
  bool quiescing;           /* a planned hand-over's pause: no client is read (zkw_quiesce.h) */
  bool internal;            /* this is the internal relay */
  struct zkw_server *relay; /* the main server's internal relay, or NULL */
  char listen_name[80];     /* ZKWARDEN_LISTEN as ip:port, for the config rewrite */
};

/* The policy's block of this session (zkw_hooks.h), or NULL without one. */
static inline void *zkw_session_policy(struct zkw_session *s) {
  return s->srv->hooks && s->srv->hooks->session_size ? (void *)(s + 1) : NULL;
}
static inline const void *zkw_session_policy_c(const struct zkw_session *s) {
  return s->srv->hooks && s->srv->hooks->session_size ? (const void *)(s + 1) : NULL;
}

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

/* Getters: what the layers above read of a session (ops reads a session
 * through these only; tests/check_layers.py checks it). */
static inline uint64_t zkw_session_conn(const struct zkw_session *s) {
  return s->conn;
}
static inline int64_t zkw_session_id(const struct zkw_session *s) {
  return s->session_id;
}
static inline const char *zkw_session_peer(const struct zkw_session *s) {
  return s->peer;
}
/* host:port of the upstream server it is connected to, or NULL. */
static inline const char *zkw_session_upstream_name(const struct zkw_session *s) {
  return s->upstream.connected ? s->up_name : NULL;
}
static inline enum zkw_phase zkw_session_phase(const struct zkw_session *s) {
  return s->phase;
}
/* The negotiated session timeout, ms (0 before the ConnectResponse). */
static inline int32_t zkw_session_timeout(const struct zkw_session *s) {
  return s->timeout;
}
static inline bool zkw_session_read_only(const struct zkw_session *s) {
  return s->read_only;
}
/* True while the session is being moved to another server. */
static inline bool zkw_session_moving(const struct zkw_session *s) {
  return s->moving;
}
/* Requests awaiting their reply: pending requests, pings and auth packets. */
static inline uint32_t zkw_session_outstanding(const struct zkw_session *s) {
  return s->pending.count + s->pings + s->auths;
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
