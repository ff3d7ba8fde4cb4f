/* zkw_journal.c: the journal's file, its slots, the logs and the commits
 * (see zkw_journal.h). One writer (the loop thread of the live process); the
 * reader is a successor after the writer is gone, so there is no locking,
 * only the order of the stores: a killed process stops between two
 * instructions, never in the middle of an aligned 8-byte store. */

#include "zkw_fault.h"
#include "zkw_journal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zkw_relay.h"
#include "zkw_watches.h"

#define MAGIC   0x314c4e524a776b7aULL /* "zkwJRNL1" */
#define VERSION 1

enum { SLOT_FREE = 0, SLOT_OPEN = 1, SLOT_LIVE = 2, SLOT_DEAD = 3 };

#define F_READ_ONLY    1u
#define F_RO_REQUESTED 2u
#define F_SASL         4u
#define F_UNMOVABLE    8u
#define F_WATCHES_LOST 16u

struct commit {
  uint64_t out_logged; /* client stream offset: logged toward the client */
  uint64_t head;       /* pending entries answered or consumed */
  int64_t last_zxid;
  uint32_t watches_len;
  uint32_t watches_which;
};

struct slot {
  uint32_t state;
  uint32_t flags;
  uint64_t conn;
  int64_t session_id;
  int32_t timeout;
  uint8_t passwd[16];
  uint8_t passwd_len;
  uint8_t pad[3];
  uint64_t in_logged;  /* client stream offset: read and logged */
  uint64_t in_handled; /* client stream offset: handled */
  uint64_t tail;       /* pending entries pushed */
  uint64_t published;  /* the record in force: rec[published & 1] */
  struct commit rec[2];
  uint32_t auth_len, auth_count;
  uint32_t policy_len;
  uint8_t policy[ZKW_JOURNAL_POLICY];
  struct zkw_jpending pend[ZKW_JOURNAL_PENDING];
  uint8_t auth[ZKW_JOURNAL_AUTH];
  uint8_t watches[2][ZKW_JOURNAL_WATCHES];
  uint8_t in_ring[ZKW_JOURNAL_IN_RING];
  uint8_t out_ring[ZKW_JOURNAL_OUT_RING];
};

struct header {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint64_t slot_size;
  uint64_t generation;
  uint32_t process_len;
  uint8_t process[ZKW_JOURNAL_PROCESS];
};

#define HEADER_SIZE 8192 /* the header, rounded to pages */

struct zkw_journal {
  int fd;
  uint8_t *base;
  size_t size;
  uint32_t slots;
  struct header *h;
  uint32_t *free_list; /* free slots, a stack */
  uint32_t nfree;
  uint8_t *recovered; /* slots a previous process left, until taken or forgotten */
};

_Static_assert(sizeof(struct header) <= HEADER_SIZE, "journal header");

static struct slot *slot_at(const struct zkw_journal *j, uint32_t i) {
  return (struct slot *)(j->base + HEADER_SIZE + (size_t)i * sizeof(struct slot));
}

