/* zkw_zk.c: libzookeeper_mt completions and watchers handed to the loop,
 * and the judgement of an ACL against the session's own digest id. */
#include "zkw_fault.h"
#include "zkw_zk.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_log.h"
#include "zkw_tls.h"

enum op_kind { OP_RESULT, OP_EVENT };

struct zk_op {
  struct zk_op *next;
  struct zkw_zk *zk;
  enum op_kind kind;
  zkw_zk_cb cb;
  void *arg;
  const char *detail; /* the fault point's detail (NULL: the call's kind alone) */
  struct zkw_zk_result r;
  int ev_type, ev_state; /* OP_EVENT */
  char *ev_path;
};

struct zkw_zk {
  uv_loop_t *loop;
  uv_async_t async;
  pthread_mutex_t mu;
  struct zk_op *head, *tail; /* completed, waiting for the loop */
  zhandle_t *zh;
  char *hosts;
  char *auth;
  /* The digest id auth authenticates as (user:base64(sha1(user:password)),
   * as the server computes it), "" without auth. */
  char digest_id[300];
  int timeout_ms;
  zkw_zk_event_cb on_event;
  void *arg;
  bool connected;
  int64_t session_id;
  int negotiated;
  int outstanding; /* operations whose callback has not run yet (loop thread only) */
  bool closing;    /* close the uv handle once the last one has run */
  /* A session event whose copy could not be allocated on libzookeeper's
   * thread: its state, delivered by the next drain (0: none). */
  atomic_int lost_state;
  bool enforced_logged;
  /* The digest auth is in the handle's list (libzookeeper sends it again at
   * every reconnect): zoo_add_auth refuses while the handle is between
   * connections (ZINVALIDSTATE), so until it took it, it is added again at
   * the next connect, before the registry hears of it. */
  bool auth_added;
  clientid_t resume; /* the session to re-attach at the first open (a predecessor's: zkw_zk_open_resumed) */
  bool has_resume;
};

static void push(struct zkw_zk *zk, struct zk_op *op) {
  pthread_mutex_lock(&zk->mu);
  op->next = NULL;
  if (zk->tail)
    zk->tail->next = op;
  else
    zk->head = op;
  zk->tail = op;
  pthread_mutex_unlock(&zk->mu);
  uv_async_send(&zk->async);
}

static void free_result(struct zkw_zk_result *r) {
  free(r->data);
  for (int i = 0; i < r->child_count; i++)
    free(r->children[i]);
  free(r->children);
  free(r->path);
}

static int open_handle(struct zkw_zk *zk);

/* Adds the digest auth to the handle unless it has it: at open, and at each
 * connect until it took it. */
static void add_auth(struct zkw_zk *zk) {
  if (!zk->auth || zk->auth_added || !zk->zh) return;
  int rc = ZKW_FAULT_AT(zk, ZKW_FAULT_WHERE, "add-auth")
               ? zkw_fault_code(ZINVALIDSTATE)
               : zoo_add_auth(zk->zh, "digest", zk->auth, (int)strlen(zk->auth), NULL, NULL);
  /* ZMARSHALLINGERROR: in the list, its packet not sent now (it goes at the next connect). */
  zk->auth_added = rc == ZOK || rc == ZMARSHALLINGERROR;
  if (!zk->auth_added)
    zkw_log_info(
        "zkwarden's own session: digest auth not taken yet (%s): added again when the session connects",
        zerror(rc));
}

/* The server closed the session for want of authentication: say which
 * server setting does it and what zkwarden can do about it, once. */
static void enforced_auth(struct zkw_zk *zk) {
  if (zk->enforced_logged) return;
  zk->enforced_logged = true;
  zkw_log_error("the ensemble requires authentication (zookeeper.enforce.auth.enabled=true) with a scheme "
                "zkwarden's own session lacks (zookeeper.enforce.auth.schemes): %s; zkwarden's registry and "
                "fencing sessions can authenticate with digest only (ZKWARDEN_REGISTRY_AUTH), not SASL: add "
                "digest to zookeeper.enforce.auth.schemes, or run with ZKWARDEN_MODE=relay",
                zk->auth ? "digest was sent, so the server requires SASL"
                         : "ZKWARDEN_REGISTRY_AUTH is not set, so nothing was sent");
}

