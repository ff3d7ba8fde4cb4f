/* test_scope.c: an identity's own trees (zkw_scope.c) and their place in the
 * registry record (zkw_record.c): what the JobManager's creates teach,
 * merging into a cluster's tree and never above it, the bound; the record's
 * tree lines and the aging of its dead sessions (issue 30; issue 29 item
 * 10). */
#include <string.h>

#include "zkw_record.h"
#include "zkw_scope.h"
#include "zkw_test.h"

static struct zkw_bytes B(const char *s) {
  return (struct zkw_bytes){(const uint8_t *)s, (int32_t)strlen(s)};
}

static struct zkw_lock_roots
roots_of(const char *list) {
  struct zkw_lock_roots r;
  char why[160];
  if (zkw_lock_roots_parse(&r, list, why, sizeof why) != 0) r.count = 0;
  return r;
}

static void test_a_flink_cluster_is_one_tree(void) {
  struct zkw_lock_roots roots = roots_of("/flink");
  struct zkw_scope sc = {0};
  /* The latch alone: its parent. */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/c1/leader/latch/_c_x-latch-0000000001")),
            ZKW_SCOPE_CHANGED);
  ASSERT_EQ(sc.count, 1);
  ASSERT_STREQ(sc.tree[0], "/flink/c1/leader/latch");
  /* A leader node and a lock: the cluster's tree, and nothing above it. */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/c1/leader/dispatcher/connection_info")),
            ZKW_SCOPE_CHANGED);
  ASSERT_STREQ(sc.tree[0], "/flink/c1/leader");
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/c1/jobs/j/checkpoints/0000000000000000001/locks/u")),
            ZKW_SCOPE_CHANGED);
  ASSERT_EQ(sc.count, 1);
  ASSERT_STREQ(sc.tree[0], "/flink/c1");
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/c1/jobgraphs/j/locks/u")), ZKW_SCOPE_SAME);
  ASSERT_TRUE(zkw_scope_covers(&sc, "/flink/c1/jobgraphs/j", 21));
  /* A prefix of a name is not an ancestor. */
  ASSERT_TRUE(!zkw_scope_covers(&sc, "/flink/c10", 10));
  /* Another cluster under the same root: a tree of its own, never /flink. */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/c2/leader/latch/_c_y-latch-0000000001")),
            ZKW_SCOPE_CHANGED);
  ASSERT_EQ(sc.count, 2);
  ASSERT_TRUE(!zkw_scope_covers(&sc, "/flink", 6));
  /* A nested path.root: the cluster below it, not its siblings. */
  struct zkw_scope nested = {0};
  ASSERT_EQ(zkw_scope_learn(&nested, &roots, B("/flink/prod/c7/leader/latch/_c_z-latch-1")),
            ZKW_SCOPE_CHANGED);
  ASSERT_EQ(zkw_scope_learn(&nested, &roots, B("/flink/prod/c7/jobs/j/locks/u")), ZKW_SCOPE_CHANGED);
  ASSERT_STREQ(nested.tree[0], "/flink/prod/c7");
}

static void test_what_is_not_learned(void) {
  struct zkw_lock_roots roots = roots_of("/flink,/other/root");
  struct zkw_scope sc = {0};
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/elsewhere/x/y")), ZKW_SCOPE_REFUSED); /* outside the roots */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/latch-1")), ZKW_SCOPE_REFUSED); /* its parent is a root */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flinkx/a/b")), ZKW_SCOPE_REFUSED);
  ASSERT_EQ(sc.count, 0);
  /* Under the deeper root of two. */
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/other/root/c/x")), ZKW_SCOPE_CHANGED);
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/other/root/d/x")), ZKW_SCOPE_CHANGED);
  ASSERT_EQ(sc.count, 2); /* /other/root/c and /d: their common ancestor is the root */
  /* Operator's trees: only below a root; a wider one replaces those below it. */
  ASSERT_EQ(zkw_scope_add(&sc, &roots, "/flink"), ZKW_SCOPE_REFUSED);
  ASSERT_EQ(zkw_scope_add(&sc, &roots, "/nowhere/x"), ZKW_SCOPE_REFUSED);
  ASSERT_EQ(zkw_scope_add(&sc, &roots, "/other/root/c/x"), ZKW_SCOPE_SAME);
  struct zkw_scope two = {0};
  ASSERT_EQ(zkw_scope_learn(&two, &roots, B("/flink/a/b/c/x")), ZKW_SCOPE_CHANGED);
  ASSERT_EQ(zkw_scope_add(&two, &roots, "/flink/a"), ZKW_SCOPE_CHANGED);
  ASSERT_EQ(two.count, 1);
  ASSERT_STREQ(two.tree[0], "/flink/a");
}

