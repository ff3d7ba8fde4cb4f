/* test_identity_units.c: the pure parts of identities and reclaim: the lock
 * rule, the lock tag, the registry record, and the frame rewrites (tagging a
 * create, untagging getData, the /zookeeper/config rewrite), checked down to
 * the bytes that must not change. */
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_encode.h"
#include "zkw_lockrule.h"
#include "zkw_record.h"
#include "zkw_rewrite.h"
#include "zkw_test.h"

#define U "0f8fad5b-d9cb-469f-a165-70867728950e"

static struct zkw_bytes B(const char *s) {
  return (struct zkw_bytes){(const uint8_t *)s, (int32_t)strlen(s)};
}

static struct zkw_lock_roots
roots(const char *list) {
  struct zkw_lock_roots r;
  char why[200];
  if (zkw_lock_roots_parse(&r, list, why, sizeof why) != 0) r.count = -1;
  return r;
}

static void test_lock_rule_matches_flink_locks_only(void) {
  struct zkw_lock_roots r = roots("/flink");
  ASSERT_EQ(r.count, 1);
  /* Flink 1.7 and 1.15+ lock paths. */
  ASSERT_TRUE(zkw_is_lock_create(&r, 1, 1, B("/flink/c/jobgraphs/00000000000000000000000000000001/" U)));
  ASSERT_TRUE(zkw_is_lock_create(&r, 15, 1, B("/flink/c/jobs/j/checkpoints/0000000000000000007/locks/" U)));
  ASSERT_TRUE(zkw_is_lock_create(&r, 1, 1, B("/flink/" U)));
  /* Not locks: other flags, opcodes, names, roots. */
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 3, B("/flink/c/leader/latch/_c_" U "-latch-")));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 0, B("/flink/c/jobgraphs/j/" U)));
  ASSERT_TRUE(
      !zkw_is_lock_create(&r, 1, 5, B("/flink/c/jobgraphs/j/" U))); /* TTL: bit 0 set, not ephemeral */
  ASSERT_TRUE(!zkw_is_lock_create(&r, 19, 1, B("/flink/c/jobgraphs/j/" U)));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/flink/c/leader/dispatcher/connection_info")));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/flinkx/c/" U)));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/other/" U)));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/flink/c/0f8fad5b-d9cb-469f-a165-70867728950")));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/flink/c/0f8fad5bxd9cb-469f-a165-70867728950e")));
  ASSERT_TRUE(!zkw_is_lock_create(&r, 1, 1, B("/flink/c/" U "/x")));
  struct zkw_lock_roots two = roots("/a,/b/c");
  ASSERT_EQ(two.count, 2);
  ASSERT_TRUE(zkw_is_lock_create(&two, 1, 1, B("/b/c/d/" U)));
  ASSERT_TRUE(!zkw_is_lock_create(&two, 1, 1, B("/b/d/" U)));
  ASSERT_EQ(roots("flink").count, -1);
  ASSERT_EQ(roots("/flink/").count, -1);
  ASSERT_EQ(roots("/a,,/b").count, -1);
}

static void test_tag_round_trip(void) {
  uint8_t buf[512];
  long n = zkw_tag_write(buf, sizeof buf, "jm-0", 7, 0x100000882350003LL, B("127.0.0.1"));
  ASSERT_TRUE(n > 0);
  const char *want = "zkwarden-lock 1 identity=jm-0 incarnation=7 session=0x100000882350003\n127.0.0.1";
  ASSERT_MEMEQ(buf, (size_t)n, want, strlen(want));
  struct zkw_tag t;
  ASSERT_EQ(zkw_tag_parse((struct zkw_bytes){buf, (int32_t)n}, &t), 0);
  ASSERT_STREQ(t.identity, "jm-0");
  ASSERT_EQ(t.incarnation, 7);
  ASSERT_EQ(t.session_id, 0x100000882350003LL);
  ASSERT_MEMEQ(t.original.p, (size_t)t.original.len, "127.0.0.1", 9);
  /* Null and binary originals survive. */
  n = zkw_tag_write(buf, sizeof buf, "a", 1, 1, (struct zkw_bytes){NULL, -1});
  ASSERT_EQ(zkw_tag_parse((struct zkw_bytes){buf, (int32_t)n}, &t), 0);
  ASSERT_EQ(t.original.len, -1);
  const uint8_t bin[] = {0, '\n', 0xff, 'z'};
  n = zkw_tag_write(buf, sizeof buf, "a", 2, 1, (struct zkw_bytes){bin, 4});
  ASSERT_EQ(zkw_tag_parse((struct zkw_bytes){buf, (int32_t)n}, &t), 0);
  ASSERT_MEMEQ(t.original.p, (size_t)t.original.len, bin, 4);
  ASSERT_EQ(zkw_tag_write(buf, 20, "jm-0", 7, 1, B("x")), -1);
}

