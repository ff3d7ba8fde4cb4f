/*
 * The C client (libzookeeper_mt, sync API) side of the integration suite.
 *
 *   zkw_cclient_workload workload  <host:port> <root> <other host:port>
 *       Runs a fixed workload and prints one transcript line per step on
 *       stdout: "<label>\t<value>" (paths relative to <root> as "R", Stat
 *       reduced to its deterministic fields, errors as "!ZNAME"), then "DONE".
 *       A second handle (unauthenticated, and the trigger of watches)
 *       connects to <other host:port>: through zkwarden, its own sidecar.
 *
 *   zkw_cclient_workload reconnect <host:port> <root>
 *       For the reconnect test: opens a session (30 s), creates <root>/eph
 *       (ephemeral), sets a data and a child watch on <root>/watched and an
 *       exists watch on the missing <root>/later, prints "READY <sid>", then
 *       prints every event as it arrives ("EVENT <type> <state> <path>") and
 *       answers commands on stdin: "CHECK" prints "SID <sid>" and
 *       "EPH owner=self|other" (or "EPH !ZERROR"); "QUIT" closes the session,
 *       prints "BYE" and exits.
 *
 * Diagnostics go to stderr; the exit status is 0 unless the workload could
 * not run at all.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zookeeper/zookeeper.h>

#define PATH_MAX_LEN 512

static const char *g_root;
static size_t g_root_len;
static int64_t g_self_sid;
static pthread_mutex_t g_out_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------ output */

static void out(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out(const char *label, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&g_out_lock);
    fputs(label, stdout);
    fputc('\t', stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&g_out_lock);
}

static const char *rel(const char *path, char *buf, size_t len)
{
    if (path == NULL) {
        return "null";
    }
    if (strncmp(path, g_root, g_root_len) == 0) {
        snprintf(buf, len, "R%s", path + g_root_len);
        return buf;
    }
    return path;
}

static const char *err_name(int rc)
{
    switch (rc) {
    case ZOK: return "ZOK";
    case ZRUNTIMEINCONSISTENCY: return "ZRUNTIMEINCONSISTENCY";
    case ZCONNECTIONLOSS: return "ZCONNECTIONLOSS";
    case ZMARSHALLINGERROR: return "ZMARSHALLINGERROR";
    case ZUNIMPLEMENTED: return "ZUNIMPLEMENTED";
    case ZOPERATIONTIMEOUT: return "ZOPERATIONTIMEOUT";
    case ZBADARGUMENTS: return "ZBADARGUMENTS";
    case ZINVALIDSTATE: return "ZINVALIDSTATE";
    case ZNONODE: return "ZNONODE";
    case ZNOAUTH: return "ZNOAUTH";
    case ZBADVERSION: return "ZBADVERSION";
    case ZNOCHILDRENFOREPHEMERALS: return "ZNOCHILDRENFOREPHEMERALS";
    case ZNODEEXISTS: return "ZNODEEXISTS";
    case ZNOTEMPTY: return "ZNOTEMPTY";
    case ZSESSIONEXPIRED: return "ZSESSIONEXPIRED";
    case ZINVALIDACL: return "ZINVALIDACL";
    case ZAUTHFAILED: return "ZAUTHFAILED";
    case ZCLOSING: return "ZCLOSING";
    case ZNOWATCHER: return "ZNOWATCHER";
    default: return "ZUNKNOWN";
    }
}

static const char *type_name(int type)
{
    if (type == ZOO_CREATED_EVENT) return "CREATED";
    if (type == ZOO_DELETED_EVENT) return "DELETED";
    if (type == ZOO_CHANGED_EVENT) return "CHANGED";
    if (type == ZOO_CHILD_EVENT) return "CHILD";
    if (type == ZOO_SESSION_EVENT) return "SESSION";
    if (type == ZOO_NOTWATCHING_EVENT) return "NOTWATCHING";
    return "?";
}

static const char *state_name(int state)
{
    if (state == ZOO_CONNECTED_STATE) return "CONNECTED";
    if (state == ZOO_CONNECTING_STATE) return "CONNECTING";
    if (state == ZOO_ASSOCIATING_STATE) return "ASSOCIATING";
    if (state == ZOO_EXPIRED_SESSION_STATE) return "EXPIRED";
    if (state == ZOO_AUTH_FAILED_STATE) return "AUTH_FAILED";
    if (state == ZOO_READONLY_STATE) return "READONLY";
    if (state == ZOO_NOTCONNECTED_STATE) return "NOTCONNECTED";
    if (state == 0) return "CLOSED";
    return "?";
}

