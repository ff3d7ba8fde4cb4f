/* zkw_locksrender.c: the lock report's renderings (zkw_locks.h): the
 * table of `zkwarden locks`, the JSON of --json and GET /v1/locks, and the
 * status page's summary. No I/O: each appends to a buffer. */
#include "zkw_locks.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "zkw_text.h"

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

/* One state node: the run of locks [i, end) that guard it. */
struct state_run {
  size_t end, stale;
  bool untrusted;                      /* a stale lock's verdict is not trusted */
  const struct zkw_lock_entry *holder; /* the first lock that is not stale, or NULL */
};

static struct state_run state_run(const struct zkw_locks_report *r, size_t i) {
  struct state_run s = {i, 0, false, NULL};
  while (s.end < r->nlocks && strcmp(r->locks[s.end].state, r->locks[i].state) == 0) {
    if (!r->locks[s.end].why) {
      s.stale++;
      if (r->locks[s.end].untrusted) s.untrusted = true;
    } else if (!s.holder) {
      s.holder = &r->locks[s.end];
    }
    s.end++;
  }
  return s;
}

static void count_states(const struct zkw_locks_report *r, size_t *states, size_t *held) {
  *states = *held = 0;
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    (*states)++;
    if (s.holder) (*held)++;
    i = s.end;
  }
}

/* When a zombie's owner session was seen to end, as 2026-01-02T03:04:05.678Z. */
static void zombie_ended(const struct zkw_lock_entry *e, char *out, size_t cap) {
  time_t t = (time_t)(e->ended_ms / 1000);
  struct tm tm;
  size_t n = gmtime_r(&t, &tm) ? strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm) : 0;
  if (n)
    snprintf(out + n, cap - n, ".%03uZ", (unsigned)(e->ended_ms % 1000));
  else
    snprintf(out, cap, "%" PRIu64 " ms", e->ended_ms);
}

static const char *const ONLY_STALE = "only stale locks: freed by reclaim (zkwarden locks --reclaim)";
static const char *const ONLY_STALE_UNTRUSTED =
    "only stale locks, by verdicts that are not trusted: --reclaim leaves them";

static const char *why_free(const struct state_run *s) {
  return s->holder ? s->holder->why : s->untrusted ? ONLY_STALE_UNTRUSTED : ONLY_STALE;
}

/* A JSON string, or null for NULL or "". */
static int json_or_null(struct zkw_buf *b, const char *s) {
  return s && s[0] ? zkw_text_json_string(b, s, 1024) : zkw_text_printf(b, "null");
}