static void test_tag_rejects_what_is_not_a_tag(void) {
  struct zkw_tag t;
  const char *bad[] = {
      "127.0.0.1",
      "zkwarden-lock 1 identity=jm-0 incarnation=7 session=0x1", /* no newline */
      "zkwarden-lock 2 identity=jm-0 incarnation=7 session=0x1\n",
      "zkwarden-lock 1 identity= incarnation=7 session=0x1\n",
      "zkwarden-lock 1 identity=j m incarnation=7 session=0x1\n",
      "zkwarden-lock 1 identity=jm-0 incarnation=-7 session=0x1\n",
      "zkwarden-lock 1 identity=jm-0 incarnation=99999999999999999999999 session=0x1\n",
      "zkwarden-lock 1 identity=jm-0 incarnation=7 session=1\n",
      "zkwarden-lock 1 identity=jm-0 incarnation=7 session=0x1 extra\n",
      "zkwarden-lock 1 identity=jm-0 incarnation=7 session=0x1 null\nnot empty",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (zkw_tag_parse(B(bad[i]), &t) == 0) {
      fprintf(stderr, "    parsed: %s\n", bad[i]);
      ASSERT_TRUE(0);
    }
  }
  ASSERT_EQ(zkw_tag_parse((struct zkw_bytes){NULL, -1}, &t), -1);
}

static void test_record_round_trip_and_corruption(void) {
  struct zkw_record r = {.incarnation = 3, .session = 0x100000882350001LL, .timeout = 20000, .dead = 2};
  for (int i = 0; i < 16; i++)
    r.passwd[i] = (uint8_t)(i * 17);
  snprintf(r.instance, sizeof r.instance, "f994a67d-5014-475f-9936-0e53a6d1b4e4");
  char text[512];
  int n = zkw_record_format(&r, text, sizeof text);
  ASSERT_TRUE(n > 0);
  ASSERT_TRUE(strstr(text, "incarnation=3\n") && strstr(text, "session=0x100000882350001\n"));
  struct zkw_record back;
  ASSERT_EQ(zkw_record_parse(text, n, &back), 0);
  ASSERT_EQ(back.incarnation, 3);
  ASSERT_EQ(back.session, r.session);
  ASSERT_MEMEQ(back.passwd, 16, r.passwd, 16);
  ASSERT_EQ(back.timeout, 20000);
  ASSERT_EQ(back.dead, 2);
  ASSERT_STREQ(back.instance, r.instance);
  ASSERT_EQ(zkw_record_parse("", 0, &back), 0); /* an empty node: no record yet */
  ASSERT_EQ(back.incarnation, 0);
  ASSERT_EQ(zkw_record_parse("garbage", 7, &back), -1);
  text[n - 2] = 'x'; /* dead=x */
  ASSERT_EQ(zkw_record_parse(text, n, &back), -1);
  const char *missing = "zkwarden-registry 1\nincarnation=1\n";
  ASSERT_EQ(zkw_record_parse(missing, (int)strlen(missing), &back), -1);
  ASSERT_EQ(zkw_record_format(&r, text, 40), -1);
}

/* The dead-session list: kept across a round trip, bounded (the oldest
 * goes), absent from records written before it existed. */
