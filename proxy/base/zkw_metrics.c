/* zkw_metrics.c: the Prometheus text exposition and the Markdown table of
 * the ZKW_METRICS list. */
#include "zkw_metrics.h"

#include <errno.h>
#include <time.h>

#include "zkw_text.h"

struct zkw_metrics zkw_metrics;

const uint64_t zkw_latency_bounds_ns[ZKW_LATENCY_BOUNDS] = {
#define ZKW_X_BUCKET(ns, le) (uint64_t)(ns),
    ZKW_LATENCY_BUCKETS(ZKW_X_BUCKET)
#undef ZKW_X_BUCKET
};

static const char *const latency_le[ZKW_LATENCY_BOUNDS] = {
#define ZKW_X_BUCKET(ns, le) le,
    ZKW_LATENCY_BUCKETS(ZKW_X_BUCKET)
#undef ZKW_X_BUCKET
};

static const char *const close_names[ZKW_CLOSE_COUNT] = {
#define ZKW_X_CLOSE(name, str) str,
    ZKW_CLOSE_CLASSES(ZKW_X_CLOSE)
#undef ZKW_X_CLOSE
};

static const char *const rfail_names[ZKW_RFAIL_COUNT] = {
#define ZKW_X_RFAIL(name, str) str,
    ZKW_RECLAIM_FAILURES(ZKW_X_RFAIL)
#undef ZKW_X_RFAIL
};

static const char *const kind_names[ZKW_ACTION_KIND_COUNT] = {
#define ZKW_X_AKIND(name, str) str,
    ZKW_ACTION_KINDS(ZKW_X_AKIND)
#undef ZKW_X_AKIND
};

static const char *const move_names[ZKW_MOVE_OUTCOME_COUNT] = {
#define ZKW_X_MOVE(name, str) str,
    ZKW_MOVE_OUTCOMES(ZKW_X_MOVE)
#undef ZKW_X_MOVE
};

static const char *const nmove_names[ZKW_NMOVE_COUNT] = {
#define ZKW_X_NMOVE(name, str) str,
    ZKW_NOT_MOVABLE_REASONS(ZKW_X_NMOVE)
#undef ZKW_X_NMOVE
};

const char *zkw_not_movable_name(int reason) {
  return reason >= 0 && reason < ZKW_NMOVE_COUNT ? nmove_names[reason] : "unknown";
}

const char *zkw_action_kind_name(int kind) {
  return kind >= 0 && kind < ZKW_ACTION_KIND_COUNT ? kind_names[kind] : "unknown";
}

static const char *const dir_names[ZKW_DIR_COUNT] = {"client_to_upstream", "upstream_to_client"};

/* Opcode code by dense index, and whether clients send it as a request. */
static const int32_t op_codes[ZKW_OP_COUNT] = {
#define ZKW_X_OPCODE(name, code, str, req, rep) (code),
    ZKW_OPCODES(ZKW_X_OPCODE)
#undef ZKW_X_OPCODE
};

static const char *const op_names[ZKW_OP_COUNT] = {
#define ZKW_X_OPNAME(name, code, str, req, rep) str,
    ZKW_OPCODES(ZKW_X_OPNAME)
#undef ZKW_X_OPNAME
};

const char *zkw_reclaim_failure_name(int f) {
  return f >= 0 && f < ZKW_RFAIL_COUNT ? rfail_names[f] : rfail_names[ZKW_RFAIL_OTHER];
}

void zkw_metrics_init(void) {
  ZKW_METRIC_SET(build_info, 1);
  ZKW_METRIC_SET(start_time, (int64_t)time(NULL));
}

/* An opcode that clients send as a request: its counters are always shown
 * (at 0 until used), so that rate() sees the first increment. */
static int op_is_request(int i) {
  return zkw_op_req_kind(op_codes[i]) != ZKW_REQ_INVALID;
}

/* ---- samples, by type and labels ---- */

#define TRY(expr)                                                                                            \
  do {                                                                                                       \
    if ((expr) != 0) return -ENOMEM;                                                                         \
  } while (0)