static const char *fmt_stat(const struct Stat *s, char *buf, size_t len)
{
    const char *eph = s->ephemeralOwner == 0 ? "none"
                      : (s->ephemeralOwner == g_self_sid ? "self" : "other");
    snprintf(buf, len, "v=%d cv=%d av=%d len=%d nc=%d eph=%s", s->version, s->cversion,
             s->aversion, s->dataLength, s->numChildren, eph);
    return buf;
}

/* ------------------------------------------------------------------ events */

/* Session state and watch events, collected for the workload to wait on. */
#define MAX_EVENTS 64
static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ev_cond = PTHREAD_COND_INITIALIZER;
static int g_state;
static char g_events[MAX_EVENTS][PATH_MAX_LEN + 64];
static int g_nevents;
static int g_print_events; /* reconnect mode: print events as they arrive */

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    char rbuf[PATH_MAX_LEN];
    (void)zh;
    (void)ctx;
    pthread_mutex_lock(&g_ev_lock);
    if (type == ZOO_SESSION_EVENT) {
        g_state = state;
    } else if (g_nevents < MAX_EVENTS) {
        snprintf(g_events[g_nevents++], sizeof g_events[0], "%s %s", type_name(type),
                 rel(path, rbuf, sizeof rbuf));
    }
    pthread_cond_broadcast(&g_ev_cond);
    pthread_mutex_unlock(&g_ev_lock);
    if (g_print_events) {
        pthread_mutex_lock(&g_out_lock);
        printf("EVENT %s %s %s\n", type_name(type), state_name(state),
               path && *path ? rel(path, rbuf, sizeof rbuf) : "-");
        fflush(stdout);
        pthread_mutex_unlock(&g_out_lock);
    }
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int wait_connected(int ms)
{
    struct timespec ts;
    int ok;
    deadline_in(&ts, ms);
    pthread_mutex_lock(&g_ev_lock);
    while (g_state != ZOO_CONNECTED_STATE) {
        if (pthread_cond_timedwait(&g_ev_cond, &g_ev_lock, &ts) == ETIMEDOUT) {
            break;
        }
    }
    ok = g_state == ZOO_CONNECTED_STATE;
    pthread_mutex_unlock(&g_ev_lock);
    return ok;
}

/* Waits until n watch events have arrived since `from`; prints them. */
static void out_events(const char *label, int from, int n)
{
    struct timespec ts;
    char line[4096];
    size_t used = 0;
    int i;
    deadline_in(&ts, 15000);
    pthread_mutex_lock(&g_ev_lock);
    while (g_nevents - from < n) {
        if (pthread_cond_timedwait(&g_ev_cond, &g_ev_lock, &ts) == ETIMEDOUT) {
            break;
        }
    }
    line[0] = '\0';
    for (i = from; i < g_nevents && used < sizeof line - 1; i++) {
        used += (size_t)snprintf(line + used, sizeof line - used, "%s[%s]", i > from ? " " : "",
                                 g_events[i]);
    }
    pthread_mutex_unlock(&g_ev_lock);
    out(label, "%s", line);
}

static int events_so_far(void)
{
    int n;
    pthread_mutex_lock(&g_ev_lock);
    n = g_nevents;
    pthread_mutex_unlock(&g_ev_lock);
    return n;
}

/* A separate watcher object for zoo_wget & co. */
static void obj_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    session_watcher(zh, type, state, path, ctx);
}

/* ------------------------------------------------------------------ auth */

static pthread_mutex_t g_auth_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_auth_cond = PTHREAD_COND_INITIALIZER;
static int g_auth_done;
static int g_auth_rc;

static void auth_done(int rc, const void *data)
{
    (void)data;
    pthread_mutex_lock(&g_auth_lock);
    g_auth_rc = rc;
    g_auth_done = 1;
    pthread_cond_broadcast(&g_auth_cond);
    pthread_mutex_unlock(&g_auth_lock);
}

