/* zkw_config.c: parsers and validation for the ZKW_CONFIG_VARS list. */
#include "zkw_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

typedef int (*parse_fn)(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                        size_t whylen);

static int parse_hostports(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                           size_t whylen) {
  (void)lo, (void)hi;
  cfg->upstream_count = 0;
  const char *p = val;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (cfg->upstream_count == ZKW_MAX_UPSTREAMS) {
      snprintf(why, whylen, "at most %d servers", ZKW_MAX_UPSTREAMS);
      return -1;
    }
    if (zkw_addr_split(p, n, &cfg->upstream[cfg->upstream_count]) != 0) {
      snprintf(why, whylen, "a comma-separated list of host:port (port 1-65535)");
      return -1;
    }
    cfg->upstream_count++;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

/* A numeric ip:port or [ipv6]:port into *ss. */
static int parse_sockaddr(struct sockaddr_storage *ss, const char *val, const char *example, char *why,
                          size_t whylen) {
  if (zkw_addr_parse(val, ss) == 0) return 0;
  snprintf(why, whylen, "a numeric ip:port or [ipv6]:port, e.g. %s", example);
  return -1;
}

static int parse_listen_addr(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                             size_t whylen) {
  (void)lo, (void)hi;
  return parse_sockaddr(&cfg->listen, val, "127.0.0.1:2181", why, whylen);
}

static int parse_admin_addr(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                            size_t whylen) {
  (void)lo, (void)hi;
  return parse_sockaddr(&cfg->admin_listen, val, "127.0.0.1:9181", why, whylen);
}

/* Empty: stderr. Otherwise a file that can be opened for appending (it is
 * created if missing). */
static int parse_log_file(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                          size_t whylen) {
  (void)lo, (void)hi;
  cfg->log_file = NULL;
  if (!*val) return 0;
  FILE *f = fopen(val, "a");
  if (!f) {
    snprintf(why, whylen, "a file path that can be opened for appending (%s), or empty for stderr",
             strerror(errno));
    return -1;
  }
  fclose(f);
  cfg->log_file = val;
  return 0;
}

static int parse_audit_file(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                            size_t whylen) {
  (void)lo, (void)hi;
  cfg->audit_file = NULL;
  if (!*val) return 0;
  FILE *f = fopen(val, "a");
  if (!f) {
    snprintf(why, whylen, "a file path that can be opened for appending (%s), or empty for none",
             strerror(errno));
    return -1;
  }
  fclose(f);
  cfg->audit_file = val;
  return 0;
}

static int parse_uint(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                      size_t whylen) {
  (void)cfg;
  char *end;
  errno = 0;
  long long v = strtoll(val, &end, 10);
  if (errno || end == val || *end || v < lo || v > hi) {
    snprintf(why, whylen, "an integer from %lld to %lld", lo, hi);
    return -1;
  }
  return 0;
}

static int parse_log_level(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                           size_t whylen) {
  (void)lo, (void)hi;
  for (int l = ZKW_LOG_ERROR; l <= ZKW_LOG_DEBUG; l++)
    if (strcmp(val, zkw_log_level_name((enum zkw_log_level)l)) == 0) {
      cfg->log_level = (enum zkw_log_level)l;
      return 0;
    }
  snprintf(why, whylen, "one of error, warn, info, debug");
  return -1;
}

static int parse_log_format(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                            size_t whylen) {
  (void)lo, (void)hi;
  if (strcmp(val, "text") == 0)
    cfg->log_format = ZKW_LOG_TEXT;
  else if (strcmp(val, "json") == 0)
    cfg->log_format = ZKW_LOG_JSON;
  else {
    snprintf(why, whylen, "text or json");
    return -1;
  }
  return 0;
}

static int parse_mode(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                      size_t whylen) {
  (void)lo, (void)hi;
  cfg->relay_only = cfg->observe = false;
  if (strcmp(val, "sidecar") == 0)
    ;
  else if (strcmp(val, "observe") == 0)
    cfg->observe = true;
  else if (strcmp(val, "relay") == 0)
    cfg->relay_only = true;
  else {
    snprintf(why, whylen, "sidecar, observe or relay");
    return -1;
  }
  return 0;
}

static int parse_admin_remote(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                              size_t whylen) {
  (void)lo, (void)hi;
  if (strcmp(val, "probes") == 0)
    cfg->admin_remote_all = false;
  else if (strcmp(val, "all") == 0)
    cfg->admin_remote_all = true;
  else {
    snprintf(why, whylen, "probes or all");
    return -1;
  }
  return 0;
}

static int parse_identity(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                          size_t whylen) {
  (void)lo, (void)hi;
  if (strcmp(val, "$HOSTNAME") == 0) {
    /* The default: the host name (in Kubernetes, the pod name). */
    if (gethostname(cfg->identity, sizeof cfg->identity) != 0) cfg->identity[0] = 0;
    cfg->identity[sizeof cfg->identity - 1] = 0;
  } else {
    snprintf(cfg->identity, sizeof cfg->identity, "%s", val);
  }
  if (strlen(val) > ZKW_IDENTITY_MAX || !zkw_identity_valid(cfg->identity)) {
    snprintf(why, whylen, "1-128 characters of [A-Za-z0-9._-]%s",
             strcmp(val, "$HOSTNAME") == 0 ? " (the host name is not usable: set ZKWARDEN_IDENTITY)" : "");
    return -1;
  }
  return 0;
}

static int parse_znode(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                       size_t whylen) {
  (void)lo, (void)hi;
  size_t n = strlen(val);
  if (n < 2 || val[0] != '/' || val[n - 1] == '/' || n >= sizeof cfg->registry_root || strstr(val, "//")) {
    snprintf(why, whylen, "an absolute znode path other than /, without trailing '/', e.g. /zkwarden");
    return -1;
  }
  memcpy(cfg->registry_root, val, n + 1);
  return 0;
}

static int check_auth(struct zkw_config *cfg, const char *val, char *why, size_t whylen) {
  const char *colon = strchr(val, ':');
  if (!colon || colon == val || !colon[1] || strlen(val) >= sizeof cfg->registry_auth) {
    snprintf(why, whylen, "user:password (both non-empty, at most %zu characters)",
             sizeof cfg->registry_auth - 1);
    return -1;
  }
  snprintf(cfg->registry_auth, sizeof cfg->registry_auth, "%s", val);
  return 0;
}

static int parse_auth(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                      size_t whylen) {
  (void)lo, (void)hi;
  return *val ? check_auth(cfg, val, why, whylen) : 0;
}

static int parse_auth_file(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                           size_t whylen) {
  (void)lo, (void)hi;
  if (!*val) return 0;
  if (cfg->registry_auth[0]) {
    snprintf(why, whylen, "only one of ZKWARDEN_REGISTRY_AUTH and ZKWARDEN_REGISTRY_AUTH_FILE");
    return -1;
  }
  char buf[512];
  FILE *f = fopen(val, "r");
  if (!f) {
    snprintf(why, whylen, "a readable file (%s)", strerror(errno));
    return -1;
  }
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
    buf[--n] = 0;
  int rc = check_auth(cfg, buf, why, whylen);
  memset(buf, 0, sizeof buf);
  if (rc) snprintf(why, whylen, "a file holding user:password");
  return rc;
}

static int parse_lock_roots(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                            size_t whylen) {
  (void)lo, (void)hi;
  return zkw_lock_roots_parse(&cfg->lock_roots, val, why, whylen);
}

/* Empty, or lock-root-like paths each strictly below one of the lock roots
 * (parsed before it in the list). */
static int parse_sweep_trees(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                             size_t whylen) {
  (void)lo, (void)hi;
  cfg->sweep_trees.count = 0;
  if (!*val) return 0;
  if (zkw_lock_roots_parse(&cfg->sweep_trees, val, why, whylen) != 0) return -1;
  if (cfg->sweep_trees.count > ZKW_SWEEP_TREES_MAX) {
    snprintf(why, whylen, "at most %d trees (%d named): name a tree above several of them instead",
             ZKW_SWEEP_TREES_MAX, cfg->sweep_trees.count);
    cfg->sweep_trees.count = 0;
    return -1;
  }
  for (int i = 0; i < cfg->sweep_trees.count; i++) {
    const char *t = cfg->sweep_trees.root[i];
    bool below = false;
    for (int r = 0; r < cfg->lock_roots.count && !below; r++) {
      size_t rl = strlen(cfg->lock_roots.root[r]);
      below = strlen(t) > rl && (rl == 1 || (memcmp(t, cfg->lock_roots.root[r], rl) == 0 && t[rl] == '/'));
    }
    if (!below) {
      snprintf(why, whylen, "empty, or paths each below one of ZKWARDEN_LOCK_ROOTS (%s is not)", t);
      return -1;
    }
  }
  return 0;
}

static int parse_onoff(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                       size_t whylen) {
  (void)cfg, (void)lo, (void)hi;
  if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
    snprintf(why, whylen, "on or off");
    return -1;
  }
  return 0; /* stored by ZKW_STORE_onoff */
}

