/* zkw_takeover.c: the standalone zkwarden's handover socket (one takeover,
 * upgrade requests) and the `zkwarden upgrade` command (zkw_takeover.h). */
#include "zkw_takeover.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_handover.h"
#include "zkw_keeperlink.h"
#include "zkw_log.h"

#define PEERS_MAX       4
#define SEND_WAIT_MS    5000  /* room for each message of the hand-over */
#define UPGRADE_WAIT_MS 90000 /* `zkwarden upgrade` waits this long for RESULT */
#define ACK_WAIT_MS     10000 /* the successor confirms it has everything within this */

extern char **environ;

struct tpeer {
  uv_poll_t poll;
  int fd;
  pid_t pid;
  bool used, polling;
};

static struct {
  uv_loop_t *loop;
  int lfd;
  uv_poll_t *lpoll; /* freed once closed: a failed hand-over listens again at once */
  bool listening;
  struct tpeer peers[PEERS_MAX];
  struct tpeer *successor; /* the --takeover being handed to */
  struct tpeer *command;   /* the upgrade command awaiting RESULT */
  uv_process_t child;      /* the process an upgrade started */
  bool child_open, handed;
  char exe[PATH_MAX];
} T = {.lfd = -1};

static void peer_closed(uv_handle_t *h) {
  struct tpeer *p = h->data;
  close(p->fd);
  p->fd = -1;
  p->used = false;
}

static void peer_close(struct tpeer *p) {
  if (!p->used || p->fd < 0) return;
  if (p == T.command) T.command = NULL;
  if (p->polling) {
    p->polling = false;
    uv_close((uv_handle_t *)&p->poll, peer_closed);
  } else {
    close(p->fd);
    p->fd = -1;
    p->used = false;
  }
}

static void result(struct tpeer *p, int status, const char *reason) {
  if (!p || p->fd < 0) return;
  struct zkw_handover_status st = {.status = status};
  snprintf(st.reason, sizeof st.reason, "%s", reason);
  int rc =
      zkw_handover_send_msg(p->fd, ZKW_HO_RESULT, 0, &st, sizeof st.status + strlen(st.reason) + 1, NULL, 0);
  if (rc) zkw_log_warn("handover: RESULT to pid %d not sent: %s", (int)p->pid, strerror(-rc));
}

static void free_handle(uv_handle_t *h) {
  free(h);
}

static void listener_close(void) {
  if (T.lpoll) uv_close((uv_handle_t *)T.lpoll, free_handle);
  T.lpoll = NULL;
  T.listening = false;
  if (T.lfd >= 0) close(T.lfd);
  T.lfd = -1;
}

/* ---- handing over to --takeover ---- */

static int send_wait(int fd, unsigned type, uint32_t slot, const void *payload, size_t len, const int *fds,
                     int nfds) {
  struct zkw_handover_msg m = {.type = (uint16_t)type, .slot = slot, .len = (uint32_t)len, .nfds = nfds};
  if (len) memcpy(m.payload, payload, len);
  if (nfds) memcpy(m.fds, fds, sizeof(int) * (size_t)nfds);
  return zkw_handover_send_wait(fd, &m, SEND_WAIT_MS);
}

static int listen_start(void);

/* Waits for the successor's DONE: it has everything. */
static int successor_ack(int fd) {
  struct zkw_handover_msg m;
  int rc = zkw_handover_recv_wait(fd, &m, ACK_WAIT_MS);
  if (rc <= 0) return rc == 0 ? -EPIPE : rc;
  zkw_handover_close_fds(&m);
  struct zkw_handover_status st;
  zkw_handover_payload(&m, &st, sizeof st);
  return m.type == ZKW_HO_DONE && st.status == 0 ? 0 : -EPROTO;
}

