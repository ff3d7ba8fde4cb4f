/* zkw_journal.h: what a successor needs to go on with each client
 * connection after zkwarden's relaying process ends (a crash, kill -9, an
 * upgrade, a restart), kept as it changes in a shared-memory file that
 * outlives the process (a memfd the keeper holds, or one handed over with
 * the connections: zkw_keeperlink.h).
 *
 * Per durable connection (a slot): the session (id, password, timeout, its
 * flags), the last zxid the client has seen, its auth packets and watches,
 * the requests in flight (xid, opcode, flags, zkwarden's own or the
 * client's), the policy's few bytes (the sidecar: the session's
 * incarnation), and the two byte streams' ends on the client's socket: every
 * byte read from the client is logged in a ring before it is handled, and
 * every byte for the client is logged in another before it is written. The
 * successor asks the kernel how many bytes the socket took from the client
 * (tcpi_bytes_received less what is still queued) and how many it was given
 * (tcpi_bytes_acked and what is queued): with the logs it knows where both
 * streams stand, frame by frame, writes what the client has not had yet,
 * handles what it sent and was not handled, answers the requests in flight
 * with CONNECTIONLOSS and re-attaches the session upstream as a move does
 * (zkw_recover.h).
 *
 * Commits. A slot's state for the client's replies (how far the client
 * stream is logged, which requests are answered, the last zxid, which watch
 * table holds) is one record written to the spare of two and published by
 * one 8-byte store: a process killed between any two instructions leaves the
 * last published record whole. Requests are pushed (the entry, then the
 * tail) before the bytes that carry them go upstream, and the read side's
 * progress is stored after each frame; the successor takes the later of the
 * two. Nothing is written to a socket before the record that covers it.
 *
 * What is not durable (its client connection is closed by a successor, as
 * by any crash): a connection without a slot (ZKWARDEN_DURABLE_SESSIONS
 * bounds them), one still in its handshake, SASL, read-only and other
 * sessions that cannot move (zkw_move.h), one whose unhandled request bytes
 * or unwritten reply bytes are more than its ring holds (a frame larger than
 * the ring while it passes), and a process killed between reading bytes
 * from the client and logging them (a few instructions). */
#ifndef ZKW_JOURNAL_H
#define ZKW_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_jref.h"

struct zkw_session;

/* Sizes of a slot's parts. */
#define ZKW_JOURNAL_PENDING  2048          /* requests in flight kept */
#define ZKW_JOURNAL_AUTH     (64 * 1024)   /* auth packets (zkw_move.c keeps at most this) */
#define ZKW_JOURNAL_WATCHES  (128 * 1024)  /* the watch table as setWatches frames, each of two */
#define ZKW_JOURNAL_IN_RING  (256 * 1024)  /* bytes read from the client, not yet handled */
#define ZKW_JOURNAL_OUT_RING (1024 * 1024) /* bytes for the client, not yet written */
#define ZKW_JOURNAL_POLICY   64            /* the policy's bytes per session */
#define ZKW_JOURNAL_PROCESS  4096          /* the policy's bytes for the process (the sidecar's identity) */

/* A request in flight, as kept (the relay's pending ring mirrored). */
struct zkw_jpending {
  int32_t xid;
  int32_t op;
  uint8_t flags; /* ZKW_PENDING_* */
  uint8_t owned; /* zkwarden's own (in-band): nothing is answered to the client */
  uint8_t pad[6];
  uint64_t end; /* the client stream's offset after the request (0: owned) */
};

/* What a successor finds in one slot (zkw_journal_read). */
struct zkw_jsession {
  uint32_t slot;
  uint64_t conn;
  int64_t session_id;
  int32_t timeout;
  uint8_t passwd[16];
  uint8_t passwd_len;
  bool read_only, ro_requested, sasl, unmovable;
  int64_t last_zxid;
  uint64_t in_logged, in_handled; /* client stream offsets: read and logged, handled */
  uint64_t out_logged;            /* client stream offset: logged toward the client */
  const uint8_t *auth;            /* the kept auth packets (in the journal: copy before reuse) */
  uint32_t auth_len, auth_count;
  const uint8_t *watches; /* setWatches frames */
  uint32_t watches_len;
  bool watches_lost;
  uint64_t head;          /* the first request in flight (zkw_journal_pending_at) */
  uint32_t pending_count; /* requests in flight */
  const uint8_t *policy;
  uint32_t policy_len;
};

