/* fuzz_codec.c: libFuzzer target for protocol/.
 *
 * The input is read as a byte stream of frames (zkw_frame_next in a loop),
 * and the whole input and every frame body are decoded every way the proxy
 * decodes: ConnectRequest, ConnectResponse, request, and reply for one
 * opcode of every reply kind. Whatever decodes is walked completely (vectors,
 * multi sub-ops and results) and re-encoded; the encoding must reproduce the
 * input's bytes (bools aside, which are normalized to 1) up to where the
 * decoded fields end, and must decode again to the same bytes. Any
 * mismatch aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_encode.h"

#define FAIL(what)                                                                                           \
  do {                                                                                                       \
    fprintf(stderr, "fuzz_codec: %s (line %d)\n", what, __LINE__);                                           \
    abort();                                                                                                 \
  } while (0)

static uint8_t enc[1 << 21], enc2[1 << 21], ops_buf[1 << 21];

/* b (n bytes) must equal a (the original), except that a byte > 1 in a may
 * come back as 1 (a bool Java reads as true). */
static void same_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && !(b[i] == 1 && a[i] > 1)) FAIL("re-encoded bytes differ");
}

/* The frame enc[0..n) must be a length prefix plus a prefix of body. */
static void check_frame(const uint8_t *body, size_t len, const uint8_t *e, size_t n, int exact) {
  if (n < 4 || n - 4 > len) FAIL("encoding longer than the input");
  if (exact && n - 4 != len) FAIL("encoding shorter than an input without trailing bytes");
  if (zkw_load_be32(e) != n - 4) FAIL("bad length prefix");
  same_bytes(body, e + 4, n - 4);
}

static void walk_strings(struct zkw_vec v) {
  struct zkw_rd it = zkw_vec_reader(v);
  for (int32_t i = 0; i < v.count; i++)
    (void)zkw_vec_string_at(&it);
  if (zkw_rd_status(&it) != ZKW_OK || zkw_rd_left(&it) != 0) FAIL("string vector does not walk");
}
static void walk_acls(struct zkw_vec v) {
  struct zkw_rd it = zkw_vec_reader(v);
  for (int32_t i = 0; i < v.count; i++)
    (void)zkw_rd_acl(&it);
  if (zkw_rd_status(&it) != ZKW_OK || zkw_rd_left(&it) != 0) FAIL("ACL vector does not walk");
}
static void walk_infos(struct zkw_vec v) {
  struct zkw_rd it = zkw_vec_reader(v);
  for (int32_t i = 0; i < v.count; i++)
    (void)zkw_rd_client_info(&it);
  if (zkw_rd_status(&it) != ZKW_OK || zkw_rd_left(&it) != 0) FAIL("ClientInfo vector does not walk");
}

static void walk_op_req(const struct zkw_op_req *op) {
  walk_acls(op->acl);
  for (int i = 0; i < 5; i++)
    walk_strings(op->watches[i]);
}

/* Walks the sub-ops and rebuilds the body op by op: it must be the same. */
static void walk_multi_req(const struct zkw_op_req *op) {
  struct zkw_multi_iter it = zkw_multi_iter(op->ops);
  struct zkw_op_req sub;
  struct zkw_wr w;
  zkw_wr_init(&w, ops_buf, sizeof ops_buf);
  int32_t n = 0;
  int st;
  size_t start = 0;
  while ((st = zkw_multi_next_req(&it, &sub)) == ZKW_OK) {
    walk_op_req(&sub);
    zkw_wr_multi_req(&w, &sub);
    if (w.err || w.len != it.rd.off) FAIL("rebuilt sub-op has another length");
    /* The header's err is ignored by the server; clients send -1 and so
     * does zkw_wr_multi_req. Take the original's for the comparison. */
    memcpy(ops_buf + start + 5, op->ops.p + start + 5, 4);
    start = w.len;
    n++;
  }
  if (st != ZKW_AGAIN) FAIL("validated multi does not iterate");
  if (n != op->op_count || it.rd.off != op->ops.len) FAIL("multi op count or length");
  zkw_wr_multi_end(&w);
  if (w.err || w.len != op->ops.len) FAIL("rebuilt multi has another length");
  same_bytes(op->ops.p, ops_buf, w.len);
}

static void walk_op_rep(const struct zkw_op_rep *op, int32_t type) {
  switch (type) {
  case ZKW_OP_GET_ACL:
    walk_acls(op->list);
    break;
  case ZKW_OP_WHO_AM_I:
    walk_infos(op->list);
    break;
  default:
    walk_strings(op->list);
    break;
  }
}

