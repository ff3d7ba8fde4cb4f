/* zkw_quiesce.c: a planned hand-over's pause (see zkw_quiesce.h): no
 * client read, the replies to what is in flight waited for, then done. */
#include "zkw_quiesce.h"

#include <errno.h>
#include <stdlib.h>

#include "zkw_pair.h"

#define CHECK_MS 5

static uv_timer_t timer;
static bool timer_init;
static void (*on_done)(int status);
static uint64_t deadline;

/* Nothing of the session's is on its way: no request of the client's in
 * flight (zkwarden's own may be: they are not the client's to wait for), no
 * withheld reply, no byte for the client left unwritten. */
static bool quiet(const struct zkw_session *s) {
  if (s->phase != ZKW_PHASE_ACTIVE || !s->jr.slot) return true; /* not durable: not the successor's */
  if (s->barrier || s->moving || zkw_side_unsent(&s->client)) return false;
  for (uint32_t i = 0; i < s->pending.count; i++)
    if (!zkw_pending_at(&s->pending, i).owned) return false;
  return true;
}

static void check_cb(uv_timer_t *t) {
  struct zkw_server *srv = t->data;
  bool all = true;
  for (struct zkw_session *s = srv->sessions; s && all; s = s->next)
    all = quiet(s);
  if (!all && uv_now(srv->loop) < deadline) return;
  uv_timer_stop(t);
  void (*done)(int) = on_done;
  on_done = NULL;
  if (!all) zkw_log_info("hand-over: replies still in flight after the bound: the successor answers them");
  if (done) done(all ? 0 : -ETIMEDOUT);
}

void zkw_quiesce_start(struct zkw_server *srv, uint32_t bound_ms, void (*done)(int status)) {
  srv->quiescing = true;
  for (struct zkw_session *s = srv->sessions; s; s = s->next)
    zkw_side_stop_reading(&s->client);
  if (!timer_init) {
    uv_timer_init(srv->loop, &timer);
    uv_unref((uv_handle_t *)&timer);
    timer_init = true;
  }
  timer.data = srv;
  on_done = done;
  deadline = uv_now(srv->loop) + bound_ms;
  uv_timer_start(&timer, check_cb, 0, CHECK_MS);
}

void zkw_quiesce_cancel(struct zkw_server *srv) {
  if (timer_init) uv_timer_stop(&timer);
  on_done = NULL;
  srv->quiescing = false;
  for (struct zkw_session *s = srv->sessions; s; s = s->next)
    if (s->phase != ZKW_PHASE_CLOSING) zkw_session_read_client(s), zkw_side_start_reading(&s->client);
}

void zkw_quiesce_close(void) {
  if (timer_init && !uv_is_closing((uv_handle_t *)&timer)) uv_close((uv_handle_t *)&timer, NULL);
  on_done = NULL;
}
