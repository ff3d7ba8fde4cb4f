/* zkw_sidecar.h: the sidecar policy as a hooks table (zkw_hooks.h).
 *
 * zkw_sidecar.c answers the relay's calls with the identity (zkw_incarnation
 * over the rooms identity/ and fencing/), the tags (zkw_rewrite), the lock
 * barrier, reclaim and sweeps (cleanup/), and the /zookeeper/config rewrite; main.c hands
 * zkw_sidecar_hooks to the server with the identity as its policy context.
 * Operations (admin, health) read the policy through the getters here. */
#ifndef ZKW_SIDECAR_H
#define ZKW_SIDECAR_H

#include <stdint.h>

#include "zkw_hooks.h"
#include "zkw_incarnation.h"
#include "zkw_relay.h"

extern const struct zkw_hooks zkw_sidecar_hooks;

/* After zkw_server_start(srv, ..., &zkw_sidecar_hooks, id): starts the
 * registry session and the claim (nothing with ZKWARDEN_MODE=relay). Returns
 * 0 or an error (logged; the proxy then relays without identity features). */
int zkw_sidecar_start(struct zkw_identity *id, struct zkw_server *srv) __attribute__((warn_unused_result));
/* zkw_server_finish's last step: closes the registry session (id: the
 * zkw_identity). */
void zkw_sidecar_finish(void *id);

/* The server's identity (its policy context), or NULL (the internal relay). */
struct zkw_identity *zkw_sidecar_identity(const struct zkw_server *srv);
/* The session's recorded incarnation; 0: a plain client. */
uint64_t zkw_sidecar_incarnation(const struct zkw_session *s);

#endif
