/* zkw_text.h: building text responses (Prometheus text, JSON) in a zkw_buf.
 *
 * The admin endpoint renders every response body into one reused buffer;
 * these helpers append to it and report running out of memory. */
#ifndef ZKW_TEXT_H
#define ZKW_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "zkw_buf.h"

/* Appends printf-formatted text. Returns 0 or -ENOMEM. */
int zkw_text_printf(struct zkw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)))
__attribute__((warn_unused_result));
/* Appends s as a quoted JSON string, escaping quotes, backslashes and control
 * bytes; at most max bytes of s are taken, cut at a UTF-8 boundary. Returns 0
 * or -ENOMEM. */
int zkw_text_json_string(struct zkw_buf *b, const char *s, size_t max) __attribute__((warn_unused_result));

/* Formats an IPv4 or IPv6 address and port as "ip:port" or "[ip]:port"
 * ("?" for another family), always NUL-terminated. */
struct sockaddr;
void zkw_text_sockaddr(const struct sockaddr *sa, char *out, size_t len);
/* True for a loopback address: 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104
 * (the admin endpoint's ZKWARDEN_ADMIN_REMOTE rule). */
bool zkw_text_is_loopback(const struct sockaddr *sa);

/* Appends s as HTML text, escaping &, <, >, " and '; at most max bytes of s.
 * Returns 0 or -ENOMEM. */
int zkw_text_html(struct zkw_buf *b, const char *s, size_t max) __attribute__((warn_unused_result));

#endif
