/* zkw_rewrite.c: tagging lock creates, untagging getData replies, and the
 * /zookeeper/config rewrite. Allocation happens only for frames that change. */
#include "zkw_fault.h"
#include "zkw_rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_encode.h"

/* Room for any rewritten frame: the original plus one tag header. */
static int reserve(struct zkw_buf *out, size_t frame_len) {
  out->len = 0;
  return zkw_buf_reserve(out, frame_len + ZKW_TAG_MAX + 64) ? ZKW_E_NOSPACE : ZKW_OK;
}

/* The tagged data of one lock create, in a heap block the caller frees. */
static int tag_data(const struct zkw_tagger *t, struct zkw_bytes original, uint8_t **block,
                    struct zkw_bytes *out) {
  size_t cap = (original.len > 0 ? (size_t)original.len : 0) + ZKW_TAG_MAX + 32;
  *block = zkw_malloc(cap);
  if (!*block) return ZKW_E_NOSPACE;
  long n = zkw_tag_write(*block, cap, t->identity, t->incarnation, t->session_id, original);
  if (n < 0) return ZKW_E_NOSPACE;
  *out = (struct zkw_bytes){*block, (int32_t)n};
  return ZKW_OK;
}

static size_t request_size(const struct zkw_request *req) {
  return 64 + (req->op.path.len > 0 ? (size_t)req->op.path.len : 0) +
         (req->op.data.len > 0 ? (size_t)req->op.data.len : 0) + req->op.acl.len + req->op.ops.len;
}

static int rewrite_multi(const struct zkw_request *req, const struct zkw_tagger *t, struct zkw_buf *out,
                         int *locks) {
  struct zkw_multi_iter it = zkw_multi_iter(req->op.ops);
  struct zkw_op_req op;
  int rc;
  *locks = 0;
  /* First pass: any lock create at all? Most multis have none. */
  while ((rc = zkw_multi_next_req(&it, &op)) == ZKW_OK)
    if (zkw_is_lock_create(t->roots, op.type, op.flags, op.path)) (*locks)++;
  if (rc != ZKW_AGAIN) return rc;
  if (!*locks) return 0;
  rc = reserve(out, request_size(req) + (size_t)*locks * (ZKW_TAG_MAX + 32));
  if (rc) return rc;
  struct zkw_wr w;
  zkw_wr_init(&w, out->data, out->cap);
  zkw_wr_int(&w, 0); /* length, patched below */
  zkw_wr_int(&w, req->xid);
  zkw_wr_int(&w, req->type);
  it = zkw_multi_iter(req->op.ops);
  while ((rc = zkw_multi_next_req(&it, &op)) == ZKW_OK) {
    uint8_t *block = NULL;
    if (zkw_is_lock_create(t->roots, op.type, op.flags, op.path)) {
      rc = tag_data(t, op.data, &block, &op.data);
      if (rc) {
        free(block);
        return rc;
      }
    }
    zkw_wr_multi_req(&w, &op);
    free(block);
  }
  zkw_wr_multi_end(&w);
  if (w.err) return w.err;
  zkw_store_be32(out->data, (uint32_t)(w.len - 4));
  out->len = w.len;
  return 1;
}

int zkw_rewrite_request(const struct zkw_request *req, const struct zkw_tagger *t, struct zkw_buf *out,
                        int *locks) {
  *locks = 0;
  if (req->type == ZKW_OP_MULTI) return rewrite_multi(req, t, out, locks);
  if (!zkw_is_lock_create(t->roots, req->type, req->op.flags, req->op.path)) return 0;
  *locks = 1;
  struct zkw_request tagged = *req;
  uint8_t *block = NULL;
  int rc = tag_data(t, req->op.data, &block, &tagged.op.data);
  if (!rc) rc = reserve(out, request_size(&tagged));
  size_t len = 0;
  if (!rc) rc = zkw_encode_request(out->data, out->cap, &tagged, &len);
  free(block);
  if (rc) return rc;
  out->len = len;
  return 1;
}

static size_t reply_size(const struct zkw_reply *rep) {
  return 128 + (rep->op.data.len > 0 ? (size_t)rep->op.data.len : 0) + rep->op.list.len + rep->op.results.len;
}

