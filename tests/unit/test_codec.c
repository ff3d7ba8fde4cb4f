/* test_codec.c: unit tests of protocol/ (framing, handshake, every opcode in
 * both directions, multi, malformed input, encoders).
 *
 * Every fixture is built byte by byte with zkw_build.h, decoded and checked
 * field by field, re-encoded (must give the same bytes) and pushed through
 * zkw_frame_next in every way a socket could deliver it. With
 * `--write-corpus DIR` the binary instead writes every fixture (and the
 * malformed cases) as seed files for tests/fuzz. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "zkw_build.h"
#include "zkw_codec.h"
#include "zkw_encode.h"
#include "zkw_test.h"

#define PATH "/flink/ha/jobgraphs/locks/4b7c0d6e-2f1a-4f3e-9c1d-0a5b6c7d8e9f"

/* ---- small helpers --------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}
static size_t rng_below(size_t n) {
  return n ? (size_t)(rng() % n) : 0;
}

static int bytes_is(struct zkw_bytes b, const char *s) {
  if (!s) return b.len == -1 && b.p == NULL;
  size_t n = strlen(s);
  return b.len >= 0 && (size_t)b.len == n && (n == 0 || memcmp(b.p, s, n) == 0);
}
#define ASSERT_BYTES(b, s)                                                                                   \
  do {                                                                                                       \
    struct zkw_bytes zkw_t_b = (b);                                                                          \
    const char *zkw_t_s = (s);                                                                               \
    if (!bytes_is(zkw_t_b, zkw_t_s)) {                                                                       \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #b " == " #s);                                                     \
      fprintf(stderr, "    left:  len %d \"%.*s\"\n    right: \"%s\"\n", zkw_t_b.len,                        \
              zkw_t_b.len > 0 ? zkw_t_b.len : 0, zkw_t_b.p ? (const char *)zkw_t_b.p : "",                   \
              zkw_t_s ? zkw_t_s : "(null)");                                                                 \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

static void check_stat(const struct zkw_stat *s, int seed) {
  ASSERT_EQ(s->czxid, 0x100000001LL + seed);
  ASSERT_EQ(s->mzxid, 0x100000002LL + seed);
  ASSERT_EQ(s->ctime, 1700000000000LL + seed);
  ASSERT_EQ(s->mtime, -1700000000001LL - seed);
  ASSERT_EQ(s->version, 3 + seed);
  ASSERT_EQ(s->cversion, -1 - seed);
  ASSERT_EQ(s->aversion, 7);
  ASSERT_EQ(s->ephemeral_owner, INT64_MIN);
  ASSERT_EQ(s->data_length, 5);
  ASSERT_EQ(s->num_children, 2 + seed);
  ASSERT_EQ(s->pzxid, INT64_MAX - seed);
}

/* Checks a string vector against a NULL-terminated list of expected strings. */
static void check_strings(struct zkw_vec v, const char *const *want) {
  int32_t n = 0;
  while (want[n])
    n++;
  ASSERT_EQ(v.count, n);
  struct zkw_rd it = zkw_vec_reader(v);
  for (int32_t i = 0; i < n; i++)
    ASSERT_BYTES(zkw_vec_string_at(&it), want[i]);
  ASSERT_STATUS(zkw_rd_status(&it), ZKW_OK);
  ASSERT_EQ(zkw_rd_left(&it), 0);
}

static void b_two_acls(struct bld *b) {
  b_i32(b, 2);
  b_acl(b, 31, "world", "anyone");
  b_acl(b, 1, "digest", "zkwarden:Yy2aHv1p7PnZtmnT1R0Ki0ciL1Y=");
}
static void check_two_acls(struct zkw_vec v) {
  ASSERT_EQ(v.count, 2);
  struct zkw_rd it = zkw_vec_reader(v);
  struct zkw_acl a = zkw_rd_acl(&it);
  ASSERT_EQ(a.perms, 31);
  ASSERT_BYTES(a.scheme, "world");
  ASSERT_BYTES(a.id, "anyone");
  a = zkw_rd_acl(&it);
  ASSERT_EQ(a.perms, 1);
  ASSERT_BYTES(a.scheme, "digest");
  ASSERT_BYTES(a.id, "zkwarden:Yy2aHv1p7PnZtmnT1R0Ki0ciL1Y=");
  ASSERT_STATUS(zkw_rd_status(&it), ZKW_OK);
  ASSERT_EQ(zkw_rd_left(&it), 0);
}

/* ---- fixtures --------------------------------------------------------------- */

enum dir { D_CONN_REQ, D_CONN_RESP, D_REQ, D_REP };

struct fixture {
  const char *name;
  enum dir dir;
  int32_t req_type; /* replies: the opcode of the request answered */
  void (*build)(struct bld *);
  void (*check)(const void *view);
  int trailing; /* has bytes after the decoded fields: re-encoding drops them */
};

static uint8_t passwd16[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0};

/* Connect */
static void fx_conn_req45(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 0);
  b_i32(b, 40000);
  b_i64(b, 0);
  b_buf(b, (const uint8_t[16]){0}, 16);
  b_bool(b, 0);
}
static void ck_conn_req45(const void *v) {
  const struct zkw_connect_req *c = v;
  ASSERT_EQ(c->protocol_version, 0);
  ASSERT_EQ(c->last_zxid_seen, 0);
  ASSERT_EQ(c->timeout, 40000);
  ASSERT_EQ(c->session_id, 0);
  ASSERT_EQ(c->passwd.len, 16);
  ASSERT_TRUE(c->has_read_only);
  ASSERT_TRUE(!c->read_only);
}
static void fx_conn_req45_reattach(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 0x2000000a1LL);
  b_i32(b, 60000);
  b_i64(b, (int64_t)0x8100000123456789ULL);
  b_buf(b, passwd16, 16);
  b_bool(b, 1);
}
static void ck_conn_req45_reattach(const void *v) {
  const struct zkw_connect_req *c = v;
  ASSERT_EQ(c->last_zxid_seen, 0x2000000a1LL);
  ASSERT_EQ(c->timeout, 60000);
  ASSERT_EQ(c->session_id, (int64_t)0x8100000123456789ULL);
  ASSERT_MEMEQ(c->passwd.p, c->passwd.len, passwd16, 16);
  ASSERT_TRUE(c->has_read_only);
  ASSERT_TRUE(c->read_only);
}
static void fx_conn_req44(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 77);
  b_i32(b, 30000);
  b_i64(b, 0x123);
  b_buf(b, passwd16, 16);
}
static void ck_conn_req44(const void *v) {
  const struct zkw_connect_req *c = v;
  ASSERT_EQ(c->last_zxid_seen, 77);
  ASSERT_EQ(c->session_id, 0x123);
  ASSERT_TRUE(!c->has_read_only);
  ASSERT_TRUE(!c->read_only);
}
static void fx_conn_req_nopasswd(struct bld *b) { /* 28 bytes: empty passwd, no readOnly */
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 0);
  b_i32(b, 1);
  b_i64(b, 0);
  b_buf(b, "", 0);
}
static void ck_conn_req_nopasswd(const void *v) {
  const struct zkw_connect_req *c = v;
  ASSERT_EQ(c->passwd.len, 0);
  ASSERT_TRUE(c->passwd.p != NULL);
  ASSERT_TRUE(!c->has_read_only);
}
static void fx_conn_resp37(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i32(b, 40000);
  b_i64(b, (int64_t)0x8100000123456789ULL);
  b_buf(b, passwd16, 16);
  b_bool(b, 0);
}
static void ck_conn_resp37(const void *v) {
  const struct zkw_connect_resp *c = v;
  ASSERT_EQ(c->protocol_version, 0);
  ASSERT_EQ(c->timeout, 40000);
  ASSERT_EQ(c->session_id, (int64_t)0x8100000123456789ULL);
  ASSERT_MEMEQ(c->passwd.p, c->passwd.len, passwd16, 16);
  ASSERT_TRUE(c->has_read_only);
  ASSERT_TRUE(!c->read_only);
}
static void fx_conn_resp37_ro(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i32(b, 4000);
  b_i64(b, 0x42);
  b_buf(b, passwd16, 16);
  b_bool(b, 1);
}
static void ck_conn_resp37_ro(const void *v) {
  const struct zkw_connect_resp *c = v;
  ASSERT_TRUE(c->has_read_only);
  ASSERT_TRUE(c->read_only);
}
static void fx_conn_resp36_expired(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i32(b, 0);
  b_i64(b, 0);
  b_buf(b, (const uint8_t[16]){0}, 16);
}
static void ck_conn_resp36_expired(const void *v) {
  const struct zkw_connect_resp *c = v;
  ASSERT_EQ(c->timeout, 0);
  ASSERT_EQ(c->session_id, 0);
  ASSERT_EQ(c->passwd.len, 16);
  ASSERT_TRUE(!c->has_read_only);
}

