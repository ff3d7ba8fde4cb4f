/* test_proxy.c: unit tests of the proxy's bookkeeping that needs no socket:
 * the pending-request ring and reply matching, the buffer pool, and the
 * configuration parser, and the size of a session (the memory figure of
 * docs/performance.md). Sessions themselves are tested end to end in tests/integration
 * against a real ZooKeeper. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_buf.h"
#include "zkw_config.h"
#include "zkw_ops.h"
#include "zkw_pending.h"
#include "zkw_session.h"
#include "zkw_wire.h"
#include "zkw_test.h"

/* ---- pending ---- */

static void test_pending_in_order(void) {
  struct zkw_pending p;
  int32_t op, expected;
  zkw_pending_init(&p);
  ASSERT_EQ(zkw_pending_push(&p, 1, ZKW_OP_CREATE), 0);
  ASSERT_EQ(zkw_pending_push(&p, 2, ZKW_OP_GET_DATA), 0);
  ASSERT_EQ(zkw_pending_push(&p, ZKW_XID_SET_WATCHES, ZKW_OP_SET_WATCHES), 0);
  ASSERT_EQ(zkw_pending_match(&p, 1, &op, &expected), 0);
  ASSERT_EQ(op, ZKW_OP_CREATE);
  ASSERT_EQ(zkw_pending_match(&p, 2, &op, &expected), 0);
  ASSERT_EQ(op, ZKW_OP_GET_DATA);
  ASSERT_EQ(zkw_pending_match(&p, ZKW_XID_SET_WATCHES, &op, &expected), 0);
  ASSERT_EQ(op, ZKW_OP_SET_WATCHES);
  ASSERT_EQ(p.count, 0);
  zkw_pending_free(&p);
}

/* zkwarden's own requests sit in the ring between the client's, are matched
 * by position and report their owner; the client's report none. */
static void test_pending_owned_entries(void) {
  struct zkw_pending p;
  int32_t op, expected;
  int mine;
  zkw_pending_init(&p);
  ASSERT_EQ(zkw_pending_push(&p, 7, ZKW_OP_DELETE), 0);
  ASSERT_EQ(zkw_pending_push_owned(&p, 0x7fff0000, ZKW_OP_GET_CHILDREN, &mine), 0);
  ASSERT_EQ(zkw_pending_push(&p, 8, ZKW_OP_GET_DATA), 0);
  ASSERT_TRUE(zkw_pending_has(&p, 0x7fff0000, 0, false));
  ASSERT_TRUE(zkw_pending_has(&p, 0, ZKW_OP_GET_DATA, true));
  ASSERT_TRUE(!zkw_pending_has(&p, 0, ZKW_OP_SASL, true));
  ASSERT_EQ(zkw_pending_match(&p, 0x7fff0000, &op, &expected), -1); /* not before the client's 7 */
  ASSERT_EQ(zkw_pending_match(&p, 7, &op, &expected), 0);
  ASSERT_TRUE(p.last_owned == NULL);
  ASSERT_EQ(zkw_pending_match(&p, 0x7fff0000, &op, &expected), 0);
  ASSERT_TRUE(p.last_owned == &mine);
  ASSERT_EQ(op, ZKW_OP_GET_CHILDREN);
  ASSERT_EQ(zkw_pending_match(&p, 8, &op, &expected), 0);
  ASSERT_TRUE(p.last_owned == NULL);
  ASSERT_TRUE(!zkw_pending_has(&p, 0x7fff0000, 0, false));
  zkw_pending_free(&p);
}

static void test_pending_out_of_order_is_refused(void) {
  struct zkw_pending p;
  int32_t op = -99, expected;
  zkw_pending_init(&p);
  ASSERT_EQ(zkw_pending_push(&p, 10, ZKW_OP_EXISTS), 0);
  ASSERT_EQ(zkw_pending_push(&p, 11, ZKW_OP_SET_DATA), 0);
  /* 11 answered before 10: a real server never does this; Java calls it "Xid out of order". */
  ASSERT_EQ(zkw_pending_match(&p, 11, &op, &expected), -1);
  ASSERT_EQ(expected, 10);
  ASSERT_EQ(op, -99);
  ASSERT_EQ(p.count, 2);
  /* A reply to an xid never sent. */
  ASSERT_EQ(zkw_pending_match(&p, 77, &op, &expected), -1);
  zkw_pending_free(&p);
  /* Nothing outstanding at all. */
  zkw_pending_init(&p);
  ASSERT_EQ(zkw_pending_match(&p, 1, &op, &expected), -1);
  ASSERT_EQ(expected, 0);
}

