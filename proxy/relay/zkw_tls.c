/* zkw_tls.c: the OpenSSL client context, its rotation, and TLS connections
 * on memory BIOs (see zkw_tls.h). */
#include "zkw_fault.h"
#include "zkw_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "zkw_config.h"
#include "zkw_log.h"
#include "zkw_metrics.h"

/* How often the files' stat is compared with the last load's. */
#define ZKW_TLS_POLL_MS 10000
/* Ciphertext taken from the socket per read. */
#define ZKW_TLS_READ_BUF (64 * 1024)

struct zkw_tls_conn {
  SSL *ssl;
  BIO *in;  /* ciphertext from the server, read by OpenSSL */
  BIO *out; /* ciphertext OpenSSL wrote, for the server */
  char error[256];
};

/* What a file looked like when the context was built. */
struct file_id {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  bool present;
};

static struct {
  const struct zkw_config *cfg;
  bool on;      /* ZKWARDEN_UPSTREAM_TLS=on: every upstream connection is TLS, whatever happens */
  SSL_CTX *ctx; /* for new connections; each SSL holds its own reference */
  uv_timer_t poll;
  bool polling;
  struct file_id files[3]; /* CA, certificate, key */
  char route[64];
  struct {
    char server[300];
    char error[256]; /* the last failure logged; "" once verified */
  } notes[ZKW_MAX_UPSTREAMS];
} tls_state;

static uint8_t read_buf[ZKW_TLS_READ_BUF];

bool zkw_tls_enabled(void) {
  return tls_state.on;
}

/* OpenSSL's queued errors as one line (and the queue emptied). */
static void ssl_errors(char *out, size_t cap) {
  unsigned long e;
  size_t n = 0;
  out[0] = 0;
  while ((e = ERR_get_error()) != 0 && n + 1 < cap) {
    char one[256];
    ERR_error_string_n(e, one, sizeof one);
    n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "; " : "", one);
  }
  if (!out[0]) snprintf(out, cap, "no detail from OpenSSL");
}

static const char *file_names(int i) {
  const struct zkw_config *cfg = tls_state.cfg;
  return i == 0 ? cfg->tls_ca_file : i == 1 ? cfg->tls_cert_file : cfg->tls_key_file;
}

static void stat_files(struct file_id ids[3]) {
  for (int i = 0; i < 3; i++) {
    struct stat st;
    const char *path = file_names(i);
    memset(&ids[i], 0, sizeof ids[i]);
    if (!path || !*path || stat(path, &st) != 0) continue; /* follows the ..data symlink */
    ids[i] = (struct file_id){st.st_dev, st.st_ino, st.st_size, st.st_mtim, true};
  }
}

static bool same_files(const struct file_id a[3], const struct file_id b[3]) {
  for (int i = 0; i < 3; i++)
    if (a[i].present != b[i].present || a[i].dev != b[i].dev || a[i].ino != b[i].ino ||
        a[i].size != b[i].size || a[i].mtime.tv_sec != b[i].mtime.tv_sec ||
        a[i].mtime.tv_nsec != b[i].mtime.tv_nsec)
      return false;
  return true;
}

/* The client certificate's notAfter, seconds since the epoch (0: none). */
static int64_t cert_expiry(SSL_CTX *ctx) {
  X509 *x = SSL_CTX_get0_certificate(ctx);
  struct tm tm;
  if (!x || ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1) return 0;
  return (int64_t)timegm(&tm);
}

