/* test_watches.c: the watch table a session move re-arms (zkw_watches.h).
 *
 * Requests and replies go in as the relay sees them; what the table keeps
 * is checked path by path, and the setWatches frames it writes are decoded
 * back with the codec: every watch once, in the vector of its kind, each
 * frame's paths under the Java client's 128 KB bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_codec.h"
#include "zkw_ops.h"
#include "zkw_watches.h"
#include "zkw_wire.h"
#include "zkw_test.h"

static struct zkw_request req(int32_t xid, int32_t type, const char *path, bool watch, int32_t mode) {
  struct zkw_request r = {.xid = xid, .type = type};
  r.op.type = type;
  r.op.path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  r.op.watch = watch;
  r.op.mode = mode;
  return r;
}

static void sent(struct zkw_watches *w, int32_t xid, int32_t type, const char *path, bool watch,
                 int32_t err) {
  struct zkw_request r = req(xid, type, path, watch, 0);
  zkw_watches_request(w, &r);
  zkw_watches_reply(w, xid, err);
}

static unsigned kinds(const struct zkw_watches *w, const char *path) {
  return zkw_watches_kinds(w, path, strlen(path));
}

static void event(struct zkw_watches *w, int32_t type, const char *path) {
  struct zkw_watcher_event ev = {.type = type, .state = 3};
  ev.path = (struct zkw_bytes){(const uint8_t *)path, (int32_t)strlen(path)};
  zkw_watches_event(w, &ev);
}

static void test_tracks_as_the_client_does(void) {
  struct zkw_watches w = {0};
  sent(&w, 1, ZKW_OP_GET_DATA, "/a", true, 0);
  sent(&w, 2, ZKW_OP_GET_DATA, "/nowatch", false, 0);
  sent(&w, 3, ZKW_OP_EXISTS, "/missing", true, ZKW_ZERR_NONODE);
  sent(&w, 4, ZKW_OP_EXISTS, "/a", true, 0);
  sent(&w, 5, ZKW_OP_GET_CHILDREN2, "/", true, 0);
  sent(&w, 6, ZKW_OP_GET_DATA, "/gone", true, ZKW_ZERR_NONODE); /* no watch on a failed read */
  ASSERT_EQ(kinds(&w, "/a"), ZKW_WATCH_DATA);
  ASSERT_EQ(kinds(&w, "/nowatch"), 0);
  ASSERT_EQ(kinds(&w, "/missing"), ZKW_WATCH_EXIST);
  ASSERT_EQ(kinds(&w, "/"), ZKW_WATCH_CHILD);
  ASSERT_EQ(kinds(&w, "/gone"), 0);
  /* Notifications end one-shot watches; a persistent one stays. */
  struct zkw_request add = req(7, ZKW_OP_ADD_WATCH, "/p", false, 1);
  zkw_watches_request(&w, &add);
  zkw_watches_reply(&w, 7, 0);
  sent(&w, 8, ZKW_OP_GET_DATA, "/p", true, 0);
  event(&w, 3, "/p");
  ASSERT_EQ(kinds(&w, "/p"), ZKW_WATCH_RECURSIVE);
  event(&w, 1, "/missing");
  ASSERT_EQ(kinds(&w, "/missing"), 0);
  event(&w, 4, "/");
  ASSERT_EQ(kinds(&w, "/"), 0);
  /* removeWatches (type Data) takes data and exist watches. */
  sent(&w, 9, ZKW_OP_GET_CHILDREN, "/a", true, 0);
  struct zkw_request rm = req(10, ZKW_OP_REMOVE_WATCHES, "/a", false, 2);
  zkw_watches_request(&w, &rm);
  zkw_watches_reply(&w, 10, 0);
  ASSERT_EQ(kinds(&w, "/a"), ZKW_WATCH_CHILD);
  /* A request lost with its connection sets nothing. */
  struct zkw_request lost = req(11, ZKW_OP_GET_DATA, "/late", true, 0);
  zkw_watches_request(&w, &lost);
  zkw_watches_lost_replies(&w);
  zkw_watches_reply(&w, 11, 0);
  ASSERT_EQ(kinds(&w, "/late"), 0);
  ASSERT_EQ(w.count, 2); /* /a (child), /p (recursive) */
  zkw_watches_free(&w);
}