/* Empty, or a file that can be read now (it is loaded, and re-read on
 * rotation, by zkw_tls.c). */
static int check_readable(const char *val, char *why, size_t whylen) {
  if (!*val) return 0;
  FILE *f = fopen(val, "r");
  if (!f) {
    snprintf(why, whylen, "a readable PEM file (%s), or empty", strerror(errno));
    return -1;
  }
  fclose(f);
  return 0;
}

static int parse_pem_file(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                          size_t whylen) {
  (void)cfg, (void)lo, (void)hi;
  return check_readable(val, why, whylen);
}

/* Follows ZKWARDEN_TLS_CERT_FILE in the list: both or neither. */
static int parse_key_file(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                          size_t whylen) {
  (void)lo, (void)hi;
  bool cert = cfg->raw_tls_cert_file && *cfg->raw_tls_cert_file;
  if (cert != (*val != 0)) {
    snprintf(why, whylen, "set together with ZKWARDEN_TLS_CERT_FILE (both or neither)");
    return -1;
  }
  return check_readable(val, why, whylen);
}

static int parse_server_name(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                             size_t whylen) {
  (void)lo, (void)hi;
  size_t n = strlen(val);
  bool ok = n < sizeof cfg->tls_server_name;
  for (size_t i = 0; ok && i < n; i++)
    ok = (val[i] >= 'a' && val[i] <= 'z') || (val[i] >= 'A' && val[i] <= 'Z') ||
         (val[i] >= '0' && val[i] <= '9') || val[i] == '.' || val[i] == '-' || val[i] == ':';
  if (!ok) {
    snprintf(why, whylen, "a DNS name or an IP address (at most %zu characters), or empty",
             sizeof cfg->tls_server_name - 1);
    return -1;
  }
  memcpy(cfg->tls_server_name, val, n + 1);
  return 0;
}

