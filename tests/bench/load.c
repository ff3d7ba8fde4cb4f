/* load.c: zkwarden's load generator, on libzookeeper_mt only.
 *
 *   zkw_bench_load latency    -s host:port[,host:port...] -o OP [-t SEC] [-w SEC] [-c COUNT] [-l LABEL,...]
 *       One request at a time with the synchronous API. With several servers
 *       (direct, through HAProxy, through zkwarden), one session to each, and
 *       the requests go to them in turn, A B C A B C ..., so that load from
 *       elsewhere on the machine hits each alike; one result per server.
 *   zkw_bench_load throughput -s host:port[,host:port...] -o OP [-n SESSIONS] [-d DEPTH] [-t SEC] [-w SEC]
 *                             [-S SLICE-MS] [-c COUNT] [-A host:port] [-l LABEL,...]
 *       SESSIONS handles per server, each keeping up to DEPTH asynchronous
 *       requests in flight (the completion of one issues the next). With
 *       several servers they take turns of SLICE-MS (default 200), A B C A B
 *       C ..., until each has had SEC seconds: only the active server's
 *       sessions issue requests. One result per server. With -A, every
 *       session is first created there (directly, raw socket) and then
 *       re-attached through its server with its id and password.
 *   zkw_bench_load idle       -s host:port -n SESSIONS [-C CONCURRENCY] [-A host:port]
 *       Raw sockets, no libzookeeper: opens SESSIONS sessions (one
 *       ConnectRequest per socket, at most CONCURRENCY handshakes at a time;
 *       with -A, the sessions are first created there, directly, and then
 *       re-attached through -s with their id and password),
 *       with -W N, each sets N exist watches (exists with the watch flag on
 *       missing paths of a JobManager's shape, as a session's watch set),
 *       prints one JSON line once all are established (or failed), keeps them
 *       alive with pings until stdin closes, then sends closeSession on each
 *       and prints a second line with the count of sessions whose connection
 *       closed after they were established ("lost").
 *
 * OP: get (getData of a small node), set (setData of a per-session node),
 * create (create an ephemeral, then delete it: two requests), flink (a
 * Flink-like checkpoint cycle of five requests: a multi of three creates
 * (state node, its `locks` child, an ephemeral UUID lock under it), an
 * ephemeral UUID lock create on a job graph, the delete of that lock, the
 * delete of the checkpoint's lock, and a multi deleting `locks` and the
 * state node). Every request counts as one op; its latency is from issue
 * to completion as the application sees it.
 *
 *   zkw_bench_load raw-latency    -s [tls:]host:port[,...] [-K ca] [-E cert -Y key] [-t SEC] [-w SEC]
 *   zkw_bench_load raw-throughput -s [tls:]host:port[,...] [-K ca] [-E cert -Y key] [-d DEPTH] [-t SEC]
 *       getData of SMALL_NODE on one raw-socket session per server, with
 *       OpenSSL (verified against -K, client certificate -E/-Y) for a server
 *       written tls:host:port, plaintext otherwise: the same client code for
 *       a client speaking TLS to ZooKeeper and one speaking plaintext to
 *       zkwarden with TLS upstream. Latency: one request at a time, the
 *       servers in turn; throughput: DEPTH requests in flight, the servers
 *       taking turns of SLICE-MS. The node is created if missing.
 *
 * Output: one JSON line on stdout per run and server. Latencies are kept in a
 * log-linear histogram (HDR-like, under 0.8% relative error). -c runs a
 * fixed number of requests instead of a time (for profiles). Errors other
 * than the expected ones are counted in "errors"; the exit status is 1 if
 * any occurred or the run could not start.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <zookeeper/zookeeper.h>

#define ROOT       "/zkwbench"
#define SMALL_NODE ROOT "/small"
#define EPH_DIR    ROOT "/e"
#define FLINK_ROOT "/flink/zkwbench"

enum op_kind { OP_GET, OP_SET, OP_CREATE, OP_FLINK };
static const char *const op_names[] = {"get", "set", "create", "flink"};

struct opts {
  const char *mode;
  const char *server;
  enum op_kind op;
  int sessions;
  int depth;
  double seconds;
  double warmup;
  long count;
  int size;
  int timeout_ms;
  int concurrency;
  int slice_ms;
  const char *attach_from;
  const char *label;
  const char *tls_ca, *tls_cert, *tls_key;
  int watches; /* idle: exist watches each session sets once established */
};

static struct opts o = {.sessions = 1,
                        .depth = 1,
                        .seconds = 5,
                        .warmup = 1,
                        .size = 32,
                        .timeout_ms = 30000,
                        .concurrency = 256,
                        .slice_ms = 200};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "zkw_bench_load: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

/* ---- histogram: values in ns; exact below 256, then 128 sub-buckets per
 * power of two (bucket width under 1/128 of its value). ---- */

#define HIST_LINEAR 256
#define HIST_SUB    128
#define HIST_SLOTS  (HIST_LINEAR + 40 * HIST_SUB)

struct hist {
  uint64_t n[HIST_SLOTS];
  uint64_t count, sum, max;
};

static int hist_index(uint64_t v) {
  if (v < HIST_LINEAR) return (int)v;
  int msb = 63 - __builtin_clzll(v); /* >= 8 */
  int shift = msb - 7;               /* v >> shift is in [128, 255] */
  int i = HIST_LINEAR + (shift - 1) * HIST_SUB + (int)((v >> shift) - HIST_SUB);
  return i < HIST_SLOTS ? i : HIST_SLOTS - 1;
}

/* The middle of bucket i. */
static double hist_value(int i) {
  if (i < HIST_LINEAR) return i;
  int shift = (i - HIST_LINEAR) / HIST_SUB + 1;
  uint64_t m = (uint64_t)((i - HIST_LINEAR) % HIST_SUB + HIST_SUB);
  return (double)(m << shift) + (double)(1ull << shift) / 2;
}

static void hist_add(struct hist *h, uint64_t v) {
  h->n[hist_index(v)]++;
  h->count++;
  h->sum += v;
  if (v > h->max) h->max = v;
}

static void hist_merge(struct hist *into, const struct hist *h) {
  for (int i = 0; i < HIST_SLOTS; i++)
    into->n[i] += h->n[i];
  into->count += h->count;
  into->sum += h->sum;
  if (h->max > into->max) into->max = h->max;
}

