/* zkw_encode.c: encoders for whole frames (zkw_encode.h).
 *
 * The exact inverse of zkw_codec.c: bodies are written by walking the same
 * field lists (zkw_fields.h) the decoder walks, vectors and multi bodies are
 * copied from the raw ranges of their views, and the frame length is patched
 * in at the end. For every valid frame without trailing bytes,
 * encode(decode(x)) == x byte for byte (bools are written as 0/1). */
#include "zkw_encode.h"

#include "zkw_fields.h"

static void wr_vec(struct zkw_wr *w, struct zkw_vec v) {
  if (w->err) return;
  if (v.count < -1 || (v.count == -1 && v.len != 0)) {
    w->err = ZKW_E_VALUE;
    return;
  }
  zkw_wr_int(w, v.count);
  zkw_wr_raw(w, v.p, v.len);
}

/* Multi bodies are copied as they are: the view covers every sub-op and the
 * end marker, so an empty range cannot be a multi. */
static void wr_multi_raw(struct zkw_wr *w, struct zkw_vec v) {
  if (w->err) return;
  if (v.len == 0) {
    w->err = ZKW_E_VALUE;
    return;
  }
  zkw_wr_raw(w, v.p, v.len);
}

static void wr_req_fields(struct zkw_wr *w, const uint8_t *f, const struct zkw_op_req *op) {
  for (int i = 0; i < ZKW_MAX_FIELDS && f[i] != ZKW_F_END; i++) {
    switch ((enum zkw_req_field)f[i]) {
    case ZKW_F_END:
      break;
    case ZKW_F_PATH:
      zkw_wr_bytes(w, op->path);
      break;
    case ZKW_F_DATA:
      zkw_wr_bytes(w, op->data);
      break;
    case ZKW_F_ACL:
      wr_vec(w, op->acl);
      break;
    case ZKW_F_FLAGS:
      zkw_wr_int(w, op->flags);
      break;
    case ZKW_F_VERSION:
      zkw_wr_int(w, op->version);
      break;
    case ZKW_F_MODE:
      zkw_wr_int(w, op->mode);
      break;
    case ZKW_F_WATCH:
      zkw_wr_bool(w, op->watch);
      break;
    case ZKW_F_TTL:
      zkw_wr_long(w, op->ttl);
      break;
    case ZKW_F_SCHEME:
      zkw_wr_bytes(w, op->scheme);
      break;
    case ZKW_F_LEAVING:
      zkw_wr_bytes(w, op->leaving);
      break;
    case ZKW_F_NEW_MEMBERS:
      zkw_wr_bytes(w, op->new_members);
      break;
    case ZKW_F_ZXID:
      zkw_wr_long(w, op->zxid);
      break;
    case ZKW_F_WATCHES0:
    case ZKW_F_WATCHES1:
    case ZKW_F_WATCHES2:
    case ZKW_F_WATCHES3:
    case ZKW_F_WATCHES4:
      wr_vec(w, op->watches[f[i] - ZKW_F_WATCHES0]);
      break;
    case ZKW_F_MULTI:
    case ZKW_F_MULTI_READ:
      wr_multi_raw(w, op->ops);
      break;
    }
  }
}

static void wr_rep_fields(struct zkw_wr *w, const uint8_t *f, const struct zkw_op_rep *op) {
  for (int i = 0; i < ZKW_MAX_FIELDS && f[i] != ZKW_R_END; i++) {
    switch ((enum zkw_rep_field)f[i]) {
    case ZKW_R_END:
      break;
    case ZKW_R_PATH:
      zkw_wr_bytes(w, op->path);
      break;
    case ZKW_R_DATA:
      zkw_wr_bytes(w, op->data);
      break;
    case ZKW_R_STAT:
      zkw_wr_stat(w, &op->stat);
      break;
    case ZKW_R_STRINGS:
    case ZKW_R_ACLS:
    case ZKW_R_INFOS:
      wr_vec(w, op->list);
      break;
    case ZKW_R_VALUE:
      zkw_wr_int(w, op->value);
      break;
    case ZKW_R_MULTI:
      wr_multi_raw(w, op->results);
      break;
    }
  }
}

/* Frame helpers: reserve the length prefix, then patch it. */
static void frame_begin(struct zkw_wr *w, uint8_t *buf, size_t cap) {
  zkw_wr_init(w, buf, cap);
  zkw_wr_int(w, 0);
}

static int frame_end(struct zkw_wr *w, size_t *out_len) {
  if (w->err) return w->err;
  if (w->len - 4 > INT32_MAX) return ZKW_E_VALUE;
  zkw_store_be32(w->p, (uint32_t)(w->len - 4));
  *out_len = w->len;
  return ZKW_OK;
}