static int add_auth_sync(zhandle_t *zh, const char *scheme, const char *cred)
{
    struct timespec ts;
    int rc;
    pthread_mutex_lock(&g_auth_lock);
    g_auth_done = 0;
    pthread_mutex_unlock(&g_auth_lock);
    rc = zoo_add_auth(zh, scheme, cred, (int)strlen(cred), auth_done, NULL);
    if (rc != ZOK) {
        return rc;
    }
    deadline_in(&ts, 15000);
    pthread_mutex_lock(&g_auth_lock);
    while (!g_auth_done) {
        if (pthread_cond_timedwait(&g_auth_cond, &g_auth_lock, &ts) == ETIMEDOUT) {
            break;
        }
    }
    rc = g_auth_done ? g_auth_rc : ZOPERATIONTIMEOUT;
    pthread_mutex_unlock(&g_auth_lock);
    return rc;
}

/* ------------------------------------------------------------------ helpers */

static zhandle_t *connect_to(const char *hostport, int timeout_ms)
{
    zhandle_t *zh = zookeeper_init(hostport, session_watcher, timeout_ms, NULL, NULL, 0);
    if (zh == NULL) {
        fprintf(stderr, "zookeeper_init(%s) failed: %s\n", hostport, strerror(errno));
        exit(2);
    }
    if (!wait_connected(20000)) {
        fprintf(stderr, "no connection to %s within 20 s\n", hostport);
        exit(2);
    }
    return zh;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void out_children(const char *label, int rc, struct String_vector *sv, const struct Stat *st)
{
    char line[8192], sbuf[128];
    size_t used = 0;
    int i;
    if (rc != ZOK) {
        out(label, "!%s", err_name(rc));
        return;
    }
    qsort(sv->data, (size_t)sv->count, sizeof sv->data[0], cmp_str);
    line[0] = '\0';
    for (i = 0; i < sv->count && used < sizeof line - 1; i++) {
        used += (size_t)snprintf(line + used, sizeof line - used, "%s%s", i ? "," : "",
                                 sv->data[i]);
    }
    if (st) {
        out(label, "[%s] %s", line, fmt_stat(st, sbuf, sizeof sbuf));
    } else {
        out(label, "[%s]", line);
    }
    deallocate_String_vector(sv);
}

static void do_create(zhandle_t *zh, const char *label, const char *path, const char *data,
                      const struct ACL_vector *acl, int mode, int with_stat)
{
    char buf[PATH_MAX_LEN], rbuf[PATH_MAX_LEN], sbuf[128];
    struct Stat st;
    int rc;
    memset(&st, 0, sizeof st);
    if (with_stat) {
        rc = zoo_create2(zh, path, data, data ? (int)strlen(data) : -1, acl, mode, buf,
                         sizeof buf, &st);
    } else {
        rc = zoo_create(zh, path, data, data ? (int)strlen(data) : -1, acl, mode, buf,
                        sizeof buf);
    }
    if (rc != ZOK) {
        out(label, "!%s", err_name(rc));
    } else if (with_stat) {
        out(label, "%s %s", rel(buf, rbuf, sizeof rbuf), fmt_stat(&st, sbuf, sizeof sbuf));
    } else {
        out(label, "%s", rel(buf, rbuf, sizeof rbuf));
    }
}

static void do_get(zhandle_t *zh, const char *label, const char *path)
{
    char buf[1024], sbuf[128];
    int len = (int)sizeof buf - 1;
    struct Stat st;
    int rc = zoo_get(zh, path, 0, buf, &len, &st);
    if (rc != ZOK) {
        out(label, "!%s", err_name(rc));
        return;
    }
    if (len < 0) {
        out(label, "null %s", fmt_stat(&st, sbuf, sizeof sbuf));
        return;
    }
    buf[len] = '\0';
    out(label, "'%s' %s", buf, fmt_stat(&st, sbuf, sizeof sbuf));
}

static void do_set(zhandle_t *zh, const char *label, const char *path, const char *data,
                   int version)
{
    char sbuf[128];
    struct Stat st;
    int rc = zoo_set2(zh, path, data, (int)strlen(data), version, &st);
    if (rc != ZOK) {
        out(label, "!%s", err_name(rc));
    } else {
        out(label, "%s", fmt_stat(&st, sbuf, sizeof sbuf));
    }
}

static void do_exists(zhandle_t *zh, const char *label, const char *path)
{
    char sbuf[128];
    struct Stat st;
    int rc = zoo_exists(zh, path, 0, &st);
    if (rc != ZOK) {
        out(label, "!%s", err_name(rc));
    } else {
        out(label, "%s", fmt_stat(&st, sbuf, sizeof sbuf));
    }
}

static void do_rc2(const char *label, int rc)
{
    if (rc == ZOK) {
        out(label, "ok");
    } else {
        out(label, "!%s", err_name(rc));
    }
}

static void out_multi(const char *label, int rc, int n, zoo_op_result_t *res, char bufs[][PATH_MAX_LEN])
{
    char line[4096], rbuf[PATH_MAX_LEN];
    size_t used = 0;
    int i;
    line[0] = '\0';
    for (i = 0; i < n && used < sizeof line - 1; i++) {
        if (res[i].err != ZOK) {
            used += (size_t)snprintf(line + used, sizeof line - used, "%s!%s", i ? " " : "",
                                     err_name(res[i].err));
        } else if (bufs && bufs[i][0]) {
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s", i ? " " : "",
                                     rel(bufs[i], rbuf, sizeof rbuf));
        } else {
            used += (size_t)snprintf(line + used, sizeof line - used, "%sok", i ? " " : "");
        }
    }
    out(label, "rc=%s %s", err_name(rc), line);
}