static void walk_multi_rep(const struct zkw_op_rep *op) {
  struct zkw_multi_iter it = zkw_multi_iter(op->results);
  struct zkw_op_rep res;
  struct zkw_wr w;
  zkw_wr_init(&w, ops_buf, sizeof ops_buf);
  int32_t n = 0;
  int st;
  while ((st = zkw_multi_next_rep(&it, &res)) == ZKW_OK) {
    walk_op_rep(&res, res.type);
    zkw_wr_multi_rep(&w, &res);
    n++;
  }
  if (st != ZKW_AGAIN) FAIL("validated multi reply does not iterate");
  if (n != op->result_count || it.rd.off != op->results.len) FAIL("multi result count or length");
  zkw_wr_multi_end(&w);
  if (w.err || w.len != op->results.len) FAIL("rebuilt multi reply has another length");
  same_bytes(op->results.p, ops_buf, w.len);
}

/* Opcodes standing for every reply kind, plus invalid and unknown ones. */
static const int32_t reply_types[] = {
    ZKW_OP_CREATE,        ZKW_OP_DELETE,       ZKW_OP_EXISTS,
    ZKW_OP_GET_DATA,      ZKW_OP_GET_ACL,      ZKW_OP_GET_CHILDREN,
    ZKW_OP_GET_CHILDREN2, ZKW_OP_CHECK,        ZKW_OP_MULTI,
    ZKW_OP_CREATE2,       ZKW_OP_SASL,         ZKW_OP_GET_ALL_CHILDREN_NUMBER,
    ZKW_OP_WHO_AM_I,      ZKW_OP_NOTIFICATION, 999,
};

static void decode_all(const uint8_t *body, size_t len) {
  size_t n = 0, n2 = 0;

  struct zkw_connect_req creq;
  if (zkw_decode_connect_req(body, len, &creq) == ZKW_OK) {
    if (zkw_encode_connect_req(enc, sizeof enc, &creq, &n) != ZKW_OK) FAIL("connect req encode");
    check_frame(body, len, enc, n, 1);
  }
  struct zkw_connect_resp cresp;
  if (zkw_decode_connect_resp(body, len, &cresp) == ZKW_OK) {
    if (zkw_encode_connect_resp(enc, sizeof enc, &cresp, &n) != ZKW_OK) FAIL("connect resp encode");
    check_frame(body, len, enc, n, 1);
  }

  struct zkw_request req, req2;
  if (zkw_decode_request(body, len, &req) == ZKW_OK) {
    walk_op_req(&req.op);
    if (req.type == ZKW_OP_MULTI || req.type == ZKW_OP_MULTI_READ) walk_multi_req(&req.op);
    if (zkw_encode_request(enc, sizeof enc, &req, &n) != ZKW_OK) FAIL("request encode");
    check_frame(body, len, enc, n, 0);
    if (zkw_decode_request(enc + 4, n - 4, &req2) != ZKW_OK) FAIL("re-encoded request does not decode");
    if (zkw_encode_request(enc2, sizeof enc2, &req2, &n2) != ZKW_OK || n2 != n || memcmp(enc, enc2, n))
      FAIL("request encoding not stable");
  }

  for (size_t t = 0; t < sizeof reply_types / sizeof reply_types[0]; t++) {
    struct zkw_reply rep, rep2;
    int32_t type = reply_types[t];
    if (zkw_decode_reply(body, len, type, &rep) != ZKW_OK) continue;
    if (rep.xid != ZKW_XID_NOTIFICATION) {
      walk_op_rep(&rep.op, type);
      if (rep.op.results.len) walk_multi_rep(&rep.op);
    }
    if (zkw_encode_reply(enc, sizeof enc, &rep, type, &n) != ZKW_OK) FAIL("reply encode");
    check_frame(body, len, enc, n, 0);
    if (zkw_decode_reply(enc + 4, n - 4, type, &rep2) != ZKW_OK) FAIL("re-encoded reply does not decode");
    if (zkw_encode_reply(enc2, sizeof enc2, &rep2, type, &n2) != ZKW_OK || n2 != n || memcmp(enc, enc2, n))
      FAIL("reply encoding not stable");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 4) (void)zkw_four_letter_word(data);
  decode_all(data, size);

  /* The same bytes as a stream: every whole frame, whatever the minimum. */
  static const uint32_t mins[] = {0, ZKW_MIN_REQUEST, ZKW_MIN_REPLY};
  for (size_t m = 0; m < 3; m++) {
    size_t off = 0;
    while (off < size) {
      size_t fl = 0;
      int st = zkw_frame_next(data + off, size - off, mins[m], 1u << 20, &fl);
      if (st != ZKW_OK) break;
      if (fl < 4 + mins[m] || fl > size - off) FAIL("frame_next returned a bad frame length");
      if (m == 0) decode_all(data + off + 4, fl - 4);
      off += fl;
    }
  }
  return 0;
}
