/* zkw_keeper.c: zkwarden-keeper, the process that outlives zkwarden's.
 *
 * It holds what a JobManager's connection needs to survive a crash or an
 * upgrade of the zkwarden that relays it (the worker): the listening socket
 * on ZKWARDEN_LISTEN, the admin listening socket on ZKWARDEN_ADMIN_LISTEN,
 * the journal (a memfd the worker writes its sessions' state into) and a
 * duplicate of every client connection the worker accepted. It parses
 * nothing of ZooKeeper and never reads a client's bytes: it polls a held
 * connection only for its close (POLLRDHUP), so that a client that goes
 * away while no worker runs is not kept. The worker reaches it on the
 * handover socket (zkw_handover.h) and gets everything back at its start
 * (STATE, a CLIENT per connection, READY).
 *
 *   zkwarden-keeper [--env-file FILE] --spawn PATH [ARGS...]
 *       starts PATH as its worker (ZKWARDEN_KEEPER=on) and starts it again
 *       when it dies: at once, then with a growing pause while it keeps
 *       dying young. SIGUSR2 or SIGHUP (and `zkwarden upgrade`): a planned
 *       restart onto the binary on disk (ZKWARDEN_TAKEOVER=on); the old
 *       worker hands over only once the new one said HELLO, and keeps
 *       serving when the new one cannot start. FILE (KEY=VALUE lines) is
 *       read at each start: a new configuration takes effect at a restart.
 *   zkwarden-keeper
 *       waits for workers that start themselves (a Kubernetes pod: the
 *       worker runs in another container and connects).
 * SIGTERM or SIGINT: the worker gets STOP (it closes its sessions), then
 * everything is closed: the JobManager's connections end with the keeper.
 * The worker's own restarts (crash, kill -9, upgrade) keep them open.
 * One line per event on stderr (or ZKWARDEN_LOG_FILE), as zkwarden's. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zkw_fault.h"
#include "zkw_handover.h"
#include "zkw_keeper_proc.h"
#include "zkw_log.h"

#define QUIESCE_MS 10000 /* a worker asked to hand over answers DONE and exits within this, each */
#define HELLO_MS   30000 /* a worker started for a restart says HELLO within this */
#define STOP_MS    8000  /* after STOP, the worker exits within this (systemd's TimeoutStopSec is 10 s) */
#define REAP_MS    10000 /* a spawned worker whose link closed exits within this, or is killed */
/* A worker that dies younger than this is restarted after a pause (a crash
 * at its start, a journal it cannot take up); an older one at once. */
#define YOUNG_MS       1000
#define BACKOFF_MAX_MS 5000
#define CTL_MAX        4 /* control messages queued to one peer */

enum role { ROLE_NEW, ROLE_WORKER, ROLE_CANDIDATE, ROLE_COMMAND };

struct peer {
  int fd;
  pid_t pid; /* SO_PEERCRED */
  enum role role;
  bool dead; /* closed at the end of this turn */
  /* The hand-over sequence: STATE, a CLIENT per slot of the snapshot, READY. */
  bool handing, state_sent;
  uint32_t *snap;
  size_t snap_n, snap_i;
  struct zkw_handover_msg ctl[CTL_MAX]; /* QUIESCE, STOP, RESULT: after the sequence */
  int nctl;
};

struct held {
  uint32_t slot;
  int fd;
};

/* A worker the keeper started. */
enum child_role { CHILD_WORKER, CHILD_CANDIDATE, CHILD_RETIRED };
struct child {
  pid_t pid;
  enum child_role role;
  int64_t started_ms, link_closed_ms; /* link_closed_ms: its link closed, it has REAP_MS to exit */
  bool said_hello;
};

