/* zkw_registry.h: the identity's registry in ZooKeeper (zkw_registry.c):
 * the claim of the identity, its record, the owner's check, the own trees
 * it writes, and the lists of sessions waiting on them. One of the headers
 * the identity room offers the floors above it (fencing/, cleanup/ and the
 * sidecar's hooks); what they only read of the identity is zkw_identity.h. */
#ifndef ZKW_REGISTRY_H
#define ZKW_REGISTRY_H

#include "zkw_identity.h"
#include "zkw_owntrees.h"

/* zkwarden's own registry session: short, so that the owner node of a
 * sidecar that died goes quickly (the server clamps it to >= 2 ticks). */
#define ZKW_REGISTRY_SESSION_MS 4000
/* How often a broken registry is retried. */
#define ZKW_REGISTRY_OPEN_RETRY_MAX_MS 30000
#define ZKW_REGISTRY_RETRY_MS          5000

/* The identity's own trees: zkw_owntrees_of (zkw_owntrees.h). The
 * JobManager (a session of incarnation `incarnation`) creates an ephemeral
 * at path: if that is the current incarnation, its parent joins its trees,
 * written to the record soon. */
void zkw_registry_learn_tree(struct zkw_identity *id, uint64_t incarnation, struct zkw_bytes path);
/* A sweep pass of incarnation `incarnation` walked `walked` whole: earlier
 * incarnations' trees may retire (zkw_owntrees_walked); the record is
 * written if they did. */
void zkw_registry_trees_walked(struct zkw_identity *id, uint64_t incarnation,
                               const struct zkw_treeset *walked);

void zkw_registry_set_state(struct zkw_identity *id, enum zkw_reg_state st, const char *why);
/* Creates the registry paths and the owner node (or waits for it). */
void zkw_registry_claim(struct zkw_identity *id);
/* Reads the record (as the owner); id->on_record_loaded follows. */
void zkw_registry_load_record(struct zkw_identity *id);
/* A registry step failed: reported, relayed without identity features,
 * retried later. */
void zkw_registry_broken(struct zkw_identity *id, const char *what, int rc);

/* The identity's session lists (waiting, writers), linked via id_next. */
void zkw_registry_list_remove(struct zkw_session **head, struct zkw_session *s);
void zkw_registry_list_append(struct zkw_session **head, struct zkw_session *s, enum zkw_id_list which);
struct zkw_session *zkw_registry_list_pop(struct zkw_session **head);
/* Lets a held request go on, and drops the list's reference. */
void zkw_registry_release_hold(struct zkw_session *s);
/* The fence is done, failed or timed out: every request held for it goes on
 * to the record write if the registry can take it now, else on its way. */
void zkw_registry_release_waiting(struct zkw_identity *id);

/* Remembers the current record's session as the one to fence (id->prev),
 * if it may still be alive: before a new incarnation overwrites it. */
void zkw_registry_capture_previous(struct zkw_identity *id);
/* The dead list and `dead`: a session zkwarden saw end, written with the
 * next record write or alone (zkw_registry_flush_dead also writes learned
 * trees). */
void zkw_registry_note_dead(struct zkw_identity *id, int64_t session, uint64_t incarnation);
void zkw_registry_write_dead(struct zkw_identity *id, uint64_t dead);
void zkw_registry_flush_dead(struct zkw_identity *id);

#endif