int zkw_journal_open(struct zkw_journal **out, int fd, uint32_t slots, bool *recovered) {
  *out = NULL;
  *recovered = false;
  struct zkw_journal *j = zkw_calloc(1, sizeof *j);
  if (!j) return -ENOMEM;
  j->fd = fd;
  if (fd < 0 && (j->fd = memfd_create("zkwarden-journal", MFD_CLOEXEC)) < 0) {
    int e = -errno;
    free(j);
    return e;
  }
  j->size = HEADER_SIZE + (size_t)slots * sizeof(struct slot);
  struct stat st;
  int rc = fstat(j->fd, &st) ? -errno : 0;
  size_t had = rc ? 0 : (size_t)st.st_size;
  if (!rc && had < j->size && ftruncate(j->fd, (off_t)j->size)) rc = -errno;
  if (!rc && had > j->size) j->size = had; /* a predecessor sized it for more slots */
  if (!rc) {
    j->base = mmap(NULL, j->size, PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0);
    if (j->base == MAP_FAILED) {
      j->base = NULL;
      rc = -errno;
    }
  }
  if (!rc && ZKW_FAULT(alloc)) rc = -ENOMEM;
  if (rc) {
    if (j->base) munmap(j->base, j->size);
    if (fd < 0) close(j->fd);
    free(j);
    return rc;
  }
  j->h = (struct header *)j->base;
  bool valid = had >= HEADER_SIZE && j->h->magic == MAGIC && j->h->version == VERSION &&
               j->h->slot_size == sizeof(struct slot) &&
               j->h->slots <= (j->size - HEADER_SIZE) / sizeof(struct slot);
  uint32_t total = valid && j->h->slots > slots ? j->h->slots : slots;
  j->free_list = zkw_calloc(total ? total : 1, sizeof *j->free_list);
  j->recovered = zkw_calloc(total ? total : 1, 1);
  if (!j->free_list || !j->recovered) {
    zkw_journal_close(j);
    return -ENOMEM;
  }
  if (!valid) {
    memset(j->h, 0, sizeof *j->h);
    for (uint32_t i = 0; i < total; i++)
      slot_at(j, i)->state = SLOT_FREE;
    j->h->slots = total;
    j->h->slot_size = sizeof(struct slot);
    j->h->version = VERSION;
    j->h->magic = MAGIC;
  } else {
    j->h->slots = total;
  }
  j->slots = total;
  j->h->generation++;
  for (uint32_t i = total; i-- > 0;) {
    struct slot *sl = slot_at(j, i);
    if (sl->state == SLOT_LIVE) {
      j->recovered[i] = 1;
      *recovered = true;
    } else if (sl->state != SLOT_FREE) {
      memset(sl->passwd, 0, sizeof sl->passwd);
      sl->state = SLOT_FREE;
    }
  }
  for (uint32_t i = total; i-- > 0;)
    if (!j->recovered[i]) j->free_list[j->nfree++] = i;
  *out = j;
  return 0;
}

void zkw_journal_close(struct zkw_journal *j) {
  if (!j) return;
  if (j->base) munmap(j->base, j->size);
  free(j->free_list);
  free(j->recovered);
  free(j);
}

int zkw_journal_fd(const struct zkw_journal *j) {
  return j ? j->fd : -1;
}

uint32_t zkw_journal_slots(const struct zkw_journal *j) {
  return j ? j->slots : 0;
}

int zkw_journal_read(struct zkw_journal *j, uint32_t i, struct zkw_jsession *out) {
  if (i >= j->slots || !j->recovered[i]) return -ENOENT;
  struct slot *sl = slot_at(j, i);
  const struct commit *c = &sl->rec[sl->published & 1];
  *out = (struct zkw_jsession){
      .slot = i,
      .conn = sl->conn,
      .session_id = sl->session_id,
      .timeout = sl->timeout,
      .passwd_len = sl->passwd_len,
      .read_only = sl->flags & F_READ_ONLY,
      .ro_requested = sl->flags & F_RO_REQUESTED,
      .sasl = sl->flags & F_SASL,
      .unmovable = sl->flags & F_UNMOVABLE,
      .watches_lost = sl->flags & F_WATCHES_LOST,
      .last_zxid = c->last_zxid,
      .in_logged = sl->in_logged,
      .in_handled = sl->in_handled,
      .out_logged = c->out_logged,
      .auth = sl->auth,
      .auth_len = sl->auth_len <= ZKW_JOURNAL_AUTH ? sl->auth_len : 0,
      .auth_count = sl->auth_count,
      .watches = sl->watches[c->watches_which & 1],
      .watches_len = c->watches_len <= ZKW_JOURNAL_WATCHES ? c->watches_len : 0,
      .policy = sl->policy,
      .policy_len = sl->policy_len <= ZKW_JOURNAL_POLICY ? sl->policy_len : 0,
  };
  memcpy(out->passwd, sl->passwd, sizeof out->passwd);
  /* The requests in flight: [head, tail). A request pushed whose handled
   * offset was not stored yet: the later of the two. */
  uint64_t head = c->head, tail = sl->tail;
  if (tail < head || tail - head > ZKW_JOURNAL_PENDING) return -EOVERFLOW;
  for (uint64_t k = head; k < tail; k++) {
    const struct zkw_jpending *e = &sl->pend[k % ZKW_JOURNAL_PENDING];
    if (!e->owned && e->end > out->in_handled) out->in_handled = e->end;
  }
  out->head = head;
  out->pending_count = (uint32_t)(tail - head);
  return 0;
}