/* Empty, or a name for the abstract namespace: printable, no spaces. */
static int parse_socket_name(struct zkw_config *cfg, const char *val, long long lo, long long hi, char *why,
                             size_t whylen) {
  (void)lo, (void)hi;
  size_t n = strlen(val);
  bool ok = n <= ZKW_HANDOVER_NAME_MAX;
  for (size_t i = 0; ok && i < n; i++)
    ok = val[i] > ' ' && val[i] < 0x7f;
  if (!ok) {
    snprintf(why, whylen, "at most %d printable characters without spaces, or empty", ZKW_HANDOVER_NAME_MAX);
    return -1;
  }
  memcpy(cfg->keeper_socket, val, n + 1);
  return 0;
}

/* Whether a parser's values are secret: never printed, not even in an error
 * (every parser must say). */
#define ZKW_SECRET_hostports    0
#define ZKW_SECRET_listen_addr  0
#define ZKW_SECRET_admin_addr   0
#define ZKW_SECRET_uint         0
#define ZKW_SECRET_log_level    0
#define ZKW_SECRET_log_format   0
#define ZKW_SECRET_log_file     0
#define ZKW_SECRET_audit_file   0
#define ZKW_SECRET_identity     0
#define ZKW_SECRET_mode         0
#define ZKW_SECRET_admin_remote 0
#define ZKW_SECRET_znode        0
#define ZKW_SECRET_auth         1
#define ZKW_SECRET_auth_file    0
#define ZKW_SECRET_lock_roots   0
#define ZKW_SECRET_sweep_trees  0
#define ZKW_SECRET_onoff        0
#define ZKW_SECRET_pem_file     0
#define ZKW_SECRET_key_file     0
#define ZKW_SECRET_server_name  0
#define ZKW_SECRET_socket_name  0

