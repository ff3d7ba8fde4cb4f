/* test_sidecar.c: the sidecar's verdicts (zkw_sidecar_hooks) on sessions
 * built with the relay's own constructors and no socket.
 *
 * The identity is switched off (as with ZKWARDEN_MODE=relay), so no registry
 * is needed; a session's incarnation is set by hand where a test needs one.
 * Checked: a plain client's lock create goes on untouched and raises no
 * barrier; an incarnation's lock create is tagged (REPLACE) and becomes the
 * barrier request, so is its delete of a lock; other requests raise none; a
 * request held for the fence stays held; getData of /zookeeper/config is
 * noted and its reply rewritten to name the sidecar, other replies are not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "zkw_config.h"
#include "zkw_encode.h"
#include "zkw_lockrule.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_ops.h"
#include "zkw_rewrite.h"
#include "zkw_server.h"
#include "zkw_session.h"
#include "zkw_sidecar.h"
#include "zkw_test.h"

#define LOCK "/flink/default/leader/rest_server/locks/123e4567-e89b-12d3-a456-426614174000"

static struct zkw_config cfg;
static struct zkw_server srv;
static struct zkw_identity identity = {.disabled = true};

static const char *env(const char *name) {
  if (strcmp(name, "ZKWARDEN_UPSTREAM") == 0) return "127.0.0.1:2181";
  if (strcmp(name, "ZKWARDEN_IDENTITY") == 0) return "jm-0";
  return NULL;
}

static struct zkw_session *new_session(uint64_t incarnation) {
  struct zkw_session *s = zkw_session_new(&srv);
  if (!s) abort();
  s->phase = ZKW_PHASE_ACTIVE;
  s->session_id = 0x100000abc;
  s->timeout = 20000;
  zkw_sc(s)->incarnation = incarnation;
  return s;
}

/* Encodes a request and hands its decoded view to the sidecar's on_request. */
static int request(struct zkw_session *s, int32_t xid, int32_t type, const char *path, int32_t flags,
                   struct zkw_buf *out) {
  static const uint8_t acl[] = {0,   0,   0,   1, 0, 0, 0, 31,  0,   0,   0,   5,   'w', 'o',
                                'r', 'l', 'd', 0, 0, 0, 6, 'a', 'n', 'y', 'o', 'n', 'e'};
  struct zkw_request req = {.xid = xid, .type = type};
  req.op.type = type;
  req.op.path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  req.op.data = (struct zkw_bytes){(const uint8_t *)"127.0.0.1", 9};
  req.op.acl = (struct zkw_vec){1, acl + 4, sizeof acl - 4};
  req.op.flags = flags;
  req.op.version = -1;
  uint8_t frame[1024];
  size_t len;
  struct zkw_request view;
  if (zkw_encode_request(frame, sizeof frame, &req, &len) != ZKW_OK ||
      zkw_decode_request(frame + 4, len - 4, &view) != ZKW_OK)
    return -1000;
  return zkw_sidecar_hooks.on_request(s, &view, frame, len, out);
}

static void test_plain_client_lock_create_untouched(void) {
  struct zkw_session *s = new_session(0);
  struct zkw_buf out = {0};
  ASSERT_EQ(request(s, 1, ZKW_OP_CREATE, LOCK, ZKW_CREATE_EPHEMERAL, &out), ZKW_FORWARD);
  ASSERT_EQ(out.len, 0);
  ASSERT_EQ(request(s, 2, ZKW_OP_DELETE, LOCK, 0, &out), ZKW_FORWARD);
}

/* A lock create is kept (its NODEEXISTS is reclaimed behind the reply,
 * nothing waits); a delete under the lock roots is a barrier (the requests
 * after it wait for its answer, which a reclaim may withhold). */
static void test_incarnation_lock_creates_are_kept_and_deletes_are_barriers(void) {
  struct zkw_session *s = new_session(3);
  struct zkw_buf out = {0};
  ASSERT_EQ(request(s, 5, ZKW_OP_CREATE, LOCK, ZKW_CREATE_EPHEMERAL, &out), ZKW_REPLACE | ZKW_KEEP);
  struct zkw_request tagged;
  ASSERT_EQ(zkw_decode_request(out.data + 4, out.len - 4, &tagged), ZKW_OK);
  ASSERT_EQ(tagged.xid, 5);
  struct zkw_tag tag;
  ASSERT_EQ(zkw_tag_parse(tagged.op.data, &tag), 0);
  ASSERT_EQ(tag.incarnation, 3);
  ASSERT_EQ(tag.session_id, 0x100000abc);
  zkw_buf_release(&out);
  ASSERT_EQ(request(s, 6, ZKW_OP_DELETE, LOCK, 0, &out), ZKW_FORWARD | ZKW_BARRIER);
  /* Not locks: a persistent create under the roots, a delete elsewhere. */
  ASSERT_EQ(request(s, 7, ZKW_OP_CREATE, "/flink/default/jobgraphs/j", 0, &out), ZKW_FORWARD);
  ASSERT_EQ(request(s, 8, ZKW_OP_DELETE, "/elsewhere/x", 0, &out), ZKW_FORWARD);
  ASSERT_EQ(request(s, 9, ZKW_OP_GET_DATA, LOCK, 0, &out), ZKW_FORWARD);
  ASSERT_EQ(out.len, 0);
}