/* Requests */
#define RQ(v) const struct zkw_request *r = (v)
static void fx_rq_create(struct bld *b) {
  b_req(b, 7, 1);
  b_str(b, PATH);
  b_buf(b, "tag\0x", 5);
  b_two_acls(b);
  b_i32(b, 1);
}
static void ck_rq_create(const void *v) {
  RQ(v);
  ASSERT_EQ(r->xid, 7);
  ASSERT_EQ(r->type, ZKW_OP_CREATE);
  ASSERT_EQ(r->op.type, ZKW_OP_CREATE);
  ASSERT_BYTES(r->op.path, PATH);
  ASSERT_MEMEQ(r->op.data.p, r->op.data.len, "tag\0x", 5);
  check_two_acls(r->op.acl);
  ASSERT_EQ(r->op.flags, 1);
}
static void fx_rq_create_nulls(struct bld *b) {
  b_req(b, 8, 1);
  b_str(b, "");
  b_i32(b, -1); /* null data */
  b_i32(b, 0);  /* empty acl */
  b_i32(b, 0);
}
static void ck_rq_create_nulls(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, "");
  ASSERT_BYTES(r->op.data, NULL);
  ASSERT_EQ(r->op.acl.count, 0);
  ASSERT_EQ(r->op.acl.len, 0);
  ASSERT_EQ(r->op.flags, 0);
}
static void fx_rq_create_nullacl(struct bld *b) {
  b_req(b, 9, 1);
  b_str(b, NULL);
  b_buf(b, "", 0);
  b_i32(b, -1); /* null acl vector */
  b_i32(b, 3);
}
static void ck_rq_create_nullacl(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, NULL);
  ASSERT_BYTES(r->op.data, "");
  ASSERT_EQ(r->op.acl.count, -1);
  ASSERT_EQ(r->op.acl.len, 0);
  ASSERT_EQ(r->op.flags, 3);
}
static void fx_rq_delete(struct bld *b) {
  b_req(b, 10, 2);
  b_str(b, PATH);
  b_i32(b, -1);
}
static void ck_rq_delete(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 2);
  ASSERT_BYTES(r->op.path, PATH);
  ASSERT_EQ(r->op.version, -1);
}
static void fx_rq_exists(struct bld *b) {
  b_req(b, 11, 3);
  b_str(b, "/zookeeper/config");
  b_bool(b, 1);
}
static void ck_rq_exists(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, "/zookeeper/config");
  ASSERT_TRUE(r->op.watch);
}
static void fx_rq_get_data(struct bld *b) {
  b_req(b, 12, 4);
  b_str(b, "/a");
  b_bool(b, 0);
}
static void ck_rq_get_data(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 4);
  ASSERT_BYTES(r->op.path, "/a");
  ASSERT_TRUE(!r->op.watch);
}
static void fx_rq_set_data(struct bld *b) {
  b_req(b, 13, 5);
  b_str(b, "/a");
  b_buf(b, "v2", 2);
  b_i32(b, 7);
}
static void ck_rq_set_data(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, "/a");
  ASSERT_BYTES(r->op.data, "v2");
  ASSERT_EQ(r->op.version, 7);
}
static void fx_rq_get_acl(struct bld *b) {
  b_req(b, 14, 6);
  b_str(b, "/a");
}
static void ck_rq_get_acl(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 6);
  ASSERT_BYTES(r->op.path, "/a");
}
static void fx_rq_set_acl(struct bld *b) {
  b_req(b, 15, 7);
  b_str(b, "/a");
  b_two_acls(b);
  b_i32(b, 3);
}
static void ck_rq_set_acl(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, "/a");
  check_two_acls(r->op.acl);
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(r->op.version, 3);
}
static void fx_rq_get_children(struct bld *b) {
  b_req(b, 16, 8);
  b_str(b, "/flink");
  b_bool(b, 1);
}
static void ck_rq_get_children(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 8);
  ASSERT_BYTES(r->op.path, "/flink");
  ASSERT_TRUE(r->op.watch);
}
static void fx_rq_sync(struct bld *b) {
  b_req(b, 17, 9);
  b_str(b, "/");
}
static void ck_rq_sync(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 9);
  ASSERT_BYTES(r->op.path, "/");
}
static void fx_rq_ping(struct bld *b) {
  b_req(b, -2, 11);
}
static void ck_rq_ping(const void *v) {
  RQ(v);
  ASSERT_EQ(r->xid, -2);
  ASSERT_EQ(r->type, 11);
}
static void fx_rq_get_children2(struct bld *b) {
  b_req(b, 18, 12);
  b_str(b, "/flink");
  b_bool(b, 0);
}
static void ck_rq_get_children2(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 12);
  ASSERT_BYTES(r->op.path, "/flink");
  ASSERT_TRUE(!r->op.watch);
}
static void fx_rq_check(struct bld *b) {
  b_req(b, 19, 13);
  b_str(b, "/a");
  b_i32(b, 4);
}
static void ck_rq_check(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 13);
  ASSERT_EQ(r->op.version, 4);
}
static void fx_rq_multi(struct bld *b) {
  b_req(b, 20, 14);
  b_mhdr(b, 1, 0, -1);
  b_str(b, "/m/1");
  b_buf(b, "d1", 2);
  b_two_acls(b);
  b_i32(b, 1);
  b_mhdr(b, 15, 0, -1);
  b_str(b, "/m/2");
  b_i32(b, -1);
  b_i32(b, 1);
  b_acl(b, 31, "world", "anyone");
  b_i32(b, 2);
  b_mhdr(b, 19, 0, -1);
  b_str(b, "/m/3");
  b_buf(b, "", 0);
  b_i32(b, 0);
  b_i32(b, 4);
  b_mhdr(b, 21, 0, -1);
  b_str(b, "/m/4");
  b_buf(b, "t", 1);
  b_i32(b, 0);
  b_i32(b, 5);
  b_i64(b, 3600000);
  b_mhdr(b, 2, 0, -1);
  b_str(b, "/m/5");
  b_i32(b, 9);
  b_mhdr(b, 5, 0, -1);
  b_str(b, "/m/6");
  b_buf(b, "x", 1);
  b_i32(b, -1);
  b_mhdr(b, 13, 0, -1);
  b_str(b, "/m/7");
  b_i32(b, 11);
  b_mend(b);
}
static void ck_rq_multi(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 14);
  ASSERT_EQ(r->op.op_count, 7);
  ASSERT_EQ(r->op.ops.count, 7);
  static const int32_t types[] = {1, 15, 19, 21, 2, 5, 13};
  struct zkw_multi_iter it = zkw_multi_iter(r->op.ops);
  struct zkw_op_req sub;
  for (int i = 0; i < 7; i++) {
    ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_OK);
    ASSERT_EQ(sub.type, types[i]);
    char want[8];
    snprintf(want, sizeof want, "/m/%d", i + 1);
    ASSERT_BYTES(sub.path, want);
    if (i == 0) {
      ASSERT_BYTES(sub.data, "d1");
      check_two_acls(sub.acl);
      ASSERT_OK_SO_FAR();
      ASSERT_EQ(sub.flags, 1);
    }
    if (i == 1) ASSERT_BYTES(sub.data, NULL);
    if (i == 2) ASSERT_EQ(sub.flags, 4);
    if (i == 3) {
      ASSERT_EQ(sub.flags, 5);
      ASSERT_EQ(sub.ttl, 3600000);
    }
    if (i == 4) ASSERT_EQ(sub.version, 9);
    if (i == 5) {
      ASSERT_BYTES(sub.data, "x");
      ASSERT_EQ(sub.version, -1);
    }
    if (i == 6) ASSERT_EQ(sub.version, 11);
  }
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_AGAIN);
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_AGAIN); /* stays at the end */
}
static void fx_rq_multi_empty(struct bld *b) {
  b_req(b, 21, 14);
  b_mend(b);
}
static void ck_rq_multi_empty(const void *v) {
  RQ(v);
  ASSERT_EQ(r->op.op_count, 0);
  ASSERT_EQ(r->op.ops.len, 9);
  struct zkw_multi_iter it = zkw_multi_iter(r->op.ops);
  struct zkw_op_req sub;
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_AGAIN);
}
static void fx_rq_multi_trailing(struct bld *b) {
  b_req(b, 22, 14);
  b_mhdr(b, 2, 0, -1);
  b_str(b, "/d");
  b_i32(b, -1);
  b_mend(b);
  b_raw(b, "junk", 4);
}
static void ck_rq_multi_trailing(const void *v) {
  RQ(v);
  ASSERT_EQ(r->op.op_count, 1);
  ASSERT_EQ(r->op.ops.len, 9 + 4 + 2 + 4 + 9);
}
static void fx_rq_create2(struct bld *b) {
  b_req(b, 23, 15);
  b_str(b, PATH);
  b_buf(b, "zz", 2);
  b_i32(b, 1);
  b_acl(b, 31, "world", "anyone");
  b_i32(b, 3);
}
static void ck_rq_create2(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 15);
  ASSERT_BYTES(r->op.path, PATH);
  ASSERT_EQ(r->op.acl.count, 1);
  ASSERT_EQ(r->op.flags, 3);
}
static void fx_rq_reconfig(struct bld *b) {
  b_req(b, 24, 16);
  b_str(b, "server.4=zk4:2888:3888:participant;2181");
  b_str(b, "3");
  b_str(b, NULL);
  b_i64(b, 0x100000000LL);
}
static void ck_rq_reconfig(const void *v) {
  RQ(v);
  ASSERT_BYTES(r->op.path, "server.4=zk4:2888:3888:participant;2181");
  ASSERT_BYTES(r->op.leaving, "3");
  ASSERT_BYTES(r->op.new_members, NULL);
  ASSERT_EQ(r->op.zxid, 0x100000000LL);
}
static void fx_rq_check_watches(struct bld *b) {
  b_req(b, 25, 17);
  b_str(b, "/w");
  b_i32(b, 2);
}
static void ck_rq_check_watches(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 17);
  ASSERT_BYTES(r->op.path, "/w");
  ASSERT_EQ(r->op.mode, 2);
}
static void fx_rq_remove_watches(struct bld *b) {
  b_req(b, 26, 18);
  b_str(b, "/w");
  b_i32(b, 3);
}
static void ck_rq_remove_watches(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 18);
  ASSERT_EQ(r->op.mode, 3);
}
static void fx_rq_create_container(struct bld *b) {
  b_req(b, 27, 19);
  b_str(b, "/flink/ha");
  b_buf(b, "", 0);
  b_i32(b, 1);
  b_acl(b, 31, "world", "anyone");
  b_i32(b, 4);
}
static void ck_rq_create_container(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 19);
  ASSERT_EQ(r->op.flags, 4);
}
static void fx_rq_create_ttl(struct bld *b) {
  b_req(b, 28, 21);
  b_str(b, "/ttl");
  b_buf(b, "abc", 3);
  b_i32(b, 1);
  b_acl(b, 31, "world", "anyone");
  b_i32(b, 6);
  b_i64(b, 0xFFFFFFFFFFLL);
}
static void ck_rq_create_ttl(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 21);
  ASSERT_BYTES(r->op.data, "abc");
  ASSERT_EQ(r->op.flags, 6);
  ASSERT_EQ(r->op.ttl, 0xFFFFFFFFFFLL);
}
static void fx_rq_multi_read(struct bld *b) {
  b_req(b, 29, 22);
  b_mhdr(b, 4, 0, -1);
  b_str(b, "/r/1");
  b_bool(b, 0);
  b_mhdr(b, 8, 0, -1);
  b_str(b, "/r/2");
  b_bool(b, 1);
  b_mhdr(b, 4, 0, -1);
  b_str(b, "/r/3");
  b_bool(b, 0);
  b_mend(b);
}
static void ck_rq_multi_read(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 22);
  ASSERT_EQ(r->op.op_count, 3);
  struct zkw_multi_iter it = zkw_multi_iter(r->op.ops);
  struct zkw_op_req sub;
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_OK);
  ASSERT_EQ(sub.type, 4);
  ASSERT_BYTES(sub.path, "/r/1");
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_OK);
  ASSERT_EQ(sub.type, 8);
  ASSERT_TRUE(sub.watch);
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_OK);
  ASSERT_BYTES(sub.path, "/r/3");
  ASSERT_STATUS(zkw_multi_next_req(&it, &sub), ZKW_AGAIN);
}
static void fx_rq_auth(struct bld *b) {
  b_req(b, -4, 100);
  b_i32(b, 0);
  b_str(b, "digest");
  b_buf(b, "zkwarden:secret", 15);
}
static void ck_rq_auth(const void *v) {
  RQ(v);
  ASSERT_EQ(r->xid, -4);
  ASSERT_EQ(r->op.mode, 0);
  ASSERT_BYTES(r->op.scheme, "digest");
  ASSERT_BYTES(r->op.data, "zkwarden:secret");
}
static void fx_rq_set_watches(struct bld *b) {
  b_req(b, -8, 101);
  b_i64(b, 0x300000010LL);
  b_i32(b, 2);
  b_str(b, "/a");
  b_str(b, "/b");
  b_i32(b, 0);
  b_i32(b, 1);
  b_str(b, "/c");
}
static void ck_rq_set_watches(const void *v) {
  RQ(v);
  ASSERT_EQ(r->op.zxid, 0x300000010LL);
  check_strings(r->op.watches[0], (const char *const[]){"/a", "/b", NULL});
  ASSERT_OK_SO_FAR();
  check_strings(r->op.watches[1], (const char *const[]){NULL});
  ASSERT_OK_SO_FAR();
  check_strings(r->op.watches[2], (const char *const[]){"/c", NULL});
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(r->op.watches[3].count, 0);
  ASSERT_TRUE(r->op.watches[3].p == NULL);
}
static void fx_rq_sasl(struct bld *b) {
  b_req(b, 30, 102);
  b_buf(b, "\x60\x82\x02\x00\xff", 5);
}
static void ck_rq_sasl(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 102);
  ASSERT_MEMEQ(r->op.data.p, r->op.data.len, "\x60\x82\x02\x00\xff", 5);
}
static void fx_rq_get_ephemerals(struct bld *b) {
  b_req(b, 31, 103);
  b_str(b, "/flink");
}
static void ck_rq_get_ephemerals(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 103);
  ASSERT_BYTES(r->op.path, "/flink");
}
static void fx_rq_get_all_children_number(struct bld *b) {
  b_req(b, 32, 104);
  b_str(b, "/");
}
static void ck_rq_get_all_children_number(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 104);
  ASSERT_BYTES(r->op.path, "/");
}
static void fx_rq_set_watches2(struct bld *b) {
  b_req(b, -8, 105);
  b_i64(b, -1);
  b_i32(b, 1);
  b_str(b, "/d");
  b_i32(b, 1);
  b_str(b, "/e");
  b_i32(b, 0);
  b_i32(b, 2);
  b_str(b, "/p1");
  b_str(b, "");
  b_i32(b, -1);
}
static void ck_rq_set_watches2(const void *v) {
  RQ(v);
  ASSERT_EQ(r->op.zxid, -1);
  check_strings(r->op.watches[0], (const char *const[]){"/d", NULL});
  ASSERT_OK_SO_FAR();
  check_strings(r->op.watches[1], (const char *const[]){"/e", NULL});
  ASSERT_OK_SO_FAR();
  check_strings(r->op.watches[3], (const char *const[]){"/p1", "", NULL});
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(r->op.watches[4].count, -1);
}
static void fx_rq_add_watch(struct bld *b) {
  b_req(b, 33, 106);
  b_str(b, "/flink/ha");
  b_i32(b, 1);
}
static void ck_rq_add_watch(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 106);
  ASSERT_BYTES(r->op.path, "/flink/ha");
  ASSERT_EQ(r->op.mode, 1);
}
static void fx_rq_who_am_i(struct bld *b) {
  b_req(b, 34, 107);
}
static void ck_rq_who_am_i(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, 107);
  ASSERT_EQ(r->xid, 34);
}
static void fx_rq_close_session(struct bld *b) {
  b_req(b, 0x65432100, -11);
}
static void ck_rq_close_session(const void *v) {
  RQ(v);
  ASSERT_EQ(r->type, -11);
  ASSERT_EQ(r->xid, 0x65432100);
}
static void fx_rq_get_data_trailing(struct bld *b) {
  fx_rq_get_data(b);
  b_raw(b, "\0\0\0", 3);
}
static void fx_rq_watch_bool2(struct bld *b) { /* Java reads any non-zero byte as true */
  b_req(b, 35, 3);
  b_str(b, "/a");
  b_bool(b, 2);
}
static void ck_rq_watch_bool2(const void *v) {
  RQ(v);
  ASSERT_TRUE(r->op.watch);
}

