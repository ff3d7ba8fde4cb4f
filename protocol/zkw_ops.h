/* zkw_ops.h: the one list of ZooKeeper opcodes and error codes.
 *
 * Every opcode zkwarden knows is one row of ZKW_OPCODES: its number, its
 * name as the Java client spells it, the shape of its request body and the
 * shape of its reply body (see zk-wire-protocol.md §4). The codec's decode
 * tables, the names in logs and the metric labels are all generated from it.
 * Error codes are listed once in ZKW_ERRORS the same way. */
#ifndef ZKW_OPS_H
#define ZKW_OPS_H

#include <stdint.h>

/* Request body shapes. */
enum zkw_req_kind {
  ZKW_REQ_INVALID,     /* clients never send it; the server rejects it */
  ZKW_REQ_NONE,        /* no body */
  ZKW_REQ_PATH,        /* {path} */
  ZKW_REQ_PATH_WATCH,  /* {path, bool watch} */
  ZKW_REQ_CREATE,      /* {path, data, acl, flags} */
  ZKW_REQ_CREATE_TTL,  /* {path, data, acl, flags, long ttl} */
  ZKW_REQ_PATH_VERSION,/* {path, int version} (delete, check) */
  ZKW_REQ_SET_DATA,    /* {path, data, int version} */
  ZKW_REQ_SET_ACL,     /* {path, acl, int aclVersion} */
  ZKW_REQ_PATH_TYPE,   /* {path, int type/mode} (checkWatches, removeWatches, addWatch) */
  ZKW_REQ_RECONFIG,    /* {joining, leaving, newMembers, long curConfigId} */
  ZKW_REQ_AUTH,        /* {int type, scheme, buffer auth} */
  ZKW_REQ_SASL,        /* {buffer token} */
  ZKW_REQ_SET_WATCHES, /* {long relZxid, 3 string vectors} */
  ZKW_REQ_SET_WATCHES2,/* {long relZxid, 5 string vectors} */
  ZKW_REQ_MULTI,       /* write ops, see zkw_multi_next */
  ZKW_REQ_MULTI_READ,  /* getData / getChildren ops */
};

/* Reply body shapes (for err == 0). */
enum zkw_rep_kind {
  ZKW_REP_INVALID,
  ZKW_REP_NONE,          /* header only */
  ZKW_REP_ANY,           /* body not specified: skipped (standalone check) */
  ZKW_REP_PATH,          /* {path} */
  ZKW_REP_PATH_STAT,     /* {path, Stat} */
  ZKW_REP_STAT,          /* Stat */
  ZKW_REP_DATA_STAT,     /* {buffer data, Stat} */
  ZKW_REP_ACL_STAT,      /* {vector<ACL>, Stat} */
  ZKW_REP_CHILDREN,      /* {vector<string>} */
  ZKW_REP_CHILDREN_STAT, /* {vector<string>, Stat} */
  ZKW_REP_MULTI,         /* results, see zkw_multi_next */
  ZKW_REP_BUFFER,        /* {buffer} (sasl token) */
  ZKW_REP_INT,           /* {int} */
  ZKW_REP_CLIENT_INFO,   /* {vector<ClientInfo>} */
};

