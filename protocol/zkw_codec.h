/* zkw_codec.h: decoding ZooKeeper client frames into typed views.
 *
 * Pure: bytes in, views out. No I/O, no allocation; every view points into
 * the frame it was decoded from and is valid while that frame is. A frame is
 * `int N` + N bytes; the functions below take the N bytes (the "body") unless
 * they say otherwise. See ../shared/reference/zk-wire-protocol.md. */
#ifndef ZKW_CODEC_H
#define ZKW_CODEC_H

#include "zkw_ops.h"
#include "zkw_wire.h"

/* Smallest legal frames (N) per direction, after the handshake. */
#define ZKW_MIN_REQUEST 8 /* xid + type */
#define ZKW_MIN_REPLY 16  /* xid + zxid + err */
/* ConnectRequest body: 44 bytes, or 45 with readOnly (16-byte passwd). */
#define ZKW_CONNECT_REQ_MIN 28  /* empty passwd, no readOnly */
/* Bound on a ConnectRequest: every real client's is under 100 bytes, so a
 * longer one is refused from its length alone, before it is read. */
#define ZKW_CONNECT_REQ_MAX 1024
#define ZKW_CONNECT_RESP_MIN 20 /* empty passwd, no readOnly */

/* Splits a byte stream into frames. Looks at buf[0..avail) and, if a whole
 * frame is there, sets *frame_len to 4 + N and returns ZKW_OK. Returns
 * ZKW_AGAIN if more bytes are needed, ZKW_E_FRAME_SHORT if N < min_body,
 * ZKW_E_FRAME_LONG if N > max_body (N is read as signed: negative is long). */
int zkw_frame_next(const uint8_t *buf, size_t avail, uint32_t min_body, uint32_t max_body,
                   size_t *frame_len);

/* Four-letter words (§1): the first 4 bytes a client sends, before any
 * ConnectRequest. Returns the word's name ("srvr", ...) or NULL if the 4 bytes
 * are not a known word (then they are a frame length). */
const char *zkw_four_letter_word(const uint8_t first4[4]);

struct zkw_connect_req {
  int32_t protocol_version;
  int64_t last_zxid_seen;
  int32_t timeout;
  int64_t session_id;
  struct zkw_bytes passwd;
  bool has_read_only;
  bool read_only;
};
int zkw_decode_connect_req(const uint8_t *body, size_t len, struct zkw_connect_req *out);

struct zkw_connect_resp {
  int32_t protocol_version;
  int32_t timeout; /* 0: session invalid or expired */
  int64_t session_id;
  struct zkw_bytes passwd;
  bool has_read_only;
  bool read_only;
};
int zkw_decode_connect_resp(const uint8_t *body, size_t len, struct zkw_connect_resp *out);

/* One request body (or one multi sub-op). Which fields are set depends on
 * the opcode's zkw_req_kind; the others are zero. */
struct zkw_op_req {
  int32_t type;
  struct zkw_bytes path;   /* every kind with a path; reconfig: joining */
  struct zkw_bytes data;   /* create, setData; auth: auth bytes; sasl: token */
  struct zkw_vec acl;      /* create, setACL: vector<ACL> */
  int32_t flags;           /* create flags */
  int32_t version;         /* delete, check, setData, setACL */
  int32_t mode;            /* checkWatches/removeWatches type, addWatch mode, auth type */
  bool watch;              /* exists, getData, getChildren(2) */
  int64_t ttl;             /* createTTL */
  struct zkw_bytes scheme; /* auth */
  struct zkw_bytes leaving, new_members; /* reconfig */
  int64_t zxid;            /* setWatches relativeZxid; reconfig curConfigId */
  struct zkw_vec watches[5]; /* setWatches: data, exist, child[, persistent, recursive] */
  struct zkw_vec ops;        /* multi, multiRead: the sub-ops, see zkw_multi_next */
  int32_t op_count;          /* multi, multiRead: number of sub-ops */
};

struct zkw_request {
  int32_t xid;
  int32_t type;
  struct zkw_op_req op;
};

/* Decodes and validates a whole request frame body (RequestHeader + body).
 * Unknown opcodes and opcodes clients never send give ZKW_E_OPCODE. */
int zkw_decode_request(const uint8_t *body, size_t len, struct zkw_request *out);

/* One reply body (or one multi result). */
struct zkw_op_rep {
  int32_t type;          /* request opcode it answers; multi result type */
  int32_t err;           /* multi results: the sub-op's error */
  struct zkw_bytes path; /* create, create2, sync */
  struct zkw_bytes data; /* getData, reconfig; sasl token */
  struct zkw_vec list;   /* children, ephemerals, ACLs, client infos */
  bool has_stat;
  struct zkw_stat stat;
  int32_t value;         /* getAllChildrenNumber, addWatch */
  struct zkw_vec results; /* multi: the results, see zkw_multi_next */
  int32_t result_count;
};

/* A notification (xid -1): WatcherEvent. */
struct zkw_watcher_event {
  int32_t type;
  int32_t state;
  struct zkw_bytes path;
};

struct zkw_reply {
  int32_t xid;
  int64_t zxid;
  int32_t err;
  struct zkw_op_rep op;         /* when xid is not -1 */
  struct zkw_watcher_event event; /* when xid == -1 */
};

/* Decodes a whole reply frame body (ReplyHeader + body). req_type is the
 * opcode of the request it answers (the caller matched the xid); it is not
 * used for xid -1 (notification). A reply with err != 0 has its body skipped,
 * a reply with err == 0 is decoded by the opcode's zkw_rep_kind. */
int zkw_decode_reply(const uint8_t *body, size_t len, int32_t req_type, struct zkw_reply *out);

/* Iterates the sub-ops of a multi/multiRead request (is_reply false) or the
 * results of a multi reply (is_reply true). Start with it = zkw_multi_iter()
 * on op.ops / op.results. Returns ZKW_OK with *req or *rep filled, ZKW_AGAIN
 * when the end marker was reached, or an error. */
struct zkw_multi_iter {
  struct zkw_rd rd;
};
static inline struct zkw_multi_iter zkw_multi_iter(struct zkw_vec v) {
  struct zkw_multi_iter it;
  zkw_rd_init(&it.rd, v.p, v.len);
  return it;
}
int zkw_multi_next_req(struct zkw_multi_iter *it, struct zkw_op_req *req);
int zkw_multi_next_rep(struct zkw_multi_iter *it, struct zkw_op_rep *rep);

/* Iterates the strings of a string vector (children, watch lists). */
static inline struct zkw_rd zkw_vec_reader(struct zkw_vec v) {
  struct zkw_rd r;
  zkw_rd_init(&r, v.p, v.len);
  return r;
}

#endif
