/* test_treeset.c: an identity's own trees (zkw_treeset.c) and their place in the
 * registry record (zkw_record.c): what the JobManager's creates teach,
 * merging into a cluster's tree and never above it, the bound; the record's
 * tree lines and the aging of its dead sessions (issue 30; issue 29 item
 * 10); which trees are the own ones at each moment (zkw_owntrees.c): a
 * record's only while it is trusted, the current incarnation's before
 * earlier ones, which retire, the operator's first (issue 30 review); the
 * verdict on a registry node's ACL (zkw_regtrust.c, issue 35). */
#include <string.h>

#include "zkw_config.h"
#include "zkw_identity.h"
#include "zkw_owntrees.h"
#include "zkw_record.h"
#include "zkw_regtrust.h"
#include "zkw_treeset.h"
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
  struct zkw_treeset sc = {0};
  /* The latch alone: its parent. */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/c1/leader/latch/_c_x-latch-0000000001")),
            ZKW_TREESET_CHANGED);
  ASSERT_EQ(sc.count, 1);
  ASSERT_STREQ(sc.tree[0], "/flink/c1/leader/latch");
  /* A leader node and a lock: the cluster's tree, and nothing above it. */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/c1/leader/dispatcher/connection_info")),
            ZKW_TREESET_CHANGED);
  ASSERT_STREQ(sc.tree[0], "/flink/c1/leader");
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/c1/jobs/j/checkpoints/0000000000000000001/locks/u")),
            ZKW_TREESET_CHANGED);
  ASSERT_EQ(sc.count, 1);
  ASSERT_STREQ(sc.tree[0], "/flink/c1");
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/c1/jobgraphs/j/locks/u")), ZKW_TREESET_SAME);
  ASSERT_TRUE(zkw_treeset_covers(&sc, "/flink/c1/jobgraphs/j", 21));
  /* A prefix of a name is not an ancestor. */
  ASSERT_TRUE(!zkw_treeset_covers(&sc, "/flink/c10", 10));
  /* Another cluster under the same root: a tree of its own, never /flink. */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/c2/leader/latch/_c_y-latch-0000000001")),
            ZKW_TREESET_CHANGED);
  ASSERT_EQ(sc.count, 2);
  ASSERT_TRUE(!zkw_treeset_covers(&sc, "/flink", 6));
  /* A nested path.root: the cluster below it, not its siblings. */
  struct zkw_treeset nested = {0};
  ASSERT_EQ(zkw_treeset_learn(&nested, &roots, B("/flink/prod/c7/leader/latch/_c_z-latch-1")),
            ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_treeset_learn(&nested, &roots, B("/flink/prod/c7/jobs/j/locks/u")), ZKW_TREESET_CHANGED);
  ASSERT_STREQ(nested.tree[0], "/flink/prod/c7");
}

static void test_what_is_not_learned(void) {
  struct zkw_lock_roots roots = roots_of("/flink,/other/root");
  struct zkw_treeset sc = {0};
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/elsewhere/x/y")), ZKW_TREESET_REFUSED); /* outside the roots */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/latch-1")),
            ZKW_TREESET_REFUSED); /* its parent is a root */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flinkx/a/b")), ZKW_TREESET_REFUSED);
  ASSERT_EQ(sc.count, 0);
  /* Under the deeper root of two. */
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/other/root/c/x")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/other/root/d/x")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(sc.count, 2); /* /other/root/c and /d: their common ancestor is the root */
  /* Operator's trees: only below a root; a wider one replaces those below it. */
  ASSERT_EQ(zkw_treeset_add(&sc, &roots, "/flink"), ZKW_TREESET_REFUSED);
  ASSERT_EQ(zkw_treeset_add(&sc, &roots, "/nowhere/x"), ZKW_TREESET_REFUSED);
  ASSERT_EQ(zkw_treeset_add(&sc, &roots, "/other/root/c/x"), ZKW_TREESET_SAME);
  struct zkw_treeset two = {0};
  ASSERT_EQ(zkw_treeset_learn(&two, &roots, B("/flink/a/b/c/x")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_treeset_add(&two, &roots, "/flink/a"), ZKW_TREESET_CHANGED);
  ASSERT_EQ(two.count, 1);
  ASSERT_STREQ(two.tree[0], "/flink/a");
}