static struct {
  struct zkw_keeper_cmd cmd; /* cmd.argv NULL: no --spawn */
  struct zkw_keeper_fds fd;  /* what it holds of its own */
  struct peer **peers;
  size_t npeers;
  struct held *held;
  size_t nheld, capheld;
  struct child children[8];
  int nchildren;
  struct peer *worker;    /* the worker serving (or being handed the state) */
  struct peer *candidate; /* a worker waiting to take over from it */
  bool quiescing, done_seen;
  int64_t quiesce_deadline;
  struct peer *waiters[8]; /* `zkwarden upgrade` commands awaiting RESULT */
  int nwaiters;
  uint32_t workers_served; /* workers that got STATE */
  uint32_t spawned;
  int backoff_ms;
  int64_t respawn_at; /* 0: none pending */
  bool stopping;
  int64_t stop_deadline;
  int exit_code;
} k = {.fd = {.listen = -1, .admin = -1, .journal = -1, .sig = -1, .ho = -1}};

/* ---- held connections ---- */

static struct held *held_find(uint32_t slot) {
  for (size_t i = 0; i < k.nheld; i++)
    if (k.held[i].slot == slot) return &k.held[i];
  return NULL;
}

static void held_remove_at(size_t i, const char *why) {
  zkw_log_debug("keeper: connection slot %u closed (%s); %zu held", k.held[i].slot, why, k.nheld - 1);
  close(k.held[i].fd);
  k.held[i] = k.held[--k.nheld];
}

/* Takes fd (closed on failure). */
static void held_add(uint32_t slot, int fd) {
  struct held *h = held_find(slot);
  if (h) {
    zkw_log_warn("keeper: slot %u adopted again: its previous connection is let go", slot);
    held_remove_at((size_t)(h - k.held), "replaced");
  }
  if (k.nheld == k.capheld) {
    size_t cap = k.capheld ? 2 * k.capheld : 64;
    struct held *grown = zkw_realloc(k.held, sizeof *grown * cap);
    if (!grown) {
      zkw_log_error("keeper: out of memory: connection slot %u is not held (a worker crash would end it)",
                    slot);
      close(fd);
      return;
    }
    k.held = grown;
    k.capheld = cap;
  }
  k.held[k.nheld++] = (struct held){slot, fd};
  zkw_log_debug("keeper: holding connection slot %u; %zu held", slot, k.nheld);
}

/* ---- peers and their messages ---- */

static void peer_drop(struct peer *p, const char *why);

static void ctl_queue(struct peer *p, unsigned type, const void *payload, size_t len) {
  if (p->dead) return;
  if (p->nctl == CTL_MAX) return peer_drop(p, "does not read its messages");
  struct zkw_handover_msg *m = &p->ctl[p->nctl++];
  memset(m, 0, sizeof *m);
  m->type = (uint16_t)type;
  m->len = (uint32_t)len;
  if (len) memcpy(m->payload, payload, len);
}

static void result_to(struct peer *p, int status, const char *reason) {
  struct zkw_handover_status st = {.status = status};
  snprintf(st.reason, sizeof st.reason, "%s", reason);
  ctl_queue(p, ZKW_HO_RESULT, &st, sizeof st.status + strlen(st.reason) + 1);
}

/* Answers every `zkwarden upgrade` waiting. */
static void answer_waiters(int status, const char *reason) {
  for (int i = 0; i < k.nwaiters; i++)
    result_to(k.waiters[i], status, reason);
  k.nwaiters = 0;
}

static struct child *child_of(pid_t pid) {
  for (int i = 0; pid > 0 && i < k.nchildren; i++)
    if (k.children[i].pid == pid) return &k.children[i];
  return NULL;
}

/* Begins the hand-over to p: STATE, the held connections, READY. */
static void hand_to(struct peer *p) {
  p->role = ROLE_WORKER;
  k.worker = p;
  p->handing = true;
  p->snap_n = 0;
  p->snap = k.nheld ? zkw_malloc(sizeof *p->snap * k.nheld) : NULL;
  if (k.nheld && !p->snap) { /* none would serve them: their clients reconnect */
    zkw_log_error("keeper: out of memory: the %zu held connection(s) are closed", k.nheld);
    while (k.nheld)
      held_remove_at(k.nheld - 1, "out of memory");
  }
  for (size_t i = 0; p->snap && i < k.nheld; i++)
    p->snap[p->snap_n++] = k.held[i].slot;
  struct child *c = child_of(p->pid);
  if (c) c->role = CHILD_WORKER;
  zkw_log_info("keeper: handing the listening socket and %zu connection(s) to worker pid %d", p->snap_n,
               (int)p->pid);
}

