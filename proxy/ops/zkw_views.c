/* zkw_views.c: what the admin endpoint shows of the proxy's state, rendered
 * into a buffer and nothing else (no HTTP, no socket): the session list
 * (/v1/sessions), the status page (/) and the gauges computed from the live
 * sessions (/metrics). zkw_admin.c serves them. */
#include "zkw_views.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zkw_health.h"
#include "zkw_history.h"
#include "zkw_metrics.h"
#include "zkw_owntrees.h"
#include "zkw_session.h"
#include "zkw_sidecar.h"
#include "zkw_text.h"

static const char *phase_name(const struct zkw_session *s) {
  if (zkw_session_moving(s)) return "moving"; /* active, on its way to another server */
  switch (zkw_session_phase(s)) {
  case ZKW_PHASE_HANDSHAKE:
    return "handshake";
  case ZKW_PHASE_CONNECTING:
    return "connecting";
  case ZKW_PHASE_ACTIVE:
    return "active";
  case ZKW_PHASE_RAW:
    return "four_letter_word";
  case ZKW_PHASE_CLOSING:
    return "closing";
  default:
    return "unknown";
  }
}

void zkw_views_refresh_gauges(struct zkw_server *srv) {
  int64_t active = 0, plain = 0, out = 0;
  for (const struct zkw_session *s = zkw_session_first(srv); s;
       s = zkw_session_next((struct zkw_session *)s)) {
    if (zkw_session_phase(s) == ZKW_PHASE_ACTIVE) active++;
    if (zkw_session_phase(s) == ZKW_PHASE_ACTIVE && !zkw_sidecar_incarnation(s)) plain++;
    out += zkw_session_outstanding(s);
  }
  ZKW_METRIC_SET(connections_active, (int64_t)srv->session_count);
  ZKW_METRIC_SET(sessions_active, active);
  ZKW_METRIC_SET(plain_client_sessions, plain);
  ZKW_METRIC_SET(outstanding_requests, out);
  ZKW_METRIC_SET(buffered_bytes, (int64_t)zkw_buf_held());
  char why[8];
  ZKW_METRIC_SET(ready, zkw_server_ready(srv, why, sizeof why) ? 1 : 0);
}

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

int zkw_views_sessions_json(struct zkw_server *srv, struct zkw_buf *b) {
  TRY(zkw_text_printf(b, "{\"count\":%llu,\"sessions\":[", (unsigned long long)srv->session_count));
  bool first = true;
  for (const struct zkw_session *s = zkw_session_first(srv); s;
       s = zkw_session_next((struct zkw_session *)s)) {
    TRY(zkw_text_printf(b, "%s{\"conn\":%llu,\"session\":\"0x%llx\",\"peer\":", first ? "" : ",",
                        (unsigned long long)zkw_session_conn(s), (unsigned long long)zkw_session_id(s)));
    first = false;
    TRY(zkw_text_json_string(b, zkw_session_peer(s), ZKW_SESSION_PEER_MAX));
    TRY(zkw_text_printf(b, ",\"upstream\":"));
    if (zkw_session_upstream_name(s))
      TRY(zkw_text_json_string(b, zkw_session_upstream_name(s), ZKW_SESSION_UPSTREAM_MAX));
    else
      TRY(zkw_text_printf(b, "null"));
    TRY(zkw_text_printf(b,
                        ",\"phase\":\"%s\",\"timeout_ms\":%d,\"read_only\":%s,\"outstanding\":%u,"
                        "\"role\":\"%s\",\"incarnation\":%llu}",
                        phase_name(s), zkw_session_timeout(s), zkw_session_read_only(s) ? "true" : "false",
                        zkw_session_outstanding(s), zkw_sidecar_incarnation(s) ? "incarnation" : "plain",
                        (unsigned long long)zkw_sidecar_incarnation(s)));
  }
  TRY(zkw_text_printf(b, "]}\n"));
  return 0;
}

/* ---- the lock report and the status page ---- */

static const char PAGE_STYLE[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:80em}"
    "h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;"
    "text-align:left;vertical-align:top}th{background:#f0f0f0}.ok{color:#0a6b0a;font-weight:bold}"
    ".bad{color:#b00000;font-weight:bold}code,.mono{font-family:monospace,monospace}";

#define HTML(b, s, max) TRY(zkw_text_html((b), (s), (max)))

