/* zkw_recover.h: a successor process takes up the client connections its
 * predecessor left (a crash, kill -9, an upgrade, a restart: zkw_journal.h).
 *
 * For each durable connection the keeper (or the predecessor itself, at a
 * planned takeover) hands over the client's socket and the journal its
 * slot: the kernel tells how far the socket's two streams went, the
 * journal's logs hold what the client sent and was not handled and what it
 * was sent and was not written; the session is re-created as it stood and
 * re-attached upstream as a move does (zkw_move.h: same session id and
 * password, the last zxid, auth replayed, watches re-armed, the requests in
 * flight answered with CONNECTIONLOSS in order), then its client's bytes
 * flow again. What cannot be taken up (zkw_journal.h says what) is closed,
 * logged and counted: the client reconnects as after any crash. */
#ifndef ZKW_RECOVER_H
#define ZKW_RECOVER_H

#include <stdint.h>

#include "zkw_relay.h"

/* The connection of journal slot `slot`, its socket fd (owned from here).
 * Returns 0 (recovered, re-attaching), or -1 (closed, logged). */
int zkw_recover_session(struct zkw_server *srv, uint32_t slot, int fd);

#endif