/* The q-quantile in microseconds. */
static double hist_quantile_us(const struct hist *h, double q) {
  if (!h->count) return 0;
  uint64_t want = (uint64_t)(q * (double)h->count);
  if (want < 1) want = 1;
  if (want > h->count) want = h->count;
  uint64_t seen = 0;
  for (int i = 0; i < HIST_SLOTS; i++) {
    seen += h->n[i];
    if (seen >= want) return hist_value(i) / 1000.0;
  }
  return (double)h->max / 1000.0;
}

/* ---- sessions and their request slots ---- */

struct sess;

/* One request in flight at a time; its paths live as long as it does. */
struct slot {
  struct sess *s;
  struct slot *parked_next;
  int step;
  uint64_t t0;
  char eph[128]; /* create: the ephemeral */
  char cp[128];  /* flink: the checkpoint's state node */
  char cplocks[160];
  char cplock[200]; /* its lock */
  char jglock[160]; /* the job graph's lock */
  zoo_op_t ops[3];
  zoo_op_result_t res[3];
  char created[3][208];
};

struct sess {
  zhandle_t *zh;
  int idx;
  int server; /* index into g_servers */
  _Atomic int state;
  _Atomic long inflight;
  _Atomic uint64_t measured, errors;
  _Atomic uint64_t total; /* completions, warm-up included */
  _Atomic uint64_t seq;
  char setnode[96];
  char base[96];    /* flink: this session's cluster dir */
  struct hist hist; /* written by the completion thread only */
  struct slot *slots;
};

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };
static _Atomic int g_phase;
static _Atomic long g_issued; /* -c: requests issued so far */
static char *g_data;
static unsigned g_pid;

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh, (void)path;
  struct sess *s = ctx;
  if (type == ZOO_SESSION_EVENT) atomic_store(&s->state, state);
}

static void rand_uuid(char out[37], uint64_t *rng) {
  static const char hex[] = "0123456789abcdef";
  int k = 0;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      out[i] = '-';
      continue;
    }
    *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
    out[i] = i == 14 ? '4' : hex[(*rng >> (k++ % 8 * 4)) & 15];
  }
  out[36] = 0;
}

/* Prepares the paths of one iteration of a create or flink cycle. */
static void slot_new_iteration(struct slot *sl) {
  struct sess *s = sl->s;
  uint64_t n = atomic_fetch_add(&s->seq, 1);
  if (o.op == OP_CREATE) {
    snprintf(sl->eph, sizeof sl->eph, EPH_DIR "/%u-%d-%" PRIu64, g_pid, s->idx, n);
  } else if (o.op == OP_FLINK) {
    uint64_t rng = now_ns() ^ (n * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)s->idx << 48) ^ 1;
    char u1[37], u2[37];
    rand_uuid(u1, &rng);
    rand_uuid(u2, &rng);
    snprintf(sl->cp, sizeof sl->cp, "%s/checkpoints/%019" PRIu64, s->base, n);
    snprintf(sl->cplocks, sizeof sl->cplocks, "%s/locks", sl->cp);
    snprintf(sl->cplock, sizeof sl->cplock, "%s/%s", sl->cplocks, u1);
    snprintf(sl->jglock, sizeof sl->jglock, "%s/jobgraph/%s", s->base, u2);
  }
}

static int steps_of(enum op_kind k) {
  return k == OP_CREATE ? 2 : k == OP_FLINK ? 5 : 1;
}

/* ZooKeeper results that a step expects. */
static bool expected(int rc) {
  return rc == ZOK;
}

static void completed(struct slot *sl, int rc);

static void data_cb(int rc, const char *v, int vl, const struct Stat *st, const void *d) {
  (void)v, (void)vl, (void)st;
  completed((struct slot *)d, rc);
}
static void stat_cb(int rc, const struct Stat *st, const void *d) {
  (void)st;
  completed((struct slot *)d, rc);
}
static void string_cb(int rc, const char *v, const void *d) {
  (void)v;
  completed((struct slot *)d, rc);
}
static void void_cb(int rc, const void *d) {
  completed((struct slot *)d, rc);
}

static void flink_multi_create(struct slot *sl) {
  zoo_create_op_init(&sl->ops[0], sl->cp, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, 0, sl->created[0],
                     sizeof sl->created[0]);
  zoo_create_op_init(&sl->ops[1], sl->cplocks, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, sl->created[1],
                     sizeof sl->created[1]);
  zoo_create_op_init(&sl->ops[2], sl->cplock, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL,
                     sl->created[2], sizeof sl->created[2]);
}

static void flink_multi_delete(struct slot *sl) {
  zoo_delete_op_init(&sl->ops[0], sl->cplocks, -1);
  zoo_delete_op_init(&sl->ops[1], sl->cp, -1);
}

/* Issues the slot's current step asynchronously. Returns a ZooKeeper code. */
static int issue_async(struct slot *sl) {
  struct sess *s = sl->s;
  zhandle_t *zh = s->zh;
  if (sl->step == 0 && o.op != OP_GET && o.op != OP_SET) slot_new_iteration(sl);
  sl->t0 = now_ns();
  switch (o.op) {
  case OP_GET:
    return zoo_aget(zh, SMALL_NODE, 0, data_cb, sl);
  case OP_SET:
    return zoo_aset(zh, s->setnode, g_data, o.size, -1, stat_cb, sl);
  case OP_CREATE:
    if (sl->step == 0)
      return zoo_acreate(zh, sl->eph, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, string_cb, sl);
    return zoo_adelete(zh, sl->eph, -1, void_cb, sl);
  case OP_FLINK:
    switch (sl->step) {
    case 0:
      flink_multi_create(sl);
      return zoo_amulti(zh, 3, sl->ops, sl->res, void_cb, sl);
    case 1:
      return zoo_acreate(zh, sl->jglock, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, string_cb, sl);
    case 2:
      return zoo_adelete(zh, sl->jglock, -1, void_cb, sl);
    case 3:
      return zoo_adelete(zh, sl->cplock, -1, void_cb, sl);
    default:
      flink_multi_delete(sl);
      return zoo_amulti(zh, 2, sl->ops, sl->res, void_cb, sl);
    }
  }
  return ZBADARGUMENTS;
}

