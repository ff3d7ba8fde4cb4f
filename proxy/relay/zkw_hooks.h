/* zkw_hooks.h: the one place where the relay meets a policy. Read this first.
 *
 * The relay (zkw_session, zkw_upstream, zkw_inband, zkw_server, zkw_pair)
 * moves ZooKeeper frames between a client and one upstream server and knows
 * nothing of identities. A policy (the sidecar: zkw_sidecar.c) sees the
 * session's life through the table below, set once when the server starts,
 * and answers with verdicts. With no table (NULL) every frame is forwarded
 * unchanged.
 *
 * Calls, all on the loop thread, in this order for a session:
 *   on_connect_request   a valid ConnectRequest arrived (before connecting up;
 *                        may hold it)
 *   on_connect_response  the server's first ConnectResponse
 *   on_request           each client request (not pings, auth, the handshake)
 *   on_reply             each reply to a client request (not pings, auth,
 *                        notifications, nor zkwarden's own in-band requests),
 *                        and the CONNECTIONLOSS a move answers it with
 *   on_notification      each notification (xid -1) of an established session,
 *                        before the relay's watch table sees it: ZKW_FORWARD,
 *                        or ZKW_DROP for one that only a watch of the policy's
 *                        own asked for (then the table never sees it). Not
 *                        called while the session moves (zkw_move.c): a
 *                        notification the new server sends before the move
 *                        finishes goes to the client unasked (the policy's
 *                        watches are not re-set there: none of theirs comes)
 *   on_move              the server of an established session went away or
 *                        silent and the session could move (zkw_move.h):
 *                        ZKW_FORWARD moves it, ZKW_DROP does what a plain
 *                        proxy would (the policy's observe mode)
 *   on_close             the session is closing (once)
 *   on_recover           instead of the first four: a session a predecessor
 *                        process served, taken up (zkw_recover.h)
 *
 * Verdicts of on_request and on_reply (negative: a codec status, the session
 * is closed as a protocol error):
 *   ZKW_FORWARD   send the frame as it came
 *   ZKW_REPLACE   send `out` instead (the policy wrote the whole frame there)
 *   ZKW_DROP      consume it, send nothing
 *   ZKW_HOLD      (requests) stop processing the client's frames here; the
 *                 same request comes again after zkw_session_resume
 *   ZKW_WITHHOLD  (the barrier reply only) keep the reply; the policy ends
 *                 it later with zkw_session_replay or zkw_session_deliver
 * A request's FORWARD or REPLACE may carry:
 *   ZKW_KEEP      the relay keeps a copy of the frame it sent; its reply comes
 *                 to on_reply with ZKW_REPLY_KEPT set, and
 *                 zkw_session_kept_request gives the request meanwhile (the
 *                 sidecar: a lock create, whose NODEEXISTS on a stale lock it
 *                 reclaims in-band after the client has its reply)
 *   ZKW_BARRIER   a ZKW_KEEP whose reply the policy may withhold: the
 *                 client's later requests are not sent to the server until
 *                 the client has the barrier's answer, so that the server
 *                 executes them after the barrier's replay as direct it
 *                 would after the request (zkw_replies.h). Its reply comes
 *                 with ZKW_REPLY_AT_BARRIER; ZKW_WITHHOLD then keeps it until
 *                 the policy replays the request or delivers the reply
 *   ZKW_MARK      its reply comes with ZKW_REPLY_MARKED (however many marked
 *                 requests are in flight).
 *
 * Per-session policy state: the relay allocates session_size bytes with each
 * session (zeroed, freed with it): zkw_session_policy(s). The back-channel
 * (what a policy may call) is in zkw_session.h, zkw_replies.h and zkw_pair.h. */
#ifndef ZKW_HOOKS_H
#define ZKW_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_buf.h"
#include "zkw_codec.h"

struct zkw_session;

enum zkw_verdict {
  ZKW_FORWARD = 0,
  ZKW_REPLACE = 1,
  ZKW_DROP = 2,
  ZKW_HOLD = 3,
  ZKW_WITHHOLD = 4,
};
#define ZKW_VERDICT_MASK 0xff
#define ZKW_BARRIER      0x100
#define ZKW_MARK         0x200
#define ZKW_KEEP         0x400

/* on_reply's flags. */
#define ZKW_REPLY_AT_BARRIER 1u /* the first reply to the barrier request (not its replay's) */
#define ZKW_REPLY_MARKED     2u /* the request carried ZKW_MARK */
#define ZKW_REPLY_KEPT       4u /* the request carried ZKW_KEEP or ZKW_BARRIER: zkw_session_kept_request */

struct zkw_hooks {
  size_t session_size;
  /* ZKW_FORWARD, or ZKW_HOLD: nothing is connected until zkw_session_resume
   * (then the same ConnectRequest comes again). */
  int (*on_connect_request)(struct zkw_session *s, const struct zkw_connect_req *req);
  void (*on_connect_response)(struct zkw_session *s, const struct zkw_connect_resp *resp);
  int (*on_request)(struct zkw_session *s, const struct zkw_request *req, const uint8_t *frame, size_t len,
                    struct zkw_buf *out);
  int (*on_reply)(struct zkw_session *s, const struct zkw_reply *rep, int32_t op, unsigned flags,
                  struct zkw_buf *out);
  /* why: what happened to the server, for the policy's report; silent: the
   * server went silent (the connection is still there: ZKW_DROP leaves it to
   * the client's own timeout) rather than closed or reset (ZKW_DROP closes
   * the client's connection). */
  int (*on_move)(struct zkw_session *s, const char *why, bool silent);
  int (*on_notification)(struct zkw_session *s, const struct zkw_watcher_event *ev);
  void (*on_close)(struct zkw_session *s);
  /* A session a predecessor process left (zkw_recover.h), before it is
   * re-attached: the policy's bytes it kept for it (zkw_session_persist). */
  void (*on_recover)(struct zkw_session *s, const uint8_t *kept, size_t len);
  /* The server stops (SIGTERM): policy timers and handles go (policy: the
   * server's policy context). */
  void (*on_stop)(void *policy);
};

#endif
