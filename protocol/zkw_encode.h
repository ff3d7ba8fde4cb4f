/* zkw_encode.h: encoders for the frames zkwarden writes itself.
 *
 * Each function writes one whole frame, length prefix included, into a
 * caller-owned buffer and returns ZKW_OK with *out_len set, or
 * ZKW_E_NOSPACE / ZKW_E_VALUE. Encoding a view decoded by zkw_codec.h gives
 * back the same bytes (multi sub-ops are copied from the view's raw range),
 * so a rewrite is: decode, change a field, encode. */
#ifndef ZKW_ENCODE_H
#define ZKW_ENCODE_H

#include "zkw_codec.h"

int zkw_encode_connect_req(uint8_t *buf, size_t cap, const struct zkw_connect_req *req, size_t *out_len);
int zkw_encode_connect_resp(uint8_t *buf, size_t cap, const struct zkw_connect_resp *resp, size_t *out_len);

/* Any request: header + the body of req->type's zkw_req_kind. */
int zkw_encode_request(uint8_t *buf, size_t cap, const struct zkw_request *req, size_t *out_len);

/* Any reply: header + (err == 0 ? body of req_type's zkw_rep_kind : nothing);
 * xid -1 writes the WatcherEvent. */
int zkw_encode_reply(uint8_t *buf, size_t cap, const struct zkw_reply *rep, int32_t req_type,
                     size_t *out_len);

/* Building a multi body op by op: write the ops with zkw_wr_multi_req /
 * zkw_wr_multi_rep, then zkw_wr_multi_end. */
void zkw_wr_op_req(struct zkw_wr *w, const struct zkw_op_req *op); /* body only, by op->type */
void zkw_wr_multi_req(struct zkw_wr *w, const struct zkw_op_req *op);
void zkw_wr_multi_rep(struct zkw_wr *w, const struct zkw_op_rep *rep);
void zkw_wr_multi_end(struct zkw_wr *w);

/* A whole multi request of n write sub-ops. */
int zkw_encode_multi(uint8_t *buf, size_t cap, int32_t xid, const struct zkw_op_req *ops, int n,
                     size_t *out_len);

/* Shorthands for what the proxy injects. */
int zkw_encode_close_session(uint8_t *buf, size_t cap, int32_t xid, size_t *out_len);
int zkw_encode_ping(uint8_t *buf, size_t cap, size_t *out_len);

#endif