/* Issues the next request of a slot, unless the run is over. */
/* Throughput against several servers takes turns in time slices: only the
 * active server's slots issue requests; the others wait here until their
 * server's turn comes. */
#define MAX_SERVERS 8
static _Atomic int g_active;
static pthread_mutex_t g_park_mu[MAX_SERVERS];
static struct slot *g_parked[MAX_SERVERS];

/* Parks the slot unless its server is active. Returns true if parked. */
static bool park_if_idle(struct slot *sl) {
  int k = sl->s->server;
  if (atomic_load(&g_active) == k) return false;
  pthread_mutex_lock(&g_park_mu[k]);
  bool park = atomic_load(&g_active) != k;
  if (park) {
    sl->parked_next = g_parked[k];
    g_parked[k] = sl;
    atomic_fetch_sub(&sl->s->inflight, 1);
  }
  pthread_mutex_unlock(&g_park_mu[k]);
  return park;
}

static void next_async(struct slot *sl);

/* Makes server k the active one and lets its parked slots go on. */
static void activate(int k) {
  atomic_store(&g_active, k);
  pthread_mutex_lock(&g_park_mu[k]);
  struct slot *sl = g_parked[k];
  g_parked[k] = NULL;
  pthread_mutex_unlock(&g_park_mu[k]);
  while (sl) {
    struct slot *next = sl->parked_next;
    atomic_fetch_add(&sl->s->inflight, 1);
    next_async(sl);
    sl = next;
  }
}

static void next_async(struct slot *sl) {
  struct sess *s = sl->s;
  for (;;) {
    if (atomic_load(&g_phase) == PHASE_STOP || (o.count && atomic_fetch_add(&g_issued, 1) >= o.count)) {
      atomic_fetch_sub(&s->inflight, 1);
      return;
    }
    if (park_if_idle(sl)) return;
    int rc = issue_async(sl);
    if (rc == ZOK) return;
    atomic_fetch_add(&s->errors, 1);
    if (s->state != ZOO_CONNECTED_STATE) { /* the session is gone: this slot stops */
      atomic_fetch_sub(&s->inflight, 1);
      return;
    }
  }
}

static void completed(struct slot *sl, int rc) {
  struct sess *s = sl->s;
  uint64_t t = now_ns() - sl->t0;
  atomic_fetch_add(&s->total, 1);
  if (atomic_load(&g_phase) == PHASE_MEASURE || o.count) {
    hist_add(&s->hist, t);
    atomic_fetch_add(&s->measured, 1);
  }
  if (!expected(rc)) {
    if (atomic_fetch_add(&s->errors, 1) < 5)
      fprintf(stderr, "zkw_bench_load: session %d: %s step %d: %s\n", s->idx, op_names[o.op], sl->step,
              zerror(rc));
    /* A failed create leaves nothing to delete: start a new iteration. */
    if (o.op == OP_FLINK && sl->step == 0) sl->step = steps_of(o.op) - 1;
    if (o.op == OP_CREATE && sl->step == 0) sl->step = steps_of(o.op) - 1;
  }
  sl->step = (sl->step + 1) % steps_of(o.op);
  next_async(sl);
}

