/* zkw_keeperlink.c: the worker's side of the handover (zkw_keeperlink.h):
 * receiving what the holder hands over at start, the slots of the client
 * connections, ADOPT and FORGET to a keeper (queued while its socket is
 * full), and QUIESCE and STOP from it. */
#include "zkw_keeperlink.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_handover.h"
#include "zkw_log.h"

#define LINK_WAIT_MS   60000 /* the hand-over at start: a takeover waits for the running one to hand over */
#define EXIT_WAIT_MS   30000 /* a standalone predecessor exits within this after READY */
#define DONE_WAIT_MS   2000  /* room for DONE on the keeper's socket */
#define QUEUE_MAX      4096  /* messages waiting for room on the keeper's socket: beyond, the link is lost */
#define KEEPER_WAIT_MS 10000 /* a keeper not listening yet at start is waited for this long */

enum state { SERVING, QUIESCING, HANDED_OVER, STOPPED };

struct queued {
  uint16_t type;
  uint32_t slot;
  int fd; /* ADOPT: a duplicate, closed once sent; else -1 */
};

static struct {
  enum zkw_keeperlink_mode mode;
  enum state state;
  const struct zkw_config *cfg;
  struct zkw_handover_addr addr;
  int fd; /* the keeper's link */
  struct zkw_keeperlink_inherited inh;
  int listener[2]; /* inherited, until taken */
  int own[2];      /* standalone: duplicates of what this process serves on */
  int *slots;      /* slot -> the connection's fd, -1 when free */
  size_t nslots, low;
  struct queued *q;
  size_t qhead, qlen, qcap;
  uv_poll_t poll;
  bool polling;
  bool lost; /* the keeper's link is of no use any more */
  int events;
  const struct zkw_keeperlink_ops *ops;
  void (*after)(int status);
} L = {.fd = -1, .listener = {-1, -1}, .own = {-1, -1}, .inh = {.journal_fd = -1}};

enum zkw_keeperlink_mode zkw_keeperlink_mode(void) {
  return L.mode;
}

const struct zkw_keeperlink_inherited *zkw_keeperlink_inherited(void) {
  return &L.inh;
}

const struct zkw_config *zkw_keeperlink_config(void) {
  return L.cfg;
}

const struct zkw_handover_addr *zkw_keeperlink_addr(void) {
  return &L.addr;
}

bool zkw_keeperlink_ending(void) {
  return L.state == HANDED_OVER || L.state == STOPPED;
}

/* ---- slots ---- */

/* Marks slot used by fd. Returns 0 or -ENOMEM. */
static int slot_set(uint32_t slot, int fd) {
  if (slot >= L.nslots) {
    size_t n = L.nslots ? L.nslots : 64;
    while (n <= slot)
      n *= 2;
    int *grown = zkw_realloc(L.slots, sizeof *grown * n);
    if (!grown) return -ENOMEM;
    for (size_t i = L.nslots; i < n; i++)
      grown[i] = -1;
    L.slots = grown;
    L.nslots = n;
  }
  L.slots[slot] = fd;
  return 0;
}

/* The lowest free slot, marked used by fd. Returns 0 or a negative errno. */
static int slot_take(int fd, uint32_t *slot) {
  size_t i = L.low;
  while (i < L.nslots && L.slots[i] >= 0)
    i++;
  if (i >= ZKW_HANDOVER_SLOT_MAX) return -ENOSPC;
  int rc = slot_set((uint32_t)i, fd);
  if (rc) return rc;
  L.low = i + 1;
  *slot = (uint32_t)i;
  return 0;
}

static void slot_free(uint32_t slot) {
  L.slots[slot] = -1;
  if (slot < L.low) L.low = slot;
}

/* ---- sending to the keeper ---- */

static void link_lost(const char *why);
static void on_poll(uv_poll_t *h, int status, int events);

static void poll_update(void) {
  if (!L.polling || L.lost || L.state == HANDED_OVER) return;
  int want = UV_READABLE | (L.qlen ? UV_WRITABLE : 0);
  if (want == L.events) return;
  if (uv_poll_start(&L.poll, want, on_poll) == 0) L.events = want;
}

