/* fuzz_admin.c: libFuzzer target for the admin HTTP endpoint's request
 * handling (proxy/zkw_admin.c: llhttp parsing, limits, routing, response
 * building), driven through zkw_admin_http_feed exactly as the socket code
 * drives it, with no socket.
 *
 * Input: byte 0 chooses the chunking (0: all bytes at once; n: pieces of
 * 1..n bytes, sizes from a PRNG seeded by n), byte 1 a few switches (see
 * FLAG_*), then optionally a peer name for a fake session (FLAG_PEER: one
 * length byte and that many bytes), then the bytes a client sends.
 *
 * Checked on every response, as it is handed to the writer: one whole
 * HTTP/1.1 response with a known status, a Content-Length equal to the body
 * sent (no body for HEAD), "Connection: close" exactly on the last one,
 * nothing after the last one, at most one response per request begun (plus
 * one refusal), the status agreeing with an independent routing of the URL
 * and method, and no raw control character in a JSON body. Any violation
 * aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_admin.h"
#include "zkw_config.h"
#include "zkw_history.h"
#include "zkw_log.h"
#include "zkw_metrics.h"
#include "zkw_server.h"
#include "zkw_session.h"
#include "zkw_sidecar.h"

#define FLAG_STOPPING 0x01 /* the server is shutting down (/readyz says so) */
#define FLAG_TIMEOUT  0x02 /* the request deadline passes after the last byte */
#define FLAG_HELD     0x04 /* the writer holds ZKW_ADMIN_OUT_MAX bytes: every answer is the last */
#define FLAG_KEEP     0x08 /* the writer takes nothing: responses pile up in out */
#define FLAG_PEER     0x10 /* a peer name for the fake session follows */

#define FAIL(what)                                                                                           \
  do {                                                                                                       \
    fprintf(stderr, "fuzz_admin: %s (line %d)\n", what, __LINE__);                                           \
    abort();                                                                                                 \
  } while (0)

static struct zkw_config cfg;
static struct zkw_server srv;
static struct zkw_identity identity; /* never started: no registry session */
static struct zkw_session *sess[2];

struct writer {
  size_t checked;    /* bytes of out already checked (FLAG_KEEP) */
  uint64_t answered; /* h->completed at the last response to a complete request */
  unsigned responses;
  bool saw_last;
  bool keep;
};

static const char *const paths[] = {"/healthz",     "/readyz",   "/metrics", "/v1/sessions",
                                    "/v1/reclaims", "/v1/locks", "/"};

static int known_path(const char *url) {
  size_t n = strcspn(url, "?#");
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    if (strlen(paths[i]) == n && memcmp(url, paths[i], n) == 0) return (int)i;
  return -1;
}

static const uint8_t *find(const uint8_t *p, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(p + i, s, k) == 0) return p + i;
  return NULL;
}

/* Checks the one response at r[0..n). */
static void check_response(struct zkw_admin_http *h, const uint8_t *r, size_t n) {
  if (n < 12 || memcmp(r, "HTTP/1.1 ", 9) != 0) FAIL("response does not start with HTTP/1.1");
  int status = (r[9] - '0') * 100 + (r[10] - '0') * 10 + (r[11] - '0');
  switch (status) {
  case 200:
  case 400:
  case 404:
  case 405:
  case 408:
  case 413:
  case 414:
  case 431:
  case 500:
  case 503:
    break;
  default:
    FAIL("unexpected status");
  }
  const uint8_t *end = find(r, n, "\r\n\r\n");
  if (!end) FAIL("no end of head");
  size_t head = (size_t)(end - r) + 4;
  const uint8_t *cl = find(r, head, "\r\nContent-Length: ");
  if (!cl) FAIL("no Content-Length");
  size_t clen = 0;
  for (const uint8_t *d = cl + 18; *d != '\r'; d++) {
    if (*d < '0' || *d > '9') FAIL("bad Content-Length");
    clen = clen * 10 + (size_t)(*d - '0');
  }
  bool head_only = h->parser.method == HTTP_HEAD;
  if (n - head != (head_only ? 0 : clen)) FAIL("body length differs from Content-Length");
  bool close = find(r, head, "\r\nConnection: close\r\n") != NULL;
  if (close != h->done) FAIL("Connection: close on a response that is not the last, or missing on the last");
  if (find(r + 9, head - 9, "HTTP/1.1 ")) FAIL("two responses in one");

  /* Routing, judged independently, for answers to complete requests. */
  int route = known_path(h->url);
  bool get = h->parser.method == HTTP_GET;
  if ((status == 200 || status == 503) && !(route >= 0 && get))
    FAIL("200/503 for a path or method not served");
  /* No registry session here: /v1/locks is 503 and the status page says why. */
  if (status == 503 && route != 1 && route != 5) FAIL("503 from a path other than /readyz and /v1/locks");
  if (status == 200 && route == 5) FAIL("a lock report without a registry session");
  if (status == 404 && route >= 0) FAIL("404 for a served path");
  if (status == 405 && (route < 0 || get)) FAIL("405 for an unknown path or a GET");
  if (status == 200 && route == 0 && !head_only && (clen != 3 || memcmp(r + head, "ok\n", 3) != 0))
    FAIL("/healthz body is not ok");
  if (status == 200 && (route == 3 || route == 4) && !head_only) {
    for (size_t i = head; i < n; i++)
      if (r[i] < 0x20 && r[i] != '\n') FAIL("raw control character in a JSON body");
    if (r[head] != '{' || r[n - 2] != '}' || r[n - 1] != '\n')
      FAIL("JSON body is not one object and a newline");
  }
}

