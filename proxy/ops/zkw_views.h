/* zkw_views.h: the admin endpoint's views of the proxy's state
 * (zkw_views.c). Each render returns 0, or -ENOMEM when the buffer cannot
 * grow. */
#ifndef ZKW_VIEWS_H
#define ZKW_VIEWS_H

#include "zkw_buf.h"
#include "zkw_locks.h"
#include "zkw_server.h"

/* Fills the gauges that are computed from the live sessions. */
void zkw_views_refresh_gauges(struct zkw_server *srv);
/* The session list as JSON. The session password is never part of it. */
int zkw_views_sessions_json(struct zkw_server *srv, struct zkw_buf *b);
/* The status page; rep is the lock report, or NULL with why it is missing. */
int zkw_views_status_page(struct zkw_server *srv, struct zkw_buf *b, const struct zkw_locks_report *rep,
                          const char *locks_why);

#endif
