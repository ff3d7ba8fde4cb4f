/* zkw_rewrite.h: the only frames zkwarden changes, as pure functions.
 *
 * - Lock creates (create, create2, and create sub-ops of multi) get their
 *   data wrapped in the lock tag.
 * - getData replies (and multiRead getData results) of tagged nodes give the
 *   JobManager back its original bytes, with Stat.dataLength to match.
 * - Replies to getData("/zookeeper/config") name the sidecar as the only
 *   client address, so Curator's ensemble tracker keeps the JobManager on the
 *   sidecar (docs/how-it-works.md: Identities, tags and reclaim).
 * Nothing else in a frame changes: xids, zxids, session ids, ephemeralOwner
 * and every other Stat field are copied as they came. Each function writes
 * the whole new frame into out and returns 1, returns 0 when the frame is to
 * be forwarded as it is, or a negative status. */
#ifndef ZKW_REWRITE_H
#define ZKW_REWRITE_H

#include "zkw_buf.h"
#include "zkw_codec.h"
#include "zkw_lockrule.h"

struct zkw_tagger {
  const struct zkw_lock_roots *roots;
  const char *identity;
  uint64_t incarnation;
  int64_t session_id;
};

/* *locks gets the number of lock creates found (tagged). */
int zkw_rewrite_request(const struct zkw_request *req, const struct zkw_tagger *t, struct zkw_buf *out,
                        int *locks);
int zkw_rewrite_untag_reply(const struct zkw_reply *rep, int32_t req_type, struct zkw_buf *out);
/* listen: the sidecar's client address as "ip:port". */
int zkw_rewrite_config_reply(const struct zkw_reply *rep, const char *listen, struct zkw_buf *out);

#define ZKW_CONFIG_NODE "/zookeeper/config"

#endif