/* One row of the status table: name, then value (HTML-escaped). */
static int kv_row(struct zkw_buf *b, const char *name, const char *cls, const char *value) {
  TRY(zkw_text_printf(b, "<tr><th>%s</th><td class=\"%s\">", name, cls));
  HTML(b, value, 4096);
  TRY(zkw_text_printf(b, "</td></tr>\n"));
  return 0;
}

static int render_page_sessions(struct zkw_server *srv, struct zkw_buf *b) {
  TRY(zkw_text_printf(
      b,
      "<h2>Sessions (%llu)</h2>\n<table><tr><th>conn</th><th>session</th><th>role</th>"
      "<th>peer</th><th>upstream</th><th>phase</th><th>timeout ms</th><th>outstanding</th></tr>\n",
      (unsigned long long)srv->session_count));
  for (const struct zkw_session *s = zkw_session_first(srv); s;
       s = zkw_session_next((struct zkw_session *)s)) {
    char role[40] = "plain client";
    if (zkw_sidecar_incarnation(s))
      snprintf(role, sizeof role, "incarnation %llu", (unsigned long long)zkw_sidecar_incarnation(s));
    TRY(zkw_text_printf(b, "<tr><td>%llu</td><td class=\"mono\">0x%llx</td><td>%s</td><td>",
                        (unsigned long long)zkw_session_conn(s), (unsigned long long)zkw_session_id(s),
                        role));
    HTML(b, zkw_session_peer(s), ZKW_SESSION_PEER_MAX);
    TRY(zkw_text_printf(b, "</td><td>"));
    HTML(b, zkw_session_upstream_name(s) ? zkw_session_upstream_name(s) : "-", ZKW_SESSION_UPSTREAM_MAX);
    TRY(zkw_text_printf(b, "</td><td>%s</td><td>%d</td><td>%u</td></tr>\n", phase_name(s),
                        zkw_session_timeout(s), zkw_session_outstanding(s)));
  }
  TRY(zkw_text_printf(b, "</table>\n"));
  return 0;
}

#define PAGE_RECLAIMS 20

static int render_page_reclaims(struct zkw_buf *b) {
  TRY(zkw_text_printf(
      b,
      "<h2>Recent reclaims (%llu in all; the last %d)</h2>\n<table><tr><th>time (UTC)</th>"
      "<th>kind</th><th>done</th><th>path</th><th>identity</th><th>incarnation</th><th>session</th>"
      "<th>reason</th><th>done</th></tr>\n",
      (unsigned long long)zkw_history_total(), PAGE_RECLAIMS));
  const struct zkw_history_entry *e;
  for (unsigned i = 0; i < PAGE_RECLAIMS && (e = zkw_history_newest(i)); i++) {
    char ts[40];
    zkw_history_time(e, ts, sizeof ts);
    TRY(zkw_text_printf(b, "<tr><td>%s</td><td>%s</td><td class=\"mono\">", ts,
                        zkw_history_kind_name(e->kind)));
    HTML(b, e->path, sizeof e->path);
    TRY(zkw_text_printf(b, "</td><td>"));
    HTML(b, e->identity, sizeof e->identity);
    TRY(zkw_text_printf(b, "</td><td>%llu</td><td class=\"mono\">0x%llx</td><td>",
                        (unsigned long long)e->incarnation, (unsigned long long)e->session_id));
    HTML(b, e->reason, sizeof e->reason);
    TRY(zkw_text_printf(b, "</td><td>%s</td></tr>\n",
                        e->done    ? "done"
                        : e->would ? "would (observe)"
                                   : "failed"));
  }
  TRY(zkw_text_printf(b, "</table>\n"));
  return 0;
}

