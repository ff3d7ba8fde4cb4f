/* zkw_watches.c: a connection's watches (see zkw_watches.h): a small hash
 * table of paths, each with the kinds of watch set on it, and the list of
 * watch-setting requests awaiting their reply. */
#include "zkw_fault.h"
#include "zkw_watches.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zkw_ops.h"
#include "zkw_wire.h"

/* The Java client's bound on one setWatches packet's paths. */
#define SET_WATCHES_MAX_BYTES (128 * 1024)
#define INITIAL_BUCKETS       16

struct zkw_watch {
  struct zkw_watch *next;
  uint32_t hash;
  uint32_t len;
  uint8_t kinds;
  char path[];
};

struct zkw_armed {
  struct zkw_armed *next;
  int32_t xid;
  uint8_t on_ok, on_nonode; /* kinds set by a reply with err 0, with NONODE */
  bool remove;              /* removeWatches: on_ok are removed, not set */
  uint32_t len;
  char path[];
};

static uint32_t hash_path(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint8_t)p[i]) * 16777619u;
  return h;
}

static struct zkw_watch **slot(const struct zkw_watches *w, const char *path, size_t len, uint32_t h) {
  struct zkw_watch **pp = &w->bucket[h & (w->nbuckets - 1)];
  while (*pp && ((*pp)->hash != h || (*pp)->len != len || memcmp((*pp)->path, path, len) != 0))
    pp = &(*pp)->next;
  return pp;
}