/* The same steps with the synchronous API. */
static int issue_sync(struct slot *sl) {
  struct sess *s = sl->s;
  zhandle_t *zh = s->zh;
  char buf[1024];
  int len = sizeof buf;
  if (sl->step == 0 && o.op != OP_GET && o.op != OP_SET) slot_new_iteration(sl);
  switch (o.op) {
  case OP_GET:
    return zoo_get(zh, SMALL_NODE, 0, buf, &len, NULL);
  case OP_SET:
    return zoo_set(zh, s->setnode, g_data, o.size, -1);
  case OP_CREATE:
    if (sl->step == 0)
      return zoo_create(zh, sl->eph, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
    return zoo_delete(zh, sl->eph, -1);
  case OP_FLINK:
    switch (sl->step) {
    case 0:
      flink_multi_create(sl);
      return zoo_multi(zh, 3, sl->ops, sl->res);
    case 1:
      return zoo_create(zh, sl->jglock, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
    case 2:
      return zoo_delete(zh, sl->jglock, -1);
    case 3:
      return zoo_delete(zh, sl->cplock, -1);
    default:
      flink_multi_delete(sl);
      return zoo_multi(zh, 2, sl->ops, sl->res);
    }
  }
  return ZBADARGUMENTS;
}

/* ---- setup and teardown ---- */

static int connect_session(struct sess *s, int idx, const char *server, const clientid_t *attach) {
  s->idx = idx;
  atomic_store(&s->state, 0);
  s->zh = zookeeper_init(server, watcher, o.timeout_ms, attach, s, 0);
  if (!s->zh) return -1;
  /* By default the C client resolves the server list again at every turn of
   * its I/O loop (getaddrinfo with a netlink dump); that would be the client's
   * CPU taken from the shared cores. Resolve at connects only. */
  zoo_set_servers_resolution_delay(s->zh, -1);
  return 0;
}

static bool wait_connected(struct sess *ss, int n, int timeout_ms) {
  uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
  for (int i = 0; i < n; i++)
    while (atomic_load(&ss[i].state) != ZOO_CONNECTED_STATE) {
      if (now_ns() > deadline) return false;
      sleep_ms(1);
    }
  return true;
}

static void ensure(zhandle_t *zh, const char *path, const char *data, int len) {
  int rc = zoo_create(zh, path, data, len, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
  if (rc != ZOK && rc != ZNODEEXISTS) die("create %s: %s", path, zerror(rc));
}

/* Deletes path and everything under it (ignores what is already gone). */
static void delete_tree(zhandle_t *zh, const char *path) {
  struct String_vector kids = {0, NULL};
  if (zoo_get_children(zh, path, 0, &kids) == ZOK) {
    for (int i = 0; i < kids.count; i++) {
      char child[512];
      snprintf(child, sizeof child, "%s/%s", path, kids.data[i]);
      delete_tree(zh, child);
    }
    deallocate_String_vector(&kids);
  }
  zoo_delete(zh, path, -1);
}

static void setup(struct sess *ss, int n) {
  zhandle_t *zh = ss[0].zh;
  ensure(zh, ROOT, NULL, -1);
  int rc = zoo_create(zh, SMALL_NODE, g_data, o.size, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
  if (rc == ZNODEEXISTS) rc = zoo_set(zh, SMALL_NODE, g_data, o.size, -1);
  if (rc != ZOK) die("create %s: %s", SMALL_NODE, zerror(rc));
  ensure(zh, EPH_DIR, NULL, -1);
  ensure(zh, "/flink", NULL, -1);
  ensure(zh, FLINK_ROOT, NULL, -1);
  for (int i = 0; i < n; i++) {
    struct sess *s = &ss[i];
    snprintf(s->setnode, sizeof s->setnode, ROOT "/set-%u-%d", g_pid, i);
    snprintf(s->base, sizeof s->base, FLINK_ROOT "/%u-%d", g_pid, i);
    if (o.op == OP_SET) ensure(zh, s->setnode, g_data, o.size);
    if (o.op == OP_FLINK) {
      char p[160];
      ensure(zh, s->base, NULL, -1);
      snprintf(p, sizeof p, "%s/checkpoints", s->base);
      ensure(zh, p, NULL, -1);
      snprintf(p, sizeof p, "%s/jobgraph", s->base);
      ensure(zh, p, NULL, -1);
    }
  }
}

static void teardown(struct sess *ss, int n) {
  zhandle_t *zh = ss[0].zh;
  for (int i = 0; i < n; i++) {
    if (o.op == OP_SET) zoo_delete(zh, ss[i].setnode, -1);
    if (o.op == OP_FLINK) delete_tree(zh, ss[i].base);
  }
}

/* ---- the run ---- */

static char *g_servers[MAX_SERVERS], *g_labels[MAX_SERVERS];
static int g_nservers;

/* Splits "a,b,c" into at most MAX_SERVERS strings; returns the count. */
static int split(const char *list, char **out) {
  int n = 0;
  char *copy = strdup(list ? list : "");
  for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && n < MAX_SERVERS;
       t = strtok_r(NULL, ",", &save))
    out[n++] = t;
  return n;
}

static void print_result(const struct hist *h, const char *label, const char *server, int sessions,
                         double secs, uint64_t errors, uint64_t total, double connect_ms) {
  double ops = (double)h->count;
  printf("{\"mode\":\"%s\",\"op\":\"%s\",\"label\":\"%s\",\"server\":\"%s\",\"sessions\":%d,\"depth\":%d,"
         "\"size\":%d,\"seconds\":%.3f,\"ops\":%.0f,\"ops_per_s\":%.1f,\"mean_us\":%.2f,\"p50_us\":%.2f,"
         "\"p90_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f,\"errors\":%" PRIu64
         ",\"ops_total\":%" PRIu64 ",\"connect_ms\":%.2f}\n",
         o.mode, op_names[o.op], label, server, sessions, o.depth, o.size, secs, ops,
         secs > 0 ? ops / secs : 0, h->count ? (double)h->sum / (double)h->count / 1000.0 : 0,
         hist_quantile_us(h, 0.50), hist_quantile_us(h, 0.90), hist_quantile_us(h, 0.99),
         hist_quantile_us(h, 0.999), (double)h->max / 1000.0, errors, total, connect_ms);
  fflush(stdout);
}

/* Latency: one request at a time with the synchronous API. With several
 * servers, one session each, and the requests go to them in turn (A B C A
 * B C ...), so that whatever else loads the machine hits all of them alike. */
static void run_sync(struct sess *ss, int n, uint64_t *t_start, uint64_t *t_end) {
  uint64_t t_warm = now_ns() + (uint64_t)(o.warmup * 1e9), t_stop = 0;
  bool stop = false;
  if (o.count) *t_start = now_ns();
  for (long round = 0; !stop; round++) {
    uint64_t now = now_ns();
    if (!o.count) {
      if (!*t_start && now >= t_warm) {
        *t_start = now;
        t_stop = now + (uint64_t)(o.seconds * 1e9);
      }
      if (*t_start && now >= t_stop) break;
    } else if (round >= o.count) {
      break;
    }
    for (int i = 0; i < n; i++) {
      struct sess *s = &ss[i];
      struct slot *sl = &s->slots[0];
      uint64_t t0 = now_ns();
      int rc = issue_sync(sl);
      uint64_t t1 = now_ns();
      atomic_fetch_add(&s->total, 1);
      if (*t_start) hist_add(&s->hist, t1 - t0);
      if (!expected(rc)) {
        if (atomic_fetch_add(&s->errors, 1) < 5)
          fprintf(stderr, "zkw_bench_load: %s: %s step %d: %s\n", g_servers[i], op_names[o.op], sl->step,
                  zerror(rc));
        if (rc == ZINVALIDSTATE || rc == ZSESSIONEXPIRED) stop = true;
        if (sl->step == 0 && (o.op == OP_CREATE || o.op == OP_FLINK)) sl->step = steps_of(o.op) - 1;
      }
      sl->step = (sl->step + 1) % steps_of(o.op);
    }
  }
  *t_end = now_ns();
  /* Finish each cycle so that no persistent node of it is left behind. */
  for (int i = 0; i < n && !stop; i++) {
    struct slot *sl = &ss[i].slots[0];
    while (sl->step != 0 && o.op == OP_FLINK) {
      issue_sync(sl);
      sl->step = (sl->step + 1) % steps_of(o.op);
    }
  }
}

/* Throughput: every slot of every session of the active server keeps one
 * request in flight. With several servers they take turns of o.slice_ms
 * (A B C A B C ...) until each has had o.seconds; the time of its turns is
 * its measured time. */
static void run_async(struct sess *ss, int n, int depth, double *measured) {
  uint64_t t_begin = now_ns();
  int k = 0;
  atomic_store(&g_active, 0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < depth; j++) {
      atomic_fetch_add(&ss[i].inflight, 1);
      next_async(&ss[i].slots[j]);
    }
  while (!o.count) {
    uint64_t now = now_ns();
    if (atomic_load(&g_phase) == PHASE_WARMUP && k == 0 && now - t_begin >= (uint64_t)(o.warmup * 1e9))
      atomic_store(&g_phase, PHASE_MEASURE);
    if (atomic_load(&g_phase) == PHASE_MEASURE && k == 0 && measured[g_nservers - 1] >= o.seconds) break;
    activate(k);
    uint64_t ts = now_ns();
    sleep_ms(o.slice_ms);
    if (atomic_load(&g_phase) == PHASE_MEASURE) measured[k] += (double)(now_ns() - ts) / 1e9;
    k = (k + 1) % g_nservers;
  }
  if (!o.count) {
    atomic_store(&g_phase, PHASE_STOP);
    for (int i = 0; i < g_nservers; i++)
      activate(i); /* parked slots see the stop and end */
  }
  /* Wait for what is in flight (at most 30 s). */
  uint64_t deadline = now_ns() + 30000000000ull;
  for (int i = 0; i < n; i++)
    while (atomic_load(&ss[i].inflight) > 0 && now_ns() < deadline)
      sleep_ms(1);
  if (o.count) measured[0] = (double)(now_ns() - t_begin) / 1e9;
}

static clientid_t *create_sessions(int n);

static int run_zk(bool sync) {
  g_nservers = split(o.server, g_servers);
  int nlabels = split(o.label, g_labels);
  if (g_nservers < 1) die("no server");
  if (o.count && g_nservers > 1) die("-c takes one server");
  /* Latency: one session per server. Throughput: o.sessions per server. */
  int per = sync ? 1 : o.sessions;
  int n = g_nservers * per;
  int depth = sync ? 1 : o.depth;
  struct sess *ss = calloc((size_t)n, sizeof *ss);
  if (!ss) die("out of memory");
  g_data = malloc((size_t)o.size + 1);
  memset(g_data, 'x', (size_t)o.size);
  for (int k = 0; k < MAX_SERVERS; k++)
    pthread_mutex_init(&g_park_mu[k], NULL);

  /* With -A the sessions are created there first and re-attached through
   * the servers: through zkwarden a new session is a new incarnation of its
   * identity, which supersedes (fences) the previous one. Otherwise they
   * connect one after the other, as a JobManager opens one at a time. */
  clientid_t *ids = o.attach_from ? create_sessions(n) : NULL;
  uint64_t c0 = now_ns();
  for (int i = 0; i < n; i++) {
    ss[i].server = i / per;
    const char *server = g_servers[ss[i].server];
    if (connect_session(&ss[i], i, server, ids ? &ids[i] : NULL) != 0)
      die("zookeeper_init %s: %s", server, strerror(errno));
    if (!wait_connected(&ss[i], 1, 15000)) die("session %d to %s not connected within 15 s", i, server);
  }
  double connect_ms = (double)(now_ns() - c0) / 1e6;
  setup(ss, n);
  for (int i = 0; i < n; i++) {
    ss[i].slots = calloc((size_t)depth, sizeof *ss[i].slots);
    if (!ss[i].slots) die("out of memory");
    for (int j = 0; j < depth; j++)
      ss[i].slots[j].s = &ss[i];
  }

  double measured[MAX_SERVERS] = {0};
  atomic_store(&g_phase, o.count ? PHASE_MEASURE : PHASE_WARMUP);
  if (sync) {
    uint64_t t_start = 0, t_end = 0;
    run_sync(ss, n, &t_start, &t_end);
    for (int k = 0; k < g_nservers; k++)
      measured[k] = (double)(t_end - t_start) / 1e9;
  } else {
    run_async(ss, n, depth, measured);
  }

  /* One result per server, its sessions merged. */
  struct hist *h = malloc(sizeof *h);
  uint64_t any_errors = 0;
  for (int k = 0; k < g_nservers; k++) {
    uint64_t errors = 0, total = 0;
    memset(h, 0, sizeof *h);
    for (int i = k * per; i < (k + 1) * per; i++) {
      hist_merge(h, &ss[i].hist);
      errors += atomic_load(&ss[i].errors) + (atomic_load(&ss[i].inflight) > 0);
      total += atomic_load(&ss[i].total);
    }
    print_result(h, k < nlabels ? g_labels[k] : "", g_servers[k], per, measured[k], errors, total,
                 connect_ms);
    any_errors += errors;
  }
  teardown(ss, n);
  for (int i = 0; i < n; i++)
    zookeeper_close(ss[i].zh);
  return any_errors ? 1 : 0;
}

/* ---- idle sessions over raw sockets ---- */

struct raw {
  int fd;
  int64_t sid;
  uint8_t passwd[16];
  int state; /* 0 unused, 1 connecting, 2 handshake sent, 3 established, 4 failed, 5 lost */
  uint8_t in[64];
  int inlen;
};

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads and drops what an established session receives (ping replies);
 * a session whose connection closes is counted as lost. */
static int g_lost;
static void drain(struct raw *c) {
  uint8_t sink[256];
  ssize_t got;
  while ((got = read(c->fd, sink, sizeof sink)) > 0) {
  }
  if (got == 0 || (got < 0 && errno != EAGAIN)) {
    c->state = 5;
    g_lost++;
  }
}

static void parse_addr(const char *hostport, struct sockaddr_in *sa) {
  char host[128];
  const char *colon = strrchr(hostport, ':');
  if (!colon || (size_t)(colon - hostport) >= sizeof host) die("bad server %s", hostport);
  memcpy(host, hostport, (size_t)(colon - hostport));
  host[colon - hostport] = 0;
  *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) die("bad address %s", host);
}

/* Opens a session on each of r[0..n): a ConnectRequest with r[i].sid and
 * r[i].passwd (0: a new session), at most o.concurrency handshakes at a time.
 * Established sessions get their id and password from the reply. Returns the
 * number established; *failed gets the others. */
static int open_all(struct raw *r, int n, const struct sockaddr_in *sa, int ep, int *failed) {
  int next = 0, pending = 0, established = 0;
  uint64_t deadline = now_ns() + 120000000000ull;
  struct epoll_event evs[256];
  *failed = 0;
  while (established + *failed < n && now_ns() < deadline) {
    while (next < n && pending < o.concurrency) {
      struct raw *c = &r[next];
      c->inlen = 0;
      c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c->fd < 0) die("socket: %s", strerror(errno));
      int one = 1;
      setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (connect(c->fd, (const struct sockaddr *)sa, sizeof *sa) != 0 && errno != EINPROGRESS) {
        c->state = 4, (*failed)++, next++;
        close(c->fd);
        c->fd = -1;
        continue;
      }
      c->state = 1;
      struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.u32 = (uint32_t)next};
      epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
      next++, pending++;
    }
    int k = epoll_wait(ep, evs, 256, 100);
    for (int i = 0; i < k; i++) {
      struct raw *c = &r[evs[i].data.u32];
      if (c->state == 1 && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        /* ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId,
         * passwd (16 bytes), readOnly. */
        uint8_t hello[4 + 45] = {0};
        put32(hello, 45);
        put32(hello + 4 + 12, (uint32_t)o.timeout_ms);
        put32(hello + 4 + 16, (uint32_t)((uint64_t)c->sid >> 32));
        put32(hello + 4 + 20, (uint32_t)c->sid);
        put32(hello + 4 + 24, 16);
        memcpy(hello + 4 + 28, c->passwd, 16);
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err || write(c->fd, hello, sizeof hello) != (ssize_t)sizeof hello) {
          c->state = 4, (*failed)++, pending--;
          epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
          continue;
        }
        c->state = 2;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[i].data.u32};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
      } else if (c->state == 2 && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
        ssize_t got = read(c->fd, c->in + c->inlen, sizeof c->in - (size_t)c->inlen);
        if (got <= 0) {
          if (got < 0 && errno == EAGAIN) continue;
          c->state = 4, (*failed)++, pending--;
          epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
          continue;
        }
        c->inlen += (int)got;
        /* ConnectResponse: length, protocolVersion, timeOut, sessionId, passwd. */
        if (c->inlen >= 4 + 36) {
          int32_t timeout = (int32_t)get32(c->in + 8);
          pending--;
          if (timeout > 0 && get32(c->in + 20) == 16) {
            c->state = 3, established++;
            c->sid = (int64_t)((uint64_t)get32(c->in + 12) << 32 | get32(c->in + 16));
            memcpy(c->passwd, c->in + 24, 16);
          } else {
            c->state = 4, (*failed)++;
          }
        }
      } else if (c->state == 3) {
        drain(c);
      }
    }
  }
  return established;
}