/* Replies */
#define RP(v) const struct zkw_reply *r = (v)
static void fx_rp_create(struct bld *b) {
  b_rep(b, 7, 0x100000003LL, 0);
  b_str(b, "/a/lock0000000001");
}
static void ck_rp_create(const void *v) {
  RP(v);
  ASSERT_EQ(r->xid, 7);
  ASSERT_EQ(r->zxid, 0x100000003LL);
  ASSERT_EQ(r->err, 0);
  ASSERT_EQ(r->op.type, 1);
  ASSERT_BYTES(r->op.path, "/a/lock0000000001");
}
static void fx_rp_none(struct bld *b) {
  b_rep(b, 10, 0x100000004LL, 0);
}
static void ck_rp_none(const void *v) {
  RP(v);
  ASSERT_TRUE(r->xid > 0);
  ASSERT_EQ(r->err, 0);
  ASSERT_TRUE(!r->op.has_stat);
}
static void fx_rp_stat(struct bld *b) {
  b_rep(b, 11, 5, 0);
  b_stat(b, 0);
}
static void ck_rp_stat(const void *v) {
  RP(v);
  ASSERT_TRUE(r->op.has_stat);
  check_stat(&r->op.stat, 0);
}
static void fx_rp_get_data(struct bld *b) {
  b_rep(b, 12, 5, 0);
  b_buf(b, "hello", 5);
  b_stat(b, 1);
}
static void ck_rp_get_data(const void *v) {
  RP(v);
  ASSERT_BYTES(r->op.data, "hello");
  ASSERT_TRUE(r->op.has_stat);
  check_stat(&r->op.stat, 1);
}
static void fx_rp_get_data_null(struct bld *b) {
  b_rep(b, 12, 5, 0);
  b_i32(b, -1);
  b_stat(b, 2);
}
static void ck_rp_get_data_null(const void *v) {
  RP(v);
  ASSERT_BYTES(r->op.data, NULL);
  check_stat(&r->op.stat, 2);
}
static void fx_rp_get_acl(struct bld *b) {
  b_rep(b, 14, 5, 0);
  b_two_acls(b);
  b_stat(b, 3);
}
static void ck_rp_get_acl(const void *v) {
  RP(v);
  check_two_acls(r->op.list);
  ASSERT_OK_SO_FAR();
  check_stat(&r->op.stat, 3);
}
static void fx_rp_children(struct bld *b) {
  b_rep(b, 16, 5, 0);
  b_i32(b, 3);
  b_str(b, "a");
  b_str(b, "4b7c0d6e-2f1a-4f3e-9c1d-0a5b6c7d8e9f");
  b_str(b, "");
}
static void ck_rp_children(const void *v) {
  RP(v);
  check_strings(r->op.list, (const char *const[]){"a", "4b7c0d6e-2f1a-4f3e-9c1d-0a5b6c7d8e9f", "", NULL});
}
static void fx_rp_children_empty(struct bld *b) {
  b_rep(b, 16, 5, 0);
  b_i32(b, 0);
}
static void ck_rp_children_empty(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.list.count, 0);
}
static void fx_rp_sync(struct bld *b) {
  b_rep(b, 17, 9, 0);
  b_str(b, "/");
}
static void ck_rp_sync(const void *v) {
  RP(v);
  ASSERT_BYTES(r->op.path, "/");
}
static void fx_rp_ping(struct bld *b) {
  b_rep(b, -2, 0x100000009LL, 0);
}
static void ck_rp_ping(const void *v) {
  RP(v);
  ASSERT_EQ(r->xid, -2);
  ASSERT_EQ(r->zxid, 0x100000009LL);
}
static void fx_rp_children2(struct bld *b) {
  b_rep(b, 18, 5, 0);
  b_i32(b, 1);
  b_str(b, "x");
  b_stat(b, 4);
}
static void ck_rp_children2(const void *v) {
  RP(v);
  check_strings(r->op.list, (const char *const[]){"x", NULL});
  ASSERT_OK_SO_FAR();
  check_stat(&r->op.stat, 4);
}
static void fx_rp_multi(struct bld *b) {
  b_rep(b, 20, 0x10000000aLL, 0);
  b_mhdr(b, 1, 0, 0);
  b_str(b, "/m/1");
  b_mhdr(b, 15, 0, 0);
  b_str(b, "/m/2");
  b_stat(b, 5);
  b_mhdr(b, 15, 0, 0); /* createContainer and createTTL answer as create2 */
  b_str(b, "/m/3");
  b_stat(b, 6);
  b_mhdr(b, 2, 0, 0);
  b_mhdr(b, 5, 0, 0);
  b_stat(b, 7);
  b_mhdr(b, 13, 0, 0);
  b_mend(b);
}
static void ck_rp_multi(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.result_count, 6);
  struct zkw_multi_iter it = zkw_multi_iter(r->op.results);
  struct zkw_op_rep res;
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 1);
  ASSERT_BYTES(res.path, "/m/1");
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 15);
  ASSERT_BYTES(res.path, "/m/2");
  check_stat(&res.stat, 5);
  ASSERT_OK_SO_FAR();
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_BYTES(res.path, "/m/3");
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 2);
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 5);
  ASSERT_TRUE(res.has_stat);
  check_stat(&res.stat, 7);
  ASSERT_OK_SO_FAR();
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 13);
  ASSERT_EQ(res.err, 0);
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_AGAIN);
}
/* A failed write multi: header err 0, every result type -1; earlier ops 0,
 * the failing op its real code, later ops -2. */