static void poll_stop(void) {
  if (L.polling && L.events) uv_poll_stop(&L.poll);
  L.events = 0;
}

static void flush(void) {
  while (L.qlen && !L.lost) {
    struct queued *m = &L.q[L.qhead];
    int rc = zkw_handover_send_msg(L.fd, m->type, m->slot, NULL, 0, &m->fd, m->fd >= 0 ? 1 : 0);
    if (rc == -EAGAIN) break;
    if (m->fd >= 0) close(m->fd);
    L.qhead = (L.qhead + 1) % L.qcap;
    L.qlen--;
    if (rc) {
      zkw_log_error("keeper link: %s for slot %u not sent: %s", zkw_handover_type_name(m->type), m->slot,
                    strerror(-rc));
      if (m->type == ZKW_HO_FORGET) return link_lost("a FORGET could not be sent");
    }
  }
  poll_update();
}

/* Queues a message (fd: a duplicate the queue owns, or -1). Returns 0 or
 * -ENOMEM (fd closed). */
static int enqueue(unsigned type, uint32_t slot, int fd) {
  if (L.qlen == L.qcap) {
    size_t cap = L.qcap ? 2 * L.qcap : 64;
    struct queued *grown = cap > QUEUE_MAX ? NULL : zkw_malloc(sizeof *grown * cap);
    if (!grown) {
      if (fd >= 0) close(fd);
      return -ENOMEM;
    }
    for (size_t i = 0; i < L.qlen; i++)
      grown[i] = L.q[(L.qhead + i) % L.qcap];
    free(L.q);
    L.q = grown;
    L.qcap = cap;
    L.qhead = 0;
  }
  L.q[(L.qhead + L.qlen++) % L.qcap] = (struct queued){(uint16_t)type, slot, fd};
  poll_update();
  return 0;
}

int zkw_keeperlink_adopt(int fd, uint32_t *slot) {
  *slot = UINT32_MAX;
  if (L.mode == ZKW_LINK_NONE || L.state != SERVING || L.lost) return 0;
  uint32_t s;
  int rc = slot_take(fd, &s);
  if (rc == 0 && L.mode == ZKW_LINK_KEEPER) {
    rc = L.qlen ? -EAGAIN : zkw_handover_send_msg(L.fd, ZKW_HO_ADOPT, s, NULL, 0, &fd, 1);
    if (rc == -EAGAIN) {
      int d = zkw_handover_dup(fd);
      rc = d < 0 ? d : enqueue(ZKW_HO_ADOPT, s, d);
    }
    if (rc) slot_free(s);
  }
  if (rc) {
    zkw_log_warn("keeper link: a client connection gets no slot (%s): a crash of this process would end it",
                 strerror(-rc));
    return rc;
  }
  *slot = s;
  return 0;
}

void zkw_keeperlink_forget(uint32_t slot) {
  if (slot >= L.nslots || L.slots[slot] < 0 || L.state == HANDED_OVER) return;
  slot_free(slot);
  if (L.mode != ZKW_LINK_KEEPER || L.fd < 0 || L.lost) return;
  int rc = L.qlen ? -EAGAIN : zkw_handover_send_msg(L.fd, ZKW_HO_FORGET, slot, NULL, 0, NULL, 0);
  if (rc == -EAGAIN) rc = enqueue(ZKW_HO_FORGET, slot, -1);
  if (rc) {
    /* The keeper would keep the connection open: the link is no use. */
    zkw_log_error("keeper link: FORGET for slot %u not sent: %s", slot, strerror(-rc));
    link_lost("a FORGET could not be sent");
  }
}

/* ---- at start: what the holder hands over ---- */

static void inherited_close(void) {
  for (size_t i = 0; i < L.inh.nclients; i++)
    if (L.inh.clients[i].fd >= 0) close(L.inh.clients[i].fd);
  free(L.inh.clients);
  L.inh.clients = NULL;
  L.inh.nclients = 0;
  for (int i = 0; i < 2; i++)
    if (L.listener[i] >= 0) close(L.listener[i]), L.listener[i] = -1;
  if (L.inh.journal_fd >= 0) close(L.inh.journal_fd), L.inh.journal_fd = -1;
}

