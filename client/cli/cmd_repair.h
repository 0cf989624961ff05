/* cmd_repair.h - what "kvpack repair" (cmd_repair.c) and its --watch agent (cmd_repair_watch.c)
 * share: one repair pass over a static node list, the agent's options and its stop flag. */
#ifndef KVPACK_CMD_REPAIR_H
#define KVPACK_CMD_REPAIR_H

#include "cli.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool     on;                /* --watch */
    uint64_t settle_s, every_s; /* --settle, --every */
} kvp_repair_watch_t;

/* Set by SIGTERM/SIGINT under --watch; a pass stops between two sessions when it is set. */
extern volatile sig_atomic_t kvp_repair_stop;

/* One pass over the nodes of o->node (a static list): list every node, repair each session,
 * print the summary. Returns the exit status (0: every node answered, every session at its
 * targets). pass/trigger: set by --watch (numbered from 1; start, membership, interval), 0/NULL
 * for a single run. */
int kvp_repair_pass(const kvp_cli_sess_opts_t *o, bool dry_run, uint32_t pass, const char *trigger);

/* o->replicas, or the n nodes there are when they are fewer (said on stderr): every session then
 * goes to all of them. Returns whether it was cut. */
bool kvp_repair_clamp(kvp_cli_sess_opts_t *o, uint32_t n);

/* The agent: runs passes until SIGTERM/SIGINT; returns 0 then, 1 when etcd cannot be read at
 * start. o->etcd (followed by a watch) or o->node (never changes). */
int kvp_repair_watch(kvp_cli_sess_opts_t *o, bool dry_run, const kvp_repair_watch_t *w);

#endif