static void fx_rp_multi_error(struct bld *b) {
  b_rep(b, 21, 0x10000000bLL, 0);
  b_mhdr(b, -1, 0, 0);
  b_i32(b, 0);
  b_mhdr(b, -1, 0, -110);
  b_i32(b, -110);
  b_mhdr(b, -1, 0, -2);
  b_i32(b, -2);
  b_mhdr(b, -1, 0, -2);
  b_i32(b, -2);
  b_mend(b);
}
static void ck_rp_multi_error(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, 0);
  ASSERT_EQ(r->op.result_count, 4);
  static const int32_t errs[] = {0, -110, -2, -2};
  struct zkw_multi_iter it = zkw_multi_iter(r->op.results);
  struct zkw_op_rep res;
  for (int i = 0; i < 4; i++) {
    ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
    ASSERT_EQ(res.type, -1);
    ASSERT_EQ(res.err, errs[i]);
    ASSERT_EQ(res.value, errs[i]);
  }
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_AGAIN);
}
static void fx_rp_multi_empty(struct bld *b) {
  b_rep(b, 22, 1, 0);
  b_mend(b);
}
static void ck_rp_multi_empty(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.result_count, 0);
  ASSERT_EQ(r->op.results.len, 9);
}
static void fx_rp_multi_header_err(struct bld *b) {
  b_rep(b, 23, 1, -112);
}
static void ck_rp_multi_header_err(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -112);
  ASSERT_EQ(r->op.result_count, 0);
}
static void fx_rp_create2(struct bld *b) {
  b_rep(b, 23, 5, 0);
  b_str(b, PATH);
  b_stat(b, 8);
}
static void ck_rp_create2(const void *v) {
  RP(v);
  ASSERT_BYTES(r->op.path, PATH);
  check_stat(&r->op.stat, 8);
}
static void fx_rp_reconfig(struct bld *b) {
  b_rep(b, 24, 5, 0);
  b_str(b, "server.1=zk1:2888:3888:participant;0.0.0.0:2181\nversion=100000000");
  b_stat(b, 9);
}
static void ck_rp_reconfig(const void *v) {
  RP(v);
  ASSERT_BYTES(r->op.data, "server.1=zk1:2888:3888:participant;0.0.0.0:2181\nversion=100000000");
  check_stat(&r->op.stat, 9);
}
static void fx_rp_nowatcher(struct bld *b) {
  b_rep(b, 25, 5, -121);
}
static void ck_rp_nowatcher(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -121);
}
static void fx_rp_multi_read(struct bld *b) {
  b_rep(b, 29, 5, 0);
  b_mhdr(b, 4, 0, 0);
  b_buf(b, "d", 1);
  b_stat(b, 10);
  b_mhdr(b, 8, 0, 0);
  b_i32(b, 2);
  b_str(b, "c1");
  b_str(b, "c2");
  b_mhdr(b, -1, 0, -101);
  b_i32(b, -101);
  b_mend(b);
}
static void ck_rp_multi_read(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.result_count, 3);
  struct zkw_multi_iter it = zkw_multi_iter(r->op.results);
  struct zkw_op_rep res;
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 4);
  ASSERT_BYTES(res.data, "d");
  check_stat(&res.stat, 10);
  ASSERT_OK_SO_FAR();
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, 8);
  check_strings(res.list, (const char *const[]){"c1", "c2", NULL});
  ASSERT_OK_SO_FAR();
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_OK);
  ASSERT_EQ(res.type, -1);
  ASSERT_EQ(res.err, -101);
  ASSERT_EQ(res.value, -101);
  ASSERT_STATUS(zkw_multi_next_rep(&it, &res), ZKW_AGAIN);
}
static void fx_rp_auth(struct bld *b) {
  b_rep(b, -4, 0, 0);
}
static void ck_rp_auth(const void *v) {
  RP(v);
  ASSERT_EQ(r->xid, -4);
  ASSERT_EQ(r->zxid, 0);
}
static void fx_rp_auth_failed(struct bld *b) {
  b_rep(b, -4, 0, -115);
}
static void ck_rp_auth_failed(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -115);
}
static void fx_rp_set_watches(struct bld *b) {
  b_rep(b, -8, 0x100000001LL, 0);
}
static void ck_rp_set_watches(const void *v) {
  RP(v);
  ASSERT_EQ(r->xid, -8);
}
static void fx_rp_sasl(struct bld *b) {
  b_rep(b, 30, 0, 0);
  b_buf(b, "\x05\x04\x01\xff", 4);
}
static void ck_rp_sasl(const void *v) {
  RP(v);
  ASSERT_MEMEQ(r->op.data.p, r->op.data.len, "\x05\x04\x01\xff", 4);
}
static void fx_rp_sasl_failed(struct bld *b) {
  b_rep(b, 30, 0, -124);
}
static void ck_rp_sasl_failed(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -124);
  ASSERT_EQ(r->op.data.len, 0);
}
static void fx_rp_ephemerals(struct bld *b) {
  b_rep(b, 31, 5, 0);
  b_i32(b, 2);
  b_str(b, "/flink/ha/leader/latch-0000000001");
  b_str(b, PATH);
}
static void ck_rp_ephemerals(const void *v) {
  RP(v);
  check_strings(r->op.list, (const char *const[]){"/flink/ha/leader/latch-0000000001", PATH, NULL});
}
static void fx_rp_int(struct bld *b) {
  b_rep(b, 32, 5, 0);
  b_i32(b, 42);
}
static void ck_rp_int(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.value, 42);
}
static void fx_rp_add_watch(struct bld *b) {
  b_rep(b, 33, 5, 0);
  b_i32(b, 0);
}
static void ck_rp_add_watch(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.value, 0);
}
static void fx_rp_who_am_i(struct bld *b) {
  b_rep(b, 34, 5, 0);
  b_i32(b, 2);
  b_str(b, "ip");
  b_str(b, "127.0.0.1");
  b_str(b, "digest");
  b_str(b, "zkwarden");
}
static void ck_rp_who_am_i(const void *v) {
  RP(v);
  ASSERT_EQ(r->op.list.count, 2);
  struct zkw_rd it = zkw_vec_reader(r->op.list);
  struct zkw_client_info ci = zkw_rd_client_info(&it);
  ASSERT_BYTES(ci.auth_scheme, "ip");
  ASSERT_BYTES(ci.user, "127.0.0.1");
  ci = zkw_rd_client_info(&it);
  ASSERT_BYTES(ci.auth_scheme, "digest");
  ASSERT_BYTES(ci.user, "zkwarden");
  ASSERT_EQ(zkw_rd_left(&it), 0);
}
static void fx_rp_close(struct bld *b) {
  b_rep(b, 0x65432100, 0x100000020LL, 0);
}
static void fx_rp_notification(struct bld *b) {
  b_rep(b, -1, -1, 0);
  b_i32(b, 4);
  b_i32(b, 3);
  b_str(b, "/flink/ha/leader");
}
static void ck_rp_notification(const void *v) {
  RP(v);
  ASSERT_EQ(r->xid, -1);
  ASSERT_EQ(r->zxid, -1);
  ASSERT_EQ(r->event.type, 4);
  ASSERT_EQ(r->event.state, 3);
  ASSERT_BYTES(r->event.path, "/flink/ha/leader");
}
static void fx_rp_notification39(struct bld *b) { /* 3.9: the event's zxid */
  b_rep(b, -1, 0x200000005LL, 0);
  b_i32(b, 2);
  b_i32(b, 3);
  b_str(b, PATH);
}
static void ck_rp_notification39(const void *v) {
  RP(v);
  ASSERT_EQ(r->zxid, 0x200000005LL);
  ASSERT_EQ(r->event.type, 2);
  ASSERT_BYTES(r->event.path, PATH);
}
static void fx_rp_nonode(struct bld *b) {
  b_rep(b, 12, 5, -101);
}
static void ck_rp_nonode(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -101);
  ASSERT_TRUE(!r->op.has_stat);
  ASSERT_EQ(r->op.data.len, 0);
}
static void fx_rp_create_err_body(struct bld *b) { /* err with a body: skipped */
  b_rep(b, 7, 5, -110);
  b_str(b, PATH);
}
static void ck_rp_create_err_body(const void *v) {
  RP(v);
  ASSERT_EQ(r->err, -110);
  ASSERT_EQ(r->op.path.len, 0);
}
static void fx_rp_stat_trailing(struct bld *b) {
  fx_rp_stat(b);
  b_raw(b, "xyz", 3);
}

#define FX(name, dir, rt, tr)                                                                                \
  { #name, dir, rt, fx_##name, ck_##name, tr }
static const struct fixture fixtures[] = {
    FX(conn_req45, D_CONN_REQ, 0, 0),
    FX(conn_req45_reattach, D_CONN_REQ, 0, 0),
    FX(conn_req44, D_CONN_REQ, 0, 0),
    FX(conn_req_nopasswd, D_CONN_REQ, 0, 0),
    FX(conn_resp37, D_CONN_RESP, 0, 0),
    FX(conn_resp37_ro, D_CONN_RESP, 0, 0),
    FX(conn_resp36_expired, D_CONN_RESP, 0, 0),

    FX(rq_create, D_REQ, 0, 0),
    FX(rq_create_nulls, D_REQ, 0, 0),
    FX(rq_create_nullacl, D_REQ, 0, 0),
    FX(rq_delete, D_REQ, 0, 0),
    FX(rq_exists, D_REQ, 0, 0),
    FX(rq_get_data, D_REQ, 0, 0),
    FX(rq_set_data, D_REQ, 0, 0),
    FX(rq_get_acl, D_REQ, 0, 0),
    FX(rq_set_acl, D_REQ, 0, 0),
    FX(rq_get_children, D_REQ, 0, 0),
    FX(rq_sync, D_REQ, 0, 0),
    FX(rq_ping, D_REQ, 0, 0),
    FX(rq_get_children2, D_REQ, 0, 0),
    FX(rq_check, D_REQ, 0, 0),
    FX(rq_multi, D_REQ, 0, 0),
    FX(rq_multi_empty, D_REQ, 0, 0),
    FX(rq_multi_trailing, D_REQ, 0, 1),
    FX(rq_create2, D_REQ, 0, 0),
    FX(rq_reconfig, D_REQ, 0, 0),
    FX(rq_check_watches, D_REQ, 0, 0),
    FX(rq_remove_watches, D_REQ, 0, 0),
    FX(rq_create_container, D_REQ, 0, 0),
    FX(rq_create_ttl, D_REQ, 0, 0),
    FX(rq_multi_read, D_REQ, 0, 0),
    FX(rq_auth, D_REQ, 0, 0),
    FX(rq_set_watches, D_REQ, 0, 0),
    FX(rq_sasl, D_REQ, 0, 0),
    FX(rq_get_ephemerals, D_REQ, 0, 0),
    FX(rq_get_all_children_number, D_REQ, 0, 0),
    FX(rq_set_watches2, D_REQ, 0, 0),
    FX(rq_add_watch, D_REQ, 0, 0),
    FX(rq_who_am_i, D_REQ, 0, 0),
    FX(rq_close_session, D_REQ, 0, 0),
    {"rq_get_data_trailing", D_REQ, 0, fx_rq_get_data_trailing, ck_rq_get_data, 1},
    FX(rq_watch_bool2, D_REQ, 0, 2), /* 2: re-encoding normalizes the bool */

    FX(rp_create, D_REP, ZKW_OP_CREATE, 0),
    {"rp_delete", D_REP, ZKW_OP_DELETE, fx_rp_none, ck_rp_none, 0},
    {"rp_exists", D_REP, ZKW_OP_EXISTS, fx_rp_stat, ck_rp_stat, 0},
    FX(rp_get_data, D_REP, ZKW_OP_GET_DATA, 0),
    FX(rp_get_data_null, D_REP, ZKW_OP_GET_DATA, 0),
    {"rp_set_data", D_REP, ZKW_OP_SET_DATA, fx_rp_stat, ck_rp_stat, 0},
    FX(rp_get_acl, D_REP, ZKW_OP_GET_ACL, 0),
    {"rp_set_acl", D_REP, ZKW_OP_SET_ACL, fx_rp_stat, ck_rp_stat, 0},
    FX(rp_children, D_REP, ZKW_OP_GET_CHILDREN, 0),
    FX(rp_children_empty, D_REP, ZKW_OP_GET_CHILDREN, 0),
    FX(rp_sync, D_REP, ZKW_OP_SYNC, 0),
    FX(rp_ping, D_REP, ZKW_OP_PING, 0),
    {"rp_ping_any_type", D_REP, ZKW_OP_GET_DATA, fx_rp_ping, ck_rp_ping, 0},
    FX(rp_children2, D_REP, ZKW_OP_GET_CHILDREN2, 0),
    {"rp_check", D_REP, ZKW_OP_CHECK, fx_rp_none, ck_rp_none, 0},
    FX(rp_multi, D_REP, ZKW_OP_MULTI, 0),
    FX(rp_multi_error, D_REP, ZKW_OP_MULTI, 0),
    FX(rp_multi_empty, D_REP, ZKW_OP_MULTI, 0),
    FX(rp_multi_header_err, D_REP, ZKW_OP_MULTI, 0),
    FX(rp_create2, D_REP, ZKW_OP_CREATE2, 0),
    FX(rp_reconfig, D_REP, ZKW_OP_RECONFIG, 0),
    {"rp_check_watches", D_REP, ZKW_OP_CHECK_WATCHES, fx_rp_none, ck_rp_none, 0},
    {"rp_check_watches_nowatcher", D_REP, ZKW_OP_CHECK_WATCHES, fx_rp_nowatcher, ck_rp_nowatcher, 0},
    {"rp_remove_watches", D_REP, ZKW_OP_REMOVE_WATCHES, fx_rp_none, ck_rp_none, 0},
    {"rp_create_container", D_REP, ZKW_OP_CREATE_CONTAINER, fx_rp_create2, ck_rp_create2, 0},
    {"rp_create_ttl", D_REP, ZKW_OP_CREATE_TTL, fx_rp_create2, ck_rp_create2, 0},
    FX(rp_multi_read, D_REP, ZKW_OP_MULTI_READ, 0),
    FX(rp_auth, D_REP, ZKW_OP_AUTH, 0),
    FX(rp_auth_failed, D_REP, ZKW_OP_AUTH, 0),
    FX(rp_set_watches, D_REP, ZKW_OP_SET_WATCHES, 0),
    {"rp_set_watches2", D_REP, ZKW_OP_SET_WATCHES2, fx_rp_set_watches, ck_rp_set_watches, 0},
    FX(rp_sasl, D_REP, ZKW_OP_SASL, 0),
    FX(rp_sasl_failed, D_REP, ZKW_OP_SASL, 0),
    FX(rp_ephemerals, D_REP, ZKW_OP_GET_EPHEMERALS, 0),
    {"rp_get_all_children_number", D_REP, ZKW_OP_GET_ALL_CHILDREN_NUMBER, fx_rp_int, ck_rp_int, 0},
    FX(rp_add_watch, D_REP, ZKW_OP_ADD_WATCH, 0),
    FX(rp_who_am_i, D_REP, ZKW_OP_WHO_AM_I, 0),
    {"rp_close_session", D_REP, ZKW_OP_CLOSE_SESSION, fx_rp_close, ck_rp_none, 0},
    FX(rp_notification, D_REP, ZKW_OP_NOTIFICATION, 0),
    {"rp_notification_any_type", D_REP, ZKW_OP_MULTI, fx_rp_notification, ck_rp_notification, 0},
    FX(rp_notification39, D_REP, ZKW_OP_NOTIFICATION, 0),
    FX(rp_nonode, D_REP, ZKW_OP_GET_DATA, 0),
    FX(rp_create_err_body, D_REP, ZKW_OP_CREATE, 1),
    {"rp_stat_trailing", D_REP, ZKW_OP_EXISTS, fx_rp_stat_trailing, ck_rp_stat, 1},
};
#define NFIX (sizeof fixtures / sizeof fixtures[0])

/* ---- decoding, re-encoding and framing of every fixture -------------------- */

union view {
  struct zkw_connect_req creq;
  struct zkw_connect_resp cresp;
  struct zkw_request req;
  struct zkw_reply rep;
};

static uint32_t dir_min(enum dir d) {
  switch (d) {
  case D_CONN_REQ:
    return ZKW_CONNECT_REQ_MIN;
  case D_CONN_RESP:
    return ZKW_CONNECT_RESP_MIN;
  case D_REQ:
    return ZKW_MIN_REQUEST;
  default:
    return ZKW_MIN_REPLY;
  }
}

static int decode_fx(const struct fixture *f, const uint8_t *body, size_t len, union view *v) {
  switch (f->dir) {
  case D_CONN_REQ:
    return zkw_decode_connect_req(body, len, &v->creq);
  case D_CONN_RESP:
    return zkw_decode_connect_resp(body, len, &v->cresp);
  case D_REQ:
    return zkw_decode_request(body, len, &v->req);
  default:
    return zkw_decode_reply(body, len, f->req_type, &v->rep);
  }
}

static int encode_fx(const struct fixture *f, const union view *v, uint8_t *buf, size_t cap, size_t *n) {
  switch (f->dir) {
  case D_CONN_REQ:
    return zkw_encode_connect_req(buf, cap, &v->creq, n);
  case D_CONN_RESP:
    return zkw_encode_connect_resp(buf, cap, &v->cresp, n);
  case D_REQ:
    return zkw_encode_request(buf, cap, &v->req, n);
  default:
    return zkw_encode_reply(buf, cap, &v->rep, f->req_type, n);
  }
}

static const struct fixture *cur_fx;

static void test_fixture_decode(void) {
  const struct fixture *f = cur_fx;
  struct bld b;
  f->build(&b);
  b_end(&b);
  union view v;
  ASSERT_STATUS(decode_fx(f, b.b + 4, b.n - 4, &v), ZKW_OK);
  f->check(&v);
  ASSERT_OK_SO_FAR();

  /* encode(decode(x)) == x, or a prefix of x's body when x has trailing bytes. */
  uint8_t out[BLD_CAP];
  size_t n = 0;
  ASSERT_STATUS(encode_fx(f, &v, out, sizeof out, &n), ZKW_OK);
  if (f->trailing == 0) {
    ASSERT_MEMEQ(out, n, b.b, b.n);
  } else if (f->trailing == 1) {
    ASSERT_TRUE(n < b.n);
    ASSERT_MEMEQ(out + 4, n - 4, b.b + 4, n - 4);
  } else {
    ASSERT_EQ(n, b.n);
    for (size_t i = 0; i < n; i++)
      if (out[i] != b.b[i]) ASSERT_TRUE(out[i] == 1 && b.b[i] > 1);
  }
  /* The re-encoded frame decodes to an equal view. */
  union view v2;
  ASSERT_STATUS(decode_fx(f, out + 4, n - 4, &v2), ZKW_OK);
  f->check(&v2);
  ASSERT_OK_SO_FAR();

  /* Every smaller output buffer fails cleanly with ZKW_E_NOSPACE. */
  for (size_t cap = 0; cap < n; cap++) {
    size_t n2 = 12345;
    ASSERT_STATUS(encode_fx(f, &v, out, cap, &n2), ZKW_E_NOSPACE);
    ASSERT_EQ(n2, 12345);
  }
  /* Every truncation of the body fails (never reads past it) unless it only
   * cut trailing bytes or the optional readOnly byte. */
  for (size_t cut = 0; cut + 4 < b.n; cut++) {
    int st = decode_fx(f, b.b + 4, cut, &v2);
    if (st == ZKW_OK) ASSERT_TRUE(f->trailing == 1 || f->dir == D_CONN_REQ || f->dir == D_CONN_RESP);
  }
}

/* Feeds a byte stream to zkw_frame_next in chunks and checks that exactly the
 * expected frames come out. */
struct stream {
  uint8_t buf[1 << 16];
  size_t len;
  const uint8_t *want;
  size_t want_len, want_off;
  size_t frames;
  int err;
};

static void stream_push(struct stream *s, const uint8_t *p, size_t n, uint32_t min) {
  if (s->len + n > sizeof s->buf) abort();
  memcpy(s->buf + s->len, p, n);
  s->len += n;
  while (!s->err) {
    size_t fl = 0;
    int st = zkw_frame_next(s->buf, s->len, min, 0xfffff, &fl);
    if (st == ZKW_AGAIN) return;
    if (st != ZKW_OK) {
      s->err = st;
      return;
    }
    if (fl > s->len || s->want_off + fl > s->want_len || memcmp(s->buf, s->want + s->want_off, fl) != 0) {
      s->err = -100;
      return;
    }
    s->want_off += fl;
    s->frames++;
    memmove(s->buf, s->buf + fl, s->len - fl);
    s->len -= fl;
  }
}

static struct stream strm;

/* Pushes `all` cut at the given points (sorted offsets) and checks the result. */
static void check_split(const uint8_t *all, size_t n, const size_t *cuts, size_t ncuts, uint32_t min,
                        size_t nframes) {
  memset(&strm, 0, sizeof strm);
  strm.want = all;
  strm.want_len = n;
  size_t prev = 0;
  for (size_t i = 0; i <= ncuts; i++) {
    size_t end = i < ncuts ? cuts[i] : n;
    stream_push(&strm, all + prev, end - prev, min);
    prev = end;
  }
  ASSERT_STATUS(strm.err, ZKW_OK);
  ASSERT_EQ(strm.frames, nframes);
  ASSERT_EQ(strm.want_off, n);
  ASSERT_EQ(strm.len, 0);
}

static void sort_cuts(size_t *c, size_t n) {
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && c[j - 1] > c[j]; j--) {
      size_t t = c[j];
      c[j] = c[j - 1];
      c[j - 1] = t;
    }
}