/* A new context from the configured files, or NULL with the reason in why. */
static SSL_CTX *build_ctx(char *why, size_t cap) {
  const struct zkw_config *cfg = tls_state.cfg;
  char detail[512];
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) goto fail_what;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (cfg->tls_ca_file && *cfg->tls_ca_file) {
    if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_file, NULL) != 1) {
      ssl_errors(detail, sizeof detail);
      snprintf(why, cap, "ZKWARDEN_TLS_CA_FILE %s: %s", cfg->tls_ca_file, detail);
      goto fail;
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    ssl_errors(detail, sizeof detail);
    snprintf(why, cap, "the system CA store: %s", detail);
    goto fail;
  }
  if (cfg->tls_cert_file && *cfg->tls_cert_file) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1) {
      ssl_errors(detail, sizeof detail);
      snprintf(why, cap, "ZKWARDEN_TLS_CERT_FILE %s: %s", cfg->tls_cert_file, detail);
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1) {
      ssl_errors(detail, sizeof detail);
      snprintf(why, cap, "ZKWARDEN_TLS_KEY_FILE %s: %s", cfg->tls_key_file, detail);
      goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      ssl_errors(detail, sizeof detail);
      snprintf(why, cap, "ZKWARDEN_TLS_KEY_FILE does not match ZKWARDEN_TLS_CERT_FILE: %s", detail);
      goto fail;
    }
  }
  return ctx;
fail_what:
  ssl_errors(detail, sizeof detail);
  snprintf(why, cap, "%s", detail);
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

static void log_expiry(const char *what, SSL_CTX *ctx) {
  int64_t exp = cert_expiry(ctx);
  ZKW_METRIC_SET(tls_cert_expiry, exp);
  if (!exp) {
    zkw_log_info("TLS %s: CA %s, no client certificate", what,
                 *tls_state.cfg->tls_ca_file ? tls_state.cfg->tls_ca_file : "(system store)");
    return;
  }
  char when[32];
  time_t tt = (time_t)exp;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  zkw_log_info("TLS %s: CA %s, client certificate %s valid until %s", what,
               *tls_state.cfg->tls_ca_file ? tls_state.cfg->tls_ca_file : "(system store)",
               tls_state.cfg->tls_cert_file, when);
}

int zkw_tls_reload(const char *why) {
  if (!tls_state.ctx) return -1;
  char err[768];
  struct file_id ids[3];
  stat_files(ids);
  SSL_CTX *ctx = build_ctx(err, sizeof err);
  if (!ctx) {
    ZKW_METRIC_INC(tls_reload_failures);
    memcpy(tls_state.files, ids, sizeof ids); /* retried when they change again, or on SIGHUP */
    zkw_log_error("TLS reload (%s) failed, the previous certificates stay in use: %s", why, err);
    return -1;
  }
  SSL_CTX_free(tls_state.ctx); /* established connections hold their own reference */
  tls_state.ctx = ctx;
  memcpy(tls_state.files, ids, sizeof ids);
  ZKW_METRIC_INC(tls_reloads);
  char what[96];
  snprintf(what, sizeof what, "reloaded (%s)", why);
  log_expiry(what, ctx);
  return 0;
}

static void poll_cb(uv_timer_t *h) {
  (void)h;
  struct file_id ids[3];
  stat_files(ids);
  if (same_files(ids, tls_state.files)) return;
  /* A Secret volume swaps its ..data symlink at once; a file written in
   * place may be caught half-written: then the reload fails and the next
   * change (the end of the write) is tried again. */
  (void)zkw_tls_reload("the certificate files changed");
}

int zkw_tls_start(uv_loop_t *loop, const struct zkw_config *cfg) {
  memset(&tls_state, 0, sizeof tls_state);
  tls_state.cfg = cfg;
  if (!cfg->upstream_tls) {
    ZKW_METRIC_SET(tls_cert_expiry, 0);
    return 0;
  }
  char err[768];
  tls_state.on = true;
  stat_files(tls_state.files);
  tls_state.ctx = build_ctx(err, sizeof err);
  if (!tls_state.ctx) {
    zkw_log_error("ZKWARDEN_UPSTREAM_TLS=on: cannot load the TLS configuration: %s", err);
    return -1;
  }
  log_expiry("to the ensemble", tls_state.ctx);
  if (uv_timer_init(loop, &tls_state.poll) == 0) {
    tls_state.polling = true;
    uv_timer_start(&tls_state.poll, poll_cb, ZKW_TLS_POLL_MS, ZKW_TLS_POLL_MS);
    uv_unref((uv_handle_t *)&tls_state.poll);
  }
  return 0;
}

void zkw_tls_stop(void) {
  if (tls_state.polling) uv_close((uv_handle_t *)&tls_state.poll, NULL);
  tls_state.polling = false;
}