static void test_bounded(void) {
  struct zkw_lock_roots roots = roots_of("/flink");
  struct zkw_treeset sc = {0};
  char path[64];
  for (int i = 0; i < ZKW_TREESET_LEARNED_MAX; i++) {
    snprintf(path, sizeof path, "/flink/c%d/x", i);
    ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B(path)), ZKW_TREESET_CHANGED);
  }
  ASSERT_EQ(zkw_treeset_learn(&sc, &roots, B("/flink/one-too-many/x")), ZKW_TREESET_FULL);
  ASSERT_EQ(sc.count, ZKW_TREESET_LEARNED_MAX);
  /* A path of 256 bytes or more is no tree. */
  char longp[300];
  memset(longp, 'a', sizeof longp);
  memcpy(longp, "/flink/", 7);
  longp[290] = '/';
  longp[299] = 0;
  struct zkw_treeset other = {0};
  ASSERT_EQ(zkw_treeset_learn(&other, &roots, B(longp)), ZKW_TREESET_REFUSED);
}

static void test_record_keeps_the_trees(void) {
  struct zkw_record r = {.incarnation = 2, .session = 0x10, .timeout = 20000, .dead = 1};
  snprintf(r.instance, sizeof r.instance, "x");
  struct zkw_lock_roots roots = roots_of("/flink");
  ASSERT_EQ(zkw_treeset_add(&r.trees, &roots, "/flink/c1"), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_treeset_add(&r.trees, &roots, "/flink/c,2"), ZKW_TREESET_CHANGED); /* commas are fine */
  char text[ZKW_RECORD_TEXT_MAX];
  int n = zkw_record_format(&r, text, sizeof text);
  ASSERT_TRUE(n > 0);
  ASSERT_TRUE(strstr(text, "\ntree=/flink/c1\ntree=/flink/c,2\ndead=1\n") != NULL);
  struct zkw_record back;
  ASSERT_EQ(zkw_record_parse(text, n, &back), 0);
  ASSERT_EQ(back.trees.count, 2);
  ASSERT_STREQ(back.trees.tree[1], "/flink/c,2");
  /* Every tree fits in the record text. */
  for (int i = back.trees.count; i < ZKW_TREESET_TREES_MAX; i++) {
    char t[ZKW_TREESET_PATH_MAX]; /* /flink/<digit>xxx...: the longest a tree may be */
    memset(t, 'x', sizeof t);
    memcpy(t, "/flink/", 7);
    t[7] = (char)('0' + i);
    t[sizeof t - 1] = 0;
    ASSERT_EQ(zkw_treeset_add(&back.trees, &roots, t), ZKW_TREESET_CHANGED);
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

/* ---- zkw_owntrees.c: a fake identity (no registry, no loop) ---- */

static struct zkw_config icfg;
static struct zkw_server isrv;

static void fresh_identity(struct zkw_identity *id, const char *sweep_trees) {
  memset(&icfg, 0, sizeof icfg);
  icfg.lock_roots = roots_of("/flink");
  if (sweep_trees) icfg.sweep_trees = roots_of(sweep_trees);
  snprintf(icfg.identity, sizeof icfg.identity, "jm-0");
  isrv.cfg = &icfg;
  memset(id, 0, sizeof *id);
  id->srv = &isrv;
}

static bool has(const struct zkw_treeset *sc, const char *tree) {
  for (int i = 0; i < sc->count; i++)
    if (strcmp(sc->tree[i], tree) == 0) return true;
  return false;
}

/* Item 1 (issue 35): a record's trees are swept only once the record is
 * judged trusted (only zkwarden's registry identity can change it); else
 * they are shown (marked) and, with credentials, never carried on by a write
 * of zkwarden's, which would make them look trusted. */
static void test_record_trees_only_while_trusted(void) {
  struct zkw_identity id;
  fresh_identity(&id, NULL);
  snprintf(icfg.registry_auth, sizeof icfg.registry_auth, "zkw:pw");
  struct zkw_treeset rec = {0}, own;
  ASSERT_EQ(zkw_treeset_add(&rec, &icfg.lock_roots, "/flink/other-cluster"), ZKW_TREESET_CHANGED);
  id.record_trust = ZKW_TRUST_PENDING;          /* read, not judged yet */
  ASSERT_TRUE(!zkw_owntrees_loaded(&id, &rec)); /* the record holds what this instance writes */
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, 0);
  zkw_owntrees_for_record(&id, &own);
  ASSERT_EQ(own.count, 0); /* nor written meanwhile */
  zkw_owntrees_untrusted(&id, &own);
  ASSERT_TRUE(has(&own, "/flink/other-cluster")); /* the lock report shows it, marked */
  id.record_trust = ZKW_TRUST_TRUSTED;
  ASSERT_TRUE(zkw_owntrees_judged(&id, NULL)); /* held back until now: written */
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_TRUE(has(&own, "/flink/other-cluster"));
  zkw_owntrees_untrusted(&id, &own);
  ASSERT_EQ(own.count, 0);
  /* Loaded again, and judged not trusted (another principal may write it). */
  ASSERT_TRUE(!zkw_owntrees_loaded(&id, &rec));
  id.record_trust = ZKW_TRUST_UNTRUSTED;
  ASSERT_TRUE(zkw_owntrees_judged(&id, "ip:0.0.0.0/0 may change it")); /* a write drops it */
  ASSERT_TRUE(id.rec_trees_warned);
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, 0);
  zkw_owntrees_for_record(&id, &own);
  ASSERT_EQ(own.count, 0);
  zkw_owntrees_untrusted(&id, &own);
  ASSERT_TRUE(has(&own, "/flink/other-cluster"));
  /* Without credentials nothing read is trusted: carried on for the lock
   * report (no write is due), never swept. */
  icfg.registry_auth[0] = 0;
  ASSERT_TRUE(!zkw_owntrees_judged(&id, ZKW_REGTRUST_NO_AUTH));
  zkw_owntrees_for_record(&id, &own);
  ASSERT_TRUE(has(&own, "/flink/other-cluster"));
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, 0);
}