/* Sends what is queued to p until the socket is full. */
static void peer_flush(struct peer *p) {
  int rc = 0;
  while (!p->dead && p->handing && rc == 0) {
    if (!p->state_sent) {
      struct zkw_handover_state st = {.clients = (uint32_t)p->snap_n, .workers = k.workers_served};
      int fds[3] = {k.fd.listen, k.fd.journal, k.fd.admin};
      st.flags = (k.fd.admin >= 0 ? ZKW_STATE_ADMIN : 0) | (k.workers_served ? ZKW_STATE_PREVIOUS : 0);
      rc = zkw_handover_send_msg(p->fd, ZKW_HO_STATE, 0, &st, sizeof st, fds, k.fd.admin >= 0 ? 3 : 2);
      if (rc == 0) p->state_sent = true;
    } else if (p->snap_i < p->snap_n) {
      struct held *h = held_find(p->snap[p->snap_i]);
      rc = h ? zkw_handover_send_msg(p->fd, ZKW_HO_CLIENT, h->slot, NULL, 0, &h->fd, 1) : 0;
      if (rc == 0) p->snap_i++;
    } else {
      rc = zkw_handover_send_msg(p->fd, ZKW_HO_READY, 0, NULL, 0, NULL, 0);
      if (rc == 0) {
        p->handing = false;
        free(p->snap);
        p->snap = NULL;
        k.workers_served++;
        zkw_log_info("keeper: worker pid %d serves", (int)p->pid);
        answer_waiters(0, "the new worker serves");
      }
    }
  }
  while (!p->dead && !p->handing && rc == 0 && p->nctl > 0) {
    rc = zkw_handover_send(p->fd, &p->ctl[0]);
    if (rc == 0) memmove(p->ctl, p->ctl + 1, sizeof p->ctl[0] * (size_t)--p->nctl);
  }
  if (rc && rc != -EAGAIN && !p->dead) {
    char why[96];
    snprintf(why, sizeof why, "a send failed: %s", strerror(-rc));
    peer_drop(p, why);
  }
}

static bool peer_wants_out(const struct peer *p) {
  return p->handing || p->nctl > 0;
}

/* ---- starting and restarting the worker ---- */

static void stop_now(int code);

static void spawn_worker(bool takeover) {
  char err[256];
  bool config_error;
  if (k.nchildren == (int)(sizeof k.children / sizeof k.children[0])) {
    zkw_log_error("keeper: %d workers have not exited yet: not starting another", k.nchildren);
    return;
  }
  pid_t pid = zkw_keeper_spawn(&k.cmd, takeover, &config_error, err, sizeof err);
  k.spawned++;
  if (pid < 0) {
    zkw_log_error("keeper: %s", err);
    if (takeover) {
      zkw_log_error("keeper: the restart did not happen: the current worker keeps serving");
      answer_waiters(1, err);
    } else if (config_error && k.spawned == 1) {
      zkw_log_error("keeper: the worker could not start (its first start): stopping");
      stop_now(2);
    } else {
      k.backoff_ms =
          k.backoff_ms ? (k.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : k.backoff_ms * 2) : 100;
      k.respawn_at = zkw_keeper_now_ms() + k.backoff_ms;
      zkw_log_info("keeper: trying again in %d ms", k.backoff_ms);
    }
    return;
  }
  k.children[k.nchildren++] =
      (struct child){pid, takeover ? CHILD_CANDIDATE : CHILD_WORKER, zkw_keeper_now_ms(), 0, false};
  zkw_log_info("keeper: started %s pid %d: %s", takeover ? "a new worker to take over," : "worker", (int)pid,
               k.cmd.argv[0]);
}

static bool child_pending(enum child_role role) {
  for (int i = 0; i < k.nchildren; i++)
    if (k.children[i].role == role && !k.children[i].link_closed_ms) return true;
  return false;
}

