/* zkw_codec.c: decoding of whole frames into views (zkw_codec.h).
 *
 * The frame splitter, the four-letter-word match, the connect handshake and
 * the table-driven request/reply decoders. Request and reply bodies are
 * decoded by walking the field list of the opcode's kind (zkw_fields.h);
 * multi bodies are validated completely at decode time so that a caller who
 * got ZKW_OK can iterate them without surprises. Nothing is read past the
 * body given; bytes left after the decoded fields are tolerated, as the
 * server does. */
#include "zkw_codec.h"

#include <string.h>

#include "zkw_fields.h"

int zkw_frame_next(const uint8_t *buf, size_t avail, uint32_t min_body, uint32_t max_body,
                   size_t *frame_len) {
  if (avail < 4) return ZKW_AGAIN;
  uint32_t n = zkw_load_be32(buf);
  if (n > INT32_MAX) return ZKW_E_FRAME_LONG; /* negative on the wire */
  if (n < min_body) return ZKW_E_FRAME_SHORT;
  if (n > max_body) return ZKW_E_FRAME_LONG;
  if (avail - 4 < n) return ZKW_AGAIN;
  *frame_len = 4 + (size_t)n;
  return ZKW_OK;
}

/* §1: the words FourLetterCommands knows, plus telnet's interrupt+do-timing. */
static const struct {
  uint32_t word;
  const char *name;
} four_letter_words[] = {
    {0x636f6e66, "conf"}, {0x636f6e73, "cons"}, {0x63727374, "crst"},         {0x64697273, "dirs"},
    {0x64756d70, "dump"}, {0x656e7669, "envi"}, {0x67746d6b, "gtmk"},         {0x72756f6b, "ruok"},
    {0x73746d6b, "stmk"}, {0x73727374, "srst"}, {0x73727672, "srvr"},         {0x73746174, "stat"},
    {0x77636863, "wchc"}, {0x77636870, "wchp"}, {0x77636873, "wchs"},         {0x6d6e7472, "mntr"},
    {0x6973726f, "isro"}, {0x68617368, "hash"}, {0xfff4fffd, "telnet-close"},
};

const char *zkw_four_letter_word(const uint8_t first4[4]) {
  uint32_t w = zkw_load_be32(first4);
  for (size_t i = 0; i < sizeof four_letter_words / sizeof four_letter_words[0]; i++)
    if (four_letter_words[i].word == w) return four_letter_words[i].name;
  return NULL;
}

/* The optional trailing readOnly byte of both handshake messages: present
 * when exactly one byte is left, absent when none is. */
static int rd_read_only(struct zkw_rd *r, bool *has, bool *val) {
  size_t left = zkw_rd_left(r);
  if (left > 1) return ZKW_E_CONNECT;
  if (left == 1) {
    *has = true;
    *val = zkw_rd_bool(r);
  }
  return zkw_rd_status(r);
}

int zkw_decode_connect_req(const uint8_t *body, size_t len, struct zkw_connect_req *out) {
  memset(out, 0, sizeof *out);
  if (len < ZKW_CONNECT_REQ_MIN) return ZKW_E_CONNECT;
  struct zkw_rd r;
  zkw_rd_init(&r, body, len);
  out->protocol_version = zkw_rd_int(&r);
  out->last_zxid_seen = zkw_rd_long(&r);
  out->timeout = zkw_rd_int(&r);
  out->session_id = zkw_rd_long(&r);
  out->passwd = zkw_rd_bytes(&r);
  return rd_read_only(&r, &out->has_read_only, &out->read_only);
}

int zkw_decode_connect_resp(const uint8_t *body, size_t len, struct zkw_connect_resp *out) {
  memset(out, 0, sizeof *out);
  if (len < ZKW_CONNECT_RESP_MIN) return ZKW_E_CONNECT;
  struct zkw_rd r;
  zkw_rd_init(&r, body, len);
  out->protocol_version = zkw_rd_int(&r);
  out->timeout = zkw_rd_int(&r);
  out->session_id = zkw_rd_long(&r);
  out->passwd = zkw_rd_bytes(&r);
  return rd_read_only(&r, &out->has_read_only, &out->read_only);
}

/* ---- field tables -------------------------------------------------------- */

