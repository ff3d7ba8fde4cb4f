/* zkw_fields.h (private to protocol/): the body layout of every request and
 * reply kind as a short list of field codes.
 *
 * The decoder (zkw_codec.c) and the encoder (zkw_encode.c) both walk these
 * same lists, which is what makes encode the exact inverse of decode. */
#ifndef ZKW_FIELDS_H
#define ZKW_FIELDS_H

#include <stdbool.h>
#include <stdint.h>

#include "zkw_ops.h"

/* Request body fields, in wire order. */
enum zkw_req_field {
  ZKW_F_END = 0,
  ZKW_F_PATH,        /* ustring -> op.path */
  ZKW_F_DATA,        /* buffer -> op.data */
  ZKW_F_ACL,         /* vector<ACL> -> op.acl */
  ZKW_F_FLAGS,       /* int -> op.flags */
  ZKW_F_VERSION,     /* int -> op.version */
  ZKW_F_MODE,        /* int -> op.mode */
  ZKW_F_WATCH,       /* bool -> op.watch */
  ZKW_F_TTL,         /* long -> op.ttl */
  ZKW_F_SCHEME,      /* ustring -> op.scheme */
  ZKW_F_LEAVING,     /* ustring -> op.leaving */
  ZKW_F_NEW_MEMBERS, /* ustring -> op.new_members */
  ZKW_F_ZXID,        /* long -> op.zxid */
  ZKW_F_WATCHES0,    /* vector<ustring> -> op.watches[0..4] */
  ZKW_F_WATCHES1,
  ZKW_F_WATCHES2,
  ZKW_F_WATCHES3,
  ZKW_F_WATCHES4,
  ZKW_F_MULTI,      /* write sub-ops + end marker -> op.ops */
  ZKW_F_MULTI_READ, /* read sub-ops + end marker -> op.ops */
};

/* Reply body fields, in wire order. */
enum zkw_rep_field {
  ZKW_R_END = 0,
  ZKW_R_PATH,    /* ustring -> op.path */
  ZKW_R_DATA,    /* buffer -> op.data */
  ZKW_R_STAT,    /* Stat -> op.stat, has_stat */
  ZKW_R_STRINGS, /* vector<ustring> -> op.list */
  ZKW_R_ACLS,    /* vector<ACL> -> op.list */
  ZKW_R_INFOS,   /* vector<ClientInfo> -> op.list */
  ZKW_R_VALUE,   /* int -> op.value (also ErrorResponse.err of a multi error result) */
  ZKW_R_MULTI,   /* results + end marker -> op.results */
};

#define ZKW_MAX_FIELDS 7

/* Field list of a request kind; NULL for ZKW_REQ_INVALID. */
const uint8_t *zkw_req_fields(enum zkw_req_kind kind);
/* Field list of a reply kind; NULL for ZKW_REP_INVALID. ZKW_REP_ANY has no
 * fields (its body is skipped). */
const uint8_t *zkw_rep_fields(enum zkw_rep_kind kind);
/* Field list of a multi result type (1, 15, 2, 13, 5, 8, 4, -1); NULL if the
 * type cannot appear in a multi reply. */
const uint8_t *zkw_multi_result_fields(int32_t type);
/* Sub-op types allowed in multi (write) and multiRead. */
bool zkw_multi_write_type(int32_t type);
bool zkw_multi_read_type(int32_t type);

#endif
