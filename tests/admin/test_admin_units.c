/* test_admin_units.c: unit tests of the operability modules: histogram
 * buckets, the Prometheus rendering, JSON and HTML strings, the reclaim
 * history ring, secrets in configuration errors, the staleness rule's
 * verdicts that `zkwarden locks`, /v1/locks and reclaim share, and which
 * admin paths answer a peer that is not on loopback (ZKWARDEN_ADMIN_REMOTE). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "../unit/zkw_test.h"
#include "zkw_admin.h"
#include "zkw_config.h"
#include "zkw_history.h"
#include "zkw_lockrule.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_text.h"

static const char *buf_str(struct zkw_buf *b) {
  if (zkw_buf_reserve(b, 1) != 0) abort();
  b->data[b->len] = 0;
  return (const char *)b->data;
}

/* An observation equal to a bucket's bound falls in that bucket (le). */
static void test_histogram_bounds_are_inclusive(void) {
  struct zkw_histogram h;
  memset(&h, 0, sizeof h);
  zkw_histogram_observe(&h, 100000);      /* exactly 0.0001 s */
  zkw_histogram_observe(&h, 100001);      /* just above: next bucket */
  zkw_histogram_observe(&h, 0);           /* first bucket */
  zkw_histogram_observe(&h, 20000000000); /* 20 s: +Inf */
  ASSERT_EQ(h.bucket[0], 2);
  ASSERT_EQ(h.bucket[1], 1);
  ASSERT_EQ(h.bucket[ZKW_LATENCY_BOUNDS], 1);
  ASSERT_EQ(h.count, 4);
  ASSERT_EQ(h.sum_ns, 100000 + 100001 + 20000000000ull);
}

static void test_render_histogram_and_counters(void) {
  struct zkw_buf b = {0};
  memset(&zkw_metrics, 0, sizeof zkw_metrics);
  zkw_metrics_init();
  zkw_metrics_request(ZKW_OP_GET_DATA);
  zkw_metrics_reply(ZKW_OP_GET_DATA);
  zkw_metrics_latency(ZKW_OP_GET_DATA, 1500000); /* 1.5 ms */
  zkw_metrics_reply(ZKW_OP_NOTIFICATION);
  zkw_metrics_request(12345); /* unknown opcodes are not counted */
  zkw_metrics_closed(ZKW_CLOSE_SHUTDOWN);
  zkw_metrics_closed(99); /* out of range: other */
  ASSERT_EQ(zkw_metrics_render(&b), 0);
  const char *t = buf_str(&b);
  ASSERT_TRUE(strstr(t, "# TYPE zkwarden_request_duration_seconds histogram\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_request_duration_seconds_bucket{op=\"getData\",le=\"0.001\"} 0\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_request_duration_seconds_bucket{op=\"getData\",le=\"0.0025\"} 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_request_duration_seconds_bucket{op=\"getData\",le=\"+Inf\"} 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_request_duration_seconds_sum{op=\"getData\"} 0.001500000\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_request_duration_seconds_count{op=\"getData\"} 1\n"));
  /* No histogram for an opcode never answered; counters for every request opcode. */
  ASSERT_TRUE(!strstr(t, "zkwarden_request_duration_seconds_count{op=\"create\"}"));
  ASSERT_TRUE(strstr(t, "zkwarden_requests_total{op=\"create\"} 0\n"));
  ASSERT_TRUE(!strstr(t, "op=\"notification\""));
  ASSERT_TRUE(strstr(t, "zkwarden_replies_total{op=\"getData\"} 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_watch_events_total 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_connections_closed_total{reason=\"shutdown\"} 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_connections_closed_total{reason=\"other\"} 1\n"));
  ASSERT_TRUE(strstr(t, "zkwarden_build_info{version=\"" ZKW_VERSION "\"} 1\n"));
  ASSERT_EQ(t[b.len - 1], '\n');
  zkw_buf_release(&b);
}

static void test_json_string_escapes_and_cuts_at_utf8_boundaries(void) {
  struct zkw_buf b = {0};
  ASSERT_EQ(zkw_text_json_string(&b, "a\"b\\c\n\x01", 100), 0);
  ASSERT_STREQ(buf_str(&b), "\"a\\\"b\\\\c\\u000a\\u0001\"");
  b.len = 0;
  /* "é" is 2 bytes: a cut after its first byte drops it whole. */
  ASSERT_EQ(zkw_text_json_string(&b, "ab\xc3\xa9", 3), 0);
  ASSERT_STREQ(buf_str(&b), "\"ab\"");
  b.len = 0;
  ASSERT_EQ(zkw_text_json_string(&b, "ab\xc3\xa9", 4), 0);
  ASSERT_STREQ(buf_str(&b), "\"ab\xc3\xa9\"");
  zkw_buf_release(&b);
}