static void test_held_request_stays_held(void) {
  struct zkw_session *s = new_session(0);
  struct zkw_buf out = {0};
  zkw_sc(s)->hold_jm = true;
  ASSERT_EQ(request(s, 1, ZKW_OP_CREATE, LOCK, ZKW_CREATE_EPHEMERAL, &out), ZKW_HOLD);
  ASSERT_EQ(request(s, 2, ZKW_OP_GET_DATA, "/a", 0, &out), ZKW_HOLD);
  zkw_sc(s)->hold_jm = false;
  ASSERT_EQ(request(s, 2, ZKW_OP_GET_DATA, "/a", 0, &out), ZKW_FORWARD);
}

/* A getData reply with data, decoded as the relay hands it over (marked: its
 * request was marked, ZKW_MARK). */
static int get_data_reply(struct zkw_session *s, int32_t xid, const char *data, bool marked,
                          struct zkw_buf *out) {
  struct zkw_reply rep = {.xid = xid, .zxid = 9};
  rep.op.type = ZKW_OP_GET_DATA;
  rep.op.data = (struct zkw_bytes){(const uint8_t *)data, (int32_t)strlen(data)};
  rep.op.has_stat = true;
  rep.op.stat.data_length = (int32_t)strlen(data);
  uint8_t frame[1024];
  size_t len;
  struct zkw_reply view;
  if (zkw_encode_reply(frame, sizeof frame, &rep, ZKW_OP_GET_DATA, &len) != ZKW_OK ||
      zkw_decode_reply(frame + 4, len - 4, ZKW_OP_GET_DATA, &view) != ZKW_OK)
    return -1000;
  return zkw_sidecar_hooks.on_reply(s, &view, ZKW_OP_GET_DATA, marked ? ZKW_REPLY_MARKED : 0u, out);
}

static void test_config_reply_names_the_sidecar(void) {
  static const char config[] = "server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\nversion=100000000";
  struct zkw_session *s = new_session(0);
  struct zkw_buf out = {0};
  ASSERT_EQ(get_data_reply(s, 11, config, false, &out), ZKW_FORWARD); /* not asked for as the config */
  /* Config reads are marked, each of them: the relay tells each reply. */
  ASSERT_EQ(request(s, 12, ZKW_OP_GET_DATA, ZKW_CONFIG_NODE, 0, &out), ZKW_FORWARD | ZKW_MARK);
  ASSERT_EQ(request(s, 13, ZKW_OP_GET_DATA, ZKW_CONFIG_NODE, 0, &out), ZKW_FORWARD | ZKW_MARK);
  ASSERT_EQ(request(s, 14, ZKW_OP_GET_DATA, "/zookeeper/configx", 0, &out), ZKW_FORWARD);
  ASSERT_EQ(get_data_reply(s, 12, config, true, &out), ZKW_REPLACE);
  struct zkw_reply rewritten;
  ASSERT_EQ(zkw_decode_reply(out.data + 4, out.len - 4, ZKW_OP_GET_DATA, &rewritten), ZKW_OK);
  ASSERT_TRUE(memmem(rewritten.op.data.p, (size_t)rewritten.op.data.len, srv.listen_name,
                     strlen(srv.listen_name)) != NULL);
  zkw_buf_release(&out);
  ASSERT_EQ(get_data_reply(s, 13, config, true, &out), ZKW_REPLACE); /* the second in flight too */
  zkw_buf_release(&out);
}

int main(void) {
  zkw_log_setup(ZKW_LOG_ERROR, ZKW_LOG_TEXT);
  zkw_metrics_init();
  char err[256];
  if (zkw_config_load(&cfg, env, err, sizeof err) != 0) {
    fprintf(stderr, "config: %s\n", err);
    return 1;
  }
  zkw_server_init(&srv, uv_default_loop(), &cfg, &zkw_sidecar_hooks, &identity);
  RUN(test_plain_client_lock_create_untouched);
  RUN(test_incarnation_lock_creates_are_kept_and_deletes_are_barriers);
  RUN(test_held_request_stays_held);
  RUN(test_config_reply_names_the_sidecar);
  return zkw_test_summary("sidecar");
}