struct zkw_jpending zkw_journal_pending_at(const struct zkw_journal *j, const struct zkw_jsession *js,
                                           uint32_t i) {
  const struct slot *sl = slot_at(j, js->slot);
  return sl->pend[(js->head + i) % ZKW_JOURNAL_PENDING];
}

/* Copies the ring's bytes of stream offsets [from, to) (to - from <= cap). */
static void ring_copy(const uint8_t *ring, size_t cap, uint64_t from, uint64_t to, uint8_t *dst) {
  for (uint64_t at = from; at < to;) {
    size_t off = (size_t)(at % cap);
    size_t k = to - at < cap - off ? (size_t)(to - at) : cap - off;
    memcpy(dst, ring + off, k);
    dst += k;
    at += k;
  }
}

int zkw_journal_client_bytes(const struct zkw_journal *j, const struct zkw_jsession *js, bool out,
                             uint64_t from, uint8_t *dst) {
  const struct slot *sl = slot_at(j, js->slot);
  uint64_t to = out ? js->out_logged : js->in_logged;
  size_t cap = out ? ZKW_JOURNAL_OUT_RING : ZKW_JOURNAL_IN_RING;
  if (from > to || to - from > cap) return -ERANGE;
  ring_copy(out ? sl->out_ring : sl->in_ring, cap, from, to, dst);
  return 0;
}

void zkw_journal_forget_previous(struct zkw_journal *j) {
  if (!j) return;
  for (uint32_t i = 0; i < j->slots; i++)
    if (j->recovered[i]) {
      j->recovered[i] = 0;
      struct slot *sl = slot_at(j, i);
      memset(sl->passwd, 0, sizeof sl->passwd);
      memset(sl->auth, 0, sl->auth_len <= ZKW_JOURNAL_AUTH ? sl->auth_len : 0);
      sl->state = SLOT_FREE;
      j->free_list[j->nfree++] = i;
    }
}

int zkw_journal_save_process(struct zkw_journal *j, const void *data, size_t len) {
  if (!j) return -ENOENT;
  if (len > ZKW_JOURNAL_PROCESS) return -E2BIG;
  j->h->process_len = 0;
  memcpy(j->h->process, data, len);
  j->h->process_len = (uint32_t)len;
  return 0;
}

size_t zkw_journal_load_process(const struct zkw_journal *j, void *data, size_t cap) {
  if (!j || j->h->process_len > ZKW_JOURNAL_PROCESS || j->h->process_len > cap) return 0;
  memcpy(data, j->h->process, j->h->process_len);
  return j->h->process_len;
}

/* ---- the relay's calls ---- */

/* Writes n bytes at stream offset at into a ring of cap bytes (the ring
 * keeps the last cap bytes; a successor checks they are enough). */
static void ring_put(uint8_t *ring, size_t cap, uint64_t at, const uint8_t *p, size_t n) {
  if (n > cap) { /* only the last cap bytes can be kept */
    at += n - cap;
    p += n - cap;
    n = cap;
  }
  for (size_t done = 0; done < n;) {
    size_t off = (size_t)((at + done) % cap);
    size_t k = n - done < cap - off ? n - done : cap - off;
    memcpy(ring + off, p + done, k);
    done += k;
  }
}