static void test_html_text_escapes_markup(void) {
  struct zkw_buf b = {0};
  ASSERT_EQ(zkw_text_html(&b, "<a href=\"x\">&'</a>", 100), 0);
  ASSERT_STREQ(buf_str(&b), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  b.len = 0;
  ASSERT_EQ(zkw_text_html(&b, "abcdef", 3), 0);
  ASSERT_STREQ(buf_str(&b), "abc");
  zkw_buf_release(&b);
}

/* Each rule of zkw_lock_why_not_stale in order, and the one stale case. */
static void test_staleness_rule_words(void) {
  struct zkw_tag t = {.identity = "jm-0", .incarnation = 2};
  ASSERT_STREQ(zkw_lock_why_not_stale(NULL, 7, 0, 3), "not tagged by zkwarden");
  ASSERT_STREQ(zkw_lock_why_not_stale(&t, 0, 0, 3), "not an ephemeral");
  ASSERT_STREQ(zkw_lock_why_not_stale(&t, 7, 7, 3), "held by the asking session");
  ASSERT_STREQ(zkw_lock_why_not_stale(&t, 7, 8, 0), "its identity's current incarnation is unknown");
  ASSERT_STREQ(zkw_lock_why_not_stale(&t, 7, 8, 2), "held by its identity's current incarnation");
  ASSERT_TRUE(zkw_lock_why_not_stale(&t, 7, 8, 3) == NULL);
  ASSERT_TRUE(zkw_lock_why_not_stale(&t, 7, 0, 3) == NULL); /* no asking session */
}

static void test_history_ring_keeps_the_newest(void) {
  struct zkw_buf b = {0};
  char path[64];
  uint64_t before = zkw_history_total();
  for (int i = 0; i < ZKW_HISTORY_SIZE + 10; i++) {
    snprintf(path, sizeof path, "/flink/x/locks/%d", i);
    zkw_history_add(ZKW_HISTORY_RECLAIM_DELETE, path, "stale", 0x10 + i, "jm-0", 3);
  }
  ASSERT_EQ(zkw_history_total() - before, ZKW_HISTORY_SIZE + 10);
  ASSERT_EQ(zkw_history_render_json(&b, 2), 0);
  const char *t = buf_str(&b);
  /* Newest first, at most the limit. */
  const char *newest = strstr(t, "/flink/x/locks/265");
  const char *next = strstr(t, "/flink/x/locks/264");
  ASSERT_TRUE(newest && next && newest < next);
  ASSERT_TRUE(!strstr(t, "/flink/x/locks/263"));
  ASSERT_TRUE(strstr(t, "\"kind\":\"reclaim_at_delete\""));
  ASSERT_TRUE(strstr(t, "\"session\":\"0x119\",\"identity\":\"jm-0\",\"incarnation\":3"));
  b.len = 0;
  ASSERT_EQ(zkw_history_render_json(&b, ZKW_HISTORY_SIZE), 0);
  t = buf_str(&b);
  ASSERT_TRUE(strstr(t, "/flink/x/locks/10\""));
  ASSERT_TRUE(!strstr(t, "/flink/x/locks/9\"")); /* overwritten */
  /* NULLs and long texts. */
  char longpath[2000];
  memset(longpath, 'p', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = 0;
  zkw_history_add(ZKW_HISTORY_FENCE, NULL, NULL, 0, NULL, 0);
  zkw_history_add(ZKW_HISTORY_SWEEP, longpath, "r", 1, "i", 1);
  b.len = 0;
  ASSERT_EQ(zkw_history_render_json(&b, 2), 0);
  t = buf_str(&b);
  ASSERT_TRUE(strstr(
      t, "\"kind\":\"fence\",\"done\":true,\"would\":false,\"path\":\"\",\"version\":null,\"reason\":\"\""));
  ASSERT_TRUE(strlen(t) < 2000);
  zkw_buf_release(&b);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  return text;
}

/* Observe mode's would-actions and the audit file: one JSON line per
 * action, done or not; a reopen after the file was moved starts a new one. */
static void test_would_actions_and_the_audit_file(void) {
  char dir[] = "/tmp/zkw-audit-XXXXXX", path[64], moved[80];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/audit", dir);
  snprintf(moved, sizeof moved, "%s/audit.1", dir);
  ASSERT_EQ(zkw_history_audit_open(path), 0);
  uint64_t would = zkw_history_would_total(), fences = zkw_metrics.would_actions[ZKW_ACTION_FENCE];
  zkw_history_record(&(struct zkw_action){ZKW_HISTORY_SWEEP, "/flink/l/\"q\"", 4, "stale", 0x2a, "jm-0", 2});
  zkw_history_would(&(struct zkw_action){ZKW_HISTORY_FENCE, NULL, -1, "superseded", 0x2b, "jm-0", 3});
  ASSERT_EQ(zkw_history_would_total() - would, 1);
  ASSERT_EQ(zkw_metrics.would_actions[ZKW_ACTION_FENCE] - fences, 1);
  const char *t = slurp(path);
  ASSERT_TRUE(t != NULL);
  const char *l2 = strchr(t, '\n');
  ASSERT_TRUE(l2 && strchr(l2 + 1, '\n') && !strchr(strchr(l2 + 1, '\n') + 1, '\n')); /* two lines */
  ASSERT_TRUE(strstr(t, "{\"time\":\"") == t);
  ASSERT_TRUE(strstr(
      t, "\"kind\":\"sweep\",\"done\":true,\"would\":false,\"path\":\"/flink/l/\\\"q\\\"\",\"version\":4,"
         "\"reason\":\"stale\",\"session\":\"0x2a\",\"identity\":\"jm-0\",\"incarnation\":2}\n"));
  ASSERT_TRUE(strstr(l2, "\"kind\":\"fence\",\"done\":false,\"would\":true,\"path\":\"\",\"version\":null,"
                         "\"reason\":\"superseded\",\"session\":\"0x2b\""));
  /* logrotate moved it: the reopen starts a new file, the old one keeps its lines. */
  ASSERT_EQ(rename(path, moved), 0);
  ASSERT_EQ(zkw_history_audit_reopen(), 0);
  zkw_history_add(ZKW_HISTORY_ORPHAN_FENCE, NULL, "closed", 0x2c, "jm-0", 3);
  zkw_history_failed(ZKW_HISTORY_RECLAIM_DELETE, "/flink/f", "failed (noauth)", 0x2d, "jm-0", 2);
  t = slurp(path);
  ASSERT_TRUE(t && strstr(t, "\"kind\":\"orphan_fence\",\"done\":true,\"would\":false") &&
              !strstr(t, "sweep"));
  ASSERT_TRUE(
      strstr(t, "\"kind\":\"reclaim_at_delete\",\"done\":false,\"would\":false,\"path\":\"/flink/f\""));
  t = slurp(moved);
  ASSERT_TRUE(t && strstr(t, "sweep") && !strstr(t, "orphan_fence"));
  zkw_history_audit_close();
  ASSERT_EQ(zkw_history_audit_reopen(), 0); /* none open: nothing to do */
  ASSERT_EQ(zkw_history_audit_open("/nonexistent-dir/audit"), -ENOENT);
  unlink(path);
  unlink(moved);
  rmdir(dir);
}

/* ---- configuration ---- */

static const char *env_names[8], *env_values[8];
static int env_n;

static const char *fake_getenv(const char *name) {
  for (int i = 0; i < env_n; i++)
    if (strcmp(env_names[i], name) == 0) return env_values[i];
  return NULL;
}

static void test_config_error_hides_a_secret(void) {
  struct zkw_config cfg;
  char err[512] = "";
  env_n = 0;
  env_names[env_n] = "ZKWARDEN_UPSTREAM", env_values[env_n++] = "127.0.0.1:2181";
  env_names[env_n] = "ZKWARDEN_REGISTRY_AUTH", env_values[env_n++] = "canary-secret-without-colon";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), -1);
  ASSERT_TRUE(strstr(err, "ZKWARDEN_REGISTRY_AUTH=\"<hidden>\""));
  ASSERT_TRUE(!strstr(err, "canary"));
}