static void after_quiesce(int status) {
  struct tpeer *p = T.successor;
  struct zkw_keeperlink_snapshot snap;
  zkw_keeperlink_snapshot(&snap);
  if (status) zkw_log_warn("handover: the quiesce reported %s: handing over anyway", strerror(-status));
  uint32_t clients = 0;
  for (size_t i = 0; i < snap.nslots; i++)
    clients += snap.slot_fds[i] >= 0;
  struct zkw_handover_state st = {ZKW_STATE_STANDALONE | ZKW_STATE_PREVIOUS | ZKW_STATE_ADMIN, clients, 1};
  int fds[3] = {snap.listen_fd, snap.journal_fd, snap.admin_fd}; /* each >= 0 (takeover()) */
  int rc = send_wait(p->fd, ZKW_HO_STATE, 0, &st, sizeof st, fds, 3);
  for (size_t i = 0; !rc && i < snap.nslots; i++)
    if (snap.slot_fds[i] >= 0)
      rc = send_wait(p->fd, ZKW_HO_CLIENT, (uint32_t)i, NULL, 0, &snap.slot_fds[i], 1);
  if (!rc) rc = send_wait(p->fd, ZKW_HO_READY, 0, NULL, 0, NULL, 0);
  if (!rc) rc = successor_ack(p->fd);
  if (rc) {
    /* The successor does not have it all: it gets nothing (its link
     * closes), and this process serves on. */
    zkw_log_error("handover to pid %d failed: %s: serving on", (int)p->pid, strerror(-rc));
    /* Said before the link closes: a successor that did get everything
     * (its DONE late) must not take the close for this process's exit. */
    result(p, 1, "the hand-over was called off: the running zkwarden serves on");
    result(T.command, 1,
           "the new zkwarden did not take over (the old one's log says why): the old one serves on");
    if (T.command) peer_close(T.command);
    close(p->fd);
    p->fd = -1;
    p->used = false;
    T.successor = NULL;
    zkw_keeperlink_run_resume();
    (void)listen_start(); /* the next takeover (logged) */
    return;
  }
  T.handed = true;
  zkw_log_info("handed the listening socket and %u client connection(s) to pid %d: exiting", clients,
               (int)p->pid);
  result(T.command, 0, "the new zkwarden serves");
  zkw_keeperlink_run_handed_over();
}

static void takeover(struct tpeer *p) {
  struct zkw_keeperlink_snapshot snap;
  zkw_keeperlink_snapshot(&snap);
  /* The admin endpoint always listens by the time a takeover is taken:
   * without a duplicate of its listener the successor would bind the port
   * itself while this process, exiting, may still hold it. */
  if (T.successor || zkw_keeperlink_ending() || snap.listen_fd < 0 || snap.journal_fd < 0 ||
      snap.admin_fd < 0) {
    const char *why =
        T.successor || zkw_keeperlink_ending()
            ? "a takeover is already under way"
            : "this zkwarden has no duplicate of its listening sockets to hand over (its log at "
              "start says why): stop it and start the new one";
    zkw_log_warn("handover: pid %d wants to take over: refused: %s", (int)p->pid, why);
    result(p, 1, why);
    return peer_close(p);
  }
  T.successor = p;
  listener_close(); /* one takeover */
  if (p->polling) {
    p->polling = false;
    uv_close((uv_handle_t *)&p->poll, NULL); /* its fd stays open until this process ends */
  }
  zkw_log_info("handover: pid %d takes over (--takeover): quiescing", (int)p->pid);
  zkw_keeperlink_run_quiesce(after_quiesce);
}

/* ---- upgrade: start the binary on disk with --takeover ---- */

static void child_closed(uv_handle_t *h) {
  (void)h;
  T.child_open = false;
}

static void child_exit(uv_process_t *proc, int64_t status, int sig) {
  if (!T.handed) {
    char why[200];
    snprintf(why, sizeof why, "the new zkwarden (pid %d) %s %d before taking over: the old one keeps serving",
             proc->pid, sig ? "was killed by signal" : "exited with status", sig ? sig : (int)status);
    zkw_log_error("upgrade: %s", why);
    result(T.command, 1, why);
    if (T.command) peer_close(T.command);
  }
  uv_close((uv_handle_t *)proc, child_closed);
}