/* Decodes the setWatches frames in b: the paths of each kind, counted. */
static void decode_frames(const struct zkw_buf *b, int64_t zxid, int32_t op, int *frames, int per_kind[5],
                          size_t *largest) {
  size_t off = 0;
  while (off < b->len) {
    int32_t n = (int32_t)zkw_load_be32(b->data + off);
    struct zkw_request r;
    ASSERT_STATUS(zkw_decode_request(b->data + off + 4, (size_t)n, &r), ZKW_OK);
    ASSERT_EQ(r.xid, ZKW_XID_SET_WATCHES);
    ASSERT_EQ(r.type, op);
    ASSERT_EQ(r.op.zxid, zxid);
    size_t paths = 0;
    for (int k = 0; k < (op == ZKW_OP_SET_WATCHES2 ? 5 : 3); k++) {
      struct zkw_rd rd = zkw_vec_reader(r.op.watches[k]);
      for (int32_t i = 0; i < r.op.watches[k].count; i++)
        paths += (size_t)zkw_rd_bytes(&rd).len;
      per_kind[k] += r.op.watches[k].count;
    }
    if (paths > *largest) *largest = paths;
    (*frames)++;
    off += 4 + (size_t)n;
  }
}

static void test_set_watches_frames(void) {
  struct zkw_watches w = {0};
  struct zkw_buf b = {0};
  ASSERT_EQ(zkw_watches_encode(&w, 5, &b), 0); /* nothing to re-arm */
  char path[256];
  /* 3,000 paths of 200 bytes: 600 KB of data watches, and child watches on
   * every tenth: five frames at least. */
  for (int i = 0; i < 3000; i++) {
    snprintf(path, sizeof path, "/flink/%0193d", i);
    sent(&w, 2 * i + 1, ZKW_OP_GET_DATA, path, true, 0);
    if (i % 10 == 0) sent(&w, 2 * i + 2, ZKW_OP_GET_CHILDREN, path, true, 0);
  }
  ASSERT_TRUE(!w.lost);
  int frames = zkw_watches_encode(&w, 0x1234, &b);
  int got = 0, per_kind[5] = {0};
  size_t largest = 0;
  decode_frames(&b, 0x1234, ZKW_OP_SET_WATCHES, &got, per_kind, &largest);
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(got, frames);
  ASSERT_TRUE(frames >= 5);
  ASSERT_EQ(per_kind[0], 3000);
  ASSERT_EQ(per_kind[1], 0);
  ASSERT_EQ(per_kind[2], 300);
  ASSERT_TRUE(largest < 128 * 1024 + 256);
  zkw_buf_release(&b);
  /* A persistent watch: setWatches2, with its own vector. */
  struct zkw_request add = req(9999, ZKW_OP_ADD_WATCH, "/jobs", false, 0);
  zkw_watches_request(&w, &add);
  zkw_watches_reply(&w, 9999, 0);
  frames = zkw_watches_encode(&w, 7, &b);
  int got2 = 0, kinds2[5] = {0};
  decode_frames(&b, 7, ZKW_OP_SET_WATCHES2, &got2, kinds2, &largest);
  ASSERT_OK_SO_FAR();
  ASSERT_EQ(got2, frames);
  ASSERT_EQ(kinds2[3], 1);
  ASSERT_EQ(kinds2[0] + kinds2[2], 3300);
  zkw_buf_release(&b);
  zkw_watches_free(&w);
}

int main(void) {
  RUN(test_tracks_as_the_client_does);
  RUN(test_set_watches_frames);
  return zkw_test_summary("watches");
}