static int flush_hook(struct zkw_admin_http *h) {
  struct writer *w = h->data;
  if (w->saw_last) FAIL("a response after the last one");
  if (h->out.len <= w->checked) FAIL("flush without a new response");
  check_response(h, h->out.data + w->checked, h->out.len - w->checked);
  w->responses++;
  if (w->responses > h->begun + 1) FAIL("more responses than requests");
  /* A complete request gets one response (a refusal answers a request that
   * did not complete: h->in_request). */
  if (!h->in_request) {
    if (h->completed == w->answered) FAIL("a second response to one request");
    w->answered = h->completed;
  }
  w->saw_last = h->done;
  if (w->keep)
    w->checked = h->out.len;
  else
    zkw_buf_release(&h->out);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  zkw_log_setup(ZKW_LOG_ERROR, ZKW_LOG_TEXT);
  zkw_metrics_init();
  /* The relay's own constructors, with the sidecar's hooks: two sessions
   * that never see a socket (the newest is first on the list). */
  zkw_server_init(&srv, uv_default_loop(), &cfg, &zkw_sidecar_hooks, &identity);
  identity.srv = &srv; /* as zkw_incarnation_start sets it: its trees read the configuration */
  for (int i = 1; i >= 0; i--) {
    struct zkw_session *s = sess[i] = zkw_session_new(&srv);
    if (!s) abort();
    s->conn = (uint64_t)i + 1;
    s->session_id = (int64_t)0x1000000abcdef00 + i;
    s->timeout = 20000;
    s->phase = i ? ZKW_PHASE_ACTIVE : ZKW_PHASE_HANDSHAKE;
    snprintf(s->peer, sizeof s->peer, "127.0.0.1:%d", 40000 + i);
  }
  sess[1]->upstream.connected = true;
  snprintf(sess[1]->up_name, sizeof sess[1]->up_name, "zk\"1\\\t:2181");
  zkw_history_add((enum zkw_history_kind)0, "/flink/leader/\"x\"\n", "reason\twith\x01control", 0x1234,
                  "jm-\xff\xfe", 7);
  zkw_admin_http_setup(&srv);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  unsigned chunk = data[0], flags = data[1];
  data += 2, size -= 2;
  if (flags & FLAG_PEER) {
    if (size < 1) return 0;
    size_t pl = data[0] < sizeof sess[0]->peer ? data[0] : sizeof sess[0]->peer - 1;
    if (size < 1 + pl) return 0;
    memset(sess[0]->peer, 0, sizeof sess[0]->peer);
    memcpy(sess[0]->peer, data + 1, pl);
    data += 1 + pl, size -= 1 + pl;
  } else {
    snprintf(sess[0]->peer, sizeof sess[0]->peer, "127.0.0.1:40000");
  }
  srv.stopping = flags & FLAG_STOPPING;

  struct writer w = {.keep = flags & FLAG_KEEP};
  struct zkw_admin_http h;
  zkw_admin_http_init(&h);
  h.flush = flush_hook;
  h.data = &w;
  if (flags & FLAG_HELD) h.held = ZKW_ADMIN_OUT_MAX;

  uint32_t rng = chunk * 2654435761u + 1;
  int rc = 0;
  size_t off = 0;
  while (off < size && rc == 0) {
    size_t n = size - off;
    if (chunk) {
      rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
      size_t k = 1 + rng % chunk;
      if (k < n) n = k;
    }
    /* Each piece from its own heap block, so that ASan sees any read past it. */
    char *piece = malloc(n);
    if (!piece) abort();
    memcpy(piece, data + off, n);
    uint64_t before = w.responses;
    rc = zkw_admin_http_feed(&h, piece, n);
    free(piece);
    off += n;
    if (h.done && !w.saw_last) FAIL("done without a last response");
    if (w.saw_last && w.responses != before && !h.done) FAIL("last response but not done");
  }
  if (rc == 0 && (flags & FLAG_TIMEOUT) && h.in_request && !h.done) {
    if (zkw_admin_http_timeout(&h) != 0) FAIL("timeout failed");
    if (!h.done || !w.saw_last) FAIL("timeout did not answer 408 as the last response");
  }
  if (rc != 0 && !h.failed) FAIL("feed failed without failed");
  if (h.failed) FAIL("out of memory");
  if (!w.keep && h.out.len) FAIL("responses left in out without a flush");
  zkw_admin_http_release(&h);
  return 0;
}