/* Takes a CLIENT's fd (closed on failure). */
static int add_client(uint32_t slot, int fd) {
  if (slot < L.nslots && L.slots[slot] >= 0) {
    close(fd);
    return -EPROTO; /* the same slot twice */
  }
  struct zkw_keeperlink_client *grown = zkw_realloc(L.inh.clients, sizeof *grown * (L.inh.nclients + 1));
  if (!grown || slot_set(slot, fd) != 0) {
    if (grown) L.inh.clients = grown;
    close(fd);
    return -ENOMEM;
  }
  L.inh.clients = grown;
  L.inh.clients[L.inh.nclients++] = (struct zkw_keeperlink_client){slot, fd};
  return 0;
}

/* Receives STATE, the CLIENTs and READY. Returns 0 or -1 (logged). */
static int receive(int fd, const char *from) {
  bool state = false;
  for (;;) {
    struct zkw_handover_msg m;
    int rc = zkw_handover_recv_wait(fd, &m, LINK_WAIT_MS);
    if (rc <= 0) {
      zkw_log_error("%s: the hand-over did not complete: %s", from,
                    rc == 0 ? "the connection closed" : strerror(-rc));
      return -1;
    }
    if (m.type == ZKW_HO_RESULT) {
      struct zkw_handover_status st;
      zkw_handover_payload(&m, &st, sizeof st);
      st.reason[sizeof st.reason - 1] = 0;
      zkw_log_error("%s refused: %s", from, st.reason);
      return -1;
    }
    if (m.type == ZKW_HO_STATE && !state) {
      struct zkw_handover_state st;
      zkw_handover_payload(&m, &st, sizeof st);
      state = true;
      L.listener[ZKW_LINK_LISTEN] = m.fds[0];
      L.inh.journal_fd = m.fds[1];
      if (st.flags & ZKW_STATE_ADMIN) L.listener[ZKW_LINK_ADMIN] = m.fds[2];
      L.inh.predecessor = st.flags & ZKW_STATE_PREVIOUS;
      continue;
    }
    if (m.type == ZKW_HO_CLIENT && state) {
      rc = add_client(m.slot, m.fds[0]);
      if (rc) {
        zkw_log_error("%s: CLIENT slot %u: %s", from, m.slot, strerror(-rc));
        return -1;
      }
      continue;
    }
    if (m.type == ZKW_HO_READY && state) return 0;
    zkw_log_error("%s: unexpected %s during the hand-over", from, zkw_handover_type_name(m.type));
    zkw_handover_close_fds(&m);
    return -1;
  }
}

static int journal_new(void) {
  int fd = -1;
  if (ZKW_FAULT_AT(memfd, ZKW_FAULT_WHERE, "journal"))
    errno = EMFILE;
  else
    fd = memfd_create("zkwarden-journal", MFD_CLOEXEC);
  if (fd < 0) zkw_log_error("cannot create the journal (memfd_create): %s", strerror(errno));
  return fd;
}

