/* zkw_sweep.h: sweeps of the lock roots (zkw_sweep.c).
 *
 * Sweeps walk the lock roots for this identity's stale locks that fencing
 * could not remove (the ensemble-bug case), in-band on the session of the
 * current incarnation (waiting while none is attached); their deletes run
 * while every session of this sidecar holds back its lock requests. */
#ifndef ZKW_SWEEP_H
#define ZKW_SWEEP_H

#include <stdbool.h>

struct zkw_identity;

/* Sweeps: soon after a new incarnation, and every ZKWARDEN_SWEEP_INTERVAL_S. */
void zkw_sweep_soon(struct zkw_identity *id);
/* True while a sweep deletes: sessions hold back lock requests. */
bool zkw_sweep_holding(const struct zkw_identity *id);

#endif
