/* zkw_takeover.h: a standalone zkwarden's handover socket, and the
 * `zkwarden upgrade` command.
 *
 * A zkwarden without a keeper listens on the handover socket itself
 * (zkw_handover.h: the same name a keeper would have) and answers ONE
 * takeover: on HELLO{TAKEOVER} from `zkwarden --takeover` it stops
 * listening there, quiesces (the link's on_quiesce), hands its listening
 * socket, journal memfd, admin listening socket and a CLIENT per session
 * to the newcomer, READY, and ends (on_handed_over): the newcomer receives
 * them with the same code as from a keeper (zkw_keeperlink_open) and
 * serves once this process has exited. On HELLO{UPGRADE} (`zkwarden
 * upgrade`) it starts its own binary as it is on disk now, with
 * `--takeover` and this process's environment, and answers the command
 * RESULT: ok once it handed over to it, or why not (the new process exited
 * first: this one keeps serving). With a keeper none of this runs: the
 * keeper answers on the socket. */
#ifndef ZKW_TAKEOVER_H
#define ZKW_TAKEOVER_H

#include <uv.h>

/* Standalone: listens on the handover socket (a failure is logged and
 * leaves this process without a takeover). Returns 0. */
int zkw_takeover_start(uv_loop_t *loop);
/* After the loop ended: closes its handles and descriptors (the successor
 * sees this process gone when the last one closes). */
void zkw_takeover_close(void);

/* `zkwarden upgrade`: asks the keeper or the standalone zkwarden found by
 * ZKWARDEN_KEEPER_SOCKET / ZKWARDEN_LISTEN to restart onto the binary on
 * disk. Returns the exit status: 0 when the new process serves, 1 with the
 * reason on stderr otherwise, 2 for a bad argument. */
int zkw_upgrade_cli(int argc, char **argv);

#endif