int zkw_keeperlink_open(const struct zkw_config *cfg, bool takeover) {
  L.cfg = cfg;
  L.state = SERVING;
  L.mode = cfg->keeper ? ZKW_LINK_KEEPER : ZKW_LINK_STANDALONE;
  takeover = takeover || cfg->takeover;
  L.inh.takeover = takeover;
  if (zkw_handover_addr(&L.addr, cfg->keeper_socket, cfg->raw_listen) != 0) {
    zkw_log_error("the handover socket's name is too long (ZKWARDEN_KEEPER_SOCKET, at most %d characters)",
                  ZKW_HANDOVER_NAME_MAX);
    return -1;
  }
  if (L.mode == ZKW_LINK_STANDALONE && !takeover) {
    L.inh.journal_fd = journal_new();
    return L.inh.journal_fd < 0 ? -1 : 0;
  }
  char from[160];
  snprintf(from, sizeof from, "%s on %s", L.mode == ZKW_LINK_KEEPER ? "the keeper" : "the running zkwarden",
           L.addr.name);
  int fd = zkw_handover_connect(&L.addr);
  /* A keeper that is starting too (the containers of a pod start together):
   * its socket appears within moments. */
  for (int waited = 0; fd == -ECONNREFUSED && L.mode == ZKW_LINK_KEEPER && waited < KEEPER_WAIT_MS;
       waited += 100) {
    if (!waited) zkw_log_info("waiting for the keeper on %s", L.addr.name);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    fd = zkw_handover_connect(&L.addr);
  }
  if (fd < 0) {
    if (L.mode == ZKW_LINK_KEEPER)
      zkw_log_error("ZKWARDEN_KEEPER=on but no keeper answers on %s: %s (start zkwarden-keeper, or set "
                    "ZKWARDEN_KEEPER=off)",
                    L.addr.name, strerror(-fd));
    else
      zkw_log_error("--takeover: no running zkwarden answers on %s: %s (it is found by ZKWARDEN_LISTEN, or "
                    "ZKWARDEN_KEEPER_SOCKET: the same environment as the running one)",
                    L.addr.name, strerror(-fd));
    return -1;
  }
  struct zkw_handover_hello h = {(uint32_t)getpid(), ZKW_HANDOVER_VERSION, takeover ? ZKW_HELLO_TAKEOVER : 0};
  struct zkw_handover_msg m = {.type = ZKW_HO_HELLO, .len = sizeof h};
  memcpy(m.payload, &h, sizeof h);
  int rc = zkw_handover_send_wait(fd, &m, LINK_WAIT_MS);
  if (rc) {
    zkw_log_error("%s: HELLO not sent: %s", from, strerror(-rc));
  } else {
    zkw_log_info("%s: HELLO%s sent, waiting for the hand-over", from, takeover ? " (takeover)" : "");
    rc = receive(fd, from);
  }
  if (!rc && L.mode == ZKW_LINK_STANDALONE) {
    /* Everything arrived: the running zkwarden ends on this DONE (else it
     * serves on), and this one serves once it is gone. */
    struct zkw_handover_status ok = {0};
    struct zkw_handover_msg done = {.type = ZKW_HO_DONE, .len = sizeof ok.status};
    memcpy(done.payload, &ok, sizeof ok.status);
    rc = zkw_handover_send_wait(fd, &done, LINK_WAIT_MS);
    if (rc) zkw_log_error("%s: DONE not sent: %s", from, strerror(-rc));
  }
  if (!rc && L.mode == ZKW_LINK_STANDALONE) {
    struct zkw_handover_msg end;
    int e = zkw_handover_recv_wait(fd, &end, EXIT_WAIT_MS);
    if (e > 0) zkw_handover_close_fds(&end);
    if (e > 0 && end.type == ZKW_HO_RESULT) { /* it gave up waiting for DONE and serves on */
      struct zkw_handover_status st;
      zkw_handover_payload(&end, &st, sizeof st);
      st.reason[sizeof st.reason - 1] = 0;
      zkw_log_error("%s: %s", from, st.reason);
      rc = -1;
    } else if (e != 0) {
      zkw_log_warn("%s: did not exit within %d ms of READY: serving anyway", from, EXIT_WAIT_MS);
    }
    if (!rc) {
      close(fd);
      fd = -1;
    }
  }
  if (rc) {
    close(fd);
    inherited_close();
    return -1;
  }
  L.fd = fd;
  zkw_log_info("%s handed over the listening socket and %zu client connection(s)%s", from, L.inh.nclients,
               L.inh.predecessor ? " (a worker served before)" : "");
  return 0;
}

/* ---- the inherited sockets and connections ---- */