static void test_record_dead_sessions(void) {
  const char *old =
      "zkwarden-registry 1\nincarnation=2\nsession=0x10\npasswd=000102030405060708090a0b0c0d0e0f\n"
      "timeout=20000\ninstance=x\ndead=1\n";
  struct zkw_record r;
  ASSERT_EQ(zkw_record_parse(old, (int)strlen(old), &r), 0); /* an older version's record */
  ASSERT_EQ(r.ndead, 0);
  ASSERT_TRUE(zkw_record_find_dead(&r, 0x10) == NULL);
  for (int i = 1; i <= ZKW_RECORD_DEAD_MAX + 2; i++) {
    struct zkw_dead_session d = {.session = 0x100000000000000LL + i,
                                 .incarnation = (uint64_t)i,
                                 .ended_ms = 1764775200000ULL + (uint64_t)i};
    ASSERT_TRUE(zkw_record_add_dead(&r, &d));
    ASSERT_TRUE(!zkw_record_add_dead(&r, &d)); /* kept once */
  }
  ASSERT_EQ(r.ndead, ZKW_RECORD_DEAD_MAX);
  ASSERT_TRUE(zkw_record_find_dead(&r, 0x100000000000001LL) == NULL); /* the oldest went */
  char text[1024];
  int n = zkw_record_format(&r, text, sizeof text);
  ASSERT_TRUE(n > 0);
  ASSERT_TRUE(strstr(text, "dead_sessions=0x100000000000003:3:1764775200003,") != NULL);
  struct zkw_record back;
  ASSERT_EQ(zkw_record_parse(text, n, &back), 0);
  ASSERT_EQ(back.ndead, ZKW_RECORD_DEAD_MAX);
  const struct zkw_dead_session *d = zkw_record_find_dead(&back, 0x10000000000000aLL);
  ASSERT_TRUE(d != NULL);
  ASSERT_EQ(d->incarnation, 10);
  ASSERT_EQ(d->ended_ms, 1764775200010ULL);
  ASSERT_EQ(back.dead, 1);
  const char *bad =
      "zkwarden-registry 1\nincarnation=2\nsession=0x10\npasswd=000102030405060708090a0b0c0d0e0f\n"
      "timeout=20000\ninstance=x\ndead_sessions=0x11:1\ndead=1\n";
  ASSERT_EQ(zkw_record_parse(bad, (int)strlen(bad), &back), -1);
  ASSERT_EQ(zkw_record_format(&r, text, 300), -1); /* too small: never cut short */
}

/* Builds a request frame with the codec's own encoder. */
static size_t create_frame(uint8_t *buf, size_t cap, int32_t type, const char *path, const char *data,
                           int32_t flags) {
  static const uint8_t acl[] = {0,   0,   0,   1, 0, 0, 0, 31,  0,   0,   0,   5,   'w', 'o',
                                'r', 'l', 'd', 0, 0, 0, 6, 'a', 'n', 'y', 'o', 'n', 'e'};
  struct zkw_request req = {.xid = 42, .type = type};
  req.op.type = type;
  req.op.path = B(path);
  req.op.data = B(data);
  req.op.acl = (struct zkw_vec){1, acl + 4, sizeof acl - 4};
  req.op.flags = flags;
  size_t len = 0;
  if (zkw_encode_request(buf, cap, &req, &len) != ZKW_OK) return 0;
  return len;
}

static void test_rewrite_tags_lock_creates_only(void) {
  struct zkw_lock_roots r = roots("/flink");
  struct zkw_tagger t = {&r, "jm-0", 4, 0x55};
  uint8_t frame[512];
  struct zkw_request req;
  struct zkw_buf out = {0};
  int locks;
  size_t n = create_frame(frame, sizeof frame, 15, "/flink/c/jobgraphs/j/" U, "127.0.0.1", 1);
  ASSERT_EQ(zkw_decode_request(frame + 4, n - 4, &req), ZKW_OK);
  ASSERT_EQ(zkw_rewrite_request(&req, &t, &out, &locks), 1);
  ASSERT_EQ(locks, 1);
  struct zkw_request tagged;
  ASSERT_EQ(zkw_frame_next(out.data, out.len, 8, 1 << 20, &n), ZKW_OK);
  ASSERT_EQ(n, out.len);
  ASSERT_EQ(zkw_decode_request(out.data + 4, out.len - 4, &tagged), ZKW_OK);
  ASSERT_EQ(tagged.xid, 42);
  ASSERT_EQ(tagged.type, 15);
  ASSERT_EQ(tagged.op.flags, 1);
  ASSERT_MEMEQ(tagged.op.path.p, (size_t)tagged.op.path.len, req.op.path.p, (size_t)req.op.path.len);
  ASSERT_MEMEQ(tagged.op.acl.p, tagged.op.acl.len, req.op.acl.p, req.op.acl.len);
  struct zkw_tag tag;
  ASSERT_EQ(zkw_tag_parse(tagged.op.data, &tag), 0);
  ASSERT_EQ(tag.incarnation, 4);
  ASSERT_EQ(tag.session_id, 0x55);
  ASSERT_MEMEQ(tag.original.p, (size_t)tag.original.len, "127.0.0.1", 9);
  zkw_buf_release(&out);
  /* A latch node passes unchanged. */
  n = create_frame(frame, sizeof frame, 15, "/flink/c/leader/latch/_c_" U "-latch-", "", 3);
  ASSERT_EQ(zkw_decode_request(frame + 4, n - 4, &req), ZKW_OK);
  ASSERT_EQ(zkw_rewrite_request(&req, &t, &out, &locks), 0);
  ASSERT_EQ(locks, 0);
}