static const uint8_t req_fields[][ZKW_MAX_FIELDS] = {
    [ZKW_REQ_NONE] = {ZKW_F_END},
    [ZKW_REQ_PATH] = {ZKW_F_PATH},
    [ZKW_REQ_PATH_WATCH] = {ZKW_F_PATH, ZKW_F_WATCH},
    [ZKW_REQ_CREATE] = {ZKW_F_PATH, ZKW_F_DATA, ZKW_F_ACL, ZKW_F_FLAGS},
    [ZKW_REQ_CREATE_TTL] = {ZKW_F_PATH, ZKW_F_DATA, ZKW_F_ACL, ZKW_F_FLAGS, ZKW_F_TTL},
    [ZKW_REQ_PATH_VERSION] = {ZKW_F_PATH, ZKW_F_VERSION},
    [ZKW_REQ_SET_DATA] = {ZKW_F_PATH, ZKW_F_DATA, ZKW_F_VERSION},
    [ZKW_REQ_SET_ACL] = {ZKW_F_PATH, ZKW_F_ACL, ZKW_F_VERSION},
    [ZKW_REQ_PATH_TYPE] = {ZKW_F_PATH, ZKW_F_MODE},
    [ZKW_REQ_RECONFIG] = {ZKW_F_PATH, ZKW_F_LEAVING, ZKW_F_NEW_MEMBERS, ZKW_F_ZXID},
    [ZKW_REQ_AUTH] = {ZKW_F_MODE, ZKW_F_SCHEME, ZKW_F_DATA},
    [ZKW_REQ_SASL] = {ZKW_F_DATA},
    [ZKW_REQ_SET_WATCHES] = {ZKW_F_ZXID, ZKW_F_WATCHES0, ZKW_F_WATCHES1, ZKW_F_WATCHES2},
    [ZKW_REQ_SET_WATCHES2] = {ZKW_F_ZXID, ZKW_F_WATCHES0, ZKW_F_WATCHES1, ZKW_F_WATCHES2, ZKW_F_WATCHES3,
                              ZKW_F_WATCHES4},
    [ZKW_REQ_MULTI] = {ZKW_F_MULTI},
    [ZKW_REQ_MULTI_READ] = {ZKW_F_MULTI_READ},
};

static const uint8_t rep_fields[][ZKW_MAX_FIELDS] = {
    [ZKW_REP_NONE] = {ZKW_R_END},
    [ZKW_REP_ANY] = {ZKW_R_END},
    [ZKW_REP_PATH] = {ZKW_R_PATH},
    [ZKW_REP_PATH_STAT] = {ZKW_R_PATH, ZKW_R_STAT},
    [ZKW_REP_STAT] = {ZKW_R_STAT},
    [ZKW_REP_DATA_STAT] = {ZKW_R_DATA, ZKW_R_STAT},
    [ZKW_REP_ACL_STAT] = {ZKW_R_ACLS, ZKW_R_STAT},
    [ZKW_REP_CHILDREN] = {ZKW_R_STRINGS},
    [ZKW_REP_CHILDREN_STAT] = {ZKW_R_STRINGS, ZKW_R_STAT},
    [ZKW_REP_MULTI] = {ZKW_R_MULTI},
    [ZKW_REP_BUFFER] = {ZKW_R_DATA},
    [ZKW_REP_INT] = {ZKW_R_VALUE},
    [ZKW_REP_CLIENT_INFO] = {ZKW_R_INFOS},
};

static const uint8_t error_result_fields[ZKW_MAX_FIELDS] = {ZKW_R_VALUE};

const uint8_t *zkw_req_fields(enum zkw_req_kind kind) {
  if (kind == ZKW_REQ_INVALID || (size_t)kind >= sizeof req_fields / sizeof req_fields[0]) return NULL;
  return req_fields[kind];
}

const uint8_t *zkw_rep_fields(enum zkw_rep_kind kind) {
  if (kind == ZKW_REP_INVALID || (size_t)kind >= sizeof rep_fields / sizeof rep_fields[0]) return NULL;
  return rep_fields[kind];
}

const uint8_t *zkw_multi_result_fields(int32_t type) {
  switch (type) {
  case ZKW_OP_CREATE:
    return rep_fields[ZKW_REP_PATH];
  case ZKW_OP_CREATE2:
    return rep_fields[ZKW_REP_PATH_STAT];
  case ZKW_OP_DELETE:
  case ZKW_OP_CHECK:
    return rep_fields[ZKW_REP_NONE];
  case ZKW_OP_SET_DATA:
    return rep_fields[ZKW_REP_STAT];
  case ZKW_OP_GET_CHILDREN:
    return rep_fields[ZKW_REP_CHILDREN];
  case ZKW_OP_GET_DATA:
    return rep_fields[ZKW_REP_DATA_STAT];
  case ZKW_OP_ERROR:
    return error_result_fields;
  default:
    return NULL;
  }
}

bool zkw_multi_write_type(int32_t type) {
  switch (type) {
  case ZKW_OP_CREATE:
  case ZKW_OP_CREATE2:
  case ZKW_OP_CREATE_CONTAINER:
  case ZKW_OP_CREATE_TTL:
  case ZKW_OP_DELETE:
  case ZKW_OP_SET_DATA:
  case ZKW_OP_CHECK:
    return true;
  default:
    return false;
  }
}