int zkw_keeperlink_take_listener(enum zkw_keeperlink_listener which) {
  int fd = L.listener[which];
  L.listener[which] = -1;
  if (fd < 0 && L.own[which] >= 0) { /* serving again after a hand-over that did not happen */
    fd = zkw_handover_dup(L.own[which]);
    if (fd < 0) zkw_log_error("cannot duplicate the listening socket: %s", strerror(-fd));
  }
  return fd < 0 ? -1 : fd;
}

int zkw_keeperlink_note_listener(enum zkw_keeperlink_listener which, int fd) {
  if (L.mode != ZKW_LINK_STANDALONE) return 0;
  if (L.own[which] >= 0) close(L.own[which]);
  L.own[which] = zkw_handover_dup(fd);
  if (L.own[which] < 0) {
    zkw_log_warn(
        "cannot keep a duplicate of the %s listening socket (%s): `zkwarden --takeover` will not get it",
        which == ZKW_LINK_LISTEN ? "client" : "admin", strerror(-L.own[which]));
    int rc = L.own[which];
    L.own[which] = -1;
    return rc;
  }
  return 0;
}

void zkw_keeperlink_recover(zkw_keeperlink_recover_fn fn, void *arg) {
  size_t kept = 0;
  for (size_t i = 0; i < L.inh.nclients; i++) {
    struct zkw_keeperlink_client *c = &L.inh.clients[i];
    if (c->fd < 0) continue;
    if (fn && fn(arg, c->slot, c->fd, L.inh.journal_fd)) {
      c->fd = -1;
      kept++;
      continue;
    }
    close(c->fd);
    c->fd = -1;
    zkw_keeperlink_forget(c->slot);
  }
  if (L.inh.nclients)
    zkw_log_info("inherited client connections: %zu recovered, %zu closed (their clients reconnect)", kept,
                 L.inh.nclients - kept);
}

/* ---- serving: QUIESCE and STOP ---- */

void zkw_keeperlink_run_stop(const char *why) {
  if (L.state == HANDED_OVER || L.state == STOPPED) return;
  L.state = STOPPED;
  /* No successor: the listening sockets close with the server's handles,
   * so that a client is refused at once rather than queued for no one. */
  for (int i = 0; i < 2; i++)
    if (L.own[i] >= 0) close(L.own[i]), L.own[i] = -1;
  if (L.ops && L.ops->on_stop) L.ops->on_stop(L.ops->arg, why);
}

static void link_lost(const char *why) {
  if (L.lost) return;
  L.lost = true;
  poll_stop();
  if (L.state == HANDED_OVER || L.state == STOPPED) return;
  if (L.state == QUIESCING) {
    /* Asked to hand over: a keeper that gave up waiting (QUIESCE not
     * answered in time) has handed everything to the successor already.
     * Closing the sessions now would write to clients the successor serves
     * and wipe the journal slots it goes on with: end as handed over. */
    zkw_log_error("keeper link on %s lost (%s) during the hand-over: exiting without closing a session",
                  L.addr.name, why);
    zkw_keeperlink_run_handed_over();
    return;
  }
  zkw_log_error("keeper link on %s lost (%s): closing the sessions and exiting", L.addr.name, why);
  zkw_keeperlink_run_stop("the keeper went away");
}

void zkw_keeperlink_run_resume(void) {
  if (L.state != QUIESCING) return;
  L.state = SERVING;
  if (L.ops && L.ops->on_resume) L.ops->on_resume(L.ops->arg);
}

void zkw_keeperlink_run_handed_over(void) {
  if (L.state == HANDED_OVER) return;
  L.state = HANDED_OVER;
  if (L.ops && L.ops->on_handed_over) L.ops->on_handed_over(L.ops->arg);
}

static void quiesce_done(int status) {
  if (L.after) L.after(status);
}

void zkw_keeperlink_run_quiesce(void (*after)(int status)) {
  if (L.state != SERVING) return;
  L.state = QUIESCING;
  L.after = after;
  if (L.ops && L.ops->on_quiesce)
    L.ops->on_quiesce(L.ops->arg, quiesce_done);
  else
    quiesce_done(0);
}

