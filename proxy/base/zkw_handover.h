/* zkw_handover.h: the handover transport between zkwarden's processes.
 *
 * Whoever holds the sockets (the keeper, proxy/keeper/, or a standalone
 * zkwarden answering `zkwarden --takeover`) and the worker that relays talk
 * over a SOCK_SEQPACKET unix socket in the Linux abstract namespace, named by
 * ZKWARDEN_KEEPER_SOCKET, else "zkwarden/" + ZKWARDEN_LISTEN as written (a
 * leading NUL: no file; the containers of one Kubernetes pod share the
 * network namespace, so both reach it). Each message is one packet: a fixed
 * header, a small payload and up to ZKW_HANDOVER_FDS_MAX descriptors passed
 * by SCM_RIGHTS. Plain POSIX and libc only (no libuv, no libzookeeper), so
 * that the keeper links it alone; every socket is nonblocking and CLOEXEC,
 * every descriptor received is CLOEXEC (MSG_CMSG_CLOEXEC) and closed on
 * every error path. A peer of another user is refused (SO_PEERCRED): the
 * descriptors carry the JobManager's connections and the journal, which
 * holds session passwords.
 *
 * The conversation (H: the holder, W: the worker):
 *   W->H HELLO   {pid, version, flags}: TAKEOVER (replace the current
 *                worker), UPGRADE (from `zkwarden upgrade`: restart onto
 *                the binary on disk, answer RESULT)
 *   H->W STATE   {flags, clients, workers} + fds [listening socket, journal
 *                memfd, admin listening socket if STATE_ADMIN]
 *   H->W CLIENT  slot + the fd of one held client connection (one each)
 *   H->W READY   end of the list: the worker serves
 *   W->H ADOPT   slot + the fd of a connection the worker accepted: the
 *                holder keeps a duplicate
 *   W->H FORGET  slot: the worker closed it; the holder closes its duplicate
 *   H->W QUIESCE hand over: stop, commit the journal, answer DONE, exit
 *   W->H DONE    {status}
 *   H->W STOP    the whole sidecar stops: close the sessions and exit
 *   H->C RESULT  {status, reason}: to an `upgrade` command
 * Failure points (zkw_fault.h, test builds): socket, bind, accept, sendmsg,
 * recvmsg, dup. */
#ifndef ZKW_HANDOVER_H
#define ZKW_HANDOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* The listening addresses' defaults, shared by the configuration list and
 * the keeper (which reads the variables itself). */
#define ZKW_DEFAULT_LISTEN       "127.0.0.1:2181"
#define ZKW_DEFAULT_ADMIN_LISTEN "127.0.0.1:9181"

#define ZKW_HANDOVER_MAGIC       0x68776b7au /* "zkwh" in memory (little-endian) */
#define ZKW_HANDOVER_VERSION     1
#define ZKW_HANDOVER_PAYLOAD_MAX 240
#define ZKW_HANDOVER_FDS_MAX     4
/* An abstract name's printable part, without the leading NUL. */
#define ZKW_HANDOVER_NAME_MAX 100
/* The highest slot number a peer may name (a bound on the holder's table). */
#define ZKW_HANDOVER_SLOT_MAX (1u << 22)

enum zkw_handover_type {
  ZKW_HO_HELLO = 1,
  ZKW_HO_STATE,
  ZKW_HO_CLIENT,
  ZKW_HO_READY,
  ZKW_HO_ADOPT,
  ZKW_HO_FORGET,
  ZKW_HO_QUIESCE,
  ZKW_HO_DONE,
  ZKW_HO_STOP,
  ZKW_HO_RESULT,
  ZKW_HO_TYPE_END
};

/* HELLO flags. */
#define ZKW_HELLO_TAKEOVER 1u
#define ZKW_HELLO_UPGRADE  2u
/* STATE flags. */
#define ZKW_STATE_ADMIN      1u /* the third fd is the admin listening socket */
#define ZKW_STATE_PREVIOUS   2u /* a worker served before this one: the journal is its */
#define ZKW_STATE_STANDALONE 4u /* handed by a standalone zkwarden that exits (not a keeper) */

struct zkw_handover_header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t slot;
  uint32_t len; /* payload bytes after the header */
};