/* A planned restart: SIGUSR2, SIGHUP or `zkwarden upgrade` (cmd). */
static void restart(struct peer *cmd, const char *why) {
  if (!k.cmd.argv) {
    const char *no = "this keeper does not start its worker (no --spawn): start the new worker with "
                     "`zkwarden --takeover` (in Kubernetes: change the worker container's image)";
    zkw_log_warn("keeper: %s: %s", why, no);
    if (cmd) result_to(cmd, 1, no);
    return;
  }
  if (k.stopping) {
    if (cmd) result_to(cmd, 1, "the keeper is stopping");
    return;
  }
  if (cmd && k.nwaiters < (int)(sizeof k.waiters / sizeof k.waiters[0])) {
    cmd->role = ROLE_COMMAND;
    k.waiters[k.nwaiters++] = cmd;
  } else if (cmd) {
    result_to(cmd, 1, "too many upgrade commands waiting");
  }
  if (k.candidate || child_pending(CHILD_CANDIDATE)) {
    zkw_log_info("keeper: %s: a restart is already under way", why);
  } else if (!k.worker) {
    zkw_log_info("keeper: %s: no worker serves: starting one", why);
    k.respawn_at = 0;
    if (!child_pending(CHILD_WORKER)) spawn_worker(false);
  } else {
    zkw_log_info("keeper: %s: starting a new worker to take over from pid %d", why, (int)k.worker->pid);
    spawn_worker(true);
  }
}

/* The worker's link closed (crash, exit, or given up on). */
static void worker_gone(const char *why) {
  struct peer *w = k.worker;
  k.worker = NULL;
  if (k.done_seen)
    zkw_log_info("keeper: worker pid %d handed over (its link closed); %zu connection(s) held", (int)w->pid,
                 k.nheld);
  else
    zkw_log_info("keeper: worker pid %d is gone (%s); %zu connection(s) held", (int)w->pid, why, k.nheld);
  struct child *c = child_of(w->pid);
  if (c && !c->link_closed_ms) c->link_closed_ms = zkw_keeper_now_ms();
  if (c && k.candidate) c->role = CHILD_RETIRED; /* handed over: its exit is no crash */
  k.quiescing = k.done_seen = false;
  if (k.candidate && !k.stopping) {
    struct peer *cand = k.candidate;
    k.candidate = NULL;
    hand_to(cand);
  } else if (k.cmd.argv && !k.stopping && !c && !child_pending(CHILD_WORKER)) {
    spawn_worker(false); /* not one of ours: the next is started now */
  }                      /* one of ours: started again once it is reaped */
}

/* Closes a peer at the end of the turn. */
static void peer_drop(struct peer *p, const char *why) {
  if (p->dead) return;
  p->dead = true;
  if (p == k.worker) {
    worker_gone(why);
  } else if (p == k.candidate) {
    k.candidate = NULL;
    zkw_log_error("keeper: the worker pid %d that was to take over went away (%s)%s", (int)p->pid, why,
                  k.quiescing ? ": the current worker was already told to hand over" : "");
    answer_waiters(1, "the new worker went away before it served");
  } else if (p->role != ROLE_COMMAND) {
    zkw_log_debug("keeper: handover peer pid %d closed (%s)", (int)p->pid, why);
  }
  for (int i = 0; i < k.nwaiters; i++)
    if (k.waiters[i] == p) k.waiters[i--] = k.waiters[--k.nwaiters];
}