/* Integer fields are stored after validation by store_uint below. */
#define ZKW_STORE_hostports(field, val)
#define ZKW_STORE_listen_addr(field, val)
#define ZKW_STORE_admin_addr(field, val)
#define ZKW_STORE_log_file(field, val)
#define ZKW_STORE_audit_file(field, val)
#define ZKW_STORE_log_level(field, val)
#define ZKW_STORE_log_format(field, val)
#define ZKW_STORE_identity(field, val)
#define ZKW_STORE_mode(field, val)
#define ZKW_STORE_admin_remote(field, val)
#define ZKW_STORE_znode(field, val)
#define ZKW_STORE_auth(field, val)
#define ZKW_STORE_auth_file(field, val)
#define ZKW_STORE_lock_roots(field, val)
#define ZKW_STORE_sweep_trees(field, val)
#define ZKW_STORE_onoff(field, val)    cfg->field = strcmp((val), "on") == 0;
#define ZKW_STORE_pem_file(field, val) cfg->field = (val);
#define ZKW_STORE_key_file(field, val) cfg->field = (val);
#define ZKW_STORE_server_name(field, val)
#define ZKW_STORE_socket_name(field, val)
#define ZKW_STORE_uint(field, val) cfg->field = (uint32_t)strtoul((val), NULL, 10);

int zkw_config_load(struct zkw_config *cfg, const char *(*getenv_fn)(const char *), char *err,
                    size_t errlen) {
  char why[160];
  memset(cfg, 0, sizeof *cfg);
#define ZKW_X_LOAD(field, env, def, parser, lo, hi, help)                                                    \
  {                                                                                                          \
    const char *val = getenv_fn(env);                                                                        \
    if (!val || !*val) val = def;                                                                            \
    if (!val) {                                                                                              \
      snprintf(err, errlen, "%s is not set; it is required: %s", env, help);                                 \
      return -1;                                                                                             \
    }                                                                                                        \
    if (parse_##parser(cfg, val, lo, hi, why, sizeof why) != 0) {                                            \
      const char *shown_ = ZKW_SECRET_##parser ? "<hidden>" : val;                                           \
      snprintf(err, errlen, "%s=\"%s\" is not valid: expected %s", env, shown_, why);                        \
      return -1;                                                                                             \
    }                                                                                                        \
    cfg->raw_##field = val;                                                                                  \
    ZKW_STORE_##parser(field, val)                                                                           \
  }
  ZKW_CONFIG_VARS(ZKW_X_LOAD)
#undef ZKW_X_LOAD
  return 0;
}

