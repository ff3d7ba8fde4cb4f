/* zkw_lockcheck.h: one node that may be a stale lock or a zombie, as
 * reclaim and the sweep see it (zkw_lockcheck.c). */
#ifndef ZKW_LOCKCHECK_H
#define ZKW_LOCKCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zkw_history.h"
#include "zkw_identity.h"
#include "zkw_lockrule.h"
#include "zkw_rewrite.h"
#include "zkw_zk.h"

/* One node that may be a stale lock. */
struct zkw_lock_check {
  char *path;
  int version;
  int64_t czxid;
  int64_t ctime; /* ms since the epoch, the server's clock */
  int64_t owner;
  struct zkw_tag tag;
  bool tagged;
  bool stale;
  const char *why; /* not stale: why */
  bool zombie;     /* its owner is a session of this identity zkwarden saw end */
  struct zkw_dead_session dead;
};

/* What a zombie means, for the operator (log lines and the alert say it). */
#define ZKW_ZOMBIE_ADVICE                                                                                    \
  "the ensemble kept an ephemeral after its session ended: check the servers' sync (initLimit, syncLimit), " \
  "their versions against ZOOKEEPER-2355/4541/4712/4837/5010, and restart the server that still serves it"

/* Why a node is not a stale lock, or NULL if it is one. current is the
 * current incarnation of the tag's identity (0 if unknown). */
const char *zkw_lockcheck_why_not(const struct zkw_lock_check *c, int64_t asking_session, uint64_t current);
/* Reads a node into a zkw_lock_check (from a get result). */
void zkw_lockcheck_fill(struct zkw_lock_check *c, const struct zkw_zk_result *r);
/* A step that could not do its work (zerr: the ZooKeeper error it got):
 * logged at warn with the path, counted by reason, recorded. c: the lock
 * concerned, if known; s: the session, if any (for the log line). */
void zkw_lockcheck_step_failed(const struct zkw_session *s, enum zkw_history_kind kind, const char *step,
                               const char *path, int zerr, const struct zkw_lock_check *c);
/* Observe mode: the delete sidecar mode would do, reported once per node. */
void zkw_lockcheck_would_delete(struct zkw_identity *id, enum zkw_history_kind kind,
                                const struct zkw_lock_check *c, const char *cost);
/* The zombie verdict on a read node: its owner a session of this identity
 * proven dead (c->zombie and c->dead set, true), or not; one listed dead and
 * not proven is reported (once, zkw_lockcheck_unproven) if report. */
bool zkw_lockcheck_zombie(const struct zkw_identity *id, struct zkw_lock_check *c, int64_t asking_session,
                          bool report);
/* A node whose owner the dead list names but zkwarden could not prove dead
 * (why): never deleted; one warn line, zkwarden_zombies_unproven_total and a
 * /v1/reclaims row per node. */
void zkw_lockcheck_unproven(const struct zkw_identity *id, const struct zkw_lock_check *c, const char *why);
/* True the first time a node (its czxid) is reported in one of the reports
 * that say a node once (a ring of the last ZKW_LOCKCHECK_REPORTED). */
#define ZKW_LOCKCHECK_REPORTED 256
bool zkw_lockcheck_report_once(int64_t czxid);
/* ms since the epoch as 2026-01-02T03:04:05.678Z. */
void zkw_lockcheck_format_ms(uint64_t ms, char *out, size_t cap);
/* A zombie of this identity deleted (at version c->version, on the
 * JobManager's connection to `server`): one warn line, the counter, a row. */
void zkw_lockcheck_zombie_deleted(const char *identity, const struct zkw_lock_check *c, const char *server,
                                  const char *by);

#endif
