/* zkw_fence.c: fencing on a worker thread with the blocking C client. */
#include "zkw_fence.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

#include "zkw_fault.h"
#include "zkw_tls.h"
#include "zkw_zk.h"

struct fence_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state; /* 0 until the session connects or expires */
};

static void fence_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh, (void)path;
  struct fence_wait *w = ctx;
  if (type != ZOO_SESSION_EVENT) return;
  if (state != ZOO_CONNECTED_STATE && state != ZOO_EXPIRED_SESSION_STATE && state != ZOO_AUTH_FAILED_STATE)
    return;
  pthread_mutex_lock(&w->mu);
  if (!w->state) w->state = state;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void fence_work(uv_work_t *req) {
  struct zkw_fence *f = req->data;
  struct fence_wait w = {.state = 0};
  clientid_t id;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, &ca);
  pthread_condattr_destroy(&ca);
  id.client_id = f->session_id;
  memcpy(id.passwd, f->passwd, sizeof id.passwd);

  f->result = ZKW_FENCE_FAILED;
  if (atomic_load(&f->cancel)) {
    memset(&id, 0, sizeof id);
    f->result = ZKW_FENCE_CANCELLED;
    goto out;
  }
  zhandle_t *zh = zookeeper_init2(f->hosts, fence_watcher, f->timeout_ms, &id, &w, 0, zkw_zk_client_log);
  memset(&id, 0, sizeof id);
  if (!zh) {
    snprintf(f->detail, sizeof f->detail, "cannot create a client handle");
    goto out;
  }
  /* Queued now, sent first once connected (zookeeper.enforce.auth.enabled). */
  if (f->auth && zoo_add_auth(zh, "digest", f->auth, (int)strlen(f->auth), NULL, NULL) != ZOK) {
    snprintf(f->detail, sizeof f->detail, "cannot add digest auth");
    goto out_close;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += f->timeout_ms / 1000;
  deadline.tv_nsec += (long)(f->timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&w.mu);
  while (!w.state)
    if (pthread_cond_timedwait(&w.cv, &w.mu, &deadline) != 0) break;
  int state = w.state;
  pthread_mutex_unlock(&w.mu);

  if (state == ZOO_CONNECTED_STATE) {
    /* zookeeper_close sends closeSession and waits for the server's reply. */
    int rc = zookeeper_close(zh);
    zh = NULL;
    if (rc == ZOK)
      f->result = ZKW_FENCE_CLOSED;
    else
      snprintf(f->detail, sizeof f->detail, "closeSession: %s", zerror(rc));
  } else if (state == ZOO_EXPIRED_SESSION_STATE) {
    f->result = ZKW_FENCE_EXPIRED;
  } else if (state == ZOO_AUTH_FAILED_STATE) {
    snprintf(f->detail, sizeof f->detail, "authentication failed");
  } else {
    snprintf(f->detail, sizeof f->detail, "no server answered within %d ms", f->timeout_ms);
  }
out_close:
  if (zh) zookeeper_close(zh);
out:
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
}

static void fence_done(uv_work_t *req, int status) {
  struct zkw_fence *f = req->data;
  memset(f->passwd, 0, sizeof f->passwd);
  if (ZKW_FAULT(zk)) {
    f->result = ZKW_FENCE_FAILED;
    snprintf(f->detail, sizeof f->detail, "injected fault");
  } else if (status == UV_ECANCELED) {
    f->result = ZKW_FENCE_FAILED;
    snprintf(f->detail, sizeof f->detail, "cancelled");
  }
  f->cb(f, f->result, f->arg);
}

int zkw_fence_start(uv_loop_t *loop, struct zkw_fence *f, zkw_fence_cb cb, void *arg) {
  if (ZKW_FAULT(zk)) return UV_EIO;
  const char *route = zkw_tls_route(f->hosts); /* the internal relay under TLS */
  if (route != f->hosts) snprintf(f->hosts, sizeof f->hosts, "%s", route);
  f->cb = cb;
  f->arg = arg;
  f->detail[0] = 0;
  f->work.data = f;
  atomic_store(&f->cancel, false);
  return uv_queue_work(loop, &f->work, fence_work, fence_done);
}

const char *zkw_fence_result_name(enum zkw_fence_result r) {
  switch (r) {
  case ZKW_FENCE_CLOSED:
    return "closed";
  case ZKW_FENCE_EXPIRED:
    return "already expired";
  case ZKW_FENCE_CANCELLED:
    return "cancelled: the session was re-attached";
  default:
    return "failed";
  }
}