/* Keeper mode: DONE, then this process ends. */
static void keeper_after(int status) {
  while (L.qlen && !L.lost && zkw_handover_wait(L.fd, POLLOUT, DONE_WAIT_MS) > 0)
    flush();
  struct zkw_handover_status st = {.status = status};
  struct zkw_handover_msg m = {.type = ZKW_HO_DONE, .len = sizeof st.status};
  memcpy(m.payload, &st, sizeof st.status);
  int rc = L.qlen || L.lost ? -EPIPE : zkw_handover_send_wait(L.fd, &m, DONE_WAIT_MS);
  if (rc)
    zkw_log_warn("keeper link: DONE not sent (%s): the keeper waits for this process's exit", strerror(-rc));
  else
    zkw_log_info("handed over to the keeper (DONE)");
  poll_stop();
  zkw_keeperlink_run_handed_over();
}

bool zkw_keeperlink_quiesce(void) {
  if (L.mode != ZKW_LINK_KEEPER || L.fd < 0 || L.lost) return false;
  zkw_keeperlink_run_quiesce(keeper_after);
  return true;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  (void)h;
  if (status < 0) return link_lost(uv_strerror(status));
  if (events & UV_WRITABLE) flush();
  for (int i = 0; i < 64 && (events & UV_READABLE) && L.events && !L.lost; i++) {
    struct zkw_handover_msg m;
    int rc = zkw_handover_recv(L.fd, &m);
    if (rc == -EAGAIN) break;
    if (rc <= 0) return link_lost(rc == 0 ? "its connection closed" : strerror(-rc));
    if (m.type == ZKW_HO_QUIESCE) {
      zkw_log_info("the keeper asks for a hand-over (QUIESCE)");
      zkw_keeperlink_run_quiesce(keeper_after);
    } else if (m.type == ZKW_HO_STOP) {
      zkw_log_info("the keeper stops (STOP): closing the sessions and exiting");
      zkw_keeperlink_run_stop("the keeper stops");
    } else {
      zkw_log_warn("keeper link: unexpected %s: ignored", zkw_handover_type_name(m.type));
      zkw_handover_close_fds(&m);
    }
  }
}

int zkw_keeperlink_start(uv_loop_t *loop, const struct zkw_keeperlink_ops *ops) {
  L.ops = ops;
  if (L.mode != ZKW_LINK_KEEPER || L.fd < 0) return 0;
  int rc = uv_poll_init(loop, &L.poll, L.fd);
  if (rc) {
    zkw_log_error("keeper link: cannot watch it: %s", uv_strerror(rc));
    return rc;
  }
  L.polling = true;
  uv_unref((uv_handle_t *)&L.poll);
  L.events = 0;
  poll_update();
  if (!L.events) {
    zkw_log_error("keeper link: cannot watch it");
    return UV_EINVAL;
  }
  flush(); /* FORGETs of the connections the recovery closed */
  return 0;
}

void zkw_keeperlink_snapshot(struct zkw_keeperlink_snapshot *out) {
  out->listen_fd = L.own[ZKW_LINK_LISTEN];
  out->admin_fd = L.own[ZKW_LINK_ADMIN];
  out->journal_fd = L.inh.journal_fd;
  out->slot_fds = L.slots;
  out->nslots = L.nslots;
}

void zkw_keeperlink_close(void) {
  if (L.polling) {
    uv_close((uv_handle_t *)&L.poll, NULL);
    L.polling = false;
  }
  while (L.qlen) {
    if (L.q[L.qhead].fd >= 0) close(L.q[L.qhead].fd);
    L.qhead = (L.qhead + 1) % L.qcap;
    L.qlen--;
  }
  free(L.q);
  L.q = NULL;
  L.qcap = 0;
  inherited_close();
  for (int i = 0; i < 2; i++)
    if (L.own[i] >= 0) close(L.own[i]), L.own[i] = -1;
  free(L.slots);
  L.slots = NULL;
  L.nslots = L.low = 0;
  if (L.fd >= 0) close(L.fd); /* last: the keeper sees this process gone */
  L.fd = -1;
}