/* ------------------------------------------------------------------ workload */

static char *P(const char *suffix)
{
    static char bufs[8][PATH_MAX_LEN];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX_LEN, "%s%s", g_root, suffix);
    return b;
}

static int run_workload(const char *hostport, const char *other_hostport)
{
    zhandle_t *zh, *other;
    struct Stat st;
    struct String_vector sv;
    struct ACL_vector acl;
    char sbuf[128], rbuf[PATH_MAX_LEN];
    int rc, from;

    zh = connect_to(hostport, 10000);
    g_self_sid = zoo_client_id(zh)->client_id;

    /* create, create2, modes */
    do_create(zh, "create root", g_root, "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_create(zh, "create", P("/a"), "alpha", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_create(zh, "create exists", P("/a"), "x", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_create(zh, "create null data", P("/null"), NULL, &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_create(zh, "create2", P("/b"), "beta", &ZOO_OPEN_ACL_UNSAFE, 0, 1);
    do_create(zh, "create2 ephemeral", P("/e"), "eph", &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, 1);
    do_create(zh, "create2 sequential", P("/s-"), "", &ZOO_OPEN_ACL_UNSAFE, ZOO_SEQUENCE, 1);
    do_create(zh, "create ephemeral sequential", P("/es-"), "", &ZOO_OPEN_ACL_UNSAFE,
              ZOO_EPHEMERAL | ZOO_SEQUENCE, 0);
    do_create(zh, "create2 container", P("/ctr"), "c", &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, 1);
    {
        char buf[PATH_MAX_LEN];
        memset(&st, 0, sizeof st);
        rc = zoo_create2_ttl(zh, P("/ttl"), "t", 1, &ZOO_OPEN_ACL_UNSAFE,
                             ZOO_PERSISTENT_WITH_TTL, 60000, buf, sizeof buf, &st);
        if (rc == ZOK) {
            out("create2 ttl", "%s %s", rel(buf, rbuf, sizeof rbuf),
                fmt_stat(&st, sbuf, sizeof sbuf));
        } else {
            out("create2 ttl", "!%s", err_name(rc));
        }
    }
    do_create(zh, "create under ephemeral", P("/e/kid"), "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_create(zh, "create no parent", P("/no/such"), "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);

    /* get, set, exists, delete */
    do_get(zh, "get", P("/a"));
    do_get(zh, "get null data", P("/null"));
    do_set(zh, "set", P("/a"), "alpha2", 0);
    do_set(zh, "set bad version", P("/a"), "alpha3", 0);
    do_get(zh, "get after set", P("/a"));
    do_get(zh, "get missing", P("/missing"));
    do_exists(zh, "exists", P("/b"));
    do_exists(zh, "exists missing", P("/missing"));
    do_rc2("delete bad version", zoo_delete(zh, P("/b"), 3));
    do_rc2("delete", zoo_delete(zh, P("/b"), 0));
    do_rc2("delete missing", zoo_delete(zh, P("/b"), -1));
    do_create(zh, "create child", P("/a/kid"), "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    do_rc2("delete not empty", zoo_delete(zh, P("/a"), -1));

    /* children2 */
    rc = zoo_get_children2(zh, g_root, 0, &sv, &st);
    out_children("children2", rc, &sv, &st);
    rc = zoo_get_children2(zh, P("/missing"), 0, &sv, &st);
    out_children("children2 missing", rc, &sv, &st);
    rc = zoo_get_children(zh, P("/a"), 0, &sv);
    out_children("children", rc, &sv, NULL);

    /* multi */
    {
        zoo_op_t ops[5];
        zoo_op_result_t res[5];
        char bufs[5][PATH_MAX_LEN];
        struct Stat setst;
        memset(bufs, 0, sizeof bufs);
        zoo_create_op_init(&ops[0], P("/m1"), "m", 1, &ZOO_OPEN_ACL_UNSAFE, 0, bufs[0],
                           sizeof bufs[0]);
        zoo_set_op_init(&ops[1], P("/m1"), "mm", 2, 0, &setst);
        zoo_check_op_init(&ops[2], P("/m1"), 1);
        zoo_create_op_init(&ops[3], P("/ms-"), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_SEQUENCE, bufs[3],
                           sizeof bufs[3]);
        zoo_delete_op_init(&ops[4], P("/a/kid"), -1);
        rc = zoo_multi(zh, 5, ops, res);
        out_multi("multi commit", rc, 5, res, bufs);
        out("multi commit set stat", "%s", fmt_stat(&setst, sbuf, sizeof sbuf));

        memset(bufs, 0, sizeof bufs);
        zoo_create_op_init(&ops[0], P("/m2"), "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, bufs[0],
                           sizeof bufs[0]);
        zoo_check_op_init(&ops[1], P("/m1"), 5);
        zoo_delete_op_init(&ops[2], P("/m1"), -1);
        rc = zoo_multi(zh, 3, ops, res);
        out_multi("multi fail", rc, 3, res, NULL);
        do_exists(zh, "multi fail left nothing", P("/m2"));
        /* Not here: a ZOO_CONTAINER create inside zoo_multi. libzookeeper_mt
         * 3.8.0 aborts on its reply (deserialize_multi: Assertion `entry'
         * failed), directly against ZooKeeper as well. */
    }

    /* auth and ACLs */
    rc = add_auth_sync(zh, "digest", "carol:pw");
    do_rc2("add_auth digest", rc);
    do_create(zh, "create creator-all acl", P("/acl"), "secret", &ZOO_CREATOR_ALL_ACL, 0, 0);
    {
        struct ACL_vector got;
        rc = zoo_get_acl(zh, P("/acl"), &got, &st);
        if (rc == ZOK) {
            char line[1024];
            size_t used = 0;
            int i;
            line[0] = '\0';
            for (i = 0; i < got.count; i++) {
                used += (size_t)snprintf(line + used, sizeof line - used, "%s%d:%s:%s",
                                         i ? "," : "", got.data[i].perms,
                                         got.data[i].id.scheme, got.data[i].id.id);
            }
            out("get_acl", "[%s] %s", line, fmt_stat(&st, sbuf, sizeof sbuf));
            /* add world:anyone READ, keep the digest entry */
            acl.count = 2;
            acl.data = calloc(2, sizeof acl.data[0]);
            acl.data[0] = got.data[0];
            acl.data[1] = ZOO_READ_ACL_UNSAFE.data[0];
            do_rc2("set_acl bad version", zoo_set_acl(zh, P("/acl"), 5, &acl));
            do_rc2("set_acl", zoo_set_acl(zh, P("/acl"), 0, &acl));
            free(acl.data);
            deallocate_ACL_vector(&got);
        } else {
            out("get_acl", "!%s", err_name(rc));
        }
    }
    do_get(zh, "get acl node authed", P("/acl"));

    other = zookeeper_init(other_hostport, NULL, 10000, NULL, NULL, 0);
    {
        /* the unauthenticated handle: its errors, in order */
        int tries;
        for (tries = 0; tries < 200 && zoo_state(other) != ZOO_CONNECTED_STATE; tries++) {
            struct timespec d = {0, 50 * 1000000L};
            nanosleep(&d, NULL);
        }
    }
    do_get(other, "unauth get (world read)", P("/acl"));
    do_set(other, "unauth set", P("/acl"), "no", -1);
    /* delete is checked against the parent's ACL, which is open */
    do_rc2("unauth delete (open parent)", zoo_delete(other, P("/acl"), -1));

    /* watches: set by zh, triggered by the other handle */
    from = events_so_far();
    {
        char buf[64];
        int len = sizeof buf;
        rc = zoo_wget(zh, P("/a"), obj_watcher, NULL, buf, &len, &st);
        do_rc2("wget", rc);
        rc = zoo_wget_children2(zh, P("/a"), obj_watcher, NULL, &sv, &st);
        out_children("wget_children2", rc, &sv, &st);
        rc = zoo_wexists(zh, P("/later"), obj_watcher, NULL, &st);
        do_rc2("wexists missing", rc);
    }
    do_set(other, "other set", P("/a"), "changed", -1);
    out_events("data watch event", from, 1);
    from = events_so_far();
    do_create(other, "other create child", P("/a/k2"), "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    out_events("child watch event", from, 1);
    from = events_so_far();
    do_create(other, "other create later", P("/later"), "", &ZOO_OPEN_ACL_UNSAFE, 0, 0);
    out_events("exists watch event", from, 1);
    do_rc2("remove watches none", zoo_remove_watches(zh, P("/a"), ZWATCHTYPE_DATA, obj_watcher,
                                                     NULL, 0));

    zookeeper_close(other);
    /* ephemerals are still ours */
    do_exists(zh, "own ephemeral", P("/e"));
    zookeeper_close(zh);
    printf("DONE\n");
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------ reconnect */

static int run_reconnect(const char *hostport)
{
    zhandle_t *zh;
    struct Stat st;
    struct String_vector sv;
    char line[256], buf[64];
    int len = sizeof buf, rc;

    /* 30 s: the client may spend 2/3 of it on one connection attempt to a
     * server that is still starting, and must still find its session */
    zh = connect_to(hostport, 30000);
    g_self_sid = zoo_client_id(zh)->client_id;
    rc = zoo_create(zh, P("/eph"), "e", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
    if (rc != ZOK) {
        fprintf(stderr, "create eph: %s\n", err_name(rc));
        return 2;
    }
    if (zoo_wget(zh, P("/watched"), obj_watcher, NULL, buf, &len, &st) != ZOK ||
        zoo_wget_children2(zh, P("/watched"), obj_watcher, NULL, &sv, &st) != ZOK ||
        zoo_wexists(zh, P("/later"), obj_watcher, NULL, &st) != ZNONODE) {
        fprintf(stderr, "setting the watches failed\n");
        return 2;
    }
    deallocate_String_vector(&sv);
    g_print_events = 1;
    pthread_mutex_lock(&g_out_lock);
    printf("READY %" PRIx64 "\n", (uint64_t)g_self_sid);
    fflush(stdout);
    pthread_mutex_unlock(&g_out_lock);

    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "CHECK", 5) == 0) {
            rc = zoo_exists(zh, P("/eph"), 0, &st);
            pthread_mutex_lock(&g_out_lock);
            printf("SID %" PRIx64 "\n", (uint64_t)zoo_client_id(zh)->client_id);
            if (rc == ZOK) {
                printf("EPH owner=%s\n", st.ephemeralOwner == g_self_sid ? "self" : "other");
            } else {
                printf("EPH !%s\n", err_name(rc));
            }
            fflush(stdout);
            pthread_mutex_unlock(&g_out_lock);
        } else if (strncmp(line, "QUIT", 4) == 0) {
            break;
        }
    }
    g_print_events = 0;
    zookeeper_close(zh);
    printf("BYE\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "workload") == 0 && argc != 5)) {
        fprintf(stderr, "usage: %s workload <host:port> <root> <other host:port>\n"
                        "       %s reconnect <host:port> <root>\n", argv[0], argv[0]);
        return 2;
    }
    g_root = argv[3];
    g_root_len = strlen(g_root);
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    zoo_set_log_stream(stderr);
    if (strcmp(argv[1], "workload") == 0) {
        return run_workload(argv[2], argv[4]);
    }
    if (strcmp(argv[1], "reconnect") == 0) {
        return run_reconnect(argv[2]);
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