static void drain(uv_async_t *h) {
  struct zkw_zk *zk = h->data;
  pthread_mutex_lock(&zk->mu);
  struct zk_op *op = zk->head;
  zk->head = zk->tail = NULL;
  pthread_mutex_unlock(&zk->mu);
  static struct zk_op lost = {.kind = OP_EVENT};
  int lost_state = atomic_exchange(&zk->lost_state, 0);
  if (lost_state) {
    lost.ev_type = ZOO_SESSION_EVENT;
    lost.ev_state = lost_state;
    lost.next = op;
    op = &lost;
  }
  while (op) {
    struct zk_op *next = op->next;
    if (op->kind == OP_EVENT) {
      bool unheard = false;
      if (op->ev_type == ZOO_SESSION_EVENT) {
        zk->connected = op->ev_state == ZOO_CONNECTED_STATE;
        if (zk->connected) add_auth(zk); /* before anything the registry sends on this connection */
        if (zk->connected && zk->auth && !zk->auth_added) {
          /* The handle left that connection before the auth could be added:
           * the caller hears of the next one, which has it. */
          zk->connected = false;
          unheard = true;
        }
        if (zk->connected && zk->zh) {
          zk->session_id = zoo_client_id(zk->zh)->client_id;
          zk->negotiated = zoo_recv_timeout(zk->zh);
        }
      }
      if (zk->on_event && !unheard)
        zk->on_event(zk->arg, op->ev_type, op->ev_state, op->ev_path ? op->ev_path : "");
      if (op->ev_type == ZOO_SESSION_EVENT && op->ev_state == ZOO_EXPIRED_SESSION_STATE) {
        zkw_log_warn("registry session 0x%llx expired; opening a new one",
                     (unsigned long long)zk->session_id);
        zookeeper_close(zk->zh);
        zk->zh = NULL;
        if (open_handle(zk) != 0) zkw_log_error("cannot open a new registry session");
      }
      free(op->ev_path);
      if (op == &lost) {
        lost.next = NULL;
        op = next;
        continue;
      }
    } else {
      zk->outstanding--;
      if (ZKW_FAULT_AT(zk, ZKW_FAULT_WHERE, op->detail)) op->r.rc = zkw_fault_code(ZCONNECTIONLOSS);
      if (op->r.rc == ZSESSIONCLOSEDREQUIRESASLAUTH) enforced_auth(zk);
      op->cb(op->arg, &op->r);
      free_result(&op->r);
    }
    free(op);
    op = next;
  }
  if (zk->closing && zk->outstanding == 0 && !uv_is_closing((uv_handle_t *)&zk->async))
    uv_close((uv_handle_t *)&zk->async, NULL);
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh;
  struct zkw_zk *zk = ctx;
  struct zk_op *op = zkw_calloc(1, sizeof *op);
  if (!op) {
    /* Out of memory: a session event is not lost, its state waits for the
     * loop (a watch notification is: the registry re-checks at the next
     * session event and ownership check). */
    if (type == ZOO_SESSION_EVENT) {
      atomic_store(&zk->lost_state, state);
      uv_async_send(&zk->async);
    }
    return;
  }
  op->kind = OP_EVENT;
  op->ev_type = type;
  op->ev_state = state;
  op->ev_path = zkw_strdup(path ? path : "");
  push(zk, op);
}

/* The C client's own log lines (connection attempts, errors while the
 * ensemble is down): at debug, in zkwarden's format, never on raw stderr. */
void zkw_zk_client_log(const char *message) {
  zkw_log_debug("libzookeeper: %s", message);
}

static int open_handle(struct zkw_zk *zk) {
  zk->connected = false;
  zk->zh = zookeeper_init2(zk->hosts, watcher, zk->timeout_ms, zk->has_resume ? &zk->resume : NULL, zk, 0,
                           zkw_zk_client_log);
  memset(&zk->resume, 0, sizeof zk->resume); /* once: a session re-created later is a new one */
  zk->has_resume = false;
  if (!zk->zh) return -errno;
  /* The C client would resolve the host list again at every turn of its I/O
   * thread (getaddrinfo with a netlink dump: about 10 syscalls); resolve at
   * (re)connects only. tests/bench: a third of the syscalls per new session. */
  zoo_set_servers_resolution_delay(zk->zh, -1);
  zk->auth_added = false;
  add_auth(zk);
  return 0;
}

