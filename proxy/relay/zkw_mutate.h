/* zkw_mutate.h: mutations of the test build, each breaking one guarantee of
 * transparency on purpose, so that the consistency test (tests/consistency)
 * shows that its checkers can fail: a checker that never fires proves
 * nothing.
 *
 * In a build configured with -DZKW_FAULT_INJECTION=ON (the sanitizer build
 * of tests/run.sh, never the release build), the environment variable
 * ZKW_TEST_MUTATION=name[:every] turns one mutation on for the life of the
 * process (read at the first call):
 *   swap_replies     every Nth reply to a client request (default 400) that
 *                    has another request behind it is held and sent after
 *                    the next reply: two replies out of xid order
 *   drop_watch_event every Nth notification for a client (default 3) is
 *                    dropped: the watch never fires
 *   lower_zxid       every Nth reply to a client request (default 300) whose
 *                    session had a reply with a zxid before it carries that
 *                    zxid less one: a zxid lower than an earlier reply's
 *   replay_create    every Nth sequential create of a client (default 25) is
 *                    sent again as an in-band request of zkwarden's own once
 *                    its reply came: the create runs twice
 * Each one logs a line when it acts (warn: "test mutation ..."). In every
 * other build the calls are empty inline functions and cost nothing.
 *
 * The relay calls it at two points of zkw_session.c: each client request
 * after it was matched (zkw_mutate_request) and each frame from the server
 * for the client with the verdict it got (zkw_mutate_reply, which may turn
 * it into another verdict). */
#ifndef ZKW_MUTATE_H
#define ZKW_MUTATE_H

#include <stddef.h>
#include <stdint.h>

#include "zkw_codec.h"

struct zkw_session;

#ifdef ZKW_FAULT_INJECTION
/* A client request about to go upstream (req decoded from frame). */
void zkw_mutate_request(struct zkw_session *s, const struct zkw_request *req, const uint8_t *frame,
                        size_t flen);
/* A frame from the server for the client (op: the opcode it answers, or
 * ZKW_OP_NOTIFICATION) and the verdict it got from the relay. Returns that
 * verdict, or the mutation's own: ZKW_DROP (held or dropped) or ZKW_REPLACE
 * (the frame, changed or with a held one behind it, in s->scratch). */
int zkw_mutate_reply(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t op, int verdict);
#else
static inline void zkw_mutate_request(struct zkw_session *s, const struct zkw_request *req,
                                      const uint8_t *frame, size_t flen) {
  (void)s, (void)req, (void)frame, (void)flen;
}
static inline int zkw_mutate_reply(struct zkw_session *s, const uint8_t *frame, size_t flen, int32_t op,
                                   int verdict) {
  (void)s, (void)frame, (void)flen, (void)op;
  return verdict;
}
#endif

#endif
