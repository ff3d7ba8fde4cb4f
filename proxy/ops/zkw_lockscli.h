/* zkw_lockscli.h: the `zkwarden locks` command (zkw_lockscli.c). */
#ifndef ZKW_LOCKSCLI_H
#define ZKW_LOCKSCLI_H

/* `zkwarden locks [--json] [--reclaim [--dry-run]]`: argv holds the
 * arguments after `locks`. Returns the exit status. */
int zkw_locks_cli(int argc, char **argv);

#endif