void zkw_tls_free(void) {
  SSL_CTX_free(tls_state.ctx);
  tls_state.ctx = NULL; /* tls_state.on stays: no connection goes plaintext */
}

const char *zkw_tls_route(const char *hosts) {
  return tls_state.route[0] ? tls_state.route : hosts;
}

void zkw_tls_set_route(const char *internal_hosts) {
  snprintf(tls_state.route, sizeof tls_state.route, "%s", internal_hosts ? internal_hosts : "");
}

void zkw_tls_note(const char *server, const char *error) {
  int i = 0;
  while (i < ZKW_MAX_UPSTREAMS && tls_state.notes[i].server[0] &&
         strcmp(tls_state.notes[i].server, server) != 0)
    i++;
  if (i == ZKW_MAX_UPSTREAMS) return;
  char *last = tls_state.notes[i].error;
  if (!tls_state.notes[i].server[0])
    snprintf(tls_state.notes[i].server, sizeof tls_state.notes[i].server, "%s", server);
  if (error && strcmp(last, error) != 0) {
    zkw_log_warn("TLS to %s refused: %s", server, error);
    snprintf(last, sizeof tls_state.notes[i].error, "%s", error);
  } else if (!error && last[0]) {
    zkw_log_info("TLS to %s verified again", server);
    last[0] = 0;
  }
}

/* ---- connections ---- */

int zkw_tls_conn_new(struct zkw_tls_conn **out, const char *host) {
  struct zkw_tls_conn *c = zkw_calloc(1, sizeof *c);
  if (!c || !tls_state.ctx) goto fail;
  c->ssl = SSL_new(tls_state.ctx);
  c->in = BIO_new(BIO_s_mem());
  c->out = BIO_new(BIO_s_mem());
  if (!c->ssl || !c->in || !c->out) goto fail;
  BIO_set_mem_eof_return(c->in, -1); /* empty input: "want read", not EOF */
  SSL_set_bio(c->ssl, c->in, c->out);
  c->in = c->out = NULL; /* owned by the SSL now */
  const char *name = *tls_state.cfg->tls_server_name ? tls_state.cfg->tls_server_name : host;
  unsigned char ip[16];
  bool is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
  if (is_ip) {
    /* An address: checked against the IP SANs; SNI carries no addresses. */
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name) != 1) goto fail;
  } else {
    if (SSL_set1_host(c->ssl, name) != 1 || SSL_set_tlsext_host_name(c->ssl, name) != 1) goto fail;
    SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  }
  SSL_set_connect_state(c->ssl);
  *out = c;
  return 0;
fail:
  ERR_clear_error();
  if (c) {
    BIO_free(c->in);
    BIO_free(c->out);
    SSL_free(c->ssl);
    free(c);
  }
  return -ENOMEM;
}

void zkw_tls_conn_free(struct zkw_tls_conn *c) {
  if (!c) return;
  SSL_free(c->ssl);
  free(c);
}

/* Records why an operation failed: the verification result if the chain or
 * name was refused, else OpenSSL's error queue. */