static void test_config_admin_listen_and_log_file(void) {
  struct zkw_config cfg;
  char err[512] = "";
  env_n = 0;
  env_names[env_n] = "ZKWARDEN_UPSTREAM", env_values[env_n++] = "127.0.0.1:2181";
  env_names[env_n] = "ZKWARDEN_ADMIN_LISTEN", env_values[env_n++] = "[::1]:9999";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_EQ(cfg.admin_listen.ss_family, AF_INET6);
  ASSERT_TRUE(cfg.log_file == NULL);
  env_names[env_n] = "ZKWARDEN_LOG_FILE", env_values[env_n++] = "/nonexistent-dir/x.log";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), -1);
  ASSERT_TRUE(strstr(err, "ZKWARDEN_LOG_FILE=\"/nonexistent-dir/x.log\" is not valid"));
}

static bool loopback4(const char *ip) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) abort();
  return zkw_text_is_loopback((const struct sockaddr *)&a);
}

static bool loopback6(const char *ip) {
  struct sockaddr_in6 a = {.sin6_family = AF_INET6};
  if (inet_pton(AF_INET6, ip, &a.sin6_addr) != 1) abort();
  return zkw_text_is_loopback((const struct sockaddr *)&a);
}

static void test_loopback_addresses(void) {
  ASSERT_TRUE(loopback4("127.0.0.1") && loopback4("127.1.2.3"));
  ASSERT_TRUE(!loopback4("10.0.0.1") && !loopback4("128.0.0.1") && !loopback4("0.0.0.0"));
  ASSERT_TRUE(loopback6("::1") && loopback6("::ffff:127.0.0.1"));
  ASSERT_TRUE(!loopback6("::ffff:10.1.2.3") && !loopback6("2001:db8::1") && !loopback6("::"));
  ASSERT_TRUE(!loopback6("fe80::1"));
}

