/* zkw_fenceconn.h: closing a superseded ZooKeeper session on the server.
 *
 * A fence re-attaches to the session with its id and password on a
 * connection of its own and sends closeSession; the server then deletes all
 * of that session's ephemerals (locks and leader latch) in one transaction.
 * It runs on the loop thread (zkwarden's own wire, not a client library), so
 * that the decision to send closeSession and a re-attach of the same session
 * read from the JobManager are ordered: once zkw_fenceconn_cancel has run, no
 * closeSession is sent. The servers of ZKWARDEN_UPSTREAM are tried in turn,
 * each bounded, the whole bounded by timeout_ms. An already expired session
 * counts as fenced. The password never leaves this struct and is wiped
 * after use. With auth set (ZKWARDEN_REGISTRY_AUTH), the connection
 * authenticates with digest before closeSession, for servers that enforce
 * authentication. */
#ifndef ZKW_FENCECONN_H
#define ZKW_FENCECONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum zkw_fenceconn_result {
  ZKW_FENCE_CLOSED,    /* the session was alive and is now closed */
  ZKW_FENCE_EXPIRED,   /* the server no longer knew it: already gone */
  ZKW_FENCE_FAILED,    /* no server answered in time, or closing failed */
  ZKW_FENCE_CANCELLED, /* zkw_fenceconn_cancel came before closeSession was sent: nothing was done */
};

struct zkw_fenceconn;
typedef void (*zkw_fenceconn_cb)(struct zkw_fenceconn *f, enum zkw_fenceconn_result result, void *arg);

struct zkw_fenceconn {
  /* Set by the caller before zkw_fenceconn_start. */
  char hosts[4096]; /* "host:port,host:port" */
  int64_t session_id;
  uint8_t passwd[16];
  int timeout_ms;         /* bound on the whole fence */
  int session_timeout_ms; /* the session's own negotiated timeout, asked for in the ConnectRequest (the
                             server re-validates the session with it: a fence stopped for a re-attach
                             must not shorten it); <= 0: unknown, timeout_ms */
  uint32_t attempt_ms;    /* bound on one server's connect and answer */
  const char *auth;       /* digest user:password sent before closeSession (enforced auth), or NULL */
  /* The outcome, for cb. */
  enum zkw_fenceconn_result result;
  char detail[160];
  void *arg;

  /* zkw_fenceconn.c's own. */
  zkw_fenceconn_cb cb;
  uv_loop_t *loop;
  bool cancel, ending, closing_sent;
  int open;    /* handles and requests whose callback is still to come */
  size_t next; /* offset in hosts of the server to try next */
  char server[300];
  uv_timer_t deadline, attempt;
  uv_getaddrinfo_t resolve;
  uv_connect_t connect;
  uv_write_t write_attach, write_close;
  uv_tcp_t tcp;
  bool tcp_open, resolving, abandoned; /* abandoned: a resolve whose attempt timed out */
  uint8_t in[256];
  size_t in_len;
  uint8_t out_attach[64];
  uint8_t out_close[1024];
};

/* Starts fencing; f must stay allocated until cb runs (cb may free it). cb
 * is never called from within zkw_fenceconn_start. */
int zkw_fenceconn_start(uv_loop_t *loop, struct zkw_fenceconn *f, zkw_fenceconn_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* The session is attached again: unless its closeSession is already sent,
 * the fence ends without closing it (its connection just goes, the session
 * stays) and reports ZKW_FENCE_CANCELLED. */
void zkw_fenceconn_cancel(struct zkw_fenceconn *f);
const char *zkw_fenceconn_result_name(enum zkw_fenceconn_result r);

#endif