static void test_fixture_framing(void) {
  const struct fixture *f = cur_fx;
  struct bld b;
  f->build(&b);
  b_end(&b);
  uint32_t min = dir_min(f->dir);
  /* One byte at a time. */
  size_t cuts[BLD_CAP];
  for (size_t i = 0; i + 1 < b.n; i++)
    cuts[i] = i + 1;
  check_split(b.b, b.n, cuts, b.n - 1, min, 1);
  ASSERT_OK_SO_FAR();
  /* Random 2- and 3-way splits. */
  for (int t = 0; t < 40; t++) {
    size_t k = (size_t)(t % 2) + 1;
    for (size_t i = 0; i < k; i++)
      cuts[i] = rng_below(b.n + 1);
    sort_cuts(cuts, k);
    check_split(b.b, b.n, cuts, k, min, 1);
    ASSERT_OK_SO_FAR();
  }
}

static uint8_t concat_buf[1 << 16];

static void test_concatenated(enum dir d) {
  size_t n = 0, frames = 0;
  for (int rep = 0; rep < 3; rep++)
    for (size_t i = 0; i < NFIX; i++) {
      if (fixtures[i].dir != d) continue;
      struct bld b;
      fixtures[i].build(&b);
      b_end(&b);
      ASSERT_TRUE(n + b.n <= sizeof concat_buf);
      memcpy(concat_buf + n, b.b, b.n);
      n += b.n;
      frames++;
    }
  ASSERT_TRUE(frames > 0);
  uint32_t min = dir_min(d);
  /* All at once, then in random chunks. */
  check_split(concat_buf, n, NULL, 0, min, frames);
  ASSERT_OK_SO_FAR();
  size_t cuts[64];
  for (int t = 0; t < 50; t++) {
    size_t k = 1 + rng_below(63);
    for (size_t i = 0; i < k; i++)
      cuts[i] = rng_below(n + 1);
    sort_cuts(cuts, k);
    check_split(concat_buf, n, cuts, k, min, frames);
    ASSERT_OK_SO_FAR();
  }
  /* And every frame decodes in place, straight out of the big buffer. */
  size_t off = 0;
  for (size_t i = 0; i < NFIX; i++) {
    if (fixtures[i].dir != d) continue;
    size_t fl = 0;
    ASSERT_STATUS(zkw_frame_next(concat_buf + off, n - off, min, 0xfffff, &fl), ZKW_OK);
    union view v;
    ASSERT_STATUS(decode_fx(&fixtures[i], concat_buf + off + 4, fl - 4, &v), ZKW_OK);
    off += fl;
  }
}
static void test_concat_conn_req(void) {
  test_concatenated(D_CONN_REQ);
}
static void test_concat_conn_resp(void) {
  test_concatenated(D_CONN_RESP);
}
static void test_concat_requests(void) {
  test_concatenated(D_REQ);
}
static void test_concat_replies(void) {
  test_concatenated(D_REP);
}

/* Every opcode a client may send has a request fixture, and every opcode with
 * a reply body kind has a reply fixture. */
static void test_every_opcode_covered(void) {
  static const struct {
    int32_t code;
    enum zkw_req_kind req;
    enum zkw_rep_kind rep;
  } ops[] = {
#define ZKW_X_ROW(name, code, str, req, rep) {code, req, rep},
      ZKW_OPCODES(ZKW_X_ROW)
#undef ZKW_X_ROW
  };
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    int have_req = 0, have_rep = 0;
    for (size_t i = 0; i < NFIX; i++) {
      struct bld b;
      fixtures[i].build(&b);
      b_end(&b);
      if (fixtures[i].dir == D_REQ && zkw_load_be32(b.b + 8) == (uint32_t)ops[o].code) have_req = 1;
      if (fixtures[i].dir == D_REP && fixtures[i].req_type == ops[o].code) have_rep = 1;
    }
    if (ops[o].req != ZKW_REQ_INVALID && !have_req) {
      fprintf(stderr, "    no request fixture for %s\n", zkw_op_name(ops[o].code));
      ASSERT_TRUE(have_req);
    }
    if (ops[o].rep != ZKW_REP_INVALID && !have_rep) {
      fprintf(stderr, "    no reply fixture for %s\n", zkw_op_name(ops[o].code));
      ASSERT_TRUE(have_rep);
    }
  }
}

/* ---- malformed input ---------------------------------------------------------- */

enum mkind { M_FRAME_REQ, M_FRAME_REP, M_CONN_REQ, M_CONN_RESP, M_REQ, M_REP };

struct malformed {
  const char *name;
  enum mkind kind;
  int32_t req_type;
  void (*build)(struct bld *);
  int want;
};

