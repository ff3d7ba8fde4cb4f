/* zkw_zk_result.h: the result of one ZooKeeper operation, as zkwarden's own
 * requests report it: both the registry session (zkw_zk.h) and the in-band
 * requests on a client's connection (zkw_inband.h) hand this to their
 * callbacks, on the loop thread. Types only. */
#ifndef ZKW_ZK_RESULT_H
#define ZKW_ZK_RESULT_H

#include <stdbool.h>
#include <zookeeper/zookeeper.h>

struct zkw_zk_result {
  int rc;       /* ZOK or a ZooKeeper error (ZNONODE, ...) */
  char *data;   /* get: the node's data (NUL-terminated copy); NULL if null */
  int data_len; /* -1 if null */
  bool has_stat;
  struct Stat stat; /* get, exists, set */
  char **children;  /* get_children: names */
  int child_count;
  char *path; /* create: the created path */
  /* get_acl: an entry for world:anyone (any permission; world_read: with
   * read), the node's ACL version in stat.aversion. Judged against the
   * session's own registry identity (the digest id its credentials,
   * ZKWARDEN_REGISTRY_AUTH, authenticate as): acl_ours, an entry names it
   * with every permission; acl_others, the permissions (ZOO_PERM_*) all
   * other entries grant together; acl_other, the first other entry that
   * grants more than READ, as scheme:id (cut to fit; of a digest id the user
   * alone, never the password's hash), "" if none. */
  bool acl_world, acl_world_read;
  bool acl_ours;
  int acl_others;
  char acl_other[96];
  /* multi (in-band): the index of the sub-op that failed (rc is its error),
   * or -1. */
  int failed_op;
};

typedef void (*zkw_zk_cb)(void *arg, const struct zkw_zk_result *r);

#endif
