/* zkw_jref.h: a session's part of the journal (zkw_journal.h), a type of
 * its own so that the session's struct (zkw_relay.h) holds it without
 * including the journal's functions. */
#ifndef ZKW_JREF_H
#define ZKW_JREF_H

#include <stdint.h>

struct zkw_journal;

/* A session's part (struct zkw_session.jr): its slot, and where its streams
 * and requests stand. */
struct zkw_jref {
  struct zkw_journal *j;
  void *slot; /* NULL: not durable */
  uint32_t idx;
  uint64_t popped;     /* pending entries matched (their replies come in order) */
  uint64_t hold;       /* a withheld reply's entry: nothing from it on is answered (UINT64_MAX: none) */
  uint64_t head, tail; /* answered as committed; pushed */
  uint64_t in_logged;  /* client stream offset: read */
  uint64_t in_base;    /* client stream offset of the client's in buffer's first byte */
  uint64_t out_logged; /* client stream offset: for the client */
  uint32_t watches_gen, watches_len, watches_which;
};

#endif
