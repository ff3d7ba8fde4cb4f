/* zkw_addr.c: host:port parsing shared by the configuration and the keeper
 * (zkw_addr.h); libc only. */
#include "zkw_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

int zkw_addr_split(const char *s, size_t n, struct zkw_hostport *out) {
  const char *colon;
  size_t hl;
  const char *host = s;
  if (n > 0 && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close || close + 1 >= s + n || close[1] != ':') return -1;
    host = s + 1;
    hl = (size_t)(close - host);
    colon = close + 1;
  } else {
    colon = NULL;
    for (size_t i = 0; i < n; i++)
      if (s[i] == ':') colon = s + i;
    if (!colon) return -1;
    hl = (size_t)(colon - s);
  }
  size_t pl = (size_t)(s + n - colon - 1);
  if (hl == 0 || hl >= sizeof out->host || pl == 0 || pl >= sizeof out->port) return -1;
  memcpy(out->host, host, hl);
  out->host[hl] = 0;
  memcpy(out->port, colon + 1, pl);
  out->port[pl] = 0;
  char *end;
  errno = 0;
  long p = strtol(out->port, &end, 10);
  if (errno || *end || p < 1 || p > 65535) return -1;
  return 0;
}

int zkw_addr_parse(const char *s, struct sockaddr_storage *ss) {
  struct zkw_hostport hp;
  memset(ss, 0, sizeof *ss);
  if (zkw_addr_split(s, strlen(s), &hp) != 0) return -1;
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  uint16_t port = (uint16_t)atoi(hp.port);
  if (inet_pton(AF_INET, hp.host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    return 0;
  }
  memset(ss, 0, sizeof *ss);
  if (inet_pton(AF_INET6, hp.host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    return 0;
  }
  memset(ss, 0, sizeof *ss);
  return -1;
}