/* Creates n sessions on o.attach_from over raw sockets and closes the
 * sockets without closeSession: the sessions live on for their timeout. */
static clientid_t *create_sessions(int n) {
  struct sockaddr_in from;
  parse_addr(o.attach_from, &from);
  struct raw *r = calloc((size_t)n, sizeof *r);
  clientid_t *ids = calloc((size_t)n, sizeof *ids);
  int ep = epoll_create1(0), failed;
  if (!r || !ids || ep < 0) die("setup: %s", strerror(errno));
  if (open_all(r, n, &from, ep, &failed) != n) die("%d sessions not opened on %s", failed, o.attach_from);
  for (int i = 0; i < n; i++) {
    close(r[i].fd);
    ids[i].client_id = r[i].sid;
    memcpy(ids[i].passwd, r[i].passwd, sizeof ids[i].passwd);
  }
  close(ep);
  sleep_ms(200); /* lets the server close its side of those connections */
  free(r);
  return ids;
}

/* -W: o.watches exists requests with the watch flag per established
 * session, on missing paths (NONODE: an exist watch each). The replies are
 * drained with the ping replies. */
static void set_watches(struct raw *r, int n) {
  for (int i = 0; i < n; i++) {
    if (r[i].state != 3) continue;
    for (int w = 0; w < o.watches; w++) {
      char path[96];
      int plen = snprintf(path, sizeof path, "/flink/default/jobs/%016llx/leader/watch-%03d",
                          (unsigned long long)r[i].sid, w);
      uint8_t frame[4 + 8 + 4 + sizeof path + 1];
      int len = 8 + 4 + plen + 1;
      put32(frame, (uint32_t)len);
      put32(frame + 4, (uint32_t)(w + 1)); /* xid */
      put32(frame + 8, 3);                 /* exists */
      put32(frame + 12, (uint32_t)plen);
      memcpy(frame + 16, path, (size_t)plen);
      frame[16 + plen] = 1; /* watch */
      if (write(r[i].fd, frame, (size_t)(4 + len)) != 4 + len) r[i].state = 4;
    }
  }
}