/*        name                   code  wire name                request kind           reply kind */
#define ZKW_OPCODES(X)                                                                                      \
  X(NOTIFICATION,              0,   "notification",          ZKW_REQ_INVALID,       ZKW_REP_INVALID)        \
  X(CREATE,                    1,   "create",                ZKW_REQ_CREATE,        ZKW_REP_PATH)           \
  X(DELETE,                    2,   "delete",                ZKW_REQ_PATH_VERSION,  ZKW_REP_NONE)           \
  X(EXISTS,                    3,   "exists",                ZKW_REQ_PATH_WATCH,    ZKW_REP_STAT)           \
  X(GET_DATA,                  4,   "getData",               ZKW_REQ_PATH_WATCH,    ZKW_REP_DATA_STAT)      \
  X(SET_DATA,                  5,   "setData",               ZKW_REQ_SET_DATA,      ZKW_REP_STAT)           \
  X(GET_ACL,                   6,   "getACL",                ZKW_REQ_PATH,          ZKW_REP_ACL_STAT)       \
  X(SET_ACL,                   7,   "setACL",                ZKW_REQ_SET_ACL,       ZKW_REP_STAT)           \
  X(GET_CHILDREN,              8,   "getChildren",           ZKW_REQ_PATH_WATCH,    ZKW_REP_CHILDREN)       \
  X(SYNC,                      9,   "sync",                  ZKW_REQ_PATH,          ZKW_REP_PATH)           \
  X(PING,                      11,  "ping",                  ZKW_REQ_NONE,          ZKW_REP_NONE)           \
  X(GET_CHILDREN2,             12,  "getChildren2",          ZKW_REQ_PATH_WATCH,    ZKW_REP_CHILDREN_STAT)  \
  X(CHECK,                     13,  "check",                 ZKW_REQ_PATH_VERSION,  ZKW_REP_ANY)            \
  X(MULTI,                     14,  "multi",                 ZKW_REQ_MULTI,         ZKW_REP_MULTI)          \
  X(CREATE2,                   15,  "create2",               ZKW_REQ_CREATE,        ZKW_REP_PATH_STAT)      \
  X(RECONFIG,                  16,  "reconfig",              ZKW_REQ_RECONFIG,      ZKW_REP_DATA_STAT)      \
  X(CHECK_WATCHES,             17,  "checkWatches",          ZKW_REQ_PATH_TYPE,     ZKW_REP_NONE)           \
  X(REMOVE_WATCHES,            18,  "removeWatches",         ZKW_REQ_PATH_TYPE,     ZKW_REP_NONE)           \
  X(CREATE_CONTAINER,          19,  "createContainer",       ZKW_REQ_CREATE,        ZKW_REP_PATH_STAT)      \
  X(DELETE_CONTAINER,          20,  "deleteContainer",       ZKW_REQ_INVALID,       ZKW_REP_INVALID)        \
  X(CREATE_TTL,                21,  "createTTL",             ZKW_REQ_CREATE_TTL,    ZKW_REP_PATH_STAT)      \
  X(MULTI_READ,                22,  "multiRead",             ZKW_REQ_MULTI_READ,    ZKW_REP_MULTI)          \
  X(AUTH,                      100, "auth",                  ZKW_REQ_AUTH,          ZKW_REP_NONE)           \
  X(SET_WATCHES,               101, "setWatches",            ZKW_REQ_SET_WATCHES,   ZKW_REP_NONE)           \
  X(SASL,                      102, "sasl",                  ZKW_REQ_SASL,          ZKW_REP_BUFFER)         \
  X(GET_EPHEMERALS,            103, "getEphemerals",         ZKW_REQ_PATH,          ZKW_REP_CHILDREN)       \
  X(GET_ALL_CHILDREN_NUMBER,   104, "getAllChildrenNumber",  ZKW_REQ_PATH,          ZKW_REP_INT)            \
  X(SET_WATCHES2,              105, "setWatches2",           ZKW_REQ_SET_WATCHES2,  ZKW_REP_NONE)           \
  X(ADD_WATCH,                 106, "addWatch",              ZKW_REQ_PATH_TYPE,     ZKW_REP_INT)            \
  X(WHO_AM_I,                  107, "whoAmI",                ZKW_REQ_NONE,          ZKW_REP_CLIENT_INFO)    \
  X(CREATE_SESSION,            -10, "createSession",         ZKW_REQ_INVALID,       ZKW_REP_INVALID)        \
  X(CLOSE_SESSION,             -11, "closeSession",          ZKW_REQ_NONE,          ZKW_REP_NONE)           \
  X(ERROR,                     -1,  "error",                 ZKW_REQ_INVALID,       ZKW_REP_INVALID)

enum zkw_opcode {
#define ZKW_X_ENUM(name, code, str, req, rep) ZKW_OP_##name = (code),
  ZKW_OPCODES(ZKW_X_ENUM)
#undef ZKW_X_ENUM
};

