/* zkw_ops.c: lookups over the opcode and error-code lists of zkw_ops.h.
 *
 * Every function here is a switch generated from the ZKW_OPCODES /
 * ZKW_ERRORS X-macros, so adding a row to a list is the only change needed
 * for names, body kinds and the dense metrics index to follow. */
#include "zkw_ops.h"

int zkw_op_index(int32_t op) {
  switch (op) {
#define ZKW_X_IDX(name, code, str, req, rep)                                                                 \
  case (code):                                                                                               \
    return ZKW_OPIDX_##name;
    ZKW_OPCODES(ZKW_X_IDX)
#undef ZKW_X_IDX
  default:
    return -1;
  }
}

const char *zkw_op_name(int32_t op) {
  switch (op) {
#define ZKW_X_NAME(name, code, str, req, rep)                                                                \
  case (code):                                                                                               \
    return str;
    ZKW_OPCODES(ZKW_X_NAME)
#undef ZKW_X_NAME
  default:
    return "unknown";
  }
}

enum zkw_req_kind zkw_op_req_kind(int32_t op) {
  switch (op) {
#define ZKW_X_REQ(name, code, str, req, rep)                                                                 \
  case (code):                                                                                               \
    return req;
    ZKW_OPCODES(ZKW_X_REQ)
#undef ZKW_X_REQ
  default:
    return ZKW_REQ_INVALID;
  }
}

enum zkw_rep_kind zkw_op_rep_kind(int32_t op) {
  switch (op) {
#define ZKW_X_REP(name, code, str, req, rep)                                                                 \
  case (code):                                                                                               \
    return rep;
    ZKW_OPCODES(ZKW_X_REP)
#undef ZKW_X_REP
  default:
    return ZKW_REP_INVALID;
  }
}

const char *zkw_zk_error_name(int32_t err) {
  switch (err) {
#define ZKW_X_ERRNAME(name, code)                                                                            \
  case (code):                                                                                               \
    return #name;
    ZKW_ERRORS(ZKW_X_ERRNAME)
#undef ZKW_X_ERRNAME
  default:
    return "UNKNOWN";
  }
}