/* Doubles the table when it holds more paths than buckets. Returns 0 or -1. */
static int grow(struct zkw_watches *w) {
  if (w->bucket && w->count < w->nbuckets) return 0;
  uint32_t n = w->bucket ? w->nbuckets * 2 : INITIAL_BUCKETS;
  struct zkw_watch **b = zkw_calloc(n, sizeof *b);
  if (!b) return -1;
  for (uint32_t i = 0; w->bucket && i < w->nbuckets; i++)
    for (struct zkw_watch *e = w->bucket[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  free(w->bucket);
  w->bucket = b;
  w->nbuckets = n;
  return 0;
}

static void add(struct zkw_watches *w, const char *path, size_t len, uint8_t kinds) {
  if (!kinds || w->lost) return;
  w->gen++;
  if (grow(w)) {
    w->lost = true;
    return;
  }
  uint32_t h = hash_path(path, len);
  struct zkw_watch **pp = slot(w, path, len, h);
  if (*pp) {
    (*pp)->kinds |= kinds;
    return;
  }
  struct zkw_watch *e = zkw_malloc(sizeof *e + len);
  if (!e) {
    w->lost = true;
    return;
  }
  *e = (struct zkw_watch){.hash = h, .len = (uint32_t)len, .kinds = kinds};
  memcpy(e->path, path, len);
  *pp = e;
  w->count++;
}

static void drop(struct zkw_watches *w, const char *path, size_t len, uint8_t kinds) {
  if (!w->bucket) return;
  struct zkw_watch **pp = slot(w, path, len, hash_path(path, len));
  struct zkw_watch *e = *pp;
  if (!e || !(e->kinds & kinds)) return;
  w->gen++;
  e->kinds &= (uint8_t)~kinds;
  if (e->kinds) return;
  *pp = e->next;
  free(e);
  w->count--;
}

unsigned zkw_watches_kinds(const struct zkw_watches *w, const char *path, size_t len) {
  if (!w->bucket) return 0;
  struct zkw_watch *e = *slot(w, path, len, hash_path(path, len));
  return e ? e->kinds : 0;
}

/* The kinds removeWatches takes away, by its WatcherType. */
static uint8_t removed_kinds(int32_t type) {
  switch (type) {
  case 1:
    return ZKW_WATCH_CHILD;
  case 2:
    return ZKW_WATCH_DATA | ZKW_WATCH_EXIST;
  case 4:
    return ZKW_WATCH_PERSISTENT;
  case 5:
    return ZKW_WATCH_RECURSIVE;
  default:
    return 0xff; /* Any */
  }
}

/* The client's own setWatches (at its reconnect): its watches are armed
 * again on this connection. */
static void add_set_watches(struct zkw_watches *w, const struct zkw_op_req *op, int kinds) {
  for (int k = 0; k < kinds; k++) {
    struct zkw_rd rd = zkw_vec_reader(op->watches[k]);
    for (int32_t i = 0; i < op->watches[k].count; i++) {
      struct zkw_bytes b = zkw_rd_bytes(&rd);
      if (rd.err || b.len <= 0) break;
      add(w, (const char *)b.p, (size_t)b.len, (uint8_t)(1u << k));
    }
  }
}

void zkw_watches_request(struct zkw_watches *w, const struct zkw_request *req) {
  uint8_t on_ok = 0, on_nonode = 0;
  bool remove = false;
  switch (req->type) {
  case ZKW_OP_SET_WATCHES:
    add_set_watches(w, &req->op, 3);
    return;
  case ZKW_OP_SET_WATCHES2:
    add_set_watches(w, &req->op, 5);
    return;
  case ZKW_OP_GET_DATA:
    on_ok = req->op.watch ? ZKW_WATCH_DATA : 0;
    break;
  case ZKW_OP_EXISTS:
    on_ok = req->op.watch ? ZKW_WATCH_DATA : 0;
    on_nonode = req->op.watch ? ZKW_WATCH_EXIST : 0;
    break;
  case ZKW_OP_GET_CHILDREN:
  case ZKW_OP_GET_CHILDREN2:
    on_ok = req->op.watch ? ZKW_WATCH_CHILD : 0;
    break;
  case ZKW_OP_ADD_WATCH:
    on_ok = req->op.mode == 1 ? ZKW_WATCH_RECURSIVE : ZKW_WATCH_PERSISTENT;
    break;
  case ZKW_OP_REMOVE_WATCHES:
    on_ok = removed_kinds(req->op.mode);
    remove = true;
    break;
  default:
    return;
  }
  if (!on_ok || w->lost || req->op.path.len < 0) return;
  size_t len = (size_t)req->op.path.len;
  struct zkw_armed *a = zkw_malloc(sizeof *a + len);
  if (!a) {
    w->lost = true;
    return;
  }
  *a = (struct zkw_armed){
      .xid = req->xid, .on_ok = on_ok, .on_nonode = on_nonode, .remove = remove, .len = (uint32_t)len};
  memcpy(a->path, req->op.path.p, len);
  if (w->armed_tail)
    w->armed_tail->next = a;
  else
    w->armed_head = a;
  w->armed_tail = a;
}

void zkw_watches_reply(struct zkw_watches *w, int32_t xid, int32_t err) {
  struct zkw_armed *a = w->armed_head;
  if (!a || a->xid != xid) return;
  w->armed_head = a->next;
  if (!w->armed_head) w->armed_tail = NULL;
  if (a->remove) {
    if (err == 0) drop(w, a->path, a->len, a->on_ok);
  } else {
    add(w, a->path, a->len, err == 0 ? a->on_ok : err == ZKW_ZERR_NONODE ? a->on_nonode : 0);
  }
  free(a);
}

void zkw_watches_event(struct zkw_watches *w, const struct zkw_watcher_event *ev) {
  uint8_t kinds;
  switch (ev->type) {
  case 1: /* NodeCreated */
  case 3: /* NodeDataChanged */
    kinds = ZKW_WATCH_DATA | ZKW_WATCH_EXIST;
    break;
  case 2: /* NodeDeleted */
    kinds = ZKW_WATCH_DATA | ZKW_WATCH_EXIST | ZKW_WATCH_CHILD;
    break;
  case 4: /* NodeChildrenChanged */
    kinds = ZKW_WATCH_CHILD;
    break;
  default:
    return;
  }
  if (ev->path.len > 0) drop(w, (const char *)ev->path.p, (size_t)ev->path.len, kinds);
}

void zkw_watches_lost_replies(struct zkw_watches *w) {
  while (w->armed_head) {
    struct zkw_armed *a = w->armed_head;
    w->armed_head = a->next;
    free(a);
  }
  w->armed_tail = NULL;
}

/* ---- setWatches ---- */

static void put32(uint8_t *p, int32_t v) {
  zkw_store_be32(p, (uint32_t)v);
}

/* One frame from the pair numbered start on (pairs: each kind, then each
 * path with it, in table order). Returns the number of the first pair left
 * for the next frame, or `total` when this frame took the rest. */
static int64_t encode_frame(const struct zkw_watches *w, int64_t start, int64_t total, int32_t op, int kinds,
                            int64_t zxid, uint8_t *p, size_t *len) {
  size_t off = 4;
  put32(p + off, ZKW_XID_SET_WATCHES);
  put32(p + off + 4, op);
  zkw_store_be64(p + off + 8, (uint64_t)zxid);
  off += 16;
  int64_t n = 0, next = total;
  size_t bytes = 0;
  for (int k = 0; k < kinds; k++) {
    size_t count_at = off;
    int32_t count = 0;
    off += 4;
    for (uint32_t b = 0; w->bucket && b < w->nbuckets; b++)
      for (const struct zkw_watch *e = w->bucket[b]; e; e = e->next) {
        if (!(e->kinds & (1u << k))) continue;
        if (n++ < start || next != total) continue;
        put32(p + off, (int32_t)e->len);
        memcpy(p + off + 4, e->path, e->len);
        off += 4 + e->len;
        bytes += e->len;
        count++;
        if (bytes >= SET_WATCHES_MAX_BYTES) next = n;
      }
    put32(p + count_at, count);
  }
  put32(p, (int32_t)(off - 4));
  *len = off;
  return next;
}

int zkw_watches_encode(const struct zkw_watches *w, int64_t relative_zxid, struct zkw_buf *out) {
  if (!w->count) return 0;
  bool persistent = false;
  int64_t total = 0;
  size_t longest = 0;
  for (uint32_t b = 0; b < w->nbuckets; b++)
    for (const struct zkw_watch *e = w->bucket[b]; e; e = e->next) {
      for (int k = 0; k < ZKW_WATCH_KINDS; k++)
        total += (e->kinds >> k) & 1u;
      persistent |= (e->kinds & (ZKW_WATCH_PERSISTENT | ZKW_WATCH_RECURSIVE)) != 0;
      if (e->len > longest) longest = e->len;
    }
  int kinds = persistent ? 5 : 3;
  int32_t op = persistent ? ZKW_OP_SET_WATCHES2 : ZKW_OP_SET_WATCHES;
  /* A frame's bound: its header and counts, the paths under the limit and
   * the one that crosses it. */
  size_t frame_max = 20 + 4 * (size_t)kinds + SET_WATCHES_MAX_BYTES + 4 * (size_t)total + longest;
  int frames = 0;
  for (int64_t start = 0; start < total; frames++) {
    if (zkw_buf_reserve(out, frame_max)) return -ENOMEM;
    size_t len;
    start = encode_frame(w, start, total, op, kinds, relative_zxid, out->data + out->len, &len);
    out->len += len;
  }
  return frames;
}

int zkw_watches_load(struct zkw_watches *w, const uint8_t *frames, size_t len) {
  for (size_t off = 0; off + 4 <= len;) {
    size_t n = 4 + (size_t)zkw_load_be32(frames + off);
    struct zkw_request req;
    if (n < 12 || n > len - off || zkw_decode_request(frames + off + 4, n - 4, &req) != ZKW_OK ||
        (req.type != ZKW_OP_SET_WATCHES && req.type != ZKW_OP_SET_WATCHES2))
      return -1;
    add_set_watches(w, &req.op, req.type == ZKW_OP_SET_WATCHES2 ? 5 : 3);
    off += n;
  }
  return w->lost ? -1 : 0;
}

void zkw_watches_free(struct zkw_watches *w) {
  for (uint32_t b = 0; w->bucket && b < w->nbuckets; b++)
    for (struct zkw_watch *e = w->bucket[b], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  free(w->bucket);
  zkw_watches_lost_replies(w);
  *w = (struct zkw_watches){0};
}