static void upgrade(struct tpeer *p) {
  if (T.command || T.successor || T.child_open || zkw_keeperlink_ending()) {
    result(p, 1, "an upgrade or a takeover is already under way");
    return peer_close(p);
  }
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = zkw_calloc(n + 2, sizeof *env);
  int rc = UV_ENOMEM;
  if (env) {
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
      if (strncmp(environ[i], "ZKWARDEN_TAKEOVER=", 18) == 0) continue;
#ifdef ZKW_FAULT_INJECTION
      if (strncmp(environ[i], "ZKW_TEST_FAULT", 14) == 0)
        continue; /* this process's fault, not its successor's */
#endif
      env[j++] = environ[i];
    }
    env[j++] = "ZKWARDEN_TAKEOVER=on";
    env[j] = NULL;
    char *args[] = {T.exe, "--takeover", NULL};
    uv_stdio_container_t stdio[3] = {
        {UV_INHERIT_FD, {.fd = 0}}, {UV_INHERIT_FD, {.fd = 1}}, {UV_INHERIT_FD, {.fd = 2}}};
    uv_process_options_t o = {
        .exit_cb = child_exit, .file = T.exe, .args = args, .env = env, .stdio_count = 3, .stdio = stdio};
    if (ZKW_FAULT_AT(fork, ZKW_FAULT_WHERE, "upgrade")) {
      rc = UV_EAGAIN;
    } else {
      rc = uv_spawn(T.loop, &T.child, &o);
      if (rc) uv_close((uv_handle_t *)&T.child, NULL); /* initialised even when it fails */
    }
    free(env);
  }
  if (rc) {
    char why[PATH_MAX + 64];
    snprintf(why, sizeof why, "cannot start %s: %s", T.exe, uv_strerror(rc));
    zkw_log_error("upgrade: %s: this zkwarden keeps serving", why);
    result(p, 1, why);
    return peer_close(p);
  }
  T.child_open = true;
  uv_unref((uv_handle_t *)&T.child);
  T.command = p;
  zkw_log_info("upgrade: started pid %d (%s --takeover) to take over", T.child.pid, T.exe);
}

/* ---- the socket ---- */

static void on_peer(uv_poll_t *h, int status, int events) {
  struct tpeer *p = h->data;
  (void)events;
  struct zkw_handover_msg m;
  int rc = status < 0 ? status : zkw_handover_recv(p->fd, &m);
  if (rc == -EAGAIN) return;
  if (rc <= 0) return peer_close(p);
  if (p == T.command) { /* nothing is expected from it */
    zkw_handover_close_fds(&m);
    return;
  }
  if (m.type != ZKW_HO_HELLO) {
    zkw_handover_close_fds(&m);
    zkw_log_warn("handover: pid %d sent %s first: closed", (int)p->pid, zkw_handover_type_name(m.type));
    return peer_close(p);
  }
  struct zkw_handover_hello hello;
  zkw_handover_payload(&m, &hello, sizeof hello);
  if (hello.flags & ZKW_HELLO_UPGRADE) return upgrade(p);
  if (hello.flags & ZKW_HELLO_TAKEOVER) return takeover(p);
  zkw_log_warn("handover: pid %d wants to be a keeper's worker, but this zkwarden serves by itself",
               (int)p->pid);
  result(p, 1, "a zkwarden serving by itself (no keeper) answers here: start the new one with --takeover");
  peer_close(p);
}

static void on_listener(uv_poll_t *h, int status, int events) {
  (void)h, (void)events;
  if (status < 0) return;
  for (;;) {
    pid_t pid;
    int fd = zkw_handover_accept(T.lfd, &pid);
    if (fd == -EAGAIN) return;
    if (fd < 0) {
      zkw_log_warn("handover: accept: %s%s", strerror(-fd), fd == -EPERM ? " (a peer of another user)" : "");
      if (fd == -EPERM) continue;
      return;
    }
    struct tpeer *p = NULL;
    for (int i = 0; i < PEERS_MAX && !p; i++)
      if (!T.peers[i].used) p = &T.peers[i];
    if (!p || uv_poll_init(T.loop, &p->poll, fd) != 0) {
      zkw_log_warn("handover: too many handover connections: pid %d closed", (int)pid);
      close(fd);
      continue;
    }
    *p = (struct tpeer){.poll = p->poll, .fd = fd, .pid = pid, .used = true, .polling = true};
    p->poll.data = p;
    uv_unref((uv_handle_t *)&p->poll);
    if (uv_poll_start(&p->poll, UV_READABLE, on_peer) != 0) peer_close(p);
  }
}

/* Listens on the handover socket; a failure is logged and leaves this
 * process without a takeover. */
static int listen_start(void) {
  const struct zkw_handover_addr *a = zkw_keeperlink_addr();
  T.lfd = zkw_handover_listen(a);
  if (T.lfd < 0) {
    zkw_log_warn("handover: cannot listen on %s: %s: `zkwarden --takeover` and `zkwarden upgrade` will not "
                 "find this process",
                 a->name, strerror(-T.lfd));
    return T.lfd;
  }
  T.lpoll = zkw_malloc(sizeof *T.lpoll);
  int rc = T.lpoll ? uv_poll_init(T.loop, T.lpoll, T.lfd) : UV_ENOMEM;
  if (rc) {
    free(T.lpoll);
    T.lpoll = NULL;
  } else {
    T.listening = true;
    uv_unref((uv_handle_t *)T.lpoll);
    rc = uv_poll_start(T.lpoll, UV_READABLE, on_listener);
  }
  if (rc) {
    zkw_log_warn("handover: cannot watch %s: %s: no takeover", a->name, uv_strerror(rc));
    listener_close();
    return rc;
  }
  zkw_log_info("handover socket %s: `zkwarden --takeover` or `zkwarden upgrade` replaces this process",
               a->name);
  return 0;
}