static void test_pending_auth_and_sasl_may_overtake(void) {
  struct zkw_pending p;
  int32_t op, expected;
  zkw_pending_init(&p);
  ASSERT_EQ(zkw_pending_push(&p, 5, ZKW_OP_GET_CHILDREN), 0);
  ASSERT_EQ(zkw_pending_push(&p, 6, ZKW_OP_SASL), 0);
  ASSERT_EQ(zkw_pending_push(&p, 7, ZKW_OP_EXISTS), 0);
  ASSERT_EQ(zkw_pending_push(&p, 8, ZKW_OP_AUTH), 0);
  ASSERT_EQ(zkw_pending_match(&p, 8, &op, &expected), 0);
  ASSERT_EQ(op, ZKW_OP_AUTH);
  ASSERT_EQ(zkw_pending_match(&p, 6, &op, &expected), 0);
  ASSERT_EQ(op, ZKW_OP_SASL);
  /* The others keep their order. */
  ASSERT_EQ(zkw_pending_match(&p, 7, &op, &expected), -1);
  ASSERT_EQ(zkw_pending_match(&p, 5, &op, &expected), 0);
  ASSERT_EQ(zkw_pending_match(&p, 7, &op, &expected), 0);
  ASSERT_EQ(p.count, 0);
  zkw_pending_free(&p);
}

static void test_pending_grows_and_wraps(void) {
  struct zkw_pending p;
  int32_t op, expected;
  zkw_pending_init(&p);
  int32_t next_push = 1, next_reply = 1;
  /* Interleave pushes and matches so the ring wraps, then grow it past the inline size. */
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < 5; i++) {
      ASSERT_EQ(zkw_pending_push(&p, next_push, next_push % 23), 0);
      next_push++;
    }
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(zkw_pending_match(&p, next_reply, &op, &expected), 0);
      ASSERT_EQ(op, next_reply % 23);
      next_reply++;
    }
  }
  ASSERT_EQ(p.count, 50);
  ASSERT_TRUE(p.cap >= 50);
  ASSERT_EQ(zkw_pending_at(&p, 0).xid, next_reply);
  while (p.count) {
    ASSERT_EQ(zkw_pending_match(&p, next_reply, &op, &expected), 0);
    next_reply++;
  }
  ASSERT_EQ(next_reply, next_push);
  zkw_pending_free(&p);
}

/* ---- buffers ---- */

static void test_buf_pool_reuses_chunks(void) {
  struct zkw_buf a = {0}, b = {0};
  zkw_buf_pool_drain();
  ASSERT_EQ(zkw_buf_append(&a, "hello", 5), 0);
  ASSERT_EQ(a.cap, ZKW_BUF_CHUNK);
  uint8_t *chunk = a.data;
  zkw_buf_consume(&a, 2);
  ASSERT_MEMEQ(a.data, a.len, "llo", 3);
  zkw_buf_consume(&a, 3); /* empties: memory goes back to the pool */
  ASSERT_TRUE(a.data == NULL);
  ASSERT_EQ(zkw_buf_pool_idle(), 1);
  ASSERT_EQ(zkw_buf_reserve(&b, 100), 0);
  ASSERT_TRUE(b.data == chunk);
  ASSERT_EQ(zkw_buf_pool_idle(), 0);
  zkw_buf_release(&b);
  zkw_buf_pool_drain();
}

static void test_buf_grows_for_big_frames(void) {
  struct zkw_buf a = {0};
  uint8_t *big = malloc(100000);
  ASSERT_TRUE(big != NULL);
  for (size_t i = 0; i < 100000; i++)
    big[i] = (uint8_t)i;
  ASSERT_EQ(zkw_buf_append(&a, big, 1000), 0);
  ASSERT_EQ(zkw_buf_append(&a, big + 1000, 99000), 0);
  ASSERT_TRUE(a.cap >= 100000);
  ASSERT_MEMEQ(a.data, a.len, big, 100000);
  size_t idle = zkw_buf_pool_idle();
  zkw_buf_release(&a); /* not a chunk: freed, not pooled */
  ASSERT_EQ(zkw_buf_pool_idle(), idle);
  free(big);
  zkw_buf_pool_drain();
}

/* ---- config ---- */

static const char *fake_env[16][2];
static const char *fake_getenv(const char *name) {
  for (int i = 0; i < 16 && fake_env[i][0]; i++)
    if (strcmp(fake_env[i][0], name) == 0) return fake_env[i][1];
  return NULL;
}
static void set_env(int n, ...) {
  va_list ap;
  memset(fake_env, 0, sizeof fake_env);
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    fake_env[i][0] = va_arg(ap, const char *);
    fake_env[i][1] = va_arg(ap, const char *);
  }
  va_end(ap);
}