int zkw_locks_render_json(const struct zkw_locks_report *r, struct zkw_buf *b) {
  size_t states, held;
  count_states(r, &states, &held);
  TRY(zkw_text_printf(b, "{\"scope\":\"%s\",\"roots\":", r->all ? "lock_roots" : "own_trees"));
  TRY(zkw_text_json_string(b, r->roots, sizeof r->roots));
  TRY(zkw_text_printf(b, ",\"untrusted_roots\":"));
  TRY(zkw_text_json_string(b, r->untrusted_roots, sizeof r->untrusted_roots));
  TRY(zkw_text_printf(b, ",\"registry_trusted\":%s,\"registry_trust\":",
                      r->have_auth && !r->registry_trust[0] ? "true" : "false"));
  TRY(json_or_null(b, r->have_auth ? r->registry_trust : ZKW_REGTRUST_NO_AUTH));
  TRY(zkw_text_printf(
      b,
      ",\"nodes_visited\":%zu,\"truncated\":%s,\"seconds\":%.3f,\"asking_session\":\"0x%" PRIx64
      "\",\"summary\":{\"locks\":%zu,\"stale\":%zu,\"untagged\":%zu,\"unreadable\":%zu,"
      "\"state_nodes\":%zu,\"state_nodes_held\":%zu,\"zombies\":%zu,\"untrusted\":%zu},\"identities\":[",
      r->visited, r->truncated ? "true" : "false", r->seconds, (uint64_t)r->asking_session, r->nlocks,
      r->stale, r->untagged, r->nunreadable, states, held, r->zombies, r->untrusted));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "%s{\"identity\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, id->name, sizeof id->name));
    TRY(zkw_text_printf(b, ",\"current_incarnation\":%" PRIu64 ",\"record\":", id->current));
    TRY(zkw_text_json_string(b, id->record, 200));
    TRY(zkw_text_printf(b, ",\"record_trusted\":%s,\"record_trust\":", id->trusted ? "true" : "false"));
    TRY(json_or_null(b, id->trust));
    TRY(zkw_text_printf(b, ",\"locks\":%zu,\"stale\":%zu,\"zombies\":%zu}", id->locks, id->stale,
                        id->zombies));
  }
  TRY(zkw_text_printf(b, "],\"locks\":["));
  for (size_t i = 0; i < r->nlocks; i++) {
    const struct zkw_lock_entry *e = &r->locks[i];
    TRY(zkw_text_printf(b, "%s{\"path\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, e->path, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"state_node\":"));
    TRY(zkw_text_json_string(b, e->state, SIZE_MAX));
    if (e->id >= 0) {
      TRY(zkw_text_printf(b, ",\"tagged\":true,\"identity\":"));
      TRY(zkw_text_json_string(b, r->ids[e->id].name, ZKW_IDENTITY_MAX));
      TRY(zkw_text_printf(b, ",\"incarnation\":%" PRIu64, e->incarnation));
    } else {
      TRY(zkw_text_printf(b, ",\"tagged\":false,\"identity\":null,\"incarnation\":null"));
    }
    TRY(zkw_text_printf(b, ",\"session\":\"0x%" PRIx64 "\",\"stale\":%s,\"why\":", (uint64_t)e->owner,
                        e->why ? "false" : "true"));
    TRY(json_or_null(b, e->why));
    TRY(zkw_text_printf(b, ",\"trusted\":%s,\"untrusted\":", e->untrusted ? "false" : "true"));
    TRY(json_or_null(b, e->untrusted));
    TRY(zkw_text_printf(b, ",\"zombie\":"));
    if (e->zombie_of >= 0) {
      char ended[40];
      zombie_ended(e, ended, sizeof ended);
      TRY(zkw_text_printf(b, "{\"seen_ended_by\":"));
      TRY(zkw_text_json_string(b, r->ids[e->zombie_of].name, ZKW_IDENTITY_MAX));
      TRY(zkw_text_printf(b, ",\"ended\":\"%s\",\"ended_ms\":%" PRIu64 "}", ended, e->ended_ms));
    } else {
      TRY(zkw_text_printf(b, "null"));
    }
    TRY(zkw_text_printf(b, "}"));
  }
  TRY(zkw_text_printf(b, "],\"state_nodes\":["));
  bool first = true;
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    TRY(zkw_text_printf(b, "%s{\"path\":", first ? "" : ","));
    first = false;
    TRY(zkw_text_json_string(b, r->locks[i].state, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"locks\":%zu,\"stale_locks\":%zu,\"held\":%s,\"held_by\":", s.end - i, s.stale,
                        s.holder ? "true" : "false"));
    if (s.holder) {
      TRY(zkw_text_json_string(b, s.holder->path, SIZE_MAX));
      TRY(zkw_text_printf(b, ",\"why\":"));
      TRY(zkw_text_json_string(b, s.holder->why, 200));
    } else {
      TRY(zkw_text_printf(b, "null,\"why\":"));
      TRY(zkw_text_json_string(b, why_free(&s), 200));
    }
    TRY(zkw_text_printf(b, "}"));
    i = s.end;
  }
  TRY(zkw_text_printf(b, "],\"unreadable\":["));
  for (size_t i = 0; i < r->nunreadable; i++) {
    TRY(zkw_text_printf(b, "%s{\"path\":", i ? "," : ""));
    TRY(zkw_text_json_string(b, r->unreadable[i].path, SIZE_MAX));
    TRY(zkw_text_printf(b, ",\"error\":"));
    TRY(zkw_text_json_string(b, zkw_zk_error(r->unreadable[i].rc), 200));
    TRY(zkw_text_printf(b, "}"));
  }
  TRY(zkw_text_printf(b, "]}\n"));
  return 0;
}

static int summary_line(const struct zkw_locks_report *r, struct zkw_buf *b) {
  size_t states, held;
  count_states(r, &states, &held);
  return zkw_text_printf(
      b,
      "%zu lock(s): %zu stale, %zu untagged; %zu state node(s), %zu held; %zu unreadable "
      "node(s); %zu zombie(s); %zu not trusted; %zu node(s) under %s%s%s%s visited in %.2f s%s",
      r->nlocks, r->stale, r->untagged, states, held, r->nunreadable, r->zombies, r->untrusted, r->visited,
      r->roots[0] ? r->roots
      : r->all    ? "no lock root"
                  : "the own trees (none known yet: its JobManager created nothing; --all walks "
                    "every lock root)",
      r->untrusted_roots[0] ? " (read from a registry record that is not trusted: " : "", r->untrusted_roots,
      r->untrusted_roots[0] ? ")" : "", r->seconds, r->truncated ? " (truncated: too many nodes)" : "");
}

/* The record column: what was read, and whether it is trusted. */
static int record_text(const struct zkw_locks_identity *id, struct zkw_buf *b, bool html) {
  char text[64 + sizeof id->trust];
  bool say = strcmp(id->record, "ok") == 0 && !id->trusted; /* else the record says why */
  snprintf(text, sizeof text, "%s%s%s", id->record, say ? ", not trusted: " : "", say ? id->trust : "");
  return html ? zkw_text_html(b, text, sizeof text) : zkw_text_printf(b, "%s", text);
}