static void on_hello(struct peer *p, const struct zkw_handover_msg *m) {
  struct zkw_handover_hello h;
  zkw_handover_payload(m, &h, sizeof h);
  struct child *c = child_of(p->pid);
  if (c) c->said_hello = true;
  if (h.flags & ZKW_HELLO_UPGRADE) {
    zkw_log_info("keeper: `zkwarden upgrade` (pid %d) asks for a restart", (int)p->pid);
    p->role = ROLE_COMMAND;
    return restart(p, "zkwarden upgrade");
  }
  if (k.stopping) return peer_drop(p, "the keeper is stopping");
  bool takeover = h.flags & ZKW_HELLO_TAKEOVER;
  if (!k.worker && !k.candidate) {
    zkw_log_info("keeper: worker pid %d says HELLO%s", (int)p->pid, takeover ? " (takeover)" : "");
    k.respawn_at = 0;
    return hand_to(p);
  }
  if (!takeover || k.candidate) {
    char why[160];
    snprintf(why, sizeof why, "pid %d wants to serve while pid %d does%s", (int)p->pid,
             (int)(k.candidate ? k.candidate : k.worker)->pid,
             k.candidate ? " and another takes over" : " (start it with --takeover to replace it)");
    zkw_log_error("keeper: %s: refused", why);
    /* Its one answer, on an empty socket: then it is closed. */
    struct zkw_handover_status st = {.status = 1};
    snprintf(st.reason, sizeof st.reason, "%s", why);
    if (zkw_handover_send_msg(p->fd, ZKW_HO_RESULT, 0, &st, sizeof st.status + strlen(st.reason) + 1, NULL,
                              0))
      zkw_log_debug("keeper: the refusal was not sent to pid %d", (int)p->pid);
    return peer_drop(p, "refused");
  }
  p->role = ROLE_CANDIDATE;
  k.candidate = p;
  if (c) c->role = CHILD_CANDIDATE;
  zkw_log_info("keeper: pid %d takes over: worker pid %d is asked to hand over (QUIESCE)", (int)p->pid,
               (int)k.worker->pid);
  ctl_queue(k.worker, ZKW_HO_QUIESCE, NULL, 0);
  k.quiescing = true;
  k.done_seen = false;
  k.quiesce_deadline = zkw_keeper_now_ms() + QUIESCE_MS;
}

static void on_message(struct peer *p, struct zkw_handover_msg *m) {
  if (p->role == ROLE_NEW) {
    if (m->type == ZKW_HO_HELLO) return on_hello(p, m);
    zkw_handover_close_fds(m);
    return peer_drop(p, "its first message was not HELLO");
  }
  if (p == k.worker && m->type == ZKW_HO_ADOPT) return held_add(m->slot, m->fds[0]);
  if (p == k.worker && m->type == ZKW_HO_FORGET) {
    struct held *h = held_find(m->slot);
    if (h) held_remove_at((size_t)(h - k.held), "the worker closed it");
    return;
  }
  if (p == k.worker && m->type == ZKW_HO_DONE) {
    if (k.quiescing) {
      zkw_log_info("keeper: worker pid %d handed over (DONE): waiting for it to exit", (int)p->pid);
      k.done_seen = true;
      k.quiesce_deadline = zkw_keeper_now_ms() + QUIESCE_MS;
    }
    return;
  }
  zkw_log_warn("keeper: unexpected %s from pid %d: ignored", zkw_handover_type_name(m->type), (int)p->pid);
  zkw_handover_close_fds(m);
}

/* Reads what p sent, bounded per turn (max messages) so that one peer
 * cannot hold the loop. */
static void peer_read_max(struct peer *p, size_t max) {
  for (size_t i = 0; i < max && !p->dead; i++) {
    struct zkw_handover_msg m;
    int rc = zkw_handover_recv(p->fd, &m);
    if (rc == -EAGAIN) return;
    if (rc == 0) return peer_drop(p, "its connection closed");
    if (rc < 0) {
      char why[96];
      snprintf(why, sizeof why, "a receive failed: %s", strerror(-rc));
      return peer_drop(p, why);
    }
    on_message(p, &m);
  }
}

static void peer_read(struct peer *p) {
  peer_read_max(p, 64);
}

static void accept_peers(void) {
  for (int i = 0; i < 16; i++) {
    pid_t pid;
    int fd = zkw_handover_accept(k.fd.ho, &pid);
    if (fd == -EAGAIN) return;
    if (fd == -EPERM) {
      zkw_log_warn("keeper: refused a handover connection from pid %d: another user", (int)pid);
      continue;
    }
    if (fd < 0) {
      zkw_log_warn("keeper: accept on %s: %s", k.fd.addr.name, strerror(-fd));
      return;
    }
    struct peer *p = zkw_calloc(1, sizeof *p);
    struct peer **grown = p ? zkw_realloc(k.peers, sizeof *grown * (k.npeers + 1)) : NULL;
    if (!grown) {
      zkw_log_error("keeper: out of memory: handover connection from pid %d closed", (int)pid);
      free(p);
      close(fd);
      continue;
    }
    k.peers = grown;
    *p = (struct peer){.fd = fd, .pid = pid, .role = ROLE_NEW};
    k.peers[k.npeers++] = p;
  }
}