static void bad_len7(struct bld *b) {
  b_frame(b);
  b_raw(b, "\0\0\0\1\0\0\0", 7);
}
static void bad_len15(struct bld *b) {
  b_frame(b);
  b_raw(b, "\0\0\0\1\0\0\0\0\0\0\0\1\0\0\0", 15);
}
static void bad_len_over_cap(struct bld *b) {
  b_u32(b, 0x100000);
}
static void bad_len_minus1(struct bld *b) {
  b_i32(b, -1);
}
static void bad_len_minus2(struct bld *b) {
  b_i32(b, -2);
}
static void bad_len_int_min(struct bld *b) {
  b_i32(b, INT32_MIN);
}
static void bad_req_body4(struct bld *b) {
  b_frame(b);
  b_i32(b, 1);
}
static void bad_rep_body12(struct bld *b) {
  b_frame(b);
  b_i32(b, 1);
  b_i64(b, 1);
}
static void bad_path_len_minus2(struct bld *b) {
  b_req(b, 1, 1);
  b_i32(b, -2);
  b_raw(b, "/abcdef", 7);
}
static void bad_path_len_int_min(struct bld *b) {
  b_req(b, 1, 4);
  b_i32(b, INT32_MIN);
  b_bool(b, 0);
}
static void bad_path_past_frame(struct bld *b) {
  b_req(b, 1, 4);
  b_i32(b, 100);
  b_raw(b, "/ab", 3);
}
static void bad_data_past_frame(struct bld *b) {
  b_req(b, 1, 5);
  b_str(b, "/a");
  b_i32(b, INT32_MAX);
  b_i32(b, 0);
}
static void bad_data_len_minus2(struct bld *b) {
  b_req(b, 1, 5);
  b_str(b, "/a");
  b_i32(b, -2);
  b_i32(b, 0);
}
static void bad_acl_count_minus2(struct bld *b) {
  b_req(b, 1, 1);
  b_str(b, "/a");
  b_buf(b, "", 0);
  b_i32(b, -2);
  b_i32(b, 0);
}
static void bad_acl_count_huge(struct bld *b) {
  b_req(b, 1, 7);
  b_str(b, "/a");
  b_i32(b, 0x7fffffff);
  b_acl(b, 31, "world", "anyone");
  b_i32(b, 0);
}
static void bad_children_count_huge(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_i32(b, 0x7fffffff);
  b_str(b, "a");
}
static void bad_children_count_1000(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_i32(b, 1000);
  b_str(b, "abcd");
}
static void bad_children_count_int_min(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_i32(b, INT32_MIN);
}
static void bad_children_missing_elem(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_i32(b, 2);
  b_str(b, "abcdef");
}
static void bad_set_watches_count(struct bld *b) {
  b_req(b, -8, 101);
  b_i64(b, 1);
  b_i32(b, -5);
}
static void bad_who_am_i_count(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_i32(b, 3);
  b_str(b, "ip");
  b_str(b, "1.2.3.4");
}
#define BAD_OPCODE(n, code)                                                                                  \
  static void bad_op_##n(struct bld *b) {                                                                    \
    b_req(b, 1, code);                                                                                       \
    b_str(b, "/a");                                                                                          \
  }
BAD_OPCODE(0, 0)
BAD_OPCODE(20, 20)
BAD_OPCODE(m10, -10)
BAD_OPCODE(m1, -1)
BAD_OPCODE(10, 10)
BAD_OPCODE(23, 23)
BAD_OPCODE(99, 99)
BAD_OPCODE(108, 108)
BAD_OPCODE(m3, -3)
BAD_OPCODE(m12, -12)
BAD_OPCODE(max, INT32_MAX)
BAD_OPCODE(min, INT32_MIN)
static void bad_multi_no_end(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 2, 0, -1);
  b_str(b, "/a");
  b_i32(b, -1);
}
static void bad_multi_empty_body(struct bld *b) {
  b_req(b, 1, 14);
}
static void bad_multi_read_empty_body(struct bld *b) {
  b_req(b, 1, 22);
}
static void bad_multi_partial_header(struct bld *b) {
  b_req(b, 1, 14);
  b_raw(b, "\xff\xff\xff\xff\x01", 5);
}
static void bad_multi_mixed_read(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 2, 0, -1);
  b_str(b, "/a");
  b_i32(b, -1);
  b_mhdr(b, 4, 0, -1);
  b_str(b, "/a");
  b_bool(b, 0);
  b_mend(b);
}
static void bad_multi_read_mixed_write(struct bld *b) {
  b_req(b, 1, 22);
  b_mhdr(b, 8, 0, -1);
  b_str(b, "/a");
  b_bool(b, 0);
  b_mhdr(b, 1, 0, -1);
  b_str(b, "/b");
  b_buf(b, "", 0);
  b_i32(b, 0);
  b_i32(b, 0);
  b_mend(b);
}
static void bad_multi_read_set_data(struct bld *b) {
  b_req(b, 1, 22);
  b_mhdr(b, 5, 0, -1);
  b_str(b, "/a");
  b_buf(b, "", 0);
  b_i32(b, 0);
  b_mend(b);
}
static void bad_multi_exists_op(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 3, 0, -1);
  b_str(b, "/a");
  b_bool(b, 0);
  b_mend(b);
}
static void bad_multi_nested(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 14, 0, -1);
  b_mend(b);
  b_mend(b);
}
static void bad_multi_type_m1_not_done(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, -1, 0, -1);
  b_mend(b);
}
static void bad_multi_bad_end_marker(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 1, 1, -1);
}
static void bad_multi_truncated_op(struct bld *b) {
  b_req(b, 1, 14);
  b_mhdr(b, 1, 0, -1);
  b_str(b, "/a");
  b_buf(b, "", 0);
  b_i32(b, 0);
}
static void bad_multi_rep_no_end(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_mhdr(b, 2, 0, 0);
}
static void bad_multi_rep_empty_body(struct bld *b) {
  b_rep(b, 1, 1, 0);
}
static void bad_multi_rep_unknown_type(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_mhdr(b, 3, 0, 0);
  b_stat(b, 0);
  b_mend(b);
}
static void bad_multi_rep_truncated_err(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_mhdr(b, -1, 0, -101);
  b_raw(b, "\xff\xff", 2);
}
static void bad_stat_67(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_stat(b, 0);
  b->n--;
}
static void bad_get_data_stat_short(struct bld *b) {
  b_rep(b, 1, 1, 0);
  b_buf(b, "x", 1);
  b_i64(b, 1);
  b_i64(b, 2);
}
static void bad_delete_no_version(struct bld *b) {
  b_req(b, 1, 2);
  b_str(b, "/a");
  b_raw(b, "\0\0", 2);
}
static void bad_notification_path(struct bld *b) {
  b_rep(b, -1, -1, 0);
  b_i32(b, 1);
  b_i32(b, 3);
  b_i32(b, 10);
  b_raw(b, "/a", 2);
}
static void bad_notification_short(struct bld *b) {
  b_rep(b, -1, -1, 0);
  b_i32(b, 1);
}
static void bad_reply_body(struct bld *b) {
  b_rep(b, 5, 1, 0);
}
static void bad_conn_req_extra2(struct bld *b) {
  fx_conn_req45(b);
  b_u8(b, 0);
}
static void bad_conn_req_short(struct bld *b) {
  b_frame(b);
  b_raw(b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 20);
}
static void bad_conn_req_passwd_neg(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 0);
  b_i32(b, 1);
  b_i64(b, 0);
  b_i32(b, -2);
  b_raw(b, (const uint8_t[16]){0}, 16);
}
static void bad_conn_req_passwd_long(struct bld *b) {
  b_frame(b);
  b_i32(b, 0);
  b_i64(b, 0);
  b_i32(b, 1);
  b_i64(b, 0);
  b_i32(b, 40);
  b_raw(b, (const uint8_t[16]){0}, 16);
}
static void bad_conn_resp_extra2(struct bld *b) {
  fx_conn_resp37(b);
  b_u8(b, 1);
}
static void bad_conn_resp_short(struct bld *b) {
  b_frame(b);
  b_raw(b, "\0\0\0\0\0\0\0\0\0\0", 10);
}

static const struct malformed malformed[] = {
    {"frame_len_7_request", M_FRAME_REQ, 0, bad_len7, ZKW_E_FRAME_SHORT},
    {"frame_len_15_reply", M_FRAME_REP, 0, bad_len15, ZKW_E_FRAME_SHORT},
    {"frame_len_7_reply", M_FRAME_REP, 0, bad_len7, ZKW_E_FRAME_SHORT},
    {"frame_len_over_cap", M_FRAME_REQ, 0, bad_len_over_cap, ZKW_E_FRAME_LONG},
    {"frame_len_minus1", M_FRAME_REQ, 0, bad_len_minus1, ZKW_E_FRAME_LONG},
    {"frame_len_minus2", M_FRAME_REP, 0, bad_len_minus2, ZKW_E_FRAME_LONG},
    {"frame_len_int_min", M_FRAME_REQ, 0, bad_len_int_min, ZKW_E_FRAME_LONG},
    {"request_body_4", M_REQ, 0, bad_req_body4, ZKW_E_FRAME_SHORT},
    {"reply_body_12", M_REP, 1, bad_rep_body12, ZKW_E_FRAME_SHORT},
    {"path_len_minus2", M_REQ, 0, bad_path_len_minus2, ZKW_E_LENGTH},
    {"path_len_int_min", M_REQ, 0, bad_path_len_int_min, ZKW_E_LENGTH},
    {"path_past_frame", M_REQ, 0, bad_path_past_frame, ZKW_E_TRUNCATED},
    {"data_past_frame", M_REQ, 0, bad_data_past_frame, ZKW_E_TRUNCATED},
    {"data_len_minus2", M_REQ, 0, bad_data_len_minus2, ZKW_E_LENGTH},
    {"acl_count_minus2", M_REQ, 0, bad_acl_count_minus2, ZKW_E_LENGTH},
    {"acl_count_huge", M_REQ, 0, bad_acl_count_huge, ZKW_E_LENGTH},
    {"children_count_huge", M_REP, 8, bad_children_count_huge, ZKW_E_LENGTH},
    {"children_count_1000", M_REP, 8, bad_children_count_1000, ZKW_E_LENGTH},
    {"children_count_int_min", M_REP, 12, bad_children_count_int_min, ZKW_E_LENGTH},
    {"children_missing_element", M_REP, 103, bad_children_missing_elem, ZKW_E_TRUNCATED},
    {"set_watches_count_minus5", M_REQ, 0, bad_set_watches_count, ZKW_E_LENGTH},
    {"who_am_i_count", M_REP, 107, bad_who_am_i_count, ZKW_E_LENGTH},
    {"opcode_0", M_REQ, 0, bad_op_0, ZKW_E_OPCODE},
    {"opcode_20", M_REQ, 0, bad_op_20, ZKW_E_OPCODE},
    {"opcode_m10", M_REQ, 0, bad_op_m10, ZKW_E_OPCODE},
    {"opcode_m1", M_REQ, 0, bad_op_m1, ZKW_E_OPCODE},
    {"opcode_10", M_REQ, 0, bad_op_10, ZKW_E_OPCODE},
    {"opcode_23", M_REQ, 0, bad_op_23, ZKW_E_OPCODE},
    {"opcode_99", M_REQ, 0, bad_op_99, ZKW_E_OPCODE},
    {"opcode_108", M_REQ, 0, bad_op_108, ZKW_E_OPCODE},
    {"opcode_m3", M_REQ, 0, bad_op_m3, ZKW_E_OPCODE},
    {"opcode_m12", M_REQ, 0, bad_op_m12, ZKW_E_OPCODE},
    {"opcode_int_max", M_REQ, 0, bad_op_max, ZKW_E_OPCODE},
    {"opcode_int_min", M_REQ, 0, bad_op_min, ZKW_E_OPCODE},
    {"multi_no_end_marker", M_REQ, 0, bad_multi_no_end, ZKW_E_MULTI},
    {"multi_empty_body", M_REQ, 0, bad_multi_empty_body, ZKW_E_MULTI},
    {"multi_read_empty_body", M_REQ, 0, bad_multi_read_empty_body, ZKW_E_MULTI},
    {"multi_partial_header", M_REQ, 0, bad_multi_partial_header, ZKW_E_TRUNCATED},
    {"multi_mixed_read_op", M_REQ, 0, bad_multi_mixed_read, ZKW_E_MULTI},
    {"multi_read_mixed_write_op", M_REQ, 0, bad_multi_read_mixed_write, ZKW_E_MULTI},
    {"multi_read_set_data", M_REQ, 0, bad_multi_read_set_data, ZKW_E_MULTI},
    {"multi_exists_op", M_REQ, 0, bad_multi_exists_op, ZKW_E_MULTI},
    {"multi_nested", M_REQ, 0, bad_multi_nested, ZKW_E_MULTI},
    {"multi_type_m1_not_done", M_REQ, 0, bad_multi_type_m1_not_done, ZKW_E_MULTI},
    {"multi_bad_end_marker", M_REQ, 0, bad_multi_bad_end_marker, ZKW_E_MULTI},
    {"multi_truncated_op", M_REQ, 0, bad_multi_truncated_op, ZKW_E_TRUNCATED},
    {"multi_reply_no_end_marker", M_REP, 14, bad_multi_rep_no_end, ZKW_E_MULTI},
    {"multi_reply_empty_body", M_REP, 14, bad_multi_rep_empty_body, ZKW_E_MULTI},
    {"multi_read_reply_empty_body", M_REP, 22, bad_multi_rep_empty_body, ZKW_E_MULTI},
    {"multi_reply_unknown_type", M_REP, 14, bad_multi_rep_unknown_type, ZKW_E_MULTI},
    {"multi_reply_truncated_error", M_REP, 14, bad_multi_rep_truncated_err, ZKW_E_TRUNCATED},
    {"stat_67_bytes", M_REP, 3, bad_stat_67, ZKW_E_TRUNCATED},
    {"get_data_stat_short", M_REP, 4, bad_get_data_stat_short, ZKW_E_TRUNCATED},
    {"delete_no_version", M_REQ, 0, bad_delete_no_version, ZKW_E_TRUNCATED},
    {"notification_path_past_frame", M_REP, 0, bad_notification_path, ZKW_E_TRUNCATED},
    {"notification_short", M_REP, 4, bad_notification_short, ZKW_E_TRUNCATED},
    {"reply_to_unknown_type", M_REP, 999, bad_reply_body, ZKW_E_OPCODE},
    {"reply_to_type_20", M_REP, 20, bad_reply_body, ZKW_E_OPCODE},
    {"reply_to_type_0", M_REP, 0, bad_reply_body, ZKW_E_OPCODE},
    {"reply_missing_body", M_REP, 4, bad_reply_body, ZKW_E_TRUNCATED},
    {"connect_req_2_extra_bytes", M_CONN_REQ, 0, bad_conn_req_extra2, ZKW_E_CONNECT},
    {"connect_req_20_bytes", M_CONN_REQ, 0, bad_conn_req_short, ZKW_E_CONNECT},
    {"connect_req_passwd_minus2", M_CONN_REQ, 0, bad_conn_req_passwd_neg, ZKW_E_LENGTH},
    {"connect_req_passwd_past_frame", M_CONN_REQ, 0, bad_conn_req_passwd_long, ZKW_E_TRUNCATED},
    {"connect_resp_2_extra_bytes", M_CONN_RESP, 0, bad_conn_resp_extra2, ZKW_E_CONNECT},
    {"connect_resp_10_bytes", M_CONN_RESP, 0, bad_conn_resp_short, ZKW_E_CONNECT},
};
#define NBAD (sizeof malformed / sizeof malformed[0])