static int run_idle(void) {
  int n = o.sessions;
  struct sockaddr_in sa, from;
  parse_addr(o.server, &sa);
  if (o.attach_from) parse_addr(o.attach_from, &from);

  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < (rlim_t)n + 64) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)n + 64) die("RLIMIT_NOFILE %lu is below %d sessions", rl.rlim_cur, n);
  }
  static const uint8_t ping[12] = {0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11};
  static const uint8_t bye[12] = {0, 0, 0, 8, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xf5};

  struct raw *r = calloc((size_t)n, sizeof *r);
  int ep = epoll_create1(0);
  if (!r || ep < 0) die("setup: %s", strerror(errno));
  int failed = 0;
  if (o.attach_from) {
    /* New sessions there, their sockets closed without closeSession: the
     * sessions live on (for their timeout) and are re-attached below. */
    int got = open_all(r, n, &from, ep, &failed);
    if (got != n) die("%d of %d sessions opened on %s", got, n, o.attach_from);
    for (int i = 0; i < n; i++) {
      epoll_ctl(ep, EPOLL_CTL_DEL, r[i].fd, NULL);
      close(r[i].fd);
      r[i].fd = -1;
    }
    sleep_ms(1000); /* lets the server close its side of those connections */
  }
  uint64_t t0 = now_ns();
  int established = open_all(r, n, &sa, ep, &failed);
  struct epoll_event evs[256];
  set_watches(r, n);
  double connect_s = (double)(now_ns() - t0) / 1e9;
  printf("{\"mode\":\"idle\",\"label\":\"%s\",\"server\":\"%s\",\"sessions\":%d,\"established\":%d,"
         "\"failed\":%d,\"connect_s\":%.3f}\n",
         o.label ? o.label : "", o.server, n, established, failed, connect_s);
  fflush(stdout);

  /* Hold until stdin closes; ping every third of the session timeout. */
  uint64_t next_ping = now_ns() + (uint64_t)o.timeout_ms * 1000000u / 3;
  struct pollfd pin = {.fd = 0, .events = POLLIN};
  for (;;) {
    if (poll(&pin, 1, 0) > 0) {
      char b[64];
      if (read(0, b, sizeof b) <= 0) break;
    }
    int k = epoll_wait(ep, evs, 256, 200);
    for (int i = 0; i < k; i++) {
      struct raw *c = &r[evs[i].data.u32];
      if (c->state == 3) {
        drain(c);
        if (c->state == 5) epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
      }
    }
    if (now_ns() >= next_ping) {
      for (int i = 0; i < n; i++)
        if (r[i].state == 3 && write(r[i].fd, ping, sizeof ping) < 0) r[i].state = 4;
      next_ping = now_ns() + (uint64_t)o.timeout_ms * 1000000u / 3;
    }
  }
  for (int i = 0; i < n; i++)
    if (r[i].state == 3 && write(r[i].fd, bye, sizeof bye) < 0) r[i].state = 4;
  sleep_ms(200);
  for (int i = 0; i < n; i++)
    if (r[i].fd > 0) close(r[i].fd);
  close(ep);
  printf("{\"mode\":\"idle_end\",\"label\":\"%s\",\"lost\":%d}\n", o.label ? o.label : "", g_lost);
  fflush(stdout);
  return established == n && !g_lost ? 0 : 1;
}