static void wr_read_only(struct zkw_wr *w, bool has, bool ro) {
  if (has) zkw_wr_bool(w, ro);
}

int zkw_encode_connect_req(uint8_t *buf, size_t cap, const struct zkw_connect_req *req, size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, req->protocol_version);
  zkw_wr_long(&w, req->last_zxid_seen);
  zkw_wr_int(&w, req->timeout);
  zkw_wr_long(&w, req->session_id);
  zkw_wr_bytes(&w, req->passwd);
  wr_read_only(&w, req->has_read_only, req->read_only);
  return frame_end(&w, out_len);
}

int zkw_encode_connect_resp(uint8_t *buf, size_t cap, const struct zkw_connect_resp *resp, size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, resp->protocol_version);
  zkw_wr_int(&w, resp->timeout);
  zkw_wr_long(&w, resp->session_id);
  zkw_wr_bytes(&w, resp->passwd);
  wr_read_only(&w, resp->has_read_only, resp->read_only);
  return frame_end(&w, out_len);
}

int zkw_encode_request(uint8_t *buf, size_t cap, const struct zkw_request *req, size_t *out_len) {
  const uint8_t *f = zkw_req_fields(zkw_op_req_kind(req->type));
  if (!f) return ZKW_E_VALUE;
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, req->xid);
  zkw_wr_int(&w, req->type);
  wr_req_fields(&w, f, &req->op);
  return frame_end(&w, out_len);
}

int zkw_encode_reply(uint8_t *buf, size_t cap, const struct zkw_reply *rep, int32_t req_type,
                     size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, rep->xid);
  zkw_wr_long(&w, rep->zxid);
  zkw_wr_int(&w, rep->err);
  if (rep->xid == ZKW_XID_NOTIFICATION) {
    zkw_wr_int(&w, rep->event.type);
    zkw_wr_int(&w, rep->event.state);
    zkw_wr_bytes(&w, rep->event.path);
  } else if (rep->xid != ZKW_XID_PING && rep->xid != ZKW_XID_AUTH && rep->xid != ZKW_XID_SET_WATCHES) {
    const uint8_t *f = zkw_rep_fields(zkw_op_rep_kind(req_type));
    if (!f) return ZKW_E_VALUE;
    if (rep->err == 0) wr_rep_fields(&w, f, &rep->op);
  }
  return frame_end(&w, out_len);
}

void zkw_wr_op_req(struct zkw_wr *w, const struct zkw_op_req *op) {
  const uint8_t *f = zkw_req_fields(zkw_op_req_kind(op->type));
  if (!f) {
    if (!w->err) w->err = ZKW_E_VALUE;
    return;
  }
  wr_req_fields(w, f, op);
}

void zkw_wr_multi_req(struct zkw_wr *w, const struct zkw_op_req *op) {
  if (!zkw_multi_write_type(op->type) && !zkw_multi_read_type(op->type)) {
    if (!w->err) w->err = ZKW_E_VALUE;
    return;
  }
  zkw_wr_int(w, op->type);
  zkw_wr_bool(w, false);
  zkw_wr_int(w, -1);
  zkw_wr_op_req(w, op);
}

void zkw_wr_multi_rep(struct zkw_wr *w, const struct zkw_op_rep *rep) {
  const uint8_t *f = zkw_multi_result_fields(rep->type);
  if (!f) {
    if (!w->err) w->err = ZKW_E_VALUE;
    return;
  }
  zkw_wr_int(w, rep->type);
  zkw_wr_bool(w, false);
  zkw_wr_int(w, rep->err);
  wr_rep_fields(w, f, rep);
}

void zkw_wr_multi_end(struct zkw_wr *w) {
  zkw_wr_int(w, -1);
  zkw_wr_bool(w, true);
  zkw_wr_int(w, -1);
}

int zkw_encode_multi(uint8_t *buf, size_t cap, int32_t xid, const struct zkw_op_req *ops, int n,
                     size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, xid);
  zkw_wr_int(&w, ZKW_OP_MULTI);
  for (int i = 0; i < n; i++)
    zkw_wr_multi_req(&w, &ops[i]);
  zkw_wr_multi_end(&w);
  return frame_end(&w, out_len);
}

int zkw_encode_close_session(uint8_t *buf, size_t cap, int32_t xid, size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, xid);
  zkw_wr_int(&w, ZKW_OP_CLOSE_SESSION);
  return frame_end(&w, out_len);
}

int zkw_encode_ping(uint8_t *buf, size_t cap, size_t *out_len) {
  struct zkw_wr w;
  frame_begin(&w, buf, cap);
  zkw_wr_int(&w, ZKW_XID_PING);
  zkw_wr_int(&w, ZKW_OP_PING);
  return frame_end(&w, out_len);
}