static const struct malformed *cur_bad;

static void test_malformed(void) {
  const struct malformed *m = cur_bad;
  struct bld b;
  b_init(&b);
  m->build(&b);
  if (m->kind != M_FRAME_REQ && m->kind != M_FRAME_REP) b_end(&b);
  const uint8_t *body = b.b + 4;
  size_t len = b.n - 4;
  size_t fl = 0;
  union view v;
  switch (m->kind) {
  case M_FRAME_REQ:
    ASSERT_STATUS(zkw_frame_next(b.b, b.n, ZKW_MIN_REQUEST, 0xfffff, &fl), m->want);
    break;
  case M_FRAME_REP:
    ASSERT_STATUS(zkw_frame_next(b.b, b.n, ZKW_MIN_REPLY, 0xfffff, &fl), m->want);
    break;
  case M_CONN_REQ:
    ASSERT_STATUS(zkw_decode_connect_req(body, len, &v.creq), m->want);
    break;
  case M_CONN_RESP:
    ASSERT_STATUS(zkw_decode_connect_resp(body, len, &v.cresp), m->want);
    break;
  case M_REQ:
    ASSERT_STATUS(zkw_decode_request(body, len, &v.req), m->want);
    break;
  case M_REP:
    ASSERT_STATUS(zkw_decode_reply(body, len, m->req_type, &v.rep), m->want);
    break;
  }
}

/* ---- smaller unit tests ---------------------------------------------------------- */

static void test_frame_next_edges(void) {
  uint8_t buf[32] = {0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 11};
  size_t fl = 0;
  for (size_t avail = 0; avail < 12; avail++)
    ASSERT_STATUS(zkw_frame_next(buf, avail, 8, 100, &fl), ZKW_AGAIN);
  ASSERT_STATUS(zkw_frame_next(buf, 12, 8, 100, &fl), ZKW_OK);
  ASSERT_EQ(fl, 12);
  ASSERT_STATUS(zkw_frame_next(buf, 32, 8, 8, &fl), ZKW_OK); /* N == max is fine */
  ASSERT_STATUS(zkw_frame_next(buf, 32, 9, 100, &fl), ZKW_E_FRAME_SHORT);
  ASSERT_STATUS(zkw_frame_next(buf, 4, 9, 100, &fl), ZKW_E_FRAME_SHORT); /* known from the prefix */
  ASSERT_STATUS(zkw_frame_next(buf, 4, 0, 7, &fl), ZKW_E_FRAME_LONG);
  uint8_t big[4] = {0x7f, 0xff, 0xff, 0xff};
  ASSERT_STATUS(zkw_frame_next(big, 4, 8, UINT32_MAX, &fl), ZKW_AGAIN);
  uint8_t zero[4] = {0};
  ASSERT_STATUS(zkw_frame_next(zero, 4, 0, 100, &fl), ZKW_OK);
  ASSERT_EQ(fl, 4);
}

static void test_four_letter_words(void) {
  static const char *const words[] = {"conf", "cons", "crst", "dirs", "dump", "envi", "gtmk", "ruok", "stmk",
                                      "srst", "srvr", "stat", "wchc", "wchp", "wchs", "mntr", "isro", "hash"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    ASSERT_STREQ(zkw_four_letter_word((const uint8_t *)words[i]), words[i]);
  ASSERT_STREQ(zkw_four_letter_word((const uint8_t[4]){0xff, 0xf4, 0xff, 0xfd}), "telnet-close");
  ASSERT_TRUE(zkw_four_letter_word((const uint8_t *)"RUOK") == NULL);
  ASSERT_TRUE(zkw_four_letter_word((const uint8_t *)"ruo ") == NULL);
  ASSERT_TRUE(zkw_four_letter_word((const uint8_t[4]){0, 0, 0, 45}) == NULL);
  ASSERT_TRUE(zkw_four_letter_word((const uint8_t[4]){0, 0, 0, 44}) == NULL);
  ASSERT_TRUE(zkw_four_letter_word((const uint8_t[4]){0xff, 0xf4, 0xff, 0xfe}) == NULL);
  /* Every word, read as a frame length, is beyond the default jute.maxbuffer. */
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t fl;
    ASSERT_STATUS(zkw_frame_next((const uint8_t *)words[i], 4, 0, 0xfffff, &fl), ZKW_E_FRAME_LONG);
  }
}

static void test_op_tables(void) {
  int seen[ZKW_OP_COUNT] = {0};
  static const int32_t codes[] = {
#define ZKW_X_CODE(name, code, str, req, rep) code,
      ZKW_OPCODES(ZKW_X_CODE)
#undef ZKW_X_CODE
  };
  ASSERT_EQ(sizeof codes / sizeof codes[0], ZKW_OP_COUNT);
  for (int i = 0; i < ZKW_OP_COUNT; i++) {
    int idx = zkw_op_index(codes[i]);
    ASSERT_TRUE(idx >= 0 && idx < ZKW_OP_COUNT);
    ASSERT_EQ(seen[idx], 0);
    seen[idx] = 1;
    ASSERT_TRUE(strcmp(zkw_op_name(codes[i]), "unknown") != 0);
  }
  ASSERT_EQ(zkw_op_index(10), -1);
  ASSERT_EQ(zkw_op_index(1000), -1);
  ASSERT_STREQ(zkw_op_name(ZKW_OP_CREATE), "create");
  ASSERT_STREQ(zkw_op_name(ZKW_OP_MULTI_READ), "multiRead");
  ASSERT_STREQ(zkw_op_name(ZKW_OP_CLOSE_SESSION), "closeSession");
  ASSERT_STREQ(zkw_op_name(23), "unknown");
  ASSERT_EQ(zkw_op_req_kind(ZKW_OP_CREATE_TTL), ZKW_REQ_CREATE_TTL);
  ASSERT_EQ(zkw_op_req_kind(23), ZKW_REQ_INVALID);
  ASSERT_EQ(zkw_op_rep_kind(ZKW_OP_WHO_AM_I), ZKW_REP_CLIENT_INFO);
  ASSERT_EQ(zkw_op_rep_kind(-5), ZKW_REP_INVALID);
  ASSERT_STREQ(zkw_zk_error_name(0), "OK");
  ASSERT_STREQ(zkw_zk_error_name(-101), "NONODE");
  ASSERT_STREQ(zkw_zk_error_name(-127), "THROTTLEDOP");
  ASSERT_STREQ(zkw_zk_error_name(-126), "UNKNOWN");
  for (int s = -9; s <= 1; s++)
    ASSERT_TRUE(strcmp(zkw_strerror(s), "unknown status") != 0);
  ASSERT_STREQ(zkw_strerror(-42), "unknown status");
}

static void test_reader_primitives(void) {
  const uint8_t in[] = {0xff, 0xff, 0xff, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 2, 'h', 'i'};
  struct zkw_rd r;
  zkw_rd_init(&r, in, sizeof in);
  ASSERT_EQ(zkw_rd_int(&r), -2);
  ASSERT_EQ(zkw_rd_long(&r), INT64_MIN);
  ASSERT_TRUE(zkw_rd_bool(&r));
  ASSERT_BYTES(zkw_rd_bytes(&r), "hi");
  ASSERT_EQ(zkw_rd_left(&r), 0);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_OK);
  /* Sticky: the first error wins and later reads give zeros. */
  ASSERT_EQ(zkw_rd_int(&r), 0);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_E_TRUNCATED);
  zkw_rd_fail(&r, ZKW_E_LENGTH);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_E_TRUNCATED);
  zkw_rd_init(&r, in, sizeof in);
  zkw_rd_skip(&r, 12);
  ASSERT_TRUE(zkw_rd_bool(&r));
  struct zkw_stat s = zkw_rd_stat(&r);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_E_TRUNCATED);
  ASSERT_EQ(s.czxid, 0);
  ASSERT_EQ(zkw_rd_left(&r), 0);
  /* An empty or NULL range. */
  zkw_rd_init(&r, NULL, 0);
  zkw_rd_skip(&r, 0);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_OK);
  ASSERT_EQ(zkw_rd_long(&r), 0);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_E_TRUNCATED);
  /* Vectors: null, and counts that cannot fit. */
  const uint8_t nullvec[] = {0xff, 0xff, 0xff, 0xff};
  zkw_rd_init(&r, nullvec, 4);
  struct zkw_vec v = zkw_rd_vec(&r, zkw_rd_skip_string, 4);
  ASSERT_EQ(v.count, -1);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_OK);
  const uint8_t vec2[] = {0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0};
  zkw_rd_init(&r, vec2, sizeof vec2);
  v = zkw_rd_vec(&r, zkw_rd_skip_acl, 12);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_E_LENGTH);
  zkw_rd_init(&r, vec2, sizeof vec2);
  v = zkw_rd_vec(&r, zkw_rd_skip_string, 4);
  ASSERT_STATUS(zkw_rd_status(&r), ZKW_OK);
  ASSERT_EQ(v.count, 2);
  ASSERT_EQ(v.len, 8);
  struct zkw_rd it = zkw_vec_reader(v);
  ASSERT_BYTES(zkw_vec_string_at(&it), "");
  ASSERT_BYTES(zkw_vec_string_at(&it), "");
  ASSERT_EQ(zkw_rd_left(&it), 0);
  /* A null vector's reader is empty. */
  it = zkw_vec_reader((struct zkw_vec){-1, NULL, 0});
  ASSERT_EQ(zkw_rd_left(&it), 0);
  (void)zkw_vec_string_at(&it);
  ASSERT_STATUS(zkw_rd_status(&it), ZKW_E_TRUNCATED);
}