int zkw_takeover_start(uv_loop_t *loop) {
  T.loop = loop;
  if (zkw_keeperlink_mode() != ZKW_LINK_STANDALONE) return 0;
  ssize_t n = readlink("/proc/self/exe", T.exe, sizeof T.exe - 1);
  T.exe[n > 0 ? n : 0] = 0;
  static const char deleted[] = " (deleted)"; /* the binary was replaced: the path names the new one */
  if (n > (ssize_t)sizeof deleted && strcmp(T.exe + n - (sizeof deleted - 1), deleted) == 0)
    T.exe[n - (sizeof deleted - 1)] = 0;
  (void)listen_start();
  return 0;
}

void zkw_takeover_close(void) {
  listener_close();
  for (int i = 0; i < PEERS_MAX; i++)
    if (&T.peers[i] != T.successor) peer_close(&T.peers[i]);
  if (T.child_open && !uv_is_closing((uv_handle_t *)&T.child))
    uv_close((uv_handle_t *)&T.child, child_closed);
  if (T.successor) { /* last: it serves once this process is gone */
    close(T.successor->fd);
    T.successor->fd = -1;
    T.successor->used = false;
    T.successor = NULL;
  }
}

/* ---- zkwarden upgrade ---- */

int zkw_upgrade_cli(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf(
          "usage: zkwarden upgrade\n"
          "Asks the running zkwarden-keeper (or a zkwarden serving by itself) found by "
          "ZKWARDEN_KEEPER_SOCKET,\n"
          "else ZKWARDEN_LISTEN, to restart zkwarden onto the binary on disk without closing a client's\n"
          "connection. Exits 0 once the new process serves; 1 with the reason otherwise (the old one keeps\n"
          "serving).\n");
      return 0;
    }
    fprintf(stderr, "zkwarden upgrade: unknown argument '%s'\n", argv[i]);
    return 2;
  }
  struct zkw_handover_addr a;
  if (zkw_handover_addr(&a, getenv("ZKWARDEN_KEEPER_SOCKET"), getenv("ZKWARDEN_LISTEN")) != 0) {
    fprintf(stderr, "zkwarden upgrade: ZKWARDEN_KEEPER_SOCKET is longer than %d characters\n",
            ZKW_HANDOVER_NAME_MAX);
    return 2;
  }
  int fd = zkw_handover_connect(&a);
  if (fd < 0) {
    fprintf(stderr,
            "zkwarden upgrade: nothing answers on %s: %s (a zkwarden-keeper or zkwarden started with this "
            "ZKWARDEN_LISTEN or ZKWARDEN_KEEPER_SOCKET?)\n",
            a.name, strerror(-fd));
    return 1;
  }
  struct zkw_handover_hello h = {(uint32_t)getpid(), ZKW_HANDOVER_VERSION, ZKW_HELLO_UPGRADE};
  struct zkw_handover_msg m = {.type = ZKW_HO_HELLO, .len = sizeof h};
  memcpy(m.payload, &h, sizeof h);
  int rc = zkw_handover_send_wait(fd, &m, SEND_WAIT_MS);
  if (!rc) rc = zkw_handover_recv_wait(fd, &m, UPGRADE_WAIT_MS);
  close(fd);
  if (rc == 1 && m.type == ZKW_HO_RESULT) {
    struct zkw_handover_status st;
    zkw_handover_payload(&m, &st, sizeof st);
    st.reason[sizeof st.reason - 1] = 0;
    fprintf(st.status ? stderr : stdout, "zkwarden upgrade: %s%s\n", st.status ? "failed: " : "", st.reason);
    return st.status ? 1 : 0;
  }
  if (rc == 1) zkw_handover_close_fds(&m);
  fprintf(stderr, "zkwarden upgrade: no result from %s: %s\n", a.name,
          rc == 1   ? "an unexpected message"
          : rc == 0 ? "the connection closed"
                    : strerror(-rc));
  return 1;
}
