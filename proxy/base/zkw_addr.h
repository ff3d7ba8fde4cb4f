/* zkw_addr.h: host:port text into addresses, with libc alone.
 *
 * The configuration parser (zkw_config.c) and the keeper (proxy/keeper/,
 * which links no libuv) read ZKWARDEN_LISTEN and ZKWARDEN_ADMIN_LISTEN with
 * the same rules: "host:port" or "[v6]:port", port 1-65535. */
#ifndef ZKW_ADDR_H
#define ZKW_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* A host:port as written; resolved when connecting (names may change). */
struct zkw_hostport {
  char host[256];
  char port[8];
};

/* Splits the n bytes at s, "host:port" or "[v6]:port"; host and port must
 * be non-empty and the port 1-65535. Returns 0 or -1. */
int zkw_addr_split(const char *s, size_t n, struct zkw_hostport *out) __attribute__((warn_unused_result));
/* A numeric "ip:port" or "[ipv6]:port" into *ss. Returns 0 or -1. */
int zkw_addr_parse(const char *s, struct sockaddr_storage *ss) __attribute__((warn_unused_result));

#endif