/* The digest id of user:password: what the server's digest provider makes
 * of it (user, then the base64 of the SHA-1 of the whole string). Returns
 * 0, or -1 (out is ""). */
static int digest_id(const char *auth, char *out, size_t cap) {
  out[0] = 0;
  const char *colon = strchr(auth, ':');
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  size_t user = colon ? (size_t)(colon - auth) : 0;
  if (!colon || !EVP_Digest(auth, strlen(auth), md, &n, EVP_sha1(), NULL) ||
      user + 2 + 4 * ((n + 2) / 3) > cap)
    return -1;
  memcpy(out, auth, user + 1);
  EVP_EncodeBlock((unsigned char *)out + user + 1, md, (int)n);
  return 0;
}

static void free_zk(struct zkw_zk *zk) {
  memset(zk->digest_id, 0, sizeof zk->digest_id);
  if (zk->auth) memset(zk->auth, 0, strlen(zk->auth));
  free(zk->auth);
  free(zk->hosts);
  free(zk);
}

static void opening_failed_closed(uv_handle_t *h) {
  struct zkw_zk *zk = h->data;
  pthread_mutex_destroy(&zk->mu);
  free_zk(zk);
}

int zkw_zk_open(struct zkw_zk **out, uv_loop_t *loop, const char *hosts, int timeout_ms, const char *auth,
                zkw_zk_event_cb on_event, void *arg) {
  return zkw_zk_open_resumed(out, loop, hosts, timeout_ms, auth, on_event, arg, 0, NULL);
}

bool zkw_zk_client_id(const struct zkw_zk *zk, int64_t *id, uint8_t passwd[16]) {
  const clientid_t *c = zk->zh && zk->connected ? zoo_client_id(zk->zh) : NULL;
  if (!c || !c->client_id) return false;
  *id = c->client_id;
  memcpy(passwd, c->passwd, 16);
  return true;
}

int zkw_zk_open_resumed(struct zkw_zk **out, uv_loop_t *loop, const char *hosts, int timeout_ms,
                        const char *auth, zkw_zk_event_cb on_event, void *arg, int64_t session,
                        const uint8_t *passwd) {
  struct zkw_zk *zk = zkw_calloc(1, sizeof *zk);
  if (!zk) return -ENOMEM;
  if (session && passwd) {
    zk->resume.client_id = session;
    memcpy(zk->resume.passwd, passwd, sizeof zk->resume.passwd);
    zk->has_resume = true;
  }
  zk->loop = loop;
  zk->hosts = zkw_strdup(zkw_tls_route(hosts)); /* the internal relay under TLS */
  zk->auth = auth ? zkw_strdup(auth) : NULL;
  if (!zk->hosts || (auth && !zk->auth)) {
    free_zk(zk);
    return -ENOMEM;
  }
  if (auth && digest_id(auth, zk->digest_id, sizeof zk->digest_id) != 0) {
    free_zk(zk);
    return -EINVAL; /* no user:password (the configuration checks it) */
  }
  zk->timeout_ms = timeout_ms;
  zk->on_event = on_event;
  zk->arg = arg;
  pthread_mutex_init(&zk->mu, NULL);
  zoo_set_debug_level(zkw_log_level >= ZKW_LOG_DEBUG ? ZOO_LOG_LEVEL_WARN : ZOO_LOG_LEVEL_ERROR);
  int rc = uv_async_init(loop, &zk->async, drain);
  if (rc) {
    pthread_mutex_destroy(&zk->mu);
    free_zk(zk);
    return rc;
  }
  zk->async.data = zk;
  rc = open_handle(zk);
  if (rc) {
    uv_close((uv_handle_t *)&zk->async, opening_failed_closed);
    return rc;
  }
  *out = zk;
  return 0;
}

void zkw_zk_close_handle(struct zkw_zk *zk) {
  /* Operations in flight still deliver their results (the session stays
   * open until zkw_zk_close), so their owners can let go of what they hold;
   * libzookeeper fails them within its session timeout if the ensemble is
   * gone. */
  zk->closing = true;
  if (zk->outstanding == 0 && !uv_is_closing((uv_handle_t *)&zk->async))
    uv_close((uv_handle_t *)&zk->async, NULL);
}