static int render_counter_none(struct zkw_buf *b, const char *name, uint64_t v) {
  return zkw_text_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static int render_counter_msec(struct zkw_buf *b, const char *name, uint64_t ms) {
  return zkw_text_printf(b, "%s %llu.%03llu\n", name, (unsigned long long)(ms / 1000),
                         (unsigned long long)(ms % 1000));
}

static int render_gauge_none(struct zkw_buf *b, const char *name, int64_t v) {
  return zkw_text_printf(b, "%s %lld\n", name, (long long)v);
}

static int render_gauge_build(struct zkw_buf *b, const char *name, int64_t v) {
  return zkw_text_printf(b, "%s{version=\"%s\"} %lld\n", name, ZKW_VERSION, (long long)v);
}

static int render_counter_op(struct zkw_buf *b, const char *name, const uint64_t *v) {
  for (int i = 0; i < ZKW_OP_COUNT; i++)
    if (op_is_request(i) || v[i])
      TRY(zkw_text_printf(b, "%s{op=\"%s\"} %llu\n", name, op_names[i], (unsigned long long)v[i]));
  return 0;
}

static int render_reasons(struct zkw_buf *b, const char *name, const uint64_t *v, const char *const *names,
                          int n) {
  for (int i = 0; i < n; i++)
    TRY(zkw_text_printf(b, "%s{reason=\"%s\"} %llu\n", name, names[i], (unsigned long long)v[i]));
  return 0;
}

static int render_counter_close(struct zkw_buf *b, const char *name, const uint64_t *v) {
  return render_reasons(b, name, v, close_names, ZKW_CLOSE_COUNT);
}

static int render_counter_rfail(struct zkw_buf *b, const char *name, const uint64_t *v) {
  return render_reasons(b, name, v, rfail_names, ZKW_RFAIL_COUNT);
}

static int render_counter_nmove(struct zkw_buf *b, const char *name, const uint64_t *v) {
  return render_reasons(b, name, v, nmove_names, ZKW_NMOVE_COUNT);
}

static int render_counter_kind(struct zkw_buf *b, const char *name, const uint64_t *v) {
  for (int i = 0; i < ZKW_ACTION_KIND_COUNT; i++)
    TRY(zkw_text_printf(b, "%s{kind=\"%s\"} %llu\n", name, kind_names[i], (unsigned long long)v[i]));
  return 0;
}

static int render_counter_move(struct zkw_buf *b, const char *name, const uint64_t *v) {
  for (int i = 0; i < ZKW_MOVE_OUTCOME_COUNT; i++)
    TRY(zkw_text_printf(b, "%s{outcome=\"%s\"} %llu\n", name, move_names[i], (unsigned long long)v[i]));
  return 0;
}

static int render_counter_dir(struct zkw_buf *b, const char *name, const uint64_t *v) {
  for (int i = 0; i < ZKW_DIR_COUNT; i++)
    TRY(zkw_text_printf(b, "%s{direction=\"%s\"} %llu\n", name, dir_names[i], (unsigned long long)v[i]));
  return 0;
}

/* One histogram's samples; label: `op="..."` or empty. */
static int render_histogram(struct zkw_buf *b, const char *name, const char *label,
                            const struct zkw_histogram *h) {
  const char *sep = *label ? "," : "";
  uint64_t cum = 0;
  for (int k = 0; k < ZKW_LATENCY_BOUNDS; k++) {
    cum += h->bucket[k];
    TRY(zkw_text_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, label, sep, latency_le[k],
                        (unsigned long long)cum));
  }
  cum += h->bucket[ZKW_LATENCY_BOUNDS];
  TRY(zkw_text_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep, (unsigned long long)cum));
  const char *open = *label ? "{" : "", *close = *label ? "}" : "";
  TRY(zkw_text_printf(b, "%s_sum%s%s%s %llu.%09llu\n", name, open, label, close,
                      (unsigned long long)(h->sum_ns / 1000000000u),
                      (unsigned long long)(h->sum_ns % 1000000000u)));
  TRY(zkw_text_printf(b, "%s_count%s%s%s %llu\n", name, open, label, close, (unsigned long long)h->count));
  return 0;
}

/* Histograms are shown only for opcodes that have been observed: a histogram
 * is 19 lines, and most of the 30-odd opcodes are never used by a JM. */
static int render_histogram_op(struct zkw_buf *b, const char *name, const struct zkw_histogram *h) {
  for (int i = 0; i < ZKW_OP_COUNT; i++) {
    if (!h[i].count) continue;
    char label[64];
    snprintf(label, sizeof label, "op=\"%s\"", op_names[i]);
    TRY(render_histogram(b, name, label, &h[i]));
  }
  return 0;
}

