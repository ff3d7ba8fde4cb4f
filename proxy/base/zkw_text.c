/* zkw_text.c: appending formatted text, JSON strings and HTML text to a zkw_buf. */
#include "zkw_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int zkw_text_printf(struct zkw_buf *b, const char *fmt, ...) {
  va_list ap;
  size_t room = b->cap - b->len;
  int n;

  if (room < 256) {
    if (zkw_buf_reserve(b, 256) != 0) return -ENOMEM;
    room = b->cap - b->len;
  }
  va_start(ap, fmt);
  n = vsnprintf((char *)b->data + b->len, room, fmt, ap);
  va_end(ap);
  if (n < 0) return -EINVAL;
  if ((size_t)n >= room) {
    if (zkw_buf_reserve(b, (size_t)n + 1) != 0) return -ENOMEM;
    va_start(ap, fmt);
    n = vsnprintf((char *)b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return -EINVAL;
  }
  b->len += (size_t)n;
  return 0;
}

int zkw_text_json_string(struct zkw_buf *b, const char *s, size_t max) {
  size_t n = strnlen(s, max);

  /* Do not cut a multi-byte UTF-8 sequence: back up over continuation bytes. */
  if (n == max && s[n] != 0) {
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
      n--;
  }
  /* Worst case: every byte becomes \u00XX, plus the quotes. */
  if (zkw_buf_reserve(b, n * 6 + 2) != 0) return -ENOMEM;
  char *o = (char *)b->data + b->len;
  size_t k = 0;
  o[k++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      o[k++] = '\\';
      o[k++] = (char)c;
    } else if (c < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      o[k++] = '\\';
      o[k++] = 'u';
      o[k++] = '0';
      o[k++] = '0';
      o[k++] = hex[c >> 4];
      o[k++] = hex[c & 15];
    } else {
      o[k++] = (char)c;
    }
  }
  o[k++] = '"';
  b->len += k;
  return 0;
}

int zkw_text_html(struct zkw_buf *b, const char *s, size_t max) {
  size_t n = strnlen(s, max);
  if (zkw_buf_reserve(b, n * 6) != 0) return -ENOMEM;
  char *o = (char *)b->data + b->len;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *rep = NULL;
    switch (s[i]) {
    case '&':
      rep = "&amp;";
      break;
    case '<':
      rep = "&lt;";
      break;
    case '>':
      rep = "&gt;";
      break;
    case '"':
      rep = "&quot;";
      break;
    case '\'':
      rep = "&#39;";
      break;
    default:
      o[k++] = s[i];
      continue;
    }
    size_t rl = strlen(rep);
    memcpy(o + k, rep, rl);
    k += rl;
  }
  b->len += k;
  return 0;
}

void zkw_text_sockaddr(const struct sockaddr *sa, char *out, size_t len) {
  char ip[INET6_ADDRSTRLEN];
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    if (!inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
    snprintf(out, len, "[%s]:%d", ip, ntohs(a->sin6_port));
  } else if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    if (!inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
    snprintf(out, len, "%s:%d", ip, ntohs(a->sin_port));
  } else {
    snprintf(out, len, "?");
  }
}

bool zkw_text_is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family != AF_INET6) return false;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}