void zkw_zk_close(struct zkw_zk *zk) {
  if (zk->zh) zookeeper_close(zk->zh);
  zk->zh = NULL;
  struct zk_op *op = zk->head;
  while (op) {
    struct zk_op *next = op->next;
    if (op->kind == OP_EVENT)
      free(op->ev_path);
    else
      free_result(&op->r);
    free(op);
    op = next;
  }
  pthread_mutex_destroy(&zk->mu);
  free_zk(zk);
}

bool zkw_zk_connected(const struct zkw_zk *zk) {
  return zk->connected;
}
int64_t zkw_zk_session_id(const struct zkw_zk *zk) {
  return zk->session_id;
}
int zkw_zk_timeout(const struct zkw_zk *zk) {
  return zk->negotiated;
}
const char *zkw_zk_error(int rc) {
  return zerror(rc);
}

/* ---- completions (on libzookeeper's thread) ---- */

static struct zk_op *new_op(struct zkw_zk *zk, zkw_zk_cb cb, void *arg, const char *detail) {
  struct zk_op *op = zkw_calloc(1, sizeof *op);
  if (!op) return NULL;
  op->zk = zk;
  op->kind = OP_RESULT;
  op->cb = cb;
  op->arg = arg;
  op->detail = detail;
  op->r.data_len = -1;
  return op;
}

static void copy_stat(struct zk_op *op, const struct Stat *stat) {
  if (!stat) return;
  op->r.stat = *stat;
  op->r.has_stat = true;
}

static void data_done(int rc, const char *value, int len, const struct Stat *stat, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  op->r.rc = rc;
  if (rc == ZOK && value && len >= 0) {
    op->r.data = zkw_malloc((size_t)len + 1);
    if (op->r.data) {
      memcpy(op->r.data, value, (size_t)len);
      op->r.data[len] = 0;
      op->r.data_len = len;
    } else {
      op->r.rc = ZSYSTEMERROR;
    }
  }
  if (rc == ZOK) copy_stat(op, stat);
  push(op->zk, op);
}

static void stat_done(int rc, const struct Stat *stat, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  op->r.rc = rc;
  if (rc == ZOK) copy_stat(op, stat);
  push(op->zk, op);
}

static void void_done(int rc, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  op->r.rc = rc;
  push(op->zk, op);
}

static void string_done(int rc, const char *value, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  op->r.rc = rc;
  if (rc == ZOK && value) op->r.path = zkw_strdup(value);
  push(op->zk, op);
}

static void strings_done(int rc, const struct String_vector *v, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  op->r.rc = rc;
  if (rc == ZOK && v && v->count > 0) {
    op->r.children = zkw_calloc((size_t)v->count, sizeof(char *));
    if (!op->r.children) {
      op->r.rc = ZSYSTEMERROR;
    } else {
      for (int i = 0; i < v->count; i++) {
        op->r.children[i] = zkw_strdup(v->data[i]);
        if (!op->r.children[i]) {
          op->r.rc = ZSYSTEMERROR;
          break;
        }
        op->r.child_count = i + 1;
      }
    }
  }
  push(op->zk, op);
}

/* The ACL, judged against the session's digest id (zkw_zk_result.h). */
static void acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data) {
  struct zk_op *op = (struct zk_op *)data;
  const char *ours = op->zk->digest_id;
  op->r.rc = rc;
  if (rc == ZOK) copy_stat(op, stat);
  for (int i = 0; rc == ZOK && acl && i < acl->count; i++) {
    const struct ACL *a = &acl->data[i];
    const char *scheme = a->id.scheme ? a->id.scheme : "", *id = a->id.id ? a->id.id : "";
    if (strcmp(scheme, "world") == 0 && strcmp(id, "anyone") == 0) {
      op->r.acl_world = true;
      if (a->perms & ZOO_PERM_READ) op->r.acl_world_read = true;
    }
    if (ours[0] && strcmp(scheme, "digest") == 0 && strcmp(id, ours) == 0) {
      if ((a->perms & ZOO_PERM_ALL) == ZOO_PERM_ALL) op->r.acl_ours = true;
      continue;
    }
    op->r.acl_others |= a->perms;
    /* A digest id is user:hash of the password: the user alone is shown. */
    int idlen = strcmp(scheme, "digest") == 0 && strchr(id, ':') ? (int)(strchr(id, ':') - id) : 50;
    if ((a->perms & ~ZOO_PERM_READ) && !op->r.acl_other[0])
      snprintf(op->r.acl_other, sizeof op->r.acl_other, "%.40s:%.*s", scheme, idlen < 50 ? idlen : 50, id);
  }
  push(op->zk, op);
}