static int render_histogram_none(struct zkw_buf *b, const char *name, struct zkw_histogram h) {
  return render_histogram(b, name, "", &h);
}

#define ZKW_MTYPE_COUNTER   "counter"
#define ZKW_MTYPE_GAUGE     "gauge"
#define ZKW_MTYPE_HISTOGRAM "histogram"

#define ZKW_MRENDER_COUNTER_NONE   render_counter_none
#define ZKW_MRENDER_COUNTER_OP     render_counter_op
#define ZKW_MRENDER_COUNTER_CLOSE  render_counter_close
#define ZKW_MRENDER_COUNTER_DIR    render_counter_dir
#define ZKW_MRENDER_COUNTER_RFAIL  render_counter_rfail
#define ZKW_MRENDER_COUNTER_KIND   render_counter_kind
#define ZKW_MRENDER_COUNTER_MSEC   render_counter_msec
#define ZKW_MRENDER_GAUGE_NONE     render_gauge_none
#define ZKW_MRENDER_GAUGE_BUILD    render_gauge_build
#define ZKW_MRENDER_COUNTER_MOVE   render_counter_move
#define ZKW_MRENDER_COUNTER_NMOVE  render_counter_nmove
#define ZKW_MRENDER_HISTOGRAM_OP   render_histogram_op
#define ZKW_MRENDER_HISTOGRAM_NONE render_histogram_none

int zkw_metrics_render(struct zkw_buf *out) {
#define ZKW_X_RENDER(field, type, labels, name, help)                                                        \
  TRY(zkw_text_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, ZKW_MTYPE_##type));             \
  TRY(ZKW_MRENDER_##type##_##labels(out, name, zkw_metrics.field));
  ZKW_METRICS(ZKW_X_RENDER)
#undef ZKW_X_RENDER
  return 0;
}

enum {
  LABELS_NONE,
  LABELS_MSEC,
  LABELS_OP,
  LABELS_CLOSE,
  LABELS_RFAIL,
  LABELS_KIND,
  LABELS_MOVE,
  LABELS_NMOVE,
  LABELS_DIR,
  LABELS_BUILD
};

static void print_reasons(FILE *out, const char *const *names, int n) {
  fprintf(out, "`reason`:");
  for (int i = 0; i < n; i++)
    fprintf(out, "%s `%s`", i ? "," : "", names[i]);
}

static void print_labels(FILE *out, int labels) {
  switch (labels) {
  case LABELS_OP:
    fprintf(out, "`op`: the opcode's name as the Java client spells it (`create`, `getData`, ...)");
    break;
  case LABELS_CLOSE:
    print_reasons(out, close_names, ZKW_CLOSE_COUNT);
    break;
  case LABELS_RFAIL:
    print_reasons(out, rfail_names, ZKW_RFAIL_COUNT);
    break;
  case LABELS_NMOVE:
    print_reasons(out, nmove_names, ZKW_NMOVE_COUNT);
    break;
  case LABELS_KIND:
    fprintf(out, "`kind`:");
    for (int i = 0; i < ZKW_ACTION_KIND_COUNT; i++)
      fprintf(out, "%s `%s`", i ? "," : "", kind_names[i]);
    break;
  case LABELS_MOVE:
    fprintf(out, "`outcome`:");
    for (int i = 0; i < ZKW_MOVE_OUTCOME_COUNT; i++)
      fprintf(out, "%s `%s`", i ? "," : "", move_names[i]);
    break;
  case LABELS_DIR:
    fprintf(out, "`direction`: `%s`, `%s`", dir_names[0], dir_names[1]);
    break;
  case LABELS_BUILD:
    fprintf(out, "`version`");
    break;
  default:
    break;
  }
}

void zkw_metrics_list_markdown(FILE *out) {
  fprintf(out, "| metric | type | labels | meaning |\n|---|---|---|---|\n");
#define ZKW_X_MD(field, type, labels, name, help)                                                            \
  fprintf(out, "| `%s` | %s | ", name, ZKW_MTYPE_##type);                                                    \
  print_labels(out, LABELS_##labels);                                                                        \
  fprintf(out, " | %s |\n", help);
  ZKW_METRICS(ZKW_X_MD)
#undef ZKW_X_MD
}
