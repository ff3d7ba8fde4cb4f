/* zkw_keeperlink.h: the worker's side of the handover (zkw_handover.h).
 *
 * One per process. At start (zkw_keeperlink_open, before the listener),
 * a zkwarden either
 *  - has a keeper (ZKWARDEN_KEEPER=on: zkwarden-keeper started it, or runs
 *    in another container of the pod): it connects to the keeper's
 *    handover socket and says HELLO (TAKEOVER with ZKWARDEN_TAKEOVER=on or
 *    `--takeover`: replace the worker that serves);
 *  - or serves by itself (standalone), and with `--takeover` connects to
 *    the running standalone zkwarden found by the same environment
 *    (zkw_takeover.h answers there);
 * and in both cases receives STATE (the listening socket, the journal
 * memfd, the admin listening socket), a CLIENT per held client connection
 * and READY, here, with one receiving code. zkw_server_start and
 * zkw_admin_start take the inherited listening sockets instead of binding
 * (zkw_keeperlink_take_listener); the recovery (zkw_keeperlink_recover)
 * decides what becomes of each inherited client connection.
 *
 * While it serves, each accepted client connection gets a slot
 * (zkw_keeperlink_adopt: with a keeper, the keeper gets a duplicate of its
 * fd by ADOPT) and gives it back when it closes (zkw_keeperlink_forget:
 * FORGET). With a keeper, the link is watched for QUIESCE (hand over: the
 * ops' on_quiesce, then DONE, then on_handed_over: this process exits
 * without closing a client's connection for good, the keeper holds them)
 * and STOP (on_stop: close the sessions and exit, as SIGTERM without a
 * keeper). A keeper that goes away is a STOP. The journal's content is
 * the recovery's (the lead's zkw_journal): the link only carries its fd.
 *
 * Slots are the link's: the lowest free number, at most
 * ZKW_HANDOVER_SLOT_MAX, never one an inherited connection still holds;
 * the journal can index its per-session records by them. */
#ifndef ZKW_KEEPERLINK_H
#define ZKW_KEEPERLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_config.h"

enum zkw_keeperlink_mode {
  ZKW_LINK_NONE,       /* not opened (tests that build a server alone) */
  ZKW_LINK_STANDALONE, /* no keeper: this process holds its sockets */
  ZKW_LINK_KEEPER,     /* a keeper holds the listening sockets and a duplicate of each connection */
};

/* An inherited client connection. */
struct zkw_keeperlink_client {
  uint32_t slot;
  int fd;
};

/* What the holder handed over at start. */
struct zkw_keeperlink_inherited {
  bool predecessor; /* a worker served before this one (a crash or a takeover): the journal is its */
  bool takeover;    /* this process took over from a live one (planned) */
  int journal_fd;   /* always >= 0 once open succeeded (standalone without a predecessor: a new memfd) */
  struct zkw_keeperlink_client *clients;
  size_t nclients; /* clients[i].fd is -1 once taken or closed */
};

/* The link's callbacks into the process (main.c wires them; the lead's
 * recovery replaces on_quiesce). */
struct zkw_keeperlink_ops {
  void *arg;
  /* Hand over: stop accepting (zkw_server_stop_accepting) and reading at a
   * frame boundary, let what is in flight be answered (bounded), commit the
   * journal, and call done(0) (or done(-errno): the hand-over goes on: the
   * successor recovers from the journal as after a crash). Never closes a
   * client connection: the holder keeps it. */
  void (*on_quiesce)(void *arg, void (*done)(int status));
  /* The successor has everything: end the process without closing a client
   * connection for good (closing this process's fds is fine; no
   * closeSession). The link no longer adopts or forgets. */
  void (*on_handed_over)(void *arg);
  /* STOP, or the keeper went away: close the sessions and exit (SIGTERM's
   * path). */
  void (*on_stop)(void *arg, const char *why);
  /* A standalone zkwarden's hand-over did not happen (the successor did not
   * confirm it took everything): serve again as before on_quiesce
   * (zkw_server_resume_accepting). */
  void (*on_resume)(void *arg);
};