/* One request on a fresh connection from a peer (remote or not): its status. */
static int admin_status(const char *path, bool remote) {
  struct zkw_admin_http h;
  zkw_admin_http_init(&h);
  h.remote = remote;
  char req[256];
  snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
  int status = -1;
  if (zkw_admin_http_feed(&h, req, strlen(req)) == 0 && h.out.len > 12)
    status = atoi((const char *)h.out.data + 9);
  zkw_admin_http_release(&h);
  return status;
}

/* ZKWARDEN_ADMIN_REMOTE=probes (the default): a peer not on loopback gets
 * only the probes and the metrics; loopback gets everything; =all opens it. */
static void test_admin_remote_rule(void) {
  static struct zkw_config cfg;
  char err[512] = "";
  env_n = 0;
  env_names[env_n] = "ZKWARDEN_UPSTREAM", env_values[env_n++] = "127.0.0.1:2181";
  env_names[env_n] = "ZKWARDEN_MODE", env_values[env_n++] = "relay";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_TRUE(!cfg.admin_remote_all);
  static struct zkw_server srv;
  zkw_server_init(&srv, NULL, &cfg, NULL, NULL);
  zkw_admin_http_setup(&srv);
  const char *private_paths[] = {"/", "/v1/sessions", "/v1/reclaims", "/v1/locks", "/v1/locks?x=1"};
  for (size_t i = 0; i < sizeof private_paths / sizeof *private_paths; i++) {
    ASSERT_EQ(admin_status(private_paths[i], true), 403);
    ASSERT_TRUE(admin_status(private_paths[i], false) != 403);
  }
  ASSERT_EQ(admin_status("/healthz", true), 200);
  ASSERT_EQ(admin_status("/nope", true), 404);
  env_names[env_n] = "ZKWARDEN_ADMIN_REMOTE", env_values[env_n++] = "all";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), 0);
  ASSERT_TRUE(cfg.admin_remote_all);
  ASSERT_EQ(admin_status("/v1/sessions", true), 200);
  ASSERT_EQ(admin_status("/v1/reclaims", true), 200);
  env_values[env_n - 1] = "everything";
  ASSERT_EQ(zkw_config_load(&cfg, fake_getenv, err, sizeof err), -1);
  ASSERT_TRUE(strstr(err, "ZKWARDEN_ADMIN_REMOTE=\"everything\" is not valid: expected probes or all"));
}

int main(void) {
  RUN(test_histogram_bounds_are_inclusive);
  RUN(test_render_histogram_and_counters);
  RUN(test_json_string_escapes_and_cuts_at_utf8_boundaries);
  RUN(test_html_text_escapes_markup);
  RUN(test_staleness_rule_words);
  RUN(test_history_ring_keeps_the_newest);
  RUN(test_would_actions_and_the_audit_file);
  RUN(test_config_error_hides_a_secret);
  RUN(test_config_admin_listen_and_log_file);
  RUN(test_loopback_addresses);
  RUN(test_admin_remote_rule);
  return zkw_test_summary("admin units");
}