void zkw_config_print(const struct zkw_config *cfg, FILE *out) {
/* What --check-config shows: the text given, except for secrets and the
 * resolved identity. */
#define ZKW_SHOW(field, parser)      ZKW_SHOW_##parser(field)
#define ZKW_SHOW_hostports(field)    cfg->raw_##field
#define ZKW_SHOW_listen_addr(field)  cfg->raw_##field
#define ZKW_SHOW_admin_addr(field)   cfg->raw_##field
#define ZKW_SHOW_log_file(field)     cfg->raw_##field
#define ZKW_SHOW_audit_file(field)   cfg->raw_##field
#define ZKW_SHOW_uint(field)         cfg->raw_##field
#define ZKW_SHOW_log_level(field)    cfg->raw_##field
#define ZKW_SHOW_log_format(field)   cfg->raw_##field
#define ZKW_SHOW_identity(field)     cfg->identity
#define ZKW_SHOW_mode(field)         cfg->raw_##field
#define ZKW_SHOW_admin_remote(field) cfg->raw_##field
#define ZKW_SHOW_znode(field)        cfg->raw_##field
#define ZKW_SHOW_auth(field)         (*cfg->raw_##field ? "<set>" : "<unset>")
#define ZKW_SHOW_auth_file(field)    cfg->raw_##field
#define ZKW_SHOW_lock_roots(field)   cfg->raw_##field
#define ZKW_SHOW_sweep_trees(field)  cfg->raw_##field
#define ZKW_SHOW_onoff(field)        cfg->raw_##field
#define ZKW_SHOW_pem_file(field)     cfg->raw_##field
#define ZKW_SHOW_key_file(field)     cfg->raw_##field
#define ZKW_SHOW_server_name(field)  cfg->raw_##field
#define ZKW_SHOW_socket_name(field)  cfg->raw_##field
#define ZKW_X_PRINT(field, env, def, parser, lo, hi, help)                                                   \
  fprintf(out, "%s=%s\n", env, ZKW_SHOW(field, parser));
  ZKW_CONFIG_VARS(ZKW_X_PRINT)
#undef ZKW_X_PRINT
}

static const char *help_default(const char *def) {
  return !def ? "(required)" : *def ? def : "(none)";
}

void zkw_config_help(FILE *out) {
  fprintf(out, "Configuration (environment variables):\n");
#define ZKW_X_HELP(field, env, def, parser, lo, hi, help)                                                    \
  fprintf(out, "  %-30s %s\n  %-30s default: %s\n", env, help, "", help_default(def));
  ZKW_CONFIG_VARS(ZKW_X_HELP)
#undef ZKW_X_HELP
}

/* One markdown table cell: a `|` in the help text would end the cell. */
static void markdown_cell(FILE *out, const char *text) {
  for (const char *c = text; *c; c++) {
    if (*c == '|') fputc('\\', out);
    fputc(*c, out);
  }
}

static void markdown_row(FILE *out, const char *env, const char *def, const char *help) {
  fprintf(out, "| `%s` | ", env);
  markdown_cell(out, help);
  if (def && *def)
    fprintf(out, " | `%s` |\n", def);
  else
    fprintf(out, " | %s |\n", help_default(def));
}

void zkw_config_list_markdown(FILE *out) {
  fprintf(out, "| variable | meaning | default |\n|---|---|---|\n");
#define ZKW_X_MD(field, env, def, parser, lo, hi, help) markdown_row(out, env, def, help);
  ZKW_CONFIG_VARS(ZKW_X_MD)
#undef ZKW_X_MD
}

void zkw_config_upstream_list(const struct zkw_config *cfg, char *out, size_t cap) {
  size_t n = 0;
  if (cap) out[0] = 0;
  for (int i = 0; i < cfg->upstream_count && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s:%s", i ? "," : "", cfg->upstream[i].host,
                          cfg->upstream[i].port);
}

bool zkw_hostport_numeric(const struct zkw_hostport *hp, struct sockaddr_storage *out) {
  int port = atoi(hp->port);
  memset(out, 0, sizeof *out);
  return uv_ip4_addr(hp->host, port, (struct sockaddr_in *)out) == 0 ||
         uv_ip6_addr(hp->host, port, (struct sockaddr_in6 *)out) == 0;
}