/* Runs the call; on an immediate error frees the op and returns the error.
 * detail names the fault points of the call and its completion apart from
 * the others of its kind (NULL: the call's kind alone). */
#define ZKW_ZK_CALL_AT(zk, cb, arg, detail, call)                                                            \
  do {                                                                                                       \
    if (!(zk)->zh || (zk)->closing) return ZINVALIDSTATE;                                                    \
    if (ZKW_FAULT_AT(zk, ZKW_FAULT_WHERE, (detail))) return zkw_fault_code(ZCONNECTIONLOSS);                 \
    struct zk_op *op = new_op((zk), (cb), (arg), (detail));                                                  \
    if (!op) return ZSYSTEMERROR;                                                                            \
    int rc_ = (call);                                                                                        \
    if (rc_ != ZOK)                                                                                          \
      free(op);                                                                                              \
    else                                                                                                     \
      (zk)->outstanding++;                                                                                   \
    return rc_;                                                                                              \
  } while (0)
#define ZKW_ZK_CALL(zk, cb, arg, call) ZKW_ZK_CALL_AT(zk, cb, arg, NULL, call)

int zkw_zk_get(struct zkw_zk *zk, const char *path, bool watch, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_aget(zk->zh, path, watch, data_done, op));
}

int zkw_zk_exists(struct zkw_zk *zk, const char *path, bool watch, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_aexists(zk->zh, path, watch, stat_done, op));
}

int zkw_zk_children(struct zkw_zk *zk, const char *path, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_aget_children(zk->zh, path, 0, strings_done, op));
}

int zkw_zk_create(struct zkw_zk *zk, const char *path, const char *data, int len, bool ephemeral,
                  zkw_zk_cb cb, void *arg) {
  const struct ACL_vector *acl = zk->auth ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE;
  ZKW_ZK_CALL(
      zk, cb, arg,
      zoo_acreate(zk->zh, path, data, len, acl, ephemeral ? ZOO_EPHEMERAL : ZOO_PERSISTENT, string_done, op));
}

int zkw_zk_set(struct zkw_zk *zk, const char *path, const char *data, int len, int version, zkw_zk_cb cb,
               void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_aset(zk->zh, path, data, len, version, stat_done, op));
}

int zkw_zk_delete(struct zkw_zk *zk, const char *path, int version, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_adelete(zk->zh, path, version, void_done, op));
}

int zkw_zk_get_acl(struct zkw_zk *zk, const char *path, const char *what, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL_AT(zk, cb, arg, what, zoo_aget_acl(zk->zh, path, acl_done, op));
}

int zkw_zk_set_acl_creator(struct zkw_zk *zk, const char *path, int aversion, bool digest_only,
                           const char *what, zkw_zk_cb cb, void *arg) {
  if (!zk->auth) return ZINVALIDACL; /* creator-only needs credentials */
  if (!digest_only)
    ZKW_ZK_CALL_AT(zk, cb, arg, what,
                   zoo_aset_acl(zk->zh, path, aversion, &ZOO_CREATOR_ALL_ACL, void_done, op));
  /* The digest id alone (serialized by the call: the vector may be ours). */
  struct ACL ours = {ZOO_PERM_ALL, {(char *)"digest", zk->digest_id}};
  struct ACL_vector acl = {1, &ours};
  ZKW_ZK_CALL_AT(zk, cb, arg, what, zoo_aset_acl(zk->zh, path, aversion, &acl, void_done, op));
}

int zkw_zk_sync(struct zkw_zk *zk, const char *path, zkw_zk_cb cb, void *arg) {
  ZKW_ZK_CALL(zk, cb, arg, zoo_async(zk->zh, path, string_done, op));
}