struct zkw_journal;

/* Opens the journal on fd (a memfd handed over or held by the keeper; -1:
 * a new one), sized for `slots` durable connections. *recovered: the file
 * holds a previous process's slots (zkw_journal_read). Returns 0, or a
 * negative errno (logged by the caller: zkwarden then runs without one). */
int zkw_journal_open(struct zkw_journal **out, int fd, uint32_t slots, bool *recovered)
    __attribute__((warn_unused_result));
void zkw_journal_close(struct zkw_journal *j);
/* The file's descriptor (handed to a successor). */
int zkw_journal_fd(const struct zkw_journal *j);
uint32_t zkw_journal_slots(const struct zkw_journal *j);

/* The slots a previous process left established, and what they hold; the
 * views point into the journal and stay valid until zkw_journal_release of
 * that slot or zkw_journal_forget_previous. */
int zkw_journal_read(struct zkw_journal *j, uint32_t slot, struct zkw_jsession *out);
/* The i-th request in flight of a slot read (0: the oldest). */
struct zkw_jpending zkw_journal_pending_at(const struct zkw_journal *j, const struct zkw_jsession *js,
                                           uint32_t i);
/* The client stream's logged bytes from stream offset `from` to the end of
 * the log (toward the client when out, else read from it) into dst. Returns
 * 0, or -ERANGE when the ring no longer holds them. */
int zkw_journal_client_bytes(const struct zkw_journal *j, const struct zkw_jsession *js, bool out,
                             uint64_t from, uint8_t *dst);
/* Every slot not taken by a recovered session is free again. */
void zkw_journal_forget_previous(struct zkw_journal *j);

/* The policy's bytes for the process (the sidecar's registry session and
 * identity), kept and read back by the successor. */
int zkw_journal_save_process(struct zkw_journal *j, const void *data, size_t len);
size_t zkw_journal_load_process(const struct zkw_journal *j, void *data, size_t cap);

/* ---- the relay's calls, per session (zkw_session.c, zkw_pair.c, ...) ----
 * Each does nothing for a session without a slot. */

/* A free slot for a newly accepted connection (want: the one the keeper
 * link numbered it with, UINT32_MAX: any), or -1 (none left, or no
 * journal): the connection is then not durable. */
int zkw_journal_take(struct zkw_journal *j, struct zkw_session *s, uint32_t want);
/* A recovered session keeps its slot (after zkw_journal_read). */
void zkw_journal_keep(struct zkw_journal *j, struct zkw_session *s, uint32_t slot);
/* The connection is closed: its slot is wiped (the password first) and free. */
void zkw_journal_release(struct zkw_session *s);
/* n bytes just read from the client (logged before they are handled). */
void zkw_journal_client_read(struct zkw_session *s, const uint8_t *p, size_t n);
/* The client's bytes up to its stream offset `end` are handled. */
void zkw_journal_client_handled(struct zkw_session *s, uint64_t end);
/* A request pushed on the pending ring (end: the client stream offset after
 * it; 0 for zkwarden's own), before it goes upstream. */
void zkw_journal_pushed(struct zkw_session *s, int32_t xid, int32_t op, uint8_t flags, bool owned,
                        uint64_t end);
/* Bytes for the client, logged and committed before they are written, with
 * head: the pending entries (counted from the session's first) answered or
 * consumed with them and before them. */
void zkw_journal_to_client(struct zkw_session *s, const uint8_t *p, size_t n, uint64_t head);
/* Pending entries answered without bytes for the client (zkwarden's own
 * replies consumed), up to head. */
void zkw_journal_consumed(struct zkw_session *s, uint64_t head);
/* The session is established (its ConnectResponse logged) or changed what
 * a move would need: session fields, auth packets, the watch table. */
void zkw_journal_session(struct zkw_session *s);
/* The policy's bytes for this session. */
void zkw_journal_policy(struct zkw_session *s, const void *data, size_t len);
/* The session can no longer be recovered (SASL, read-only, closeSession):
 * its slot stays until it closes, marked so. */
void zkw_journal_not_durable(struct zkw_session *s);

#endif