/* Frees the peers dropped this turn. */
static void peers_sweep(void) {
  size_t j = 0;
  for (size_t i = 0; i < k.npeers; i++) {
    struct peer *p = k.peers[i];
    if (!p->dead) {
      k.peers[j++] = p;
      continue;
    }
    close(p->fd);
    free(p->snap);
    free(p);
  }
  k.npeers = j;
}

/* ---- children ---- */

static void reaped(pid_t pid, int status) {
  struct child *c = child_of(pid);
  if (!c) return;
  char st[128];
  zkw_keeper_status_text(status, st, sizeof st);
  /* Its link first (closed by now, or here), while it is still a child:
   * what it sent before it died is read to the end first (its last ADOPTs
   * and FORGETs: more than one turn's worth may be queued). */
  for (size_t i = 0; i < k.npeers; i++) {
    if (k.peers[i]->pid != pid || k.peers[i]->dead) continue;
    peer_read_max(k.peers[i], SIZE_MAX);
    if (!k.peers[i]->dead) peer_drop(k.peers[i], "its process exited");
  }
  c = child_of(pid);
  struct child me = *c;
  *c = k.children[--k.nchildren];
  if (me.role == CHILD_RETIRED) {
    zkw_log_info("keeper: the previous worker pid %d %s", (int)pid, st);
    return;
  }
  if (me.role == CHILD_CANDIDATE) {
    char why[200];
    snprintf(why, sizeof why, "the new worker (pid %d) %s before taking over", (int)pid, st);
    zkw_log_error("keeper: %s: %s", why,
                  k.worker ? "the current worker keeps serving" : "no worker serves: starting one");
    answer_waiters(1, why);
    if (!k.worker && !k.candidate && !k.stopping && !child_pending(CHILD_WORKER)) spawn_worker(false);
    return;
  }
  zkw_log_info("keeper: worker pid %d %s", (int)pid, st);
  if (k.stopping) return;
  bool first = k.spawned == 1 && k.workers_served == 0;
  if (first && !me.said_hello && WIFEXITED(status) &&
      (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 127)) {
    zkw_log_error("keeper: the worker could not start (its first start): stopping");
    return stop_now(2);
  }
  if (k.worker || k.candidate || child_pending(CHILD_WORKER)) return; /* another serves or starts */
  int64_t lived = zkw_keeper_now_ms() - me.started_ms;
  if (lived >= YOUNG_MS) k.backoff_ms = 0;
  if (!k.backoff_ms) {
    k.backoff_ms = 100; /* the next early death waits this long */
    spawn_worker(false);
  } else {
    zkw_log_info("keeper: starting the next worker in %d ms (it lived %lld ms)", k.backoff_ms,
                 (long long)lived);
    k.respawn_at = zkw_keeper_now_ms() + k.backoff_ms;
    k.backoff_ms = k.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : k.backoff_ms * 2;
  }
}

static void reap_all(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    reaped(pid, status);
  }
}

/* ---- stopping ---- */

static void stop_begin(const char *sig) {
  if (k.stopping) return;
  k.stopping = true;
  k.stop_deadline = zkw_keeper_now_ms() + STOP_MS;
  zkw_log_info("keeper: received %s: stopping the worker, then closing %zu held connection(s)", sig, k.nheld);
  if (k.fd.ho >= 0) close(k.fd.ho);
  k.fd.ho = -1;
  if (k.worker) ctl_queue(k.worker, ZKW_HO_STOP, NULL, 0);
  if (k.candidate) peer_drop(k.candidate, "the keeper is stopping");
  answer_waiters(1, "the keeper is stopping");
  /* The worker gets STOP; any other child (starting, or finishing after a
   * hand-over) gets SIGTERM. */
  for (int i = 0; i < k.nchildren; i++)
    if (!k.worker || k.children[i].pid != k.worker->pid) kill(k.children[i].pid, SIGTERM);
  k.respawn_at = 0;
}