int zkw_locks_render_table(const struct zkw_locks_report *r, struct zkw_buf *b) {
  TRY(summary_line(r, b));
  if (!r->have_auth || r->registry_trust[0])
    TRY(zkw_text_printf(b,
                        "\nthe registry is not trusted (%s): --reclaim acts on no verdict that rests on it",
                        r->have_auth ? r->registry_trust : ZKW_REGTRUST_NO_AUTH));
  TRY(zkw_text_printf(b, "\n\n%-32s %11s %7s %7s %7s  %s\n", "IDENTITY", "CURRENT", "LOCKS", "STALE",
                      "ZOMBIES", "RECORD"));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "%-32s %11" PRIu64 " %7zu %7zu %7zu  ", id->name, id->current, id->locks,
                        id->stale, id->zombies));
    TRY(record_text(id, b, false));
    TRY(zkw_text_printf(b, "\n"));
  }
  if (r->untagged)
    TRY(zkw_text_printf(b, "%-32s %11s %7zu %7s %7s  %s\n", "(untagged)", "-", r->untagged, "-", "-", "-"));
  if (r->nlocks)
    TRY(zkw_text_printf(b, "\n%-44s %-20s %11s %-18s %s\n", "STATE NODE / LOCK", "IDENTITY", "INCARNATION",
                        "SESSION", "VERDICT"));
  for (size_t i = 0; i < r->nlocks;) {
    struct state_run s = state_run(r, i);
    TRY(zkw_text_printf(b, "%s  [%s%s%s]\n", r->locks[i].state, s.holder ? "held: " : "", why_free(&s), ""));
    for (size_t k = i; k < s.end; k++) {
      const struct zkw_lock_entry *e = &r->locks[k];
      char inc[24] = "-";
      if (e->id >= 0) snprintf(inc, sizeof inc, "%" PRIu64, e->incarnation);
      char sess[24];
      snprintf(sess, sizeof sess, "0x%" PRIx64, (uint64_t)e->owner);
      const char *rel = e->path + strlen(e->state) + (strcmp(e->state, "/") ? 1 : 0);
      TRY(zkw_text_printf(b, "  %-42s %-20s %11s %-18s %s%s", rel, e->id >= 0 ? r->ids[e->id].name : "-", inc,
                          sess, e->why ? "not stale: " : "STALE", e->why ? e->why : ""));
      if (e->zombie_of >= 0) {
        char ended[40];
        zombie_ended(e, ended, sizeof ended);
        TRY(zkw_text_printf(
            b, "; ZOMBIE: its session ended %s (seen by the sidecar of %s), the ensemble kept it", ended,
            r->ids[e->zombie_of].name));
      }
      if (e->untrusted) TRY(zkw_text_printf(b, " [not trusted: %s]", e->untrusted));
      TRY(zkw_text_printf(b, "\n"));
    }
    i = s.end;
  }
  if (r->nunreadable) TRY(zkw_text_printf(b, "\nUNREADABLE (not judged)\n"));
  for (size_t i = 0; i < r->nunreadable; i++)
    TRY(zkw_text_printf(b, "  %s  %s\n", r->unreadable[i].path, zkw_zk_error(r->unreadable[i].rc)));
  return 0;
}

int zkw_locks_render_html_summary(const struct zkw_locks_report *r, struct zkw_buf *b) {
  TRY(zkw_text_printf(b, "<p>"));
  struct zkw_buf line = {0};
  int rc = summary_line(r, &line);
  if (!rc) rc = zkw_buf_append(&line, "", 1);
  if (!rc) rc = zkw_text_html(b, (const char *)line.data, line.len);
  zkw_buf_release(&line);
  TRY(rc);
  TRY(zkw_text_printf(b, "</p>\n<table><tr><th>identity</th><th>current incarnation</th><th>locks</th>"
                         "<th>stale</th><th>zombies</th><th>record</th></tr>\n"));
  for (size_t i = 0; i < r->nids; i++) {
    const struct zkw_locks_identity *id = &r->ids[i];
    TRY(zkw_text_printf(b, "<tr><td>"));
    TRY(zkw_text_html(b, id->name, sizeof id->name));
    TRY(zkw_text_printf(
        b, "</td><td>%" PRIu64 "</td><td>%zu</td><td class=\"%s\">%zu</td><td class=\"%s\">%zu</td><td>",
        id->current, id->locks, id->stale ? "bad" : "", id->stale, id->zombies ? "bad" : "", id->zombies));
    TRY(record_text(id, b, true));
    TRY(zkw_text_printf(b, "</td></tr>\n"));
  }
  if (r->untagged)
    TRY(zkw_text_printf(b,
                        "<tr><td>(untagged)</td><td>-</td><td>%zu</td><td>-</td><td>-</td><td>-</td></tr>\n",
                        r->untagged));
  TRY(zkw_text_printf(b, "</table>\n"));
  return 0;
}