static struct slot *slot_of(const struct zkw_session *s) {
  return s->jr.slot;
}

static void init_ref(struct zkw_session *s, struct zkw_journal *j, uint32_t i) {
  s->jr = (struct zkw_jref){.j = j, .slot = slot_at(j, i), .idx = i, .hold = UINT64_MAX};
}

int zkw_journal_take(struct zkw_journal *j, struct zkw_session *s, uint32_t want) {
  if (!j || !j->nfree) return -1;
  uint32_t k = j->nfree - 1;
  if (want != UINT32_MAX) /* the slot the keeper link numbered it with */
    for (k = 0; k < j->nfree && j->free_list[k] != want; k++)
      ;
  if (k >= j->nfree) return -1;
  uint32_t i = j->free_list[k];
  j->free_list[k] = j->free_list[--j->nfree];
  struct slot *sl = slot_at(j, i);
  sl->state = SLOT_FREE; /* until its fields are all reset */
  sl->flags = 0;
  sl->conn = s->conn;
  sl->session_id = 0;
  sl->timeout = 0;
  memset(sl->passwd, 0, sizeof sl->passwd);
  sl->passwd_len = 0;
  sl->in_logged = sl->in_handled = sl->tail = 0;
  sl->rec[0] = sl->rec[1] = (struct commit){0};
  sl->published = 0;
  sl->auth_len = sl->auth_count = sl->policy_len = 0;
  sl->state = SLOT_OPEN;
  init_ref(s, j, i);
  return (int)i;
}

void zkw_journal_keep(struct zkw_journal *j, struct zkw_session *s, uint32_t i) {
  j->recovered[i] = 0;
  init_ref(s, j, i);
}

void zkw_journal_release(struct zkw_session *s) {
  struct slot *sl = slot_of(s);
  if (!sl) return;
  struct zkw_journal *j = s->jr.j;
  memset(sl->passwd, 0, sizeof sl->passwd);
  memset(sl->auth, 0, sl->auth_len <= ZKW_JOURNAL_AUTH ? sl->auth_len : 0);
  sl->auth_len = 0;
  sl->state = SLOT_FREE;
  j->free_list[j->nfree++] = s->jr.idx;
  s->jr.slot = NULL;
}

void zkw_journal_client_read(struct zkw_session *s, const uint8_t *p, size_t n) {
  struct slot *sl = slot_of(s);
  if (!sl) return;
  ring_put(sl->in_ring, ZKW_JOURNAL_IN_RING, s->jr.in_logged, p, n);
  s->jr.in_logged += n;
  sl->in_logged = s->jr.in_logged;
}

void zkw_journal_client_handled(struct zkw_session *s, uint64_t end) {
  struct slot *sl = slot_of(s);
  if (sl && end > sl->in_handled) sl->in_handled = end;
}

void zkw_journal_pushed(struct zkw_session *s, int32_t xid, int32_t op, uint8_t flags, bool owned,
                        uint64_t end) {
  struct slot *sl = slot_of(s);
  if (!sl) return;
  uint64_t t = s->jr.tail;
  if (t - s->jr.head >= ZKW_JOURNAL_PENDING) { /* more in flight than kept: never recoverable */
    sl->state = SLOT_DEAD;
    return;
  }
  sl->pend[t % ZKW_JOURNAL_PENDING] =
      (struct zkw_jpending){.xid = xid, .op = op, .flags = flags, .owned = owned, .end = end};
  s->jr.tail = t + 1;
  sl->tail = s->jr.tail;
}

/* Publishes the record: into the spare, then one store. */
static void commit(struct zkw_session *s, uint64_t head) {
  struct slot *sl = slot_of(s);
  uint64_t next = sl->published + 1;
  struct commit *c = &sl->rec[next & 1];
  c->out_logged = s->jr.out_logged;
  c->head = head;
  c->last_zxid = s->last_zxid;
  c->watches_len = s->jr.watches_len;
  c->watches_which = s->jr.watches_which;
  __atomic_store_n(&sl->published, next, __ATOMIC_RELEASE);
  s->jr.head = head;
}

