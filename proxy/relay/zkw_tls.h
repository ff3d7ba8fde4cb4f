/* zkw_tls.h: TLS to the ensemble (ZKWARDEN_UPSTREAM_TLS), on OpenSSL, driven
 * by the libuv loop.
 *
 * One process-wide client context (SSL_CTX): the CA bundle (or the system
 * store), an optional client certificate and key, peer verification, TLS 1.2
 * at least. Each upstream connection gets an SSL on two memory BIOs: the
 * caller reads ciphertext from its socket and feeds it in (zkw_tls_feed),
 * takes plaintext out (zkw_tls_decrypt), and writes what zkw_tls_encrypt or
 * the handshake leave in the output (zkw_tls_take_output). No socket is ever
 * touched here except by zkw_tls_flush, no thread, no blocking handshake.
 *
 * Every connection verifies the server's chain and its name: the host of
 * ZKWARDEN_UPSTREAM, or ZKWARDEN_TLS_SERVER_NAME when set; an IP address is
 * checked against the certificate's IP SANs and sent no SNI, a name is
 * checked against the DNS SANs and sent as SNI. A connection that fails is
 * not used, never downgraded to plaintext.
 *
 * Rotation: zkw_tls_reload (SIGHUP, or a change of the files' stat seen by a
 * 10 s poll) builds a new context; new connections use it, established ones
 * keep the one they started with (an SSL holds a reference on its SSL_CTX).
 * A new context that cannot be built is logged and the old one stays.
 *
 * zkwarden's own libzookeeper_mt sessions (registry, fencing) cannot speak
 * TLS: they connect to an internal plaintext relay on 127.0.0.1 whose
 * upstream side is TLS (zkw_server.c); zkw_tls_route gives their host list. */
#ifndef ZKW_TLS_H
#define ZKW_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "zkw_buf.h"

struct zkw_config;
struct zkw_tls_conn;

/* Results of zkw_tls_handshake and zkw_tls_decrypt. */
enum {
  ZKW_TLS_DONE = 1,   /* handshake complete */
  ZKW_TLS_AGAIN = 0,  /* more input needed */
  ZKW_TLS_ERROR = -1, /* failed: the reason is in zkw_tls_conn_error */
  ZKW_TLS_CLOSED = -2 /* the server sent close_notify */
};

/* Builds the first context from cfg when ZKWARDEN_UPSTREAM_TLS=on (else
 * does nothing) and starts watching the files. Returns 0, or -1 with the
 * reason logged (zkwarden cannot start). */
int zkw_tls_start(uv_loop_t *loop, const struct zkw_config *cfg) __attribute__((warn_unused_result));
/* Stops the file watch (at shutdown, before the loop ends). */
void zkw_tls_stop(void);
/* Drops the current context, after the loop ended (for leak checkers). New
 * connections fail from then on; none goes plaintext. */
void zkw_tls_free(void);
bool zkw_tls_enabled(void);
/* Re-reads CA, certificate and key; why says what triggered it (for the
 * log). Returns 0 when the new context is in use, -1 when the old one stays. */
int zkw_tls_reload(const char *why);

/* The host list zkwarden's own libzookeeper sessions use: the internal
 * relay's address when one runs (TLS on), else hosts itself. */
const char *zkw_tls_route(const char *hosts);
void zkw_tls_set_route(const char *internal_hosts);

/* A client connection to the server host (the name or IP address as
 * written in ZKWARDEN_UPSTREAM). Returns 0 or -ENOMEM. */
int zkw_tls_conn_new(struct zkw_tls_conn **out, const char *host) __attribute__((warn_unused_result));
void zkw_tls_conn_free(struct zkw_tls_conn *c);
/* Advances the handshake with the input fed so far. */
int zkw_tls_handshake(struct zkw_tls_conn *c) __attribute__((warn_unused_result));
/* Why the handshake or a read failed: OpenSSL's verification or protocol
 * reason, one line. */
const char *zkw_tls_conn_error(const struct zkw_tls_conn *c);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384", for a debug line. */
void zkw_tls_conn_describe(const struct zkw_tls_conn *c, char *out, size_t cap);

/* A buffer for the ciphertext of one read (alloc_cb); the loop thread's
 * read_cb must feed it before the next read. */
uv_buf_t zkw_tls_read_buf(void);
/* Ciphertext read from the socket. Returns 0 or -ENOMEM. */
int zkw_tls_feed(struct zkw_tls_conn *c, const void *p, size_t n) __attribute__((warn_unused_result));
/* Appends all the plaintext available to out. Returns ZKW_TLS_AGAIN,
 * ZKW_TLS_CLOSED, ZKW_TLS_ERROR, or -ENOMEM. */
int zkw_tls_decrypt(struct zkw_tls_conn *c, struct zkw_buf *out) __attribute__((warn_unused_result));
/* Encrypts n bytes (after the handshake). Returns 0 or ZKW_TLS_ERROR. */
int zkw_tls_encrypt(struct zkw_tls_conn *c, const uint8_t *p, size_t n) __attribute__((warn_unused_result));
/* Moves the pending ciphertext (handshake records, encrypted data) to out. */
int zkw_tls_take_output(struct zkw_tls_conn *c, struct zkw_buf *out) __attribute__((warn_unused_result));
/* The outcome of a handshake with server (host:port): error NULL when it
 * verified. Logs one warning when a server starts failing (or fails for a
 * new reason) and one line when it verifies again, whatever the number of
 * connections (libzookeeper reconnects every few ms through the relay). */
void zkw_tls_note(const char *server, const char *error);

/* Appends a close_notify alert to out (the connection's orderly end).
 * Returns 0 or a negative error. */
int zkw_tls_close_notify(struct zkw_tls_conn *c, struct zkw_buf *out) __attribute__((warn_unused_result));
/* Writes the pending ciphertext to stream with a uv_write of its own (the
 * handshake's few records; freed by its callback). Returns 0 or a negative
 * libuv error. */
int zkw_tls_flush(struct zkw_tls_conn *c, uv_stream_t *stream) __attribute__((warn_unused_result));

#endif