static int conn_failed(struct zkw_tls_conn *c, int ssl_err) {
  if (ssl_err < 0) { /* an injected fault (zkw_fault.h) */
    snprintf(c->error, sizeof c->error, "injected fault");
    return ZKW_TLS_ERROR;
  }
  long v = SSL_get_verify_result(c->ssl);
  char detail[200];
  if (v != X509_V_OK) {
    snprintf(c->error, sizeof c->error, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    ERR_clear_error();
  } else if (ssl_err == SSL_ERROR_SYSCALL || ERR_peek_error() == 0) {
    snprintf(c->error, sizeof c->error, "the server closed the connection during the TLS handshake");
    ERR_clear_error();
  } else {
    ssl_errors(detail, sizeof detail);
    snprintf(c->error, sizeof c->error, "%s", detail);
  }
  return ZKW_TLS_ERROR;
}

int zkw_tls_handshake(struct zkw_tls_conn *c) {
  if (ZKW_FAULT(tls)) return conn_failed(c, -1);
  int rc = SSL_do_handshake(c->ssl);
  if (rc == 1) {
    ZKW_METRIC_INC(tls_handshakes);
    return ZKW_TLS_DONE;
  }
  int e = SSL_get_error(c->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return ZKW_TLS_AGAIN;
  return conn_failed(c, e); /* counted by the caller, with the other ways a handshake fails */
}

const char *zkw_tls_conn_error(const struct zkw_tls_conn *c) {
  return c->error[0] ? c->error : "TLS error";
}

void zkw_tls_conn_describe(const struct zkw_tls_conn *c, char *out, size_t cap) {
  snprintf(out, cap, "%s %s", SSL_get_version(c->ssl), SSL_get_cipher_name(c->ssl));
}

uv_buf_t zkw_tls_read_buf(void) {
  return uv_buf_init((char *)read_buf, sizeof read_buf);
}

int zkw_tls_feed(struct zkw_tls_conn *c, const void *p, size_t n) {
  if (n == 0) return 0;
  return BIO_write(SSL_get_rbio(c->ssl), p, (int)n) == (int)n ? 0 : -ENOMEM;
}

int zkw_tls_decrypt(struct zkw_tls_conn *c, struct zkw_buf *out) {
  if (ZKW_FAULT(tls)) return conn_failed(c, -1);
  for (;;) {
    if (zkw_buf_reserve(out, 16 * 1024) != 0) return -ENOMEM;
    size_t got = 0;
    int rc = SSL_read_ex(c->ssl, out->data + out->len, out->cap - out->len, &got);
    if (rc == 1) {
      out->len += got;
      continue;
    }
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_WANT_READ) return ZKW_TLS_AGAIN;
    if (e == SSL_ERROR_ZERO_RETURN) return ZKW_TLS_CLOSED;
    return conn_failed(c, e);
  }
}

int zkw_tls_encrypt(struct zkw_tls_conn *c, const uint8_t *p, size_t n) {
  size_t done = 0;
  if (n == 0) return 0;
  if (ZKW_FAULT(tls)) return conn_failed(c, -1);
  /* Memory BIOs take everything: one call writes it all. */
  if (SSL_write_ex(c->ssl, p, n, &done) != 1 || done != n) return conn_failed(c, SSL_ERROR_SSL);
  return 0;
}

int zkw_tls_take_output(struct zkw_tls_conn *c, struct zkw_buf *out) {
  BIO *b = SSL_get_wbio(c->ssl);
  char *p;
  long n = BIO_get_mem_data(b, &p);
  if (n <= 0) return 0;
  if (zkw_buf_append(out, (const uint8_t *)p, (size_t)n) != 0) return -ENOMEM;
  (void)BIO_reset(b);
  return 0;
}

int zkw_tls_close_notify(struct zkw_tls_conn *c, struct zkw_buf *out) {
  (void)SSL_shutdown(c->ssl); /* 0: sent, the server's answer is not waited for */
  ERR_clear_error();
  return zkw_tls_take_output(c, out);
}

struct flush_req {
  uv_write_t req;
  struct zkw_buf buf;
};

static void flush_cb(uv_write_t *req, int status) {
  (void)status; /* a failed write shows as a failed read or the connect timeout */
  struct flush_req *f = req->data;
  zkw_buf_release(&f->buf);
  free(f);
}

int zkw_tls_flush(struct zkw_tls_conn *c, uv_stream_t *stream) {
  struct flush_req *f = zkw_calloc(1, sizeof *f);
  if (!f) return UV_ENOMEM;
  if (zkw_tls_take_output(c, &f->buf) != 0) {
    free(f);
    return UV_ENOMEM;
  }
  if (!f->buf.len) {
    free(f);
    return 0;
  }
  f->req.data = f;
  uv_buf_t b = uv_buf_init((char *)f->buf.data, (unsigned)f->buf.len);
  int rc = uv_write(&f->req, stream, &b, 1, flush_cb);
  if (rc) {
    zkw_buf_release(&f->buf);
    free(f);
  }
  return rc;
}