/* ---- getData over a raw socket, plaintext or TLS ---- */

struct rconn {
  int fd;
  SSL *ssl; /* NULL: plaintext */
  uint8_t in[65536];
  size_t inlen;
  int32_t xid;
  const char *name;
};

static void rwrite(struct rconn *c, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = c->ssl ? SSL_write(c->ssl, p, (int)n) : write(c->fd, p, n);
    if (w <= 0) die("%s: write failed", c->name);
    p += w, n -= (size_t)w;
  }
}

/* Reads more bytes into c->in. */
static void rread(struct rconn *c) {
  if (c->inlen == sizeof c->in) die("%s: frame too large", c->name);
  ssize_t got = c->ssl ? SSL_read(c->ssl, c->in + c->inlen, (int)(sizeof c->in - c->inlen))
                       : read(c->fd, c->in + c->inlen, sizeof c->in - c->inlen);
  if (got <= 0) die("%s: connection closed or read failed", c->name);
  c->inlen += (size_t)got;
}

/* Waits for one whole frame; returns its length (body after the 4 bytes).
 * The caller drops it with rconsume. */
static uint32_t rframe(struct rconn *c) {
  while (c->inlen < 4 || c->inlen < 4 + get32(c->in))
    rread(c);
  return get32(c->in);
}

static void rconsume(struct rconn *c, uint32_t len) {
  memmove(c->in, c->in + 4 + len, c->inlen - 4 - len);
  c->inlen -= 4 + len;
}

static size_t put_str(uint8_t *p, const char *s) {
  put32(p, (uint32_t)strlen(s));
  memcpy(p + 4, s, strlen(s));
  return 4 + strlen(s);
}

/* A request frame: xid, type, then the body. */
static void rrequest(struct rconn *c, int32_t type, const uint8_t *body, size_t n) {
  uint8_t f[512];
  put32(f, (uint32_t)(8 + n));
  put32(f + 4, (uint32_t)++c->xid);
  put32(f + 8, (uint32_t)type);
  memcpy(f + 12, body, n);
  rwrite(c, f, 12 + n);
}

static void rget(struct rconn *c) {
  uint8_t b[128];
  size_t n = put_str(b, SMALL_NODE);
  b[n++] = 0; /* no watch */
  rrequest(c, ZOO_GETDATA_OP, b, n);
}

/* Reply header: xid, zxid, err. */
static int32_t rreply_err(struct rconn *c) {
  uint32_t len = rframe(c);
  if (len < 16) die("%s: short reply", c->name);
  int32_t err = (int32_t)get32(c->in + 4 + 12);
  rconsume(c, len);
  return err;
}

static void rcreate(struct rconn *c, const char *path) {
  uint8_t b[256];
  size_t n = put_str(b, path);
  put32(b + n, (uint32_t)o.size), n += 4;
  memcpy(b + n, g_data, (size_t)o.size), n += (size_t)o.size;
  put32(b + n, 1), n += 4; /* one ACL: world:anyone, all */
  put32(b + n, 31), n += 4;
  n += put_str(b + n, "world");
  n += put_str(b + n, "anyone");
  put32(b + n, 0), n += 4; /* persistent */
  rrequest(c, ZOO_CREATE_OP, b, n);
  int32_t err = rreply_err(c);
  if (err != ZOK && err != ZNODEEXISTS) die("%s: create %s: %s", c->name, path, zerror(err));
}

static SSL_CTX *g_ssl_ctx;

static void ropen(struct rconn *c, const char *spec) {
  bool tls = strncmp(spec, "tls:", 4) == 0;
  const char *hostport = tls ? spec + 4 : spec;
  struct sockaddr_in sa;
  parse_addr(hostport, &sa);
  memset(c, 0, sizeof *c);
  c->name = spec;
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (c->fd < 0 || connect(c->fd, (const struct sockaddr *)&sa, sizeof sa) != 0)
    die("%s: connect: %s", spec, strerror(errno));
  if (tls) {
    if (!g_ssl_ctx) {
      g_ssl_ctx = SSL_CTX_new(TLS_client_method());
      SSL_CTX_set_min_proto_version(g_ssl_ctx, TLS1_2_VERSION);
      SSL_CTX_set_verify(g_ssl_ctx, SSL_VERIFY_PEER, NULL);
      if (!o.tls_ca || SSL_CTX_load_verify_locations(g_ssl_ctx, o.tls_ca, NULL) != 1) die("-K: no usable CA");
      if (o.tls_cert && (SSL_CTX_use_certificate_chain_file(g_ssl_ctx, o.tls_cert) != 1 ||
                         SSL_CTX_use_PrivateKey_file(g_ssl_ctx, o.tls_key, SSL_FILETYPE_PEM) != 1))
        die("-E/-Y: cannot load the client certificate");
    }
    c->ssl = SSL_new(g_ssl_ctx);
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)(strrchr(hostport, ':') - hostport), hostport);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
    SSL_set_fd(c->ssl, c->fd);
    if (SSL_connect(c->ssl) != 1) die("%s: TLS handshake failed", spec);
  }
  uint8_t hello[4 + 45] = {0}; /* a new session, as in open_all */
  put32(hello, 45);
  put32(hello + 4 + 12, (uint32_t)o.timeout_ms);
  put32(hello + 4 + 24, 16);
  rwrite(c, hello, sizeof hello);
  uint32_t len = rframe(c);
  if (len < 36 || (int32_t)get32(c->in + 8) <= 0) die("%s: no session", spec);
  rconsume(c, len);
}