/* The watch table, when it changed since it was last kept: encoded into the
 * spare region (published by the next commit). */
static void keep_watches(struct zkw_session *s) {
  struct slot *sl = slot_of(s);
  if (s->jr.watches_gen == s->watches.gen && !(s->watches.lost && !(sl->flags & F_WATCHES_LOST))) return;
  s->jr.watches_gen = s->watches.gen;
  struct zkw_buf frames = {0};
  int n = s->watches.lost ? -1 : zkw_watches_encode(&s->watches, 0, &frames);
  if (n < 0 || frames.len > ZKW_JOURNAL_WATCHES) {
    sl->flags |= F_WATCHES_LOST; /* a successor cannot re-arm them: not recoverable */
  } else {
    uint32_t spare = s->jr.watches_which ^ 1u;
    if (frames.len) memcpy(sl->watches[spare], frames.data, frames.len);
    s->jr.watches_which = spare;
    s->jr.watches_len = (uint32_t)frames.len;
  }
  zkw_buf_release(&frames);
}

static uint64_t done_head(const struct zkw_session *s) {
  return s->jr.popped < s->jr.hold ? s->jr.popped : s->jr.hold;
}

void zkw_journal_to_client(struct zkw_session *s, const uint8_t *p, size_t n, uint64_t head) {
  struct slot *sl = slot_of(s);
  if (!sl) return;
  ring_put(sl->out_ring, ZKW_JOURNAL_OUT_RING, s->jr.out_logged, p, n);
  s->jr.out_logged += n;
  keep_watches(s);
  uint64_t d = done_head(s);
  commit(s, head < d ? head : d);
  /* Its ConnectResponse is logged: from now on the session is recoverable. */
  if (sl->state == SLOT_OPEN && s->response_seen) zkw_journal_session(s);
}

void zkw_journal_consumed(struct zkw_session *s, uint64_t head) {
  if (!slot_of(s)) return;
  uint64_t d = done_head(s);
  commit(s, head < d ? head : d);
}

void zkw_journal_session(struct zkw_session *s) {
  struct slot *sl = slot_of(s);
  if (!sl || sl->state == SLOT_DEAD) return;
  sl->session_id = s->session_id;
  sl->timeout = s->timeout;
  memcpy(sl->passwd, s->passwd, sizeof sl->passwd);
  sl->passwd_len = s->passwd_len;
  uint32_t f = sl->flags & F_WATCHES_LOST;
  if (s->read_only) f |= F_READ_ONLY;
  if (s->ro_requested) f |= F_RO_REQUESTED;
  if (s->sasl) f |= F_SASL;
  if (s->unmovable) f |= F_UNMOVABLE;
  sl->flags = f;
  if (s->auth_len <= ZKW_JOURNAL_AUTH && s->auth_len != sl->auth_len) {
    sl->auth_len = 0;
    if (s->auth_len) memcpy(sl->auth, s->auth_frames, s->auth_len);
    sl->auth_count = s->auth_count;
    sl->auth_len = (uint32_t)s->auth_len;
  }
  if (s->session_id && s->timeout > 0 && sl->state == SLOT_OPEN) sl->state = SLOT_LIVE;
}

void zkw_journal_policy(struct zkw_session *s, const void *data, size_t len) {
  struct slot *sl = slot_of(s);
  if (!sl || len > ZKW_JOURNAL_POLICY) return;
  sl->policy_len = 0;
  if (len) memcpy(sl->policy, data, len);
  sl->policy_len = (uint32_t)len;
}

void zkw_journal_not_durable(struct zkw_session *s) {
  struct slot *sl = slot_of(s);
  if (sl) sl->state = SLOT_DEAD;
}