/* A getData reply frame: xid 9, zxid 77, data, Stat with owner 0x55. */
static size_t get_data_reply(uint8_t *buf, size_t cap, struct zkw_bytes data) {
  struct zkw_reply rep = {.xid = 9, .zxid = 77, .err = 0};
  rep.op.type = ZKW_OP_GET_DATA;
  rep.op.data = data;
  rep.op.has_stat = true;
  rep.op.stat = (struct zkw_stat){.czxid = 5,
                                  .mzxid = 6,
                                  .ctime = 1,
                                  .mtime = 2,
                                  .version = 0,
                                  .cversion = 0,
                                  .aversion = 0,
                                  .ephemeral_owner = 0x55,
                                  .data_length = data.len,
                                  .num_children = 0,
                                  .pzxid = 5};
  size_t len = 0;
  if (zkw_encode_reply(buf, cap, &rep, ZKW_OP_GET_DATA, &len) != ZKW_OK) return 0;
  return len;
}

static void test_rewrite_untags_get_data(void) {
  uint8_t tagged[256], frame[512], want[512];
  long tl = zkw_tag_write(tagged, sizeof tagged, "jm-0", 1, 0x55, B("127.0.0.1"));
  size_t n = get_data_reply(frame, sizeof frame, (struct zkw_bytes){tagged, (int32_t)tl});
  size_t wn = get_data_reply(want, sizeof want, B("127.0.0.1"));
  struct zkw_reply rep;
  struct zkw_buf out = {0};
  ASSERT_EQ(zkw_decode_reply(frame + 4, n - 4, ZKW_OP_GET_DATA, &rep), ZKW_OK);
  ASSERT_EQ(zkw_rewrite_untag_reply(&rep, ZKW_OP_GET_DATA, &out), 1);
  /* Exactly the reply of an untagged node: xid, zxid and every Stat field kept. */
  ASSERT_MEMEQ(out.data, out.len, want, wn);
  zkw_buf_release(&out);
  ASSERT_EQ(zkw_decode_reply(want + 4, wn - 4, ZKW_OP_GET_DATA, &rep), ZKW_OK);
  ASSERT_EQ(zkw_rewrite_untag_reply(&rep, ZKW_OP_GET_DATA, &out), 0);
}

static void test_rewrite_config_names_the_sidecar(void) {
  const char *cfg = "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n"
                    "server.2=127.0.0.1:2889:3889:participant;0.0.0.0:2182\n"
                    "server.3=127.0.0.1:2890:3890:participant\n"
                    "version=100000000";
  const char *want = "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:9999\n"
                     "server.2=127.0.0.1:2889:3889:participant\n"
                     "server.3=127.0.0.1:2890:3890:participant\n"
                     "version=100000000";
  uint8_t frame[1024], wframe[1024];
  size_t n = get_data_reply(frame, sizeof frame, B(cfg));
  size_t wn = get_data_reply(wframe, sizeof wframe, B(want));
  struct zkw_reply rep;
  struct zkw_buf out = {0};
  ASSERT_EQ(zkw_decode_reply(frame + 4, n - 4, ZKW_OP_GET_DATA, &rep), ZKW_OK);
  ASSERT_EQ(zkw_rewrite_config_reply(&rep, "127.0.0.1:9999", &out), 1);
  ASSERT_MEMEQ(out.data, out.len, wframe, wn);
  zkw_buf_release(&out);
}

int main(void) {
  RUN(test_lock_rule_matches_flink_locks_only);
  RUN(test_tag_round_trip);
  RUN(test_tag_rejects_what_is_not_a_tag);
  RUN(test_record_round_trip_and_corruption);
  RUN(test_record_dead_sessions);
  RUN(test_rewrite_tags_lock_creates_only);
  RUN(test_rewrite_untags_get_data);
  RUN(test_rewrite_config_names_the_sidecar);
  return zkw_test_summary("identity");
}
