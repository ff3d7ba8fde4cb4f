/* zkw_pair.h: a session's two sockets: writing, reading on and off,
 * closing, and the session's lifetime.
 *
 * The lowest module of the relay: zkw_upstream, zkw_inband and zkw_session
 * build on it, and a policy uses its back-channel part (zkw_session_close,
 * zkw_session_ref / zkw_session_unref). It reaches the frame loop only
 * through the session's callbacks (on_read, on_closing). */
#ifndef ZKW_PAIR_H
#define ZKW_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "zkw_fault.h"
#include "zkw_relay.h"

/* Backpressure: a side stops reading while its peer has more than
 * ZKW_HIGH_WATER bytes unsent, and resumes below ZKW_LOW_WATER. */
#define ZKW_HIGH_WATER (1024 * 1024)
#define ZKW_LOW_WATER  (256 * 1024)

/* Closes both sides (flushing what is already queued, briefly) and logs the
 * reason once at the given level. Safe to call more than once. */
void zkw_session_close(struct zkw_session *s, enum zkw_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A write to side failed with rc: the session closes as an I/O error. */
void zkw_session_write_failed(struct zkw_session *s, const struct zkw_side *side, int rc);
/* zkwarden could not keep what it must (what: a frame from the server, a
 * reply held for the client): the session closes, out of memory. */
void zkw_session_out_of_memory(struct zkw_session *s, const char *what);
/* The client is read again, if it was paused, once its bytes to the server
 * are under ZKW_LOW_WATER. */
void zkw_session_read_client(struct zkw_session *s);
/* The process-wide bound (ZKWARDEN_MAX_BUFFERED_BYTES): once all buffers
 * together pass it, a side whose session holds more than its share (the
 * bound over the connections open) stops being read once its frames are all
 * handled (one half read is read to its end: zkw_pair.c's reads stop there);
 * it reads again once all buffers drain under three quarters of the bound,
 * or its own session's under half its share. Called after a side's frames
 * are handled. */
void zkw_side_check_cap(struct zkw_side *side);

/* A reference keeps the session's memory while closing (a handle, a request
 * in flight, a policy's pending work). The last unref of a closing session
 * frees it: after zkw_session_unref, s may be gone. */
void zkw_session_ref(struct zkw_session *s);
void zkw_session_unref(struct zkw_session *s);

/* Sends n bytes to side: straight to the socket if nothing is queued, the
 * rest (or all) copied to side->out. Returns 0 or a negative error. A socket
 * error on the upstream of an established session is its loss, not an
 * error: 0 is returned, the bytes (and later ones) are dropped, and the
 * session's on_upstream_lost runs on the next turn of the loop. */
int zkw_side_send_at(struct zkw_side *side, const uint8_t *p, size_t n, const char *where)
    __attribute__((warn_unused_result));
/* (where: the caller's place, a fault-injection point of the test build) */
#define zkw_side_send(side, p, n) zkw_side_send_at((side), (p), (n), ZKW_FAULT_WHERE)
/* Starts writing side->out if no write is in flight. */
void zkw_side_flush(struct zkw_side *side);
void zkw_side_start_reading(struct zkw_side *side);
void zkw_side_stop_reading(struct zkw_side *side);

/* Bytes queued or in flight to side. */
static inline size_t zkw_side_unsent(const struct zkw_side *side) {
  return side->out.len + side->flight.len;
}
static inline struct zkw_side *zkw_side_peer(struct zkw_side *side) {
  struct zkw_session *s = side->s;
  return side == &s->client ? &s->upstream : &s->client;
}

#endif