/* Replaces data (and dataLength) of one getData result if it is tagged. */
static bool untag(struct zkw_op_rep *op) {
  struct zkw_tag tag;
  if (zkw_tag_parse(op->data, &tag) != 0) return false;
  op->data = tag.original;
  op->stat.data_length = tag.original.len > 0 ? tag.original.len : 0;
  return true;
}

static int untag_multi_read(const struct zkw_reply *rep, struct zkw_buf *out) {
  struct zkw_multi_iter it = zkw_multi_iter(rep->op.results);
  struct zkw_op_rep r;
  int rc, tagged = 0;
  while ((rc = zkw_multi_next_rep(&it, &r)) == ZKW_OK)
    if (r.type == ZKW_OP_GET_DATA && zkw_tag_parse(r.data, &(struct zkw_tag){0}) == 0) tagged++;
  if (rc != ZKW_AGAIN) return rc;
  if (!tagged) return 0;
  rc = reserve(out, reply_size(rep));
  if (rc) return rc;
  struct zkw_wr w;
  zkw_wr_init(&w, out->data, out->cap);
  zkw_wr_int(&w, 0);
  zkw_wr_int(&w, rep->xid);
  zkw_wr_long(&w, rep->zxid);
  zkw_wr_int(&w, rep->err);
  it = zkw_multi_iter(rep->op.results);
  while (zkw_multi_next_rep(&it, &r) == ZKW_OK) {
    if (r.type == ZKW_OP_GET_DATA) untag(&r);
    zkw_wr_multi_rep(&w, &r);
  }
  zkw_wr_multi_end(&w);
  if (w.err) return w.err;
  zkw_store_be32(out->data, (uint32_t)(w.len - 4));
  out->len = w.len;
  return 1;
}

int zkw_rewrite_untag_reply(const struct zkw_reply *rep, int32_t req_type, struct zkw_buf *out) {
  if (rep->err != 0 || rep->xid < 0) return 0;
  if (req_type == ZKW_OP_MULTI_READ) return untag_multi_read(rep, out);
  if (req_type != ZKW_OP_GET_DATA) return 0;
  struct zkw_reply copy = *rep;
  if (!untag(&copy.op)) return 0;
  int rc = reserve(out, reply_size(rep));
  size_t len = 0;
  if (!rc) rc = zkw_encode_reply(out->data, out->cap, &copy, req_type, &len);
  if (rc) return rc;
  out->len = len;
  return 1;
}

/* Dynamic config lines are `server.<id>=<host>:<p1>:<p2>[:<role>][;[<client host>:]<client port>]`
 * and `version=<hex>`. The first server line gets `;<listen>`, the others
 * lose their client address, so that the only client address is ours. */
int zkw_rewrite_config_reply(const struct zkw_reply *rep, const char *listen, struct zkw_buf *out) {
  if (rep->err != 0 || rep->op.data.len <= 0) return 0;
  size_t in_len = (size_t)rep->op.data.len, cap = in_len + strlen(listen) + 16;
  char *text = zkw_malloc(cap);
  if (!text) return ZKW_E_NOSPACE;
  size_t n = 0;
  bool first = true;
  const char *p = (const char *)rep->op.data.p, *end = p + in_len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = nl ? nl : end;
    size_t ll = (size_t)(line_end - p);
    if (ll > 7 && memcmp(p, "server.", 7) == 0) {
      const char *semi = memchr(p, ';', ll);
      size_t keep = semi ? (size_t)(semi - p) : ll;
      memcpy(text + n, p, keep);
      n += keep;
      if (first) n += (size_t)snprintf(text + n, cap - n, ";%s", listen);
      first = false;
    } else {
      memcpy(text + n, p, ll);
      n += ll;
    }
    if (nl) text[n++] = '\n';
    p = nl ? nl + 1 : end;
  }
  struct zkw_reply copy = *rep;
  copy.op.data = (struct zkw_bytes){(const uint8_t *)text, (int32_t)n};
  copy.op.stat.data_length = (int32_t)n;
  int rc = reserve(out, reply_size(rep) + strlen(listen) + 16);
  size_t len = 0;
  if (!rc) rc = zkw_encode_reply(out->data, out->cap, &copy, ZKW_OP_GET_DATA, &len);
  free(text);
  if (rc) return rc;
  out->len = len;
  return 1;
}
