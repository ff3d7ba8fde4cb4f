/* zkw_quiesce.h: a planned hand-over's pause (zkwarden upgrade, SIGUSR2, a
 * takeover, SIGTERM under a keeper): the clients are no longer read, so no
 * new request goes upstream; the requests in flight get their replies and
 * the replies reach the clients' sockets, within a bound. What is left when
 * the bound passes (a server that does not answer, a client that does not
 * read) is the successor's, as after a crash: the journal holds it
 * (zkw_journal.h) and the successor answers a request in flight with
 * CONNECTIONLOSS, in order. */
#ifndef ZKW_QUIESCE_H
#define ZKW_QUIESCE_H

#include <stdint.h>

#include "zkw_relay.h"

/* Begins the pause; done(0) once every durable session is quiet, or
 * done(-ETIMEDOUT) after bound_ms, on the loop thread. */
void zkw_quiesce_start(struct zkw_server *srv, uint32_t bound_ms, void (*done)(int status));
/* The hand-over did not happen: the clients are read again. */
void zkw_quiesce_cancel(struct zkw_server *srv);
/* At the end of the process: the pause's timer is closed (a hand-over that
 * failed leaves it initialised). */
void zkw_quiesce_close(void);

#endif