/* Item 2: after a cluster-id change the old tree serves the new
 * incarnation's first walk, then retires; the record keeps the new one. */
static void test_current_incarnation_replaces_earlier_trees(void) {
  struct zkw_identity id;
  fresh_identity(&id, NULL);
  struct zkw_treeset own;
  ASSERT_EQ(zkw_owntrees_learn(&id, 1, B("/flink/old/leader/latch/_c_a-latch-1")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_owntrees_learn(&id, 1, B("/flink/old/jobs/j/locks/u")), ZKW_TREESET_CHANGED);
  ASSERT_STREQ(id.scope.tree[0], "/flink/old");
  /* Incarnation 2 walks before it learned anything: nothing retires. */
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_EQ(zkw_owntrees_walked(&id, 2, &own), 0);
  ASSERT_EQ(zkw_owntrees_learn(&id, 2, B("/flink/new/leader/latch/_c_b-latch-1")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(id.scope.count, 1);
  ASSERT_STREQ(id.scope.tree[0], "/flink/new/leader/latch");
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_EQ(own.count, 2);
  ASSERT_STREQ(own.tree[0], "/flink/new/leader/latch"); /* the current incarnation's first */
  ASSERT_TRUE(has(&own, "/flink/old"));
  /* A walk of the new tree alone retires nothing; one of both, the old. */
  struct zkw_treeset part = {0};
  ASSERT_EQ(zkw_treeset_add(&part, &icfg.lock_roots, "/flink/new/leader/latch"), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_owntrees_walked(&id, 2, &part), 0);
  ASSERT_EQ(zkw_owntrees_walked(&id, 1, &own), 0); /* not the incarnation that learned */
  ASSERT_EQ(zkw_owntrees_walked(&id, 2, &own), 1);
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_EQ(own.count, 1);
  zkw_owntrees_for_record(&id, &own);
  ASSERT_EQ(own.count, 1);
  ASSERT_STREQ(own.tree[0], "/flink/new/leader/latch");
  /* A restarted sidecar reads its record back: nothing new, nothing due. */
  ASSERT_TRUE(!zkw_owntrees_loaded(&id, &own));
  ASSERT_EQ(id.rec_trees.count, 0);
}

/* Item 2: a record full of old trees never crowds out the real one. */
static void test_old_trees_never_crowd_out_the_current_one(void) {
  struct zkw_identity id;
  fresh_identity(&id, NULL);
  id.record_trust = ZKW_TRUST_TRUSTED;
  struct zkw_treeset rec = {0}, own;
  char t[64];
  for (int i = 0; i < ZKW_TREESET_TREES_MAX; i++) {
    snprintf(t, sizeof t, "/flink/gone-%d", i);
    ASSERT_EQ(zkw_treeset_add(&rec, &icfg.lock_roots, t), ZKW_TREESET_CHANGED);
  }
  ASSERT_TRUE(!zkw_owntrees_loaded(&id, &rec));
  ASSERT_EQ(zkw_owntrees_learn(&id, 9, B("/flink/real/leader/latch/_c_c-latch-1")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 1); /* one old tree has no room */
  ASSERT_STREQ(own.tree[0], "/flink/real/leader/latch");
  /* A complete pass retires the old ones it read; the one without room
   * was not read: it stays, and the next complete pass reads it (issue 35,
   * item 3: before, it was retired unread). */
  ASSERT_EQ(zkw_owntrees_walked(&id, 9, &own), ZKW_TREESET_TREES_MAX - 1);
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, 2);
  ASSERT_EQ(zkw_owntrees_walked(&id, 9, &own), 1);
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, 1);
  ASSERT_TRUE(zkw_owntrees_loaded(&id, &rec)); /* the old record is due a write */
}

/* Item 2: past the learned bound, naming the tree left out makes it read. */
static void test_operator_trees_make_room(void) {
  struct zkw_identity id;
  fresh_identity(&id, NULL);
  char p[64];
  for (int i = 0; i < ZKW_TREESET_LEARNED_MAX; i++) {
    snprintf(p, sizeof p, "/flink/c%d/x", i);
    ASSERT_EQ(zkw_owntrees_learn(&id, 1, B(p)), ZKW_TREESET_CHANGED);
  }
  ASSERT_EQ(zkw_owntrees_learn(&id, 1, B("/flink/ninth/x")), ZKW_TREESET_FULL);
  /* The operator names it (the sidecar restarts with it). */
  struct zkw_treeset own;
  fresh_identity(&id, "/flink/ninth");
  for (int i = 0; i < ZKW_TREESET_LEARNED_MAX; i++) {
    snprintf(p, sizeof p, "/flink/c%d/x", i);
    ASSERT_EQ(zkw_owntrees_learn(&id, 2, B(p)), ZKW_TREESET_CHANGED);
  }
  ASSERT_EQ(zkw_owntrees_learn(&id, 2, B("/flink/ninth/x")), ZKW_TREESET_SAME); /* covered: no room taken */
  ASSERT_EQ(zkw_owntrees_of(&id, &own), 0);
  ASSERT_EQ(own.count, ZKW_TREESET_LEARNED_MAX + 1);
  ASSERT_STREQ(own.tree[0], "/flink/ninth");
  ASSERT_TRUE(has(&own, "/flink/c7"));
}

/* A new incarnation whose creates all fall under an operator's tree still
 * retires the old learned trees once it walked them (a cluster-id change
 * with ZKWARDEN_SWEEP_TREES naming the new tree). */
static void test_operator_tree_begins_the_incarnation(void) {
  struct zkw_identity id;
  fresh_identity(&id, "/flink/new");
  struct zkw_treeset own;
  ASSERT_EQ(zkw_owntrees_learn(&id, 1, B("/flink/old/leader/latch/_c_a-latch-1")), ZKW_TREESET_CHANGED);
  ASSERT_EQ(zkw_owntrees_learn(&id, 2, B("/flink/new/leader/latch/_c_b-latch-1")), ZKW_TREESET_SAME);
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_TRUE(has(&own, "/flink/new") && has(&own, "/flink/old/leader/latch"));
  ASSERT_EQ(zkw_owntrees_walked(&id, 2, &own), 1);
  (void)zkw_owntrees_of(&id, &own);
  ASSERT_EQ(own.count, 1);
  ASSERT_STREQ(own.tree[0], "/flink/new");
}

/* Issue 35 item 1: a registry node is trusted only when zkwarden's registry
 * identity holds every permission and anyone else READ at most. The ACL as
 * zkw_zk.c judges it: acl_ours, the union of the others' permissions, the
 * first other entry that grants more than READ. */
static void test_regtrust_verdicts(void) {
  char buf[ZKW_REGTRUST_WHY_MAX];
  struct zkw_zk_result r = {.rc = ZOK, .acl_ours = true};
  ASSERT_TRUE(zkw_regtrust_why(&r, true, buf, sizeof buf) == NULL); /* creator-only: trusted */
  ASSERT_STREQ(zkw_regtrust_why(&r, false, buf, sizeof buf), ZKW_REGTRUST_NO_AUTH);
  r.acl_others = ZOO_PERM_READ; /* world:anyone READ beside it: still zkwarden's alone to change */
  ASSERT_TRUE(zkw_regtrust_why(&r, true, buf, sizeof buf) == NULL);
  r.acl_others = ZOO_PERM_ALL; /* an ip range, another user, world: every right */
  snprintf(r.acl_other, sizeof r.acl_other, "ip:0.0.0.0/0");
  const char *why = zkw_regtrust_why(&r, true, buf, sizeof buf);
  ASSERT_TRUE(why && strstr(why, "ip:0.0.0.0/0") && strstr(why, "cdwa"));
  r.acl_others = ZOO_PERM_CREATE | ZOO_PERM_DELETE; /* a parent: delete a record, create another */
  snprintf(r.acl_other, sizeof r.acl_other, "digest:mallory:x");
  why = zkw_regtrust_why(&r, true, buf, sizeof buf);
  ASSERT_TRUE(why && strstr(why, "digest:mallory:x") && strstr(why, "(its ACL grants others cd)"));
  struct zkw_zk_result noone = {.rc = ZOK}; /* read-only for all, but not written by zkwarden */
  ASSERT_TRUE(zkw_regtrust_why(&noone, true, buf, sizeof buf) != NULL);
  struct zkw_zk_result gone = {.rc = ZNONODE}, failed = {.rc = ZCONNECTIONLOSS};
  ASSERT_STREQ(zkw_regtrust_why(&gone, true, buf, sizeof buf), "it is gone");
  ASSERT_TRUE(strstr(zkw_regtrust_why(&failed, true, buf, sizeof buf), "cannot be read") != NULL);
  /* The verdict holds for content of the same node under the same ACL. */
  struct Stat acl = {.czxid = 7, .aversion = 1, .version = 4}, data = acl;
  data.version = 9; /* written since: the same ACL covers it */
  ASSERT_TRUE(zkw_regtrust_same(&acl, &data));
  data.aversion = 2;
  ASSERT_TRUE(!zkw_regtrust_same(&acl, &data));
  data.aversion = 1;
  data.czxid = 8; /* deleted and created again */
  ASSERT_TRUE(!zkw_regtrust_same(&acl, &data));
}

int main(void) {
  RUN(test_regtrust_verdicts);
  RUN(test_a_flink_cluster_is_one_tree);
  RUN(test_what_is_not_learned);
  RUN(test_bounded);
  RUN(test_record_keeps_the_trees);
  RUN(test_dead_sessions_age_out);
  RUN(test_record_trees_only_while_trusted);
  RUN(test_current_incarnation_replaces_earlier_trees);
  RUN(test_old_trees_never_crowd_out_the_current_one);
  RUN(test_operator_trees_make_room);
  RUN(test_operator_tree_begins_the_incarnation);
  return zkw_test_summary("scope");
}