static void test_writer_primitives(void) {
  uint8_t out[64];
  struct zkw_wr w;
  zkw_wr_init(&w, out, sizeof out);
  zkw_wr_int(&w, -2);
  zkw_wr_long(&w, INT64_MIN);
  zkw_wr_bool(&w, true);
  zkw_wr_bytes(&w, (struct zkw_bytes){(const uint8_t *)"hi", 2});
  zkw_wr_bytes(&w, (struct zkw_bytes){NULL, -1});
  zkw_wr_bytes(&w, (struct zkw_bytes){NULL, 0});
  ASSERT_STATUS(w.err, ZKW_OK);
  const uint8_t want[] = {0xff, 0xff, 0xff, 0xfe, 0x80, 0,    0,    0,    0,    0, 0, 0, 1, 0,
                          0,    0,    2,    'h',  'i',  0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  ASSERT_MEMEQ(out, w.len, want, sizeof want);
  zkw_wr_bytes(&w, (struct zkw_bytes){NULL, -2});
  ASSERT_STATUS(w.err, ZKW_E_VALUE);
  zkw_wr_init(&w, out, 3);
  zkw_wr_int(&w, 1);
  ASSERT_STATUS(w.err, ZKW_E_NOSPACE);
  ASSERT_EQ(w.len, 0);
  zkw_wr_bool(&w, true); /* sticky */
  ASSERT_EQ(w.len, 0);
  zkw_wr_init(&w, NULL, 0);
  zkw_wr_raw(&w, NULL, 0);
  ASSERT_STATUS(w.err, ZKW_OK);
  zkw_wr_long(&w, 1);
  ASSERT_STATUS(w.err, ZKW_E_NOSPACE);
}

static void test_encode_shorthands(void) {
  uint8_t out[16];
  size_t n = 0;
  ASSERT_STATUS(zkw_encode_ping(out, sizeof out, &n), ZKW_OK);
  ASSERT_MEMEQ(out, n, "\0\0\0\x08\xff\xff\xff\xfe\0\0\0\x0b", 12);
  ASSERT_STATUS(zkw_encode_close_session(out, sizeof out, 0x01020304, &n), ZKW_OK);
  ASSERT_MEMEQ(out, n, "\0\0\0\x08\x01\x02\x03\x04\xff\xff\xff\xf5", 12);
  ASSERT_STATUS(zkw_encode_ping(out, 11, &n), ZKW_E_NOSPACE);
  /* Encoding an opcode clients never send is refused. */
  struct zkw_request rq;
  memset(&rq, 0, sizeof rq);
  rq.type = 20;
  ASSERT_STATUS(zkw_encode_request(out, sizeof out, &rq, &n), ZKW_E_VALUE);
  rq.type = ZKW_OP_MULTI; /* a multi view without its ops */
  ASSERT_STATUS(zkw_encode_request(out, sizeof out, &rq, &n), ZKW_E_VALUE);
  struct zkw_reply rp;
  memset(&rp, 0, sizeof rp);
  rp.xid = 5;
  ASSERT_STATUS(zkw_encode_reply(out, sizeof out, &rp, 23, &n), ZKW_E_VALUE);
}

/* Builds multi bodies with the zkw_wr_multi_* helpers and checks them against
 * the hand-built fixtures. */
static void test_multi_builders(void) {
  uint8_t ops[1024], frame[2048];
  struct zkw_wr w;
  zkw_wr_init(&w, ops, sizeof ops);
  struct zkw_op_req op;
  memset(&op, 0, sizeof op);
  op.type = ZKW_OP_DELETE;
  op.path = (struct zkw_bytes){(const uint8_t *)"/d", 2};
  op.version = -1;
  zkw_wr_multi_req(&w, &op);
  zkw_wr_multi_end(&w);
  ASSERT_STATUS(w.err, ZKW_OK);
  struct zkw_request rq;
  memset(&rq, 0, sizeof rq);
  rq.xid = 22;
  rq.type = ZKW_OP_MULTI;
  rq.op.type = ZKW_OP_MULTI;
  rq.op.ops = (struct zkw_vec){1, ops, w.len};
  size_t n = 0;
  ASSERT_STATUS(zkw_encode_request(frame, sizeof frame, &rq, &n), ZKW_OK);
  struct bld b;
  fx_rq_multi_trailing(&b);
  b.n -= 4; /* without the junk */
  b_end(&b);
  ASSERT_MEMEQ(frame, n, b.b, b.n);
  /* A sub-op type that cannot be in a multi is refused. */
  op.type = ZKW_OP_EXISTS;
  zkw_wr_multi_req(&w, &op);
  ASSERT_STATUS(w.err, ZKW_E_VALUE);

  /* Results: the failed-multi encoding. */
  zkw_wr_init(&w, ops, sizeof ops);
  static const int32_t errs[] = {0, -110, -2, -2};
  for (int i = 0; i < 4; i++) {
    struct zkw_op_rep res;
    memset(&res, 0, sizeof res);
    res.type = -1;
    res.err = errs[i];
    res.value = errs[i];
    zkw_wr_multi_rep(&w, &res);
  }
  zkw_wr_multi_end(&w);
  struct zkw_reply rp;
  memset(&rp, 0, sizeof rp);
  rp.xid = 21;
  rp.zxid = 0x10000000bLL;
  rp.op.results = (struct zkw_vec){4, ops, w.len};
  ASSERT_STATUS(zkw_encode_reply(frame, sizeof frame, &rp, ZKW_OP_MULTI, &n), ZKW_OK);
  fx_rp_multi_error(&b);
  b_end(&b);
  ASSERT_MEMEQ(frame, n, b.b, b.n);
  struct zkw_op_rep bad;
  memset(&bad, 0, sizeof bad);
  bad.type = ZKW_OP_EXISTS;
  zkw_wr_multi_rep(&w, &bad);
  ASSERT_STATUS(w.err, ZKW_E_VALUE);
}

/* A rewrite: decode, change a field, encode, decode again. */
static void test_rewrite(void) {
  struct bld b;
  fx_rq_create(&b);
  b_end(&b);
  struct zkw_request rq;
  ASSERT_STATUS(zkw_decode_request(b.b + 4, b.n - 4, &rq), ZKW_OK);
  static const char tagged[] = "ZKW1\0flink-jm-0\0\0\0\0\0\0\0\3tag\0x";
  rq.op.data = (struct zkw_bytes){(const uint8_t *)tagged, (int32_t)(sizeof tagged - 1)};
  uint8_t out[1024];
  size_t n = 0;
  ASSERT_STATUS(zkw_encode_request(out, sizeof out, &rq, &n), ZKW_OK);
  ASSERT_EQ(n, b.n - 5 + sizeof tagged - 1);
  struct zkw_request rq2;
  ASSERT_STATUS(zkw_decode_request(out + 4, n - 4, &rq2), ZKW_OK);
  ASSERT_MEMEQ(rq2.op.data.p, rq2.op.data.len, tagged, sizeof tagged - 1);
  ASSERT_BYTES(rq2.op.path, PATH);
  check_two_acls(rq2.op.acl);
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(rq2.op.flags, 1);
  /* zkw_wr_op_req writes the body alone. */
  struct zkw_wr w;
  zkw_wr_init(&w, out, sizeof out);
  zkw_wr_op_req(&w, &rq.op);
  ASSERT_STATUS(w.err, ZKW_OK);
  ASSERT_EQ(w.len, n - 12);
  struct zkw_op_req inval;
  memset(&inval, 0, sizeof inval);
  inval.type = 0;
  zkw_wr_op_req(&w, &inval);
  ASSERT_STATUS(w.err, ZKW_E_VALUE);
}

/* ---- seed corpus for tests/fuzz ---------------------------------------------------- */

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static int write_corpus(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    perror(dir);
    return 1;
  }
  static const char *const dir_names[] = {"connreq", "connresp", "req", "rep"};
  size_t files = 0;
  for (size_t i = 0; i < NFIX; i++) {
    struct bld b;
    fixtures[i].build(&b);
    b_end(&b);
    char name[128];
    snprintf(name, sizeof name, "%s-%s.bin", dir_names[fixtures[i].dir], fixtures[i].name);
    if (write_file(dir, name, b.b, b.n)) return 1;
    files++;
  }
  for (size_t i = 0; i < NBAD; i++) {
    struct bld b;
    b_init(&b);
    malformed[i].build(&b);
    if (malformed[i].kind != M_FRAME_REQ && malformed[i].kind != M_FRAME_REP) b_end(&b);
    char name[128];
    snprintf(name, sizeof name, "bad-%s.bin", malformed[i].name);
    if (write_file(dir, name, b.b, b.n)) return 1;
    files++;
  }
  /* Whole conversations: the handshake followed by the other frames. */
  for (int d = 0; d < 2; d++) {
    size_t n = 0;
    for (size_t i = 0; i < NFIX; i++) {
      enum dir want = d == 0 ? D_REQ : D_REP;
      if (fixtures[i].dir != want && !(i == (d == 0 ? 0 : 4))) continue;
      struct bld b;
      fixtures[i].build(&b);
      b_end(&b);
      memcpy(concat_buf + n, b.b, b.n);
      n += b.n;
    }
    if (write_file(dir, d == 0 ? "stream-requests.bin" : "stream-replies.bin", concat_buf, n)) return 1;
    files++;
  }
  printf("wrote %zu corpus files to %s\n", files, dir);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) return write_corpus(argv[2]);
  const char *seed_env = getenv("ZKW_TEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x5eed2024ULL;
  printf("codec: seed 0x%llx (set ZKW_TEST_SEED to change)\n", (unsigned long long)seed);
  rng_state = seed ? seed : 1;

  RUN(test_op_tables);
  RUN(test_reader_primitives);
  RUN(test_writer_primitives);
  RUN(test_frame_next_edges);
  RUN(test_four_letter_words);
  RUN(test_every_opcode_covered);
  char name[160];
  for (size_t i = 0; i < NFIX; i++) {
    cur_fx = &fixtures[i];
    snprintf(name, sizeof name, "decode %s", fixtures[i].name);
    RUN_NAMED(name, test_fixture_decode());
    snprintf(name, sizeof name, "framing %s", fixtures[i].name);
    RUN_NAMED(name, test_fixture_framing());
  }
  RUN(test_concat_conn_req);
  RUN(test_concat_conn_resp);
  RUN(test_concat_requests);
  RUN(test_concat_replies);
  for (size_t i = 0; i < NBAD; i++) {
    cur_bad = &malformed[i];
    snprintf(name, sizeof name, "malformed %s", malformed[i].name);
    RUN_NAMED(name, test_malformed());
  }
  RUN(test_encode_shorthands);
  RUN(test_multi_builders);
  RUN(test_rewrite);
  return zkw_test_summary("codec");
}