struct zkw_handover_hello {
  uint32_t pid;
  uint32_t version;
  uint32_t flags;
};
struct zkw_handover_state {
  uint32_t flags;
  uint32_t clients; /* CLIENT messages that follow, at most (one may be skipped if it closed meanwhile) */
  uint32_t workers; /* workers that served before this one */
};
struct zkw_handover_status {
  int32_t status;   /* 0: ok */
  char reason[200]; /* NUL-terminated text: why not (RESULT) */
};

/* One message, received or to send. fds: nfds descriptors (received: owned
 * by the receiver). */
struct zkw_handover_msg {
  uint16_t type;
  uint32_t slot;
  uint32_t len;
  uint8_t payload[ZKW_HANDOVER_PAYLOAD_MAX];
  int fds[ZKW_HANDOVER_FDS_MAX];
  int nfds;
};

struct zkw_handover_addr {
  struct sockaddr_un sun;
  socklen_t len;
  char name[ZKW_HANDOVER_NAME_MAX + 2]; /* "@" + the name, for logs */
};

const char *zkw_handover_type_name(unsigned type);

/* The address: socket_name when non-empty, else "zkwarden/" + listen.
 * Returns 0, or -ENAMETOOLONG (longer than ZKW_HANDOVER_NAME_MAX). */
int zkw_handover_addr(struct zkw_handover_addr *a, const char *socket_name, const char *listen)
    __attribute__((warn_unused_result));

/* A listening socket on a (nonblocking, CLOEXEC). Returns the fd or a
 * negative errno (-EADDRINUSE: someone holds the name). */
int zkw_handover_listen(const struct zkw_handover_addr *a) __attribute__((warn_unused_result));
/* Accepts one peer (nonblocking, CLOEXEC) and checks that it runs as our
 * user (or root). Returns the fd, -EAGAIN when none is pending, -EPERM
 * (closed: another user; *pid says who) or another negative errno. */
int zkw_handover_accept(int lfd, pid_t *pid) __attribute__((warn_unused_result));
/* Connects to a (blocking connect, then nonblocking) and checks the peer's
 * user as accept does. Returns the fd or a negative errno (-ECONNREFUSED,
 * -ENOENT: no one listens there). */
int zkw_handover_connect(const struct zkw_handover_addr *a) __attribute__((warn_unused_result));

/* Sends one message; never takes the fds (the caller closes them). Returns
 * 0, -EAGAIN (nothing sent: wait for POLLOUT) or another negative errno. */
int zkw_handover_send(int fd, const struct zkw_handover_msg *m) __attribute__((warn_unused_result));
/* Builds and sends a message (payload may be NULL when len is 0). */
int zkw_handover_send_msg(int fd, unsigned type, uint32_t slot, const void *payload, size_t len,
                          const int *fds, int nfds) __attribute__((warn_unused_result));
/* Receives one message and checks it: magic, version, a known type, the
 * payload's length and the number of descriptors the type carries.
 * Returns 1 (m filled, its fds owned by the caller), 0 at end of stream,
 * -EAGAIN, -EPROTO (a malformed message: its descriptors closed) or another
 * negative errno (nothing left open). */
int zkw_handover_recv(int fd, struct zkw_handover_msg *m) __attribute__((warn_unused_result));
/* Waits up to timeout_ms (-1: forever) for fd to be readable (POLLIN) or
 * writable (POLLOUT). Returns 1, 0 on timeout, or a negative errno. */
int zkw_handover_wait(int fd, short events, int timeout_ms) __attribute__((warn_unused_result));
/* Receives one message, waiting up to timeout_ms. As zkw_handover_recv, and
 * -ETIMEDOUT. */
int zkw_handover_recv_wait(int fd, struct zkw_handover_msg *m, int timeout_ms)
    __attribute__((warn_unused_result));
/* Sends one message, waiting up to timeout_ms for room. */
int zkw_handover_send_wait(int fd, const struct zkw_handover_msg *m, int timeout_ms)
    __attribute__((warn_unused_result));
/* Closes the message's descriptors (nfds becomes 0). */
void zkw_handover_close_fds(struct zkw_handover_msg *m);
/* fcntl(F_DUPFD_CLOEXEC) with its failure point. Returns the new fd or a
 * negative errno. */
int zkw_handover_dup(int fd) __attribute__((warn_unused_result));
/* Reads the payload as the type's struct (zero-filled past len). */
void zkw_handover_payload(const struct zkw_handover_msg *m, void *out, size_t size);

#endif