/* Stops at once (a configuration error): no worker serves. */
static void stop_now(int code) {
  k.stopping = true;
  k.exit_code = code;
  k.stop_deadline = zkw_keeper_now_ms();
  k.respawn_at = 0;
}

static bool stopped(void) {
  return k.stopping && !k.worker && k.nchildren == 0;
}

static void on_signals(void) {
  struct signalfd_siginfo si;
  while (read(k.fd.sig, &si, sizeof si) == (ssize_t)sizeof si) {
    switch (si.ssi_signo) {
    case SIGCHLD:
      reap_all();
      break;
    case SIGTERM:
    case SIGINT:
      stop_begin(si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    case SIGHUP:
      if (zkw_log_reopen() != 0) zkw_log_error("keeper: SIGHUP: cannot reopen the log file");
      restart(NULL, "SIGHUP");
      break;
    case SIGUSR2:
      restart(NULL, "SIGUSR2");
      break;
    }
  }
}

/* ---- timers ---- */

static void on_time(int64_t now) {
  if (k.respawn_at && now >= k.respawn_at && !k.stopping) {
    k.respawn_at = 0;
    if (!k.worker && !k.candidate && !child_pending(CHILD_WORKER)) spawn_worker(false);
  }
  if (k.quiescing && k.worker && now >= k.quiesce_deadline) {
    zkw_log_error("keeper: worker pid %d did not %s within %d ms: treated as dead", (int)k.worker->pid,
                  k.done_seen ? "exit after DONE" : "answer QUIESCE", QUIESCE_MS);
    struct child *c = child_of(k.worker->pid);
    if (c) kill(c->pid, SIGKILL);
    peer_drop(k.worker, "it did not hand over in time");
  }
  for (int i = 0; i < k.nchildren; i++) {
    struct child *c = &k.children[i];
    if (c->link_closed_ms && now - c->link_closed_ms >= REAP_MS) {
      zkw_log_warn("keeper: worker pid %d closed its link %d ms ago and still runs: killed", (int)c->pid,
                   REAP_MS);
      kill(c->pid, SIGKILL);
      c->link_closed_ms = 0;
    }
    if (c->role == CHILD_CANDIDATE && !c->said_hello && now - c->started_ms >= HELLO_MS) {
      zkw_log_error("keeper: the new worker pid %d said no HELLO within %d ms: killed", (int)c->pid,
                    HELLO_MS);
      kill(c->pid, SIGKILL);
      c->said_hello = true; /* killed once */
    }
  }
  if (k.stopping && now >= k.stop_deadline) {
    for (int i = 0; i < k.nchildren; i++) {
      zkw_log_warn("keeper: worker pid %d did not exit in time: killed", (int)k.children[i].pid);
      kill(k.children[i].pid, SIGKILL);
    }
    if (k.worker) peer_drop(k.worker, "stopping");
    /* In spawn mode the killed children are reaped below before exiting. */
    for (int i = 0; i < k.nchildren;) {
      int status;
      if (waitpid(k.children[i].pid, &status, 0) >= 0 || errno != EINTR)
        k.children[i] = k.children[--k.nchildren];
    }
  }
}

static int poll_timeout(int64_t now) {
  int64_t next = now + 1000;
  if (k.respawn_at && k.respawn_at < next) next = k.respawn_at;
  if (k.quiescing && k.quiesce_deadline < next) next = k.quiesce_deadline;
  if (k.stopping && k.stop_deadline < next) next = k.stop_deadline;
  return next > now ? (int)(next - now) : 0;
}

/* ---- the loop ---- */

static int loop(void) {
  struct pollfd *pfd = NULL;
  size_t cap = 0;
  while (!stopped()) {
    size_t n = 2 + k.npeers + k.nheld;
    if (n > cap) {
      struct pollfd *grown = realloc(pfd, sizeof *pfd * n);
      if (!grown) {
        zkw_log_error("keeper: out of memory for its poll set");
        free(pfd);
        return 1;
      }
      pfd = grown;
      cap = n;
    }
    pfd[0] = (struct pollfd){.fd = k.fd.sig, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = k.fd.ho, .events = POLLIN};
    for (size_t i = 0; i < k.npeers; i++)
      pfd[2 + i] = (struct pollfd){.fd = k.peers[i]->fd,
                                   .events = POLLIN | (peer_wants_out(k.peers[i]) ? POLLOUT : 0)};
    size_t npeers = k.npeers, nheld = k.nheld, hb = 2 + npeers;
    /* A held connection: its close only, never its bytes (they are the worker's). */
    for (size_t i = 0; i < nheld; i++)
      pfd[hb + i] = (struct pollfd){.fd = k.held[i].fd, .events = POLLRDHUP};
    int rc = poll(pfd, hb + nheld, poll_timeout(zkw_keeper_now_ms()));
    if (rc < 0 && errno != EINTR) {
      zkw_log_error("keeper: poll: %s", strerror(errno));
      free(pfd);
      return 1;
    }
    if (rc > 0) {
      /* From the end: a removal moves the last entry, already looked at. */
      for (size_t i = nheld; i-- > 0;)
        if (pfd[hb + i].revents) held_remove_at(i, "the client closed it");
      for (size_t i = 0; i < npeers; i++) {
        struct peer *p = k.peers[i];
        if (pfd[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) peer_read(p);
        if (!p->dead && (pfd[2 + i].revents & POLLOUT)) peer_flush(p);
      }
      if (pfd[1].revents & POLLIN) accept_peers();
      if (pfd[0].revents & POLLIN) on_signals();
    }
    on_time(zkw_keeper_now_ms());
    for (size_t i = 0; i < k.npeers; i++)
      if (peer_wants_out(k.peers[i])) peer_flush(k.peers[i]);
    peers_sweep();
  }
  free(pfd);
  return k.exit_code;
}

/* ---- start ---- */

static void close_all(void) {
  while (k.nheld)
    held_remove_at(k.nheld - 1, "the keeper stops");
  free(k.held);
  for (size_t i = 0; i < k.npeers; i++)
    k.peers[i]->dead = true;
  peers_sweep();
  free(k.peers);
  zkw_keeper_close(&k.fd);
}

static void usage(FILE *out) {
  fprintf(out, "usage: zkwarden-keeper [--env-file FILE] [--spawn PATH [ARGS...]]\n"
               "       zkwarden-keeper --help | --version\n"
               "Holds zkwarden's listening sockets and its clients' connections across the restarts of\n"
               "zkwarden (the worker): --spawn starts PATH and starts it again when it dies; without it,\n"
               "workers started elsewhere (ZKWARDEN_KEEPER=on) connect. SIGUSR2 or SIGHUP: restart the\n"
               "worker onto the binary on disk; SIGTERM: stop it and close everything. Reads\n"
               "ZKWARDEN_LISTEN, ZKWARDEN_ADMIN_LISTEN, ZKWARDEN_KEEPER_SOCKET and ZKWARDEN_LOG_*.\n");
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("zkwarden-keeper %s\n", ZKW_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--env-file") == 0 && i + 1 < argc) {
      k.cmd.env_file = argv[++i];
    } else if (strcmp(argv[i], "--spawn") == 0 && i + 1 < argc) {
      k.cmd.argv = argv + i + 1;
      break;
    } else {
      fprintf(stderr, "zkwarden-keeper: unknown or incomplete argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  char err[256];
  if (k.cmd.env_file && zkw_keeper_env_apply(&k.cmd, err, sizeof err) != 0) {
    fprintf(stderr, "zkwarden-keeper: %s\n", err);
    return 2;
  }
  if (zkw_keeper_log_setup() != 0) return 2;
  zkw_fault_name_process("keeper");
  if (zkw_fault_init() != 0) return 2;
  int rc = zkw_keeper_open(&k.fd, k.cmd.argv ? k.cmd.argv[0] : NULL);
  k.cmd.socket_name = k.fd.addr.name + 1;
  if (rc == 0) {
    if (k.cmd.argv) spawn_worker(false);
    rc = loop();
  }
  close_all();
  zkw_fault_report();
  if (rc == 0) zkw_log_info("keeper: stopped");
  return rc;
}