bool zkw_multi_read_type(int32_t type) {
  return type == ZKW_OP_GET_CHILDREN || type == ZKW_OP_GET_DATA;
}

/* ---- requests ------------------------------------------------------------- */

static int rd_multi_ops(struct zkw_rd *r, bool read, struct zkw_op_req *op);

static void rd_req_fields(struct zkw_rd *r, const uint8_t *f, struct zkw_op_req *op) {
  for (int i = 0; i < ZKW_MAX_FIELDS && f[i] != ZKW_F_END && !r->err; i++) {
    switch ((enum zkw_req_field)f[i]) {
    case ZKW_F_END:
      break;
    case ZKW_F_PATH:
      op->path = zkw_rd_bytes(r);
      break;
    case ZKW_F_DATA:
      op->data = zkw_rd_bytes(r);
      break;
    case ZKW_F_ACL:
      op->acl = zkw_rd_vec(r, zkw_rd_skip_acl, 12);
      break;
    case ZKW_F_FLAGS:
      op->flags = zkw_rd_int(r);
      break;
    case ZKW_F_VERSION:
      op->version = zkw_rd_int(r);
      break;
    case ZKW_F_MODE:
      op->mode = zkw_rd_int(r);
      break;
    case ZKW_F_WATCH:
      op->watch = zkw_rd_bool(r);
      break;
    case ZKW_F_TTL:
      op->ttl = zkw_rd_long(r);
      break;
    case ZKW_F_SCHEME:
      op->scheme = zkw_rd_bytes(r);
      break;
    case ZKW_F_LEAVING:
      op->leaving = zkw_rd_bytes(r);
      break;
    case ZKW_F_NEW_MEMBERS:
      op->new_members = zkw_rd_bytes(r);
      break;
    case ZKW_F_ZXID:
      op->zxid = zkw_rd_long(r);
      break;
    case ZKW_F_WATCHES0:
    case ZKW_F_WATCHES1:
    case ZKW_F_WATCHES2:
    case ZKW_F_WATCHES3:
    case ZKW_F_WATCHES4:
      op->watches[f[i] - ZKW_F_WATCHES0] = zkw_rd_vec(r, zkw_rd_skip_string, 4);
      break;
    case ZKW_F_MULTI:
    case ZKW_F_MULTI_READ:
      zkw_rd_fail(r, rd_multi_ops(r, f[i] == ZKW_F_MULTI_READ, op));
      break;
    }
  }
}

/* Reads a MultiHeader. Returns ZKW_OK for an op header, ZKW_AGAIN for the end
 * marker {-1, true, -1}, or an error; running out of bytes exactly where a
 * header should start means the end marker is missing. */
static int rd_multi_header(struct zkw_rd *r, int32_t *type, int32_t *err) {
  if (r->err) return r->err;
  if (r->off == r->len) return ZKW_E_MULTI;
  *type = zkw_rd_int(r);
  bool done = zkw_rd_bool(r);
  *err = zkw_rd_int(r);
  if (r->err) return r->err;
  if (done) return *type == -1 && *err == -1 ? ZKW_AGAIN : ZKW_E_MULTI;
  return ZKW_OK;
}

int zkw_multi_next_req(struct zkw_multi_iter *it, struct zkw_op_req *req) {
  struct zkw_rd *r = &it->rd;
  memset(req, 0, sizeof *req);
  int32_t type = 0, err = 0;
  int st = rd_multi_header(r, &type, &err);
  if (st != ZKW_OK) {
    r->err = st; /* sticky, ZKW_AGAIN included: the iteration is over */
    return st;
  }
  if (!zkw_multi_write_type(type) && !zkw_multi_read_type(type)) {
    r->err = ZKW_E_MULTI;
    return ZKW_E_MULTI;
  }
  req->type = type;
  rd_req_fields(r, zkw_req_fields(zkw_op_req_kind(type)), req);
  return r->err;
}

/* Validates the sub-ops that start at r's offset and sets op->ops/op_count. */
static int rd_multi_ops(struct zkw_rd *r, bool read, struct zkw_op_req *op) {
  struct zkw_vec all = {0, r->p + r->off, r->len - r->off};
  struct zkw_multi_iter it = zkw_multi_iter(all);
  struct zkw_op_req sub;
  int32_t n = 0;
  int st;
  while ((st = zkw_multi_next_req(&it, &sub)) == ZKW_OK) {
    if (read ? !zkw_multi_read_type(sub.type) : !zkw_multi_write_type(sub.type)) return ZKW_E_MULTI;
    n++;
  }
  if (st != ZKW_AGAIN) return st;
  op->ops.count = n;
  op->ops.p = all.p;
  op->ops.len = it.rd.off;
  op->op_count = n;
  r->off += it.rd.off;
  return ZKW_OK;
}

