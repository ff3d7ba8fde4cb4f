/* zkw_fault.h: the fault-injection seam of the test build.
 *
 * Every point where zkwarden's own work can fail (an allocation, a socket
 * write, a libzookeeper call or completion, a TLS read or write, a reply
 * that does not decode, a system call of the handover or the keeper) asks
 * ZKW_FAULT(kind) first. In a build configured
 * with -DZKW_FAULT_INJECTION=ON (the sanitizer build of tests/run.sh, never
 * the release build), the environment variable ZKW_TEST_FAULT=kind:N[:code]
 * makes the Nth call of that kind fail, once, and logs it (kind:N@point: the
 * Nth call at the points whose detail is `point`, or whose file:line ends
 * with it); at exit the
 * number of calls of each kind is logged, so that a test can fail the 1st,
 * 2nd, ... call until N passes the count (SQLite's OOM and I/O-error loops).
 * In every other build ZKW_FAULT is the constant false and costs nothing.
 *
 * The kinds are one list (ZKW_FAULT_KINDS): their names are the ones the
 * variable takes and the logs print. ZKW_TEST_FAULT_PROCESS=name tags the
 * seam's lines "fault injection (name)" (several processes in one log: the
 * keeper, its workers). */
#ifndef ZKW_FAULT_H
#define ZKW_FAULT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* X(name, what fails) */
#define ZKW_FAULT_KINDS(X)                                                                                   \
  X(alloc, "an allocation of the relay, in-band, reclaim, sweep, fence or registry code returns NULL")       \
  X(write, "a write to the client or the upstream socket fails (EPIPE)")                                     \
  X(zk, "a libzookeeper call or completion of the registry fails (the code, default ZCONNECTIONLOSS)")       \
  X(tls, "a TLS handshake step, read or write fails")                                                        \
  X(reply, "an upstream or fence reply arrives corrupted (cut short: it does not decode)")                   \
  X(socket, "a socket() or connect() of the handover or the keeper fails")                                   \
  X(bind, "a bind() or listen() of the handover or the keeper fails (EADDRINUSE)")                           \
  X(accept, "an accept() of a handover peer fails")                                                          \
  X(sendmsg, "a handover message is not sent (EIO)")                                                         \
  X(recvmsg, "a handover message received is lost (EIO; its descriptors are closed)")                        \
  X(memfd, "the keeper's memfd_create() (or a standalone zkwarden's, for its journal) fails")                \
  X(fork, "the keeper's fork() (or a standalone zkwarden's spawn for an upgrade) fails")                     \
  X(exec, "the keeper's execv() of the worker fails in the child")                                           \
  X(dup, "a duplicate of a descriptor (F_DUPFD_CLOEXEC) fails (EMFILE)")

enum zkw_fault_kind {
#define ZKW_FAULT_ENUM(name, what) ZKW_FAULT_##name,
  ZKW_FAULT_KINDS(ZKW_FAULT_ENUM)
#undef ZKW_FAULT_ENUM
      ZKW_FAULT_KIND_COUNT
};

#ifdef ZKW_FAULT_INJECTION
/* Reads ZKW_TEST_FAULT. Returns 0, or -1 (with a line on stderr) when it
 * does not parse. */
int zkw_fault_init(void);
/* Counts a call of kind at where (detail: what the call is for there, when
 * one place serves several, or NULL); true when this is the one to fail.
 * Each (where, detail) is a point. */
bool zkw_fault_hit(enum zkw_fault_kind kind, const char *where, const char *detail);
/* The error code given with the variable, or dflt. */
int zkw_fault_code(int dflt);
/* Logs the count of calls of each kind (at exit). */
void zkw_fault_report(void);
/* Names the process in the seam's lines when several share a log (the
 * keeper and its workers): "fault injection (keeper): ...". Call before
 * zkw_fault_init (ZKW_TEST_FAULT_PROCESS overrides it). */
void zkw_fault_name_process(const char *name);
#define ZKW_FAULT_STR2(x) #x
#define ZKW_FAULT_STR(x)  ZKW_FAULT_STR2(x)
#define ZKW_FAULT_WHERE   __FILE__ ":" ZKW_FAULT_STR(__LINE__)
#define ZKW_FAULT(kind)   zkw_fault_hit(ZKW_FAULT_##kind, ZKW_FAULT_WHERE, NULL)
/* A point whose place the caller names (a helper's caller's line). */
#define ZKW_FAULT_AT(kind, where, detail) zkw_fault_hit(ZKW_FAULT_##kind, (where), (detail))
#else
static inline int zkw_fault_init(void) {
  return 0;
}
static inline int zkw_fault_code(int dflt) {
  return dflt;
}
static inline void zkw_fault_report(void) {}
static inline void zkw_fault_name_process(const char *name) {
  (void)name;
}
#define ZKW_FAULT_WHERE                   NULL
#define ZKW_FAULT(kind)                   false
#define ZKW_FAULT_AT(kind, where, detail) ((void)(where), (void)(detail), false)
#endif

/* Allocation with its fault point: what zkwarden's own paths call. */
#define zkw_malloc(n)     (ZKW_FAULT(alloc) ? NULL : malloc(n))
#define zkw_calloc(n, m)  (ZKW_FAULT(alloc) ? NULL : calloc((n), (m)))
#define zkw_realloc(p, n) (ZKW_FAULT(alloc) ? NULL : realloc((p), (n)))
#define zkw_strdup(s)     (ZKW_FAULT(alloc) ? NULL : strdup(s))

#endif
