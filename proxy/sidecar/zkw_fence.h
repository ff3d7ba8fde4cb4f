/* zkw_fence.h: closing a superseded ZooKeeper session on the server.
 *
 * A fence re-attaches to the session with its id and password and sends
 * closeSession; the server then deletes all of that session's ephemerals
 * (locks and leader latch) in one transaction. It runs on a libuv worker
 * thread with libzookeeper_mt's blocking calls, bounded by a timeout, and
 * reports back on the loop thread. An already expired session counts as
 * fenced. The password never leaves this struct and is wiped after use.
 * With auth set (ZKWARDEN_REGISTRY_AUTH), the connection authenticates with
 * digest before anything else, for servers that enforce authentication. */
#ifndef ZKW_FENCE_H
#define ZKW_FENCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdatomic.h>
#include <uv.h>

enum zkw_fence_result {
  ZKW_FENCE_CLOSED,    /* the session was alive and is now closed */
  ZKW_FENCE_EXPIRED,   /* the server no longer knew it: already gone */
  ZKW_FENCE_FAILED,    /* no server answered in time, or closing failed */
  ZKW_FENCE_CANCELLED, /* zkw_fence_cancel came before it connected: nothing was done */
};

struct zkw_fence;
typedef void (*zkw_fence_cb)(struct zkw_fence *f, enum zkw_fence_result result, void *arg);

struct zkw_fence {
  uv_work_t work;
  char hosts[4096];
  int64_t session_id;
  uint8_t passwd[16];
  int timeout_ms;   /* requested session timeout and bound on connecting */
  const char *auth; /* digest user:password sent before closeSession (enforced auth), or NULL */
  enum zkw_fence_result result;
  char detail[160];
  zkw_fence_cb cb;
  void *arg;
  atomic_bool cancel; /* zkw_fence_cancel: checked before connecting */
};

/* Asks a fence under way not to begin: it reports ZKW_FENCE_CANCELLED unless
 * it has already connected (then it closes the session and says so). */
static inline void zkw_fence_cancel(struct zkw_fence *f) {
  atomic_store(&f->cancel, true);
}

/* Starts fencing; f must stay allocated until cb runs (cb may free it). */
int zkw_fence_start(uv_loop_t *loop, struct zkw_fence *f, zkw_fence_cb cb, void *arg)
    __attribute__((warn_unused_result));
const char *zkw_fence_result_name(enum zkw_fence_result r);

#endif