static void test_bounded(void) {
  struct zkw_lock_roots roots = roots_of("/flink");
  struct zkw_scope sc = {0};
  char path[64];
  for (int i = 0; i < ZKW_SCOPE_TREES_MAX; i++) {
    snprintf(path, sizeof path, "/flink/c%d/x", i);
    ASSERT_EQ(zkw_scope_learn(&sc, &roots, B(path)), ZKW_SCOPE_CHANGED);
  }
  ASSERT_EQ(zkw_scope_learn(&sc, &roots, B("/flink/one-too-many/x")), ZKW_SCOPE_FULL);
  ASSERT_EQ(sc.count, ZKW_SCOPE_TREES_MAX);
  /* A path of 256 bytes or more is no tree. */
  char longp[300];
  memset(longp, 'a', sizeof longp);
  memcpy(longp, "/flink/", 7);
  longp[290] = '/';
  longp[299] = 0;
  struct zkw_scope other = {0};
  ASSERT_EQ(zkw_scope_learn(&other, &roots, B(longp)), ZKW_SCOPE_REFUSED);
}

static void test_record_keeps_the_trees(void) {
  struct zkw_record r = {.incarnation = 2, .session = 0x10, .timeout = 20000, .dead = 1};
  snprintf(r.instance, sizeof r.instance, "x");
  struct zkw_lock_roots roots = roots_of("/flink");
  ASSERT_EQ(zkw_scope_add(&r.trees, &roots, "/flink/c1"), ZKW_SCOPE_CHANGED);
  ASSERT_EQ(zkw_scope_add(&r.trees, &roots, "/flink/c,2"), ZKW_SCOPE_CHANGED); /* commas are fine */
  char text[ZKW_RECORD_TEXT_MAX];
  int n = zkw_record_format(&r, text, sizeof text);
  ASSERT_TRUE(n > 0);
  ASSERT_TRUE(strstr(text, "\ntree=/flink/c1\ntree=/flink/c,2\ndead=1\n") != NULL);
  struct zkw_record back;
  ASSERT_EQ(zkw_record_parse(text, n, &back), 0);
  ASSERT_EQ(back.trees.count, 2);
  ASSERT_STREQ(back.trees.tree[1], "/flink/c,2");
  /* Every tree fits in the record text. */
  for (int i = back.trees.count; i < ZKW_SCOPE_TREES_MAX; i++) {
    char t[ZKW_SCOPE_PATH_MAX]; /* /flink/<digit>xxx...: the longest a tree may be */
    memset(t, 'x', sizeof t);
    memcpy(t, "/flink/", 7);
    t[7] = (char)('0' + i);
    t[sizeof t - 1] = 0;
    ASSERT_EQ(zkw_scope_add(&back.trees, &roots, t), ZKW_SCOPE_CHANGED);
  }
  ASSERT_TRUE(zkw_record_format(&back, text, sizeof text) > 0);
  /* Lines it cannot take are ignored, not a corrupt record. */
  const char *odd =
      "zkwarden-registry 1\nincarnation=2\nsession=0x10\npasswd=000102030405060708090a0b0c0d0e0f\n"
      "timeout=20000\ninstance=x\ntree=relative\ntree=/t/\ntree=/ok\ndead=1\n";
  ASSERT_EQ(zkw_record_parse(odd, (int)strlen(odd), &back), 0);
  ASSERT_EQ(back.trees.count, 1);
  ASSERT_STREQ(back.trees.tree[0], "/ok");
}

/* Issue 29 item 10: dead sessions age out; a record's entries are never
 * "seen ending" by this process. */
static void test_dead_sessions_age_out(void) {
  struct zkw_record r = {0};
  struct zkw_dead_session old = {.session = 0x11, .incarnation = 1, .ended_ms = 1000, .observed = true};
  struct zkw_dead_session fresh = {.session = 0x12, .incarnation = 2, .ended_ms = 90000, .observed = true};
  ASSERT_TRUE(zkw_record_add_dead(&r, &old));
  ASSERT_TRUE(zkw_record_add_dead(&r, &fresh));
  ASSERT_EQ(zkw_record_age_dead(&r, 100000, 50000), 1);
  ASSERT_EQ(r.ndead, 1);
  ASSERT_TRUE(zkw_record_find_dead(&r, 0x11) == NULL);
  ASSERT_TRUE(zkw_record_find_dead(&r, 0x12) != NULL);
  char text[ZKW_RECORD_TEXT_MAX];
  snprintf(r.instance, sizeof r.instance, "x");
  int n = zkw_record_format(&r, text, sizeof text);
  struct zkw_record back;
  ASSERT_EQ(zkw_record_parse(text, n, &back), 0);
  ASSERT_EQ(back.ndead, 1);
  ASSERT_TRUE(!back.dead_sessions[0].observed);
}

int main(void) {
  RUN(test_a_flink_cluster_is_one_tree);
  RUN(test_what_is_not_learned);
  RUN(test_bounded);
  RUN(test_record_keeps_the_trees);
  RUN(test_dead_sessions_age_out);
  return zkw_test_summary("scope");
}
