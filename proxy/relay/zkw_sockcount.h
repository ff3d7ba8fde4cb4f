/* zkw_sockcount.h: how far a TCP socket's two streams went, as the kernel
 * counts them (a file of its own: the kernel's struct tcp_info, with the
 * byte counts, cannot share a file with libc's older one, which uv.h
 * brings). */
#ifndef ZKW_SOCKCOUNT_H
#define ZKW_SOCKCOUNT_H

#include <stdint.h>

/* Bytes the socket's processes have read from the peer (received, less
 * what waits to be read) and written to it (acked, and what waits to be
 * sent or acked), since it was connected. Read until two readings agree: the
 * peer may still be sending, and acknowledging. Returns 0 or a negative
 * errno. */
int zkw_sockcount(int fd, uint64_t *consumed, uint64_t *written);

#endif