static void rclose(struct rconn *c) {
  rrequest(c, ZOO_CLOSE_OP, NULL, 0);
  (void)rreply_err(c);
  if (c->ssl) SSL_free(c->ssl);
  close(c->fd);
}

static int run_raw(bool sync) {
  g_nservers = split(o.server, g_servers);
  int nl = split(o.label, g_labels);
  struct rconn *cs = calloc((size_t)g_nservers, sizeof *cs);
  struct hist *hs = calloc((size_t)g_nservers, sizeof *hs);
  double *measured = calloc((size_t)g_nservers, sizeof *measured);
  uint64_t *errors = calloc((size_t)g_nservers, sizeof *errors);
  if (!cs || !hs || !measured || !errors) die("out of memory");
  for (int i = 0; i < g_nservers; i++)
    ropen(&cs[i], g_servers[i]);
  rcreate(&cs[0], ROOT);
  rcreate(&cs[0], SMALL_NODE);
  uint64_t t_warm = now_ns() + (uint64_t)(o.warmup * 1e9);
  if (sync) {
    /* One request at a time, the servers in turn. */
    uint64_t t_start = 0, t_stop = 0;
    for (;;) {
      uint64_t now = now_ns();
      if (!t_start && now >= t_warm) t_start = now, t_stop = now + (uint64_t)(o.seconds * 1e9);
      if (t_start && now >= t_stop) break;
      for (int i = 0; i < g_nservers; i++) {
        uint64_t t0 = now_ns();
        rget(&cs[i]);
        if (rreply_err(&cs[i]) != ZOK) errors[i]++;
        if (t_start) hist_add(&hs[i], now_ns() - t0);
      }
    }
    for (int i = 0; i < g_nservers; i++)
      measured[i] = (double)(t_stop - t_start) / 1e9;
  } else {
    /* o.depth in flight on the active server; turns of o.slice_ms. */
    for (int k = 0;; k = (k + 1) % g_nservers) {
      if (now_ns() >= t_warm && k == 0 && measured[g_nservers - 1] >= o.seconds) break;
      struct rconn *c = &cs[k];
      bool measure = now_ns() >= t_warm;
      uint64_t *t0 = calloc((size_t)o.depth, sizeof *t0);
      uint64_t ts = now_ns(), t_end = ts + (uint64_t)o.slice_ms * 1000000u;
      int32_t first = c->xid + 1;
      for (int j = 0; j < o.depth; j++) {
        t0[j] = now_ns();
        rget(c);
      }
      int inflight = o.depth;
      while (inflight) {
        rframe(c);
        int32_t xid = (int32_t)get32(c->in + 4);
        int slot = (int)((xid - first) % o.depth);
        uint64_t t = now_ns();
        if (measure) hist_add(&hs[k], t - t0[slot]);
        if (rreply_err(c) != ZOK) errors[k]++;
        inflight--;
        if (t < t_end) {
          t0[slot] = now_ns();
          rget(c);
          inflight++;
        }
      }
      if (measure) measured[k] += (double)(now_ns() - ts) / 1e9;
      free(t0);
    }
  }
  int any = 0;
  for (int i = 0; i < g_nservers; i++) {
    print_result(&hs[i], i < nl ? g_labels[i] : g_servers[i], g_servers[i], 1, measured[i], errors[i],
                 hs[i].count, 0);
    any |= errors[i] != 0;
    rclose(&cs[i]);
  }
  return any;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: zkw_bench_load latency|throughput|idle -s host:port[,host:port...] [-o get|set|create|flink]\n"
      "       [-n sessions] [-d depth] [-t seconds] [-w warmup-seconds] [-c count] [-z size]\n"
      "       [-T session-timeout-ms] [-C concurrency] [-S slice-ms] [-A attach-from] [-W watches] [-l "
      "label[,label...]]\n"
      "       zkw_bench_load raw-latency|raw-throughput -s [tls:]host:port[,...] [-K ca] [-E cert -Y key]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  o.mode = argv[1];
  optind = 2;
  int c;
  while ((c = getopt(argc, argv, "s:o:n:d:t:w:c:z:T:C:S:A:l:K:E:Y:W:")) != -1) {
    switch (c) {
    case 's':
      o.server = optarg;
      break;
    case 'o': {
      int k = 0;
      while (k < 4 && strcmp(op_names[k], optarg) != 0)
        k++;
      if (k == 4) usage();
      o.op = (enum op_kind)k;
      break;
    }
    case 'n':
      o.sessions = atoi(optarg);
      break;
    case 'd':
      o.depth = atoi(optarg);
      break;
    case 't':
      o.seconds = atof(optarg);
      break;
    case 'w':
      o.warmup = atof(optarg);
      break;
    case 'c':
      o.count = atol(optarg);
      break;
    case 'z':
      o.size = atoi(optarg);
      break;
    case 'T':
      o.timeout_ms = atoi(optarg);
      break;
    case 'W':
      o.watches = atoi(optarg);
      break;
    case 'C':
      o.concurrency = atoi(optarg);
      break;
    case 'S':
      o.slice_ms = atoi(optarg);
      break;
    case 'A':
      o.attach_from = optarg;
      break;
    case 'l':
      o.label = optarg;
      break;
    case 'K':
      o.tls_ca = optarg;
      break;
    case 'E':
      o.tls_cert = optarg;
      break;
    case 'Y':
      o.tls_key = optarg;
      break;
    default:
      usage();
    }
  }
  if (!o.server || o.sessions < 1 || o.depth < 1 || o.size < 0 || o.size > 1000 || o.concurrency < 1 ||
      o.slice_ms < 1)
    usage();
  g_pid = (unsigned)getpid();
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  if (strcmp(o.mode, "latency") == 0) return run_zk(true);
  if (strcmp(o.mode, "throughput") == 0) return run_zk(false);
  if (strcmp(o.mode, "idle") == 0) return run_idle();
  if (strcmp(o.mode, "raw-latency") == 0 || strcmp(o.mode, "raw-throughput") == 0) {
    g_data = calloc(1, (size_t)o.size + 1);
    if (!g_data) die("out of memory");
    memset(g_data, 'x', (size_t)o.size);
    return run_raw(strcmp(o.mode, "raw-latency") == 0);
  }
  usage();
}