/* Connects to the keeper or the running zkwarden when cfg (ZKWARDEN_KEEPER,
 * ZKWARDEN_TAKEOVER) or takeover (`--takeover`) says so, and receives what
 * it hands over (blocking, bounded: a takeover waits for the running one to
 * quiesce and exit). Standalone without --takeover: only creates the
 * journal memfd. Returns 0, or -1 (logged: no keeper, no zkwarden to take
 * over from, a refusal, a broken hand-over; every fd received is closed). */
int zkw_keeperlink_open(const struct zkw_config *cfg, bool takeover) __attribute__((warn_unused_result));
enum zkw_keeperlink_mode zkw_keeperlink_mode(void);
const struct zkw_keeperlink_inherited *zkw_keeperlink_inherited(void);

enum zkw_keeperlink_listener { ZKW_LINK_LISTEN, ZKW_LINK_ADMIN };
/* The inherited listening socket (ownership passes to the caller); in a
 * standalone zkwarden serving again after a hand-over that did not happen,
 * a duplicate of the one it served on; else -1: bind as usual. */
int zkw_keeperlink_take_listener(enum zkw_keeperlink_listener which);
/* The listening socket the caller serves on (inherited or bound): a
 * standalone zkwarden keeps a duplicate to hand to its successor. Returns
 * 0 or a negative errno (logged: a takeover will not get it). */
int zkw_keeperlink_note_listener(enum zkw_keeperlink_listener which, int fd);

/* The recovery seam: called once per inherited client connection (after
 * the server listens), fd owned by fn when it returns true (the session
 * goes on under its slot); false: the link closes fd and forgets the slot.
 * fn NULL: every inherited connection is closed (the JobManager's client
 * reconnects: what zkwarden did before the journal). */
typedef bool (*zkw_keeperlink_recover_fn)(void *arg, uint32_t slot, int fd, int journal_fd);
void zkw_keeperlink_recover(zkw_keeperlink_recover_fn fn, void *arg);

/* Watches the link (keeper mode) for QUIESCE and STOP. Returns 0 or a
 * negative libuv error (logged). */
int zkw_keeperlink_start(uv_loop_t *loop, const struct zkw_keeperlink_ops *ops)
    __attribute__((warn_unused_result));

/* A client connection accepted: its slot (the keeper gets a duplicate of
 * fd). Returns 0, or a negative errno (logged; the connection is served
 * without a slot: a crash of this process would end it). A no-op (0, slot
 * UINT32_MAX) without a link or once handed over. */
int zkw_keeperlink_adopt(int fd, uint32_t *slot);
/* The connection in slot is being closed by this process: the keeper
 * closes its duplicate. A no-op for UINT32_MAX and once handed over. */
void zkw_keeperlink_forget(uint32_t slot);

/* Hands over as on QUIESCE (SIGTERM with a keeper: the keeper keeps the
 * connections for the next worker). Returns false when there is no keeper
 * (the caller stops as usual). */
bool zkw_keeperlink_quiesce(void);
/* True once handed over or stopping: what this process still does is its
 * own ending. */
bool zkw_keeperlink_ending(void);

/* For zkw_takeover.c (a standalone zkwarden handing over to --takeover). */
struct zkw_keeperlink_snapshot {
  int listen_fd, admin_fd, journal_fd; /* the link's (not duplicates) */
  const int *slot_fds;                 /* slot_fds[slot]: the session's fd, or < 0 */
  size_t nslots;
};
void zkw_keeperlink_snapshot(struct zkw_keeperlink_snapshot *out);
/* Runs on_quiesce, then after(status). */
void zkw_keeperlink_run_quiesce(void (*after)(int status));
void zkw_keeperlink_run_handed_over(void);
void zkw_keeperlink_run_resume(void);
void zkw_keeperlink_run_stop(const char *why);
const struct zkw_config *zkw_keeperlink_config(void);
struct zkw_handover_addr;
const struct zkw_handover_addr *zkw_keeperlink_addr(void);

/* After the loop ended: closes the link's handles and descriptors (the
 * keeper or the successor then sees this process gone). */
void zkw_keeperlink_close(void);

#endif