/* Number of rows in ZKW_OPCODES and a dense index for per-opcode arrays
 * (metrics): zkw_op_index returns 0..ZKW_OP_COUNT-1, or -1 if unknown. */
enum {
#define ZKW_X_COUNT(name, code, str, req, rep) ZKW_OPIDX_##name,
  ZKW_OPCODES(ZKW_X_COUNT)
#undef ZKW_X_COUNT
  ZKW_OP_COUNT
};

int zkw_op_index(int32_t op);
const char *zkw_op_name(int32_t op);          /* "unknown" if not listed */
enum zkw_req_kind zkw_op_req_kind(int32_t op); /* ZKW_REQ_INVALID if not listed */
enum zkw_rep_kind zkw_op_rep_kind(int32_t op); /* ZKW_REP_INVALID if not listed */

/* ZooKeeper error codes (KeeperException.Code and the C client's extras). */
#define ZKW_ERRORS(X)                          \
  X(OK, 0)                                     \
  X(SYSTEMERROR, -1)                           \
  X(RUNTIMEINCONSISTENCY, -2)                  \
  X(DATAINCONSISTENCY, -3)                     \
  X(CONNECTIONLOSS, -4)                        \
  X(MARSHALLINGERROR, -5)                      \
  X(UNIMPLEMENTED, -6)                         \
  X(OPERATIONTIMEOUT, -7)                      \
  X(BADARGUMENTS, -8)                          \
  X(INVALIDSTATE, -9)                          \
  X(UNKNOWNSESSION, -12)                       \
  X(NEWCONFIGNOQUORUM, -13)                    \
  X(RECONFIGINPROGRESS, -14)                   \
  X(SSLCONNECTIONERROR, -15)                   \
  X(APIERROR, -100)                            \
  X(NONODE, -101)                              \
  X(NOAUTH, -102)                              \
  X(BADVERSION, -103)                          \
  X(NOCHILDRENFOREPHEMERALS, -108)             \
  X(NODEEXISTS, -110)                          \
  X(NOTEMPTY, -111)                            \
  X(SESSIONEXPIRED, -112)                      \
  X(INVALIDCALLBACK, -113)                     \
  X(INVALIDACL, -114)                          \
  X(AUTHFAILED, -115)                          \
  X(CLOSING, -116)                             \
  X(NOTHING, -117)                             \
  X(SESSIONMOVED, -118)                        \
  X(NOTREADONLY, -119)                         \
  X(EPHEMERALONLOCALSESSION, -120)             \
  X(NOWATCHER, -121)                           \
  X(REQUESTTIMEOUT, -122)                      \
  X(RECONFIGDISABLED, -123)                    \
  X(SESSIONCLOSEDREQUIRESASLAUTH, -124)        \
  X(QUOTAEXCEEDED, -125)                       \
  X(THROTTLEDOP, -127)

enum zkw_zk_error {
#define ZKW_X_ERR(name, code) ZKW_ZERR_##name = (code),
  ZKW_ERRORS(ZKW_X_ERR)
#undef ZKW_X_ERR
};

const char *zkw_zk_error_name(int32_t err); /* "UNKNOWN" if not listed */

/* Special xids (zk-wire-protocol.md §3). */
enum {
  ZKW_XID_NOTIFICATION = -1,
  ZKW_XID_PING = -2,
  ZKW_XID_AUTH = -4,
  ZKW_XID_SET_WATCHES = -8,
};

/* Create flags (CreateMode): not a bitmask, use the helpers. */
enum {
  ZKW_CREATE_PERSISTENT = 0,
  ZKW_CREATE_EPHEMERAL = 1,
  ZKW_CREATE_PERSISTENT_SEQUENTIAL = 2,
  ZKW_CREATE_EPHEMERAL_SEQUENTIAL = 3,
  ZKW_CREATE_CONTAINER = 4,
  ZKW_CREATE_PERSISTENT_WITH_TTL = 5,
  ZKW_CREATE_PERSISTENT_SEQUENTIAL_WITH_TTL = 6,
};

#endif