int zkw_views_status_page(struct zkw_server *srv, struct zkw_buf *b, const struct zkw_locks_report *rep,
                          const char *locks_why) {
  const struct zkw_config *cfg = srv->cfg;
  static const struct zkw_identity none = {.disabled = true};
  const struct zkw_identity *id = zkw_sidecar_identity(srv);
  if (!id) id = &none;
  char why[600], line[700];
  bool ready = zkw_server_ready(srv, why, sizeof why);
  TRY(zkw_text_printf(b,
                      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>zkwarden "));
  HTML(b, cfg->identity, sizeof cfg->identity);
  TRY(zkw_text_printf(b, "</title><style>%s</style></head><body>\n<h1>zkwarden %s: ", PAGE_STYLE,
                      ZKW_VERSION));
  HTML(b, cfg->identity, sizeof cfg->identity);
  TRY(zkw_text_printf(b, "</h1>\n<table id=\"status\">\n"));
  TRY(kv_row(b, "identity", "mono", cfg->relay_only ? "(relay mode: none)" : cfg->identity));
  if (cfg->observe) {
    snprintf(
        line, sizeof line,
        "observe: nothing fenced or deleted; %llu would-action(s) so far (each a fence or delete sidecar "
        "mode would have done: see Recent reclaims and zkwarden_would_actions_total); leadership waits "
        "that the fences not done cost: %llu.%03llu s",
        (unsigned long long)zkw_history_would_total(),
        (unsigned long long)(zkw_metrics.would_fence_wait_ms / 1000),
        (unsigned long long)(zkw_metrics.would_fence_wait_ms % 1000));
    TRY(kv_row(b, "mode", "", line));
  } else {
    TRY(kv_row(b, "mode", "", cfg->relay_only ? "relay" : "sidecar"));
  }
  snprintf(line, sizeof line, "%llu", (unsigned long long)zkw_identity_current(id));
  TRY(kv_row(b, "incarnation", "", line));
  snprintf(line, sizeof line, "%s%s", ready ? "ready" : "not ready: ", ready ? "" : why);
  TRY(kv_row(b, "readiness", ready ? "ok" : "bad", line));
  if (!cfg->relay_only) {
    snprintf(line, sizeof line, "%s%s%s", zkw_identity_state_name(id->state), id->why[0] ? ": " : "",
             id->why);
    TRY(kv_row(b, "registry", id->state == ZKW_REG_OWNER ? "ok" : "bad", line));
  }
  zkw_config_upstream_list(cfg, line, sizeof line);
  TRY(kv_row(b, "upstream", "mono", line));
  TRY(kv_row(b, "lock roots", "mono", cfg->raw_lock_roots ? cfg->raw_lock_roots : ""));
  if (!cfg->relay_only && id != &none) { /* what the sweep and the lock summary below read */
    struct zkw_treeset trees;
    zkw_owntrees_of(id, &trees);
    char list[ZKW_TREESET_TREES_MAX * ZKW_TREESET_PATH_MAX];
    zkw_treeset_format(&trees, list, sizeof list);
    TRY(kv_row(b, "own trees", "mono", list));
    zkw_owntrees_untrusted(id, &trees);
    if (trees.count) {
      zkw_treeset_format(&trees, list, sizeof list);
      snprintf(line, sizeof line,
               "%.400s (read from the registry record, which is not trusted: the lock report "
               "shows them, marked so; never swept)",
               list);
      TRY(kv_row(b, "untrusted trees", "bad", line));
    }
    const char *untrusted = cfg->registry_auth[0] ? id->record_why : ZKW_REGTRUST_NO_AUTH;
    snprintf(line, sizeof line, "%s%.520s%s", untrusted[0] ? "not trusted: " : "", untrusted,
             untrusted[0] ? " (its dead sessions and trees delete nothing)"
                          : "trusted: only zkwarden's registry identity can change the record and the "
                            "registry nodes above it");
    TRY(kv_row(b, "registry record", untrusted[0] ? "bad" : "ok", line));
  }
  TRY(zkw_text_printf(b, "</table>\n"));
  TRY(render_page_sessions(srv, b));
  TRY(render_page_reclaims(b));
  TRY(zkw_text_printf(b, "<h2>Locks</h2>\n<div id=\"locks\">\n"));
  if (rep) {
    TRY(zkw_locks_render_html_summary(rep, b));
    TRY(zkw_text_printf(b, "<p>Every lock with its verdict: <a href=\"/v1/locks\">/v1/locks</a> or "
                           "<code>zkwarden locks</code>.</p>\n"));
  } else {
    TRY(zkw_text_printf(b, "<p class=\"bad\">lock report unavailable: "));
    HTML(b, locks_why, 200);
    TRY(zkw_text_printf(b, "</p>\n"));
  }
  TRY(zkw_text_printf(b,
                      "</div>\n<p><a href=\"/metrics\">/metrics</a> <a href=\"/readyz\">/readyz</a> "
                      "<a href=\"/v1/sessions\">/v1/sessions</a> <a href=\"/v1/reclaims\">/v1/reclaims</a> "
                      "<a href=\"/v1/locks\">/v1/locks</a></p>\n</body></html>\n"));
  return 0;
}