static void test_config_defaults(void) {
  struct zkw_config cfg;
  char err[256] = "";
  set_env(1, "ZKWARDEN_UPSTREAM", "zk-0.zk:2181,127.0.0.2:2182,[::1]:2183");
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_EQ(cfg.upstream_count, 3);
  ASSERT_STREQ(cfg.upstream[0].host, "zk-0.zk");
  ASSERT_STREQ(cfg.upstream[0].port, "2181");
  ASSERT_STREQ(cfg.upstream[2].host, "::1");
  ASSERT_STREQ(cfg.upstream[2].port, "2183");
  ASSERT_EQ(cfg.max_frame, 1048575);
  ASSERT_EQ(cfg.connect_timeout_ms, 2000);
  ASSERT_EQ(cfg.log_level, ZKW_LOG_INFO);
  ASSERT_EQ(cfg.listen.ss_family, AF_INET);
  ASSERT_STREQ(cfg.raw_listen, "127.0.0.1:2181");
}

static void expect_config_error(const char *var, const char *val, const char *needle) {
  struct zkw_config cfg;
  char err[256] = "";
  if (strcmp(var, "ZKWARDEN_UPSTREAM") == 0)
    set_env(1, var, val);
  else
    set_env(2, "ZKWARDEN_UPSTREAM", "127.0.0.1:2181", var, val);
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), -1);
  ASSERT_TRUE(strstr(err, var) != NULL);
  ASSERT_TRUE(strstr(err, val) != NULL);
  if (!strstr(err, needle)) {
    fprintf(stderr, "    message: %s\n    wanted:  %s\n", err, needle);
    ASSERT_TRUE(0);
  }
}

static void test_config_errors_name_variable_value_and_rule(void) {
  struct zkw_config cfg;
  char err[256] = "";
  set_env(0);
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), -1);
  ASSERT_TRUE(strstr(err, "ZKWARDEN_UPSTREAM is not set") != NULL);

  expect_config_error("ZKWARDEN_UPSTREAM", "localhost", "host:port");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_UPSTREAM", "a:2181,,b:2181", "host:port");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_UPSTREAM", "a:70000", "port 1-65535");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_LISTEN", "localhost:2181", "numeric ip:port");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_MAX_FRAME", "4", "from 8 to");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_MAX_FRAME", "1M", "an integer");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_CONNECT_TIMEOUT_MS", "-5", "from 1 to 600000");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_LOG_LEVEL", "verbose", "error, warn, info, debug");
  ASSERT_OK_SO_FAR();
  expect_config_error("ZKWARDEN_LOG_FORMAT", "xml", "text or json");
  ASSERT_OK_SO_FAR();
  /* More operator trees than a scope keeps beside the learned ones: refused
   * at start, not dropped later. */
  expect_config_error("ZKWARDEN_SWEEP_TREES",
                      "/flink/t1,/flink/t2,/flink/t3,/flink/t4,/flink/t5,/flink/t6,"
                      "/flink/t7,/flink/t8,/flink/t9",
                      "at most 8 trees");
  ASSERT_OK_SO_FAR();
  set_env(2, "ZKWARDEN_UPSTREAM", "127.0.0.1:2181", "ZKWARDEN_SWEEP_TREES",
          "/flink/t1,/flink/t2,/flink/t3,/flink/t4,/flink/t5,/flink/t6,/flink/t7,/flink/t8");
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_EQ(cfg.sweep_trees.count, 8);
}

static void test_config_values(void) {
  struct zkw_config cfg;
  char err[256] = "";
  set_env(5, "ZKWARDEN_UPSTREAM", "127.0.0.1:1", "ZKWARDEN_LISTEN", "[::1]:3000", "ZKWARDEN_MAX_FRAME",
          "2048", "ZKWARDEN_LOG_LEVEL", "debug", "ZKWARDEN_LOG_FORMAT", "json");
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_EQ(cfg.listen.ss_family, AF_INET6);
  ASSERT_EQ(cfg.max_frame, 2048);
  ASSERT_EQ(cfg.log_level, ZKW_LOG_DEBUG);
  ASSERT_EQ(cfg.log_format, ZKW_LOG_JSON);
}

/* ---- memory ---- */

/* An idle session is this struct and nothing else (buffers come from the
 * pool only while bytes are in flight). docs/performance.md quotes the printed size;
 * the bound is DESIGN.md's target of 16 KiB per idle session, with room. */
static void test_session_struct_size(void) {
  printf("sizeof(struct zkw_session) = %zu bytes\n", sizeof(struct zkw_session));
  ASSERT_TRUE(sizeof(struct zkw_session) < 4096);
}

int main(void) {
  RUN(test_session_struct_size);
  RUN(test_pending_in_order);
  RUN(test_pending_out_of_order_is_refused);
  RUN(test_pending_owned_entries);
  RUN(test_pending_auth_and_sasl_may_overtake);
  RUN(test_pending_grows_and_wraps);
  RUN(test_buf_pool_reuses_chunks);
  RUN(test_buf_grows_for_big_frames);
  RUN(test_config_defaults);
  RUN(test_config_errors_name_variable_value_and_rule);
  RUN(test_config_values);
  return zkw_test_summary("proxy");
}