int zkw_decode_request(const uint8_t *body, size_t len, struct zkw_request *out) {
  memset(out, 0, sizeof *out);
  if (len < ZKW_MIN_REQUEST) return ZKW_E_FRAME_SHORT;
  struct zkw_rd r;
  zkw_rd_init(&r, body, len);
  out->xid = zkw_rd_int(&r);
  out->type = zkw_rd_int(&r);
  const uint8_t *f = zkw_req_fields(zkw_op_req_kind(out->type));
  if (!f) return ZKW_E_OPCODE;
  out->op.type = out->type;
  rd_req_fields(&r, f, &out->op);
  return zkw_rd_status(&r);
}

/* ---- replies -------------------------------------------------------------- */

static int rd_multi_results(struct zkw_rd *r, struct zkw_op_rep *op);

static void rd_rep_fields(struct zkw_rd *r, const uint8_t *f, struct zkw_op_rep *op) {
  for (int i = 0; i < ZKW_MAX_FIELDS && f[i] != ZKW_R_END && !r->err; i++) {
    switch ((enum zkw_rep_field)f[i]) {
    case ZKW_R_END:
      break;
    case ZKW_R_PATH:
      op->path = zkw_rd_bytes(r);
      break;
    case ZKW_R_DATA:
      op->data = zkw_rd_bytes(r);
      break;
    case ZKW_R_STAT:
      op->stat = zkw_rd_stat(r);
      op->has_stat = !r->err;
      break;
    case ZKW_R_STRINGS:
      op->list = zkw_rd_vec(r, zkw_rd_skip_string, 4);
      break;
    case ZKW_R_ACLS:
      op->list = zkw_rd_vec(r, zkw_rd_skip_acl, 12);
      break;
    case ZKW_R_INFOS:
      op->list = zkw_rd_vec(r, zkw_rd_skip_client_info, 8);
      break;
    case ZKW_R_VALUE:
      op->value = zkw_rd_int(r);
      break;
    case ZKW_R_MULTI:
      zkw_rd_fail(r, rd_multi_results(r, op));
      break;
    }
  }
}

int zkw_multi_next_rep(struct zkw_multi_iter *it, struct zkw_op_rep *rep) {
  struct zkw_rd *r = &it->rd;
  memset(rep, 0, sizeof *rep);
  int32_t type = 0, err = 0;
  int st = rd_multi_header(r, &type, &err);
  if (st != ZKW_OK) {
    r->err = st;
    return st;
  }
  const uint8_t *f = zkw_multi_result_fields(type);
  if (!f) {
    r->err = ZKW_E_MULTI;
    return ZKW_E_MULTI;
  }
  rep->type = type;
  rep->err = err;
  rd_rep_fields(r, f, rep);
  return r->err;
}

static int rd_multi_results(struct zkw_rd *r, struct zkw_op_rep *op) {
  struct zkw_vec all = {0, r->p + r->off, r->len - r->off};
  struct zkw_multi_iter it = zkw_multi_iter(all);
  struct zkw_op_rep sub;
  int32_t n = 0;
  int st;
  while ((st = zkw_multi_next_rep(&it, &sub)) == ZKW_OK)
    n++;
  if (st != ZKW_AGAIN) return st;
  op->results.count = n;
  op->results.p = all.p;
  op->results.len = it.rd.off;
  op->result_count = n;
  r->off += it.rd.off;
  return ZKW_OK;
}

int zkw_decode_reply(const uint8_t *body, size_t len, int32_t req_type, struct zkw_reply *out) {
  memset(out, 0, sizeof *out);
  if (len < ZKW_MIN_REPLY) return ZKW_E_FRAME_SHORT;
  struct zkw_rd r;
  zkw_rd_init(&r, body, len);
  out->xid = zkw_rd_int(&r);
  out->zxid = zkw_rd_long(&r);
  out->err = zkw_rd_int(&r);
  if (out->xid == ZKW_XID_NOTIFICATION) {
    out->event.type = zkw_rd_int(&r);
    out->event.state = zkw_rd_int(&r);
    out->event.path = zkw_rd_bytes(&r);
    return zkw_rd_status(&r);
  }
  out->op.type = req_type;
  /* Ping, auth and setWatches replies are a header only, whatever req_type. */
  if (out->xid == ZKW_XID_PING || out->xid == ZKW_XID_AUTH || out->xid == ZKW_XID_SET_WATCHES) return ZKW_OK;
  const uint8_t *f = zkw_rep_fields(zkw_op_rep_kind(req_type));
  if (!f) return ZKW_E_OPCODE;
  if (out->err != 0) return ZKW_OK;
  rd_rep_fields(&r, f, &out->op);
  return zkw_rd_status(&r);
}
