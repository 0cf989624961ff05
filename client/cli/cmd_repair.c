/* cmd_repair.c - "kvpack repair": bring every session back to its r copies after a node was lost
 * or added. One list of every node (records and delete tombstones, with their versions); a
 * session's targets are the first r nodes of its rank that answered. The newest version over all
 * nodes decides (last writer wins; a tombstone wins a tie): a tombstone deletes every copy; else a
 * target without the newest version gets it (fetched from a holder of it, pages CRC-checked, put
 * at that same version: an older copy there is replaced), and copies outside the targets are
 * dropped (no tombstone) only after every target passed target_check just before: not
 * restarted, on disk where a surplus copy was, and read back whole at that version or newer.
 * --watch (cmd_repair_watch.c) runs passes as an agent.
 * Flow: kvp_cmd_repair -> kvp_repair_pass | kvp_repair_watch -> kvp_repair_pass -> repair_plan ->
 * repair_session (copy_all, drop_surplus). Test hooks: KVP_REPAIR_STOP_AFTER=N stops the process
 * (SIGSTOP) after N sessions; KVP_REPAIR_PAUSE_FILE=PATH, before the first drop of surplus
 * copies, creates PATH and waits (up to 120 s) until it is removed. */
#include "cmd_repair.h"
#include "kvpack/alloc.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint32_t sessions, already_ok, repaired, failed, unverifiable;
    uint32_t copied, deleted;
    uint32_t deleted_tombstoned; /* copies deleted because a newer tombstone says so */
    uint32_t replaced_stale;     /* target copies of an older version replaced by the newest */
    uint32_t replaced_damaged;   /* target copies the node lost a page of, put again */
    uint64_t bytes;
} repair_sum_t;

/* One run: the node handle, r, which nodes still answer, and the tallies. */
typedef struct {
    kvp_cluster_h cl;
    uint32_t      n, r;
    uint64_t      listed; /* nodes that answered the list */
    uint64_t      alive;  /* listed, and no unreachable status since */
    bool          dry_run, json;
    kvp_json_t    j;      /* the "actions" array while json */
    repair_sum_t  sum;
    uint64_t      boot_ms[KVP_CLUSTER_MAX_NODES]; /* each listed node's start (wall ms less its
                                                   * uptime) as the pass began; 0: not known */
    uint64_t      boot_err_ms[KVP_CLUSTER_MAX_NODES]; /* how far off that can be: the STAT's
                                                       * round trip */
    uint32_t      pass;   /* --watch: the pass number (1, 2, ...); 0 for a single run */
    const char   *trigger; /* --watch: why this pass runs: start, membership, unsettled, interval,
                            * retry */
} repair_t;

volatile sig_atomic_t kvp_repair_stop; /* --watch: SIGTERM/SIGINT, checked between sessions */

/* One session's plan: node bitmasks, and the rank order. */
typedef struct {
    const kvp_session_info_t *e;
    uint64_t                  holders, targets, copy_to, delete_from;
    uint64_t                  damaged;    /* holders whose copy lost a page: not holders above */
    uint64_t                  on_disk;    /* holders whose current record was on disk (listed) */
    uint64_t                  fresh;      /* holders of the newest version */
    uint64_t                  tombs;      /* nodes holding a tombstone */
    uint64_t                  version;    /* the newest version over every node */
    const uint64_t           *versions;   /* each node's record or tombstone version */
    bool                      tombstoned; /* it is a tombstone: every copy goes */
    uint32_t                  order[KVP_CLUSTER_MAX_NODES];
    uint32_t                  src; /* the node a copy comes from: first holder by rank */
    const char               *error;
} repair_plan_t;

#define BIT(k)        (1ull << (k))
#define ALL_NODES(n)  ((1ull << ((n) - 1)) * 2 - 1) /* bits 0..n-1, n up to 64 */

static void repair_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack repair (--node LIST | --etcd URL[,URL] [--etcd-prefix P]) --replicas N\n"
            "                     [--dry-run] [--json] [--timeout-ms MS]\n"
            "                     [--watch [--settle S] [--every S]]\n"
            "Bring every session the nodes hold to exactly its target set: the first N nodes of\n"
            "its rendezvous rank that answer (where a put would place it now). Per session the\n"
            "newest version over all nodes wins (records and rm tombstones; a tombstone wins a\n"
            "tie). A newest tombstone deletes every copy, targets included, and copies nothing.\n"
            "Else a target without the newest version (absent, or older: replaced) gets a copy\n"
            "(fetched from a holder of it, every page CRC-checked, then put to that node at the\n"
            "same version: pages and record, fp16 tail included, byte-identical); once every\n"
            "target holds it, copies on other nodes (stand-ins from while a node was down) are\n"
            "deleted. The last copy is never deleted, and nothing is deleted before every\n"
            "target, just before, read back whole (CRC-checked) at that version or newer and\n"
            "holds it on disk (spilled there first; a target without --data-dir keeps a\n"
            "surplus copy that is on disk: exit 1). A damaged copy (its node lost a\n"
            "page of it: it fails its CRC there, so that node never serves it) counts as no\n"
            "copy: put again on a target, deleted elsewhere.\n"
            "A node that does not answer is named and skipped. Exit 0 when every node answered\n"
            "and every session is at its target set, 1 otherwise, 2 for a usage error.\n"
            "  --node LIST     the static peer list, HOST:PORT,HOST:PORT,... (as put used it)\n"
            "  --etcd URL[,URL] in place of --node: the nodes registered in etcd (kvpackd --etcd)\n"
            "  --etcd-prefix P their key prefix (default /kvpack/nodes/)\n"
            "  --replicas N    r, required: a session's copies beyond its first N nodes are deleted\n"
            KVP_CLI_TIMEOUT_HELP
            "  --dry-run       print the plan (copies and deletes per session), change nothing\n"
            "  --json          one JSON object: sessions, already_ok, repaired, failed, copied,\n"
            "                  deleted_surplus, deleted_tombstoned, replaced_stale,\n"
            "                  replaced_damaged, bytes_moved (planned, with --dry-run),\n"
            "                  unverifiable, unreachable, and each session's actions\n"
            "  --watch         keep running (until SIGTERM/SIGINT, exit 0): a pass at start, a\n"
            "                  pass once the members have not changed for --settle seconds after\n"
            "                  a change (--etcd follows etcd; a --node list never changes), and\n"
            "                  one every --every seconds; after a failed pass another --settle\n"
            "                  later, doubling up to --every; each pass prints its summary\n"
            "                  (--json: one object per line, with pass and trigger: start,\n"
            "                  membership, unsettled, interval, retry). With fewer nodes than N\n"
            "                  registered a pass (also a one-shot --etcd one, then exit 1)\n"
            "                  repairs to as many copies as there are nodes\n"
            "  --settle S      seconds the members must be stable before a pass (default 30: a\n"
            "                  node that restarts within that is not copied elsewhere); members\n"
            "                  that keep changing get a pass 3 x S (or --every if shorter)\n"
            "                  after the first change\n"
            "  --every S       seconds between passes without a change (default 600)\n");
}

static void json_nodes(repair_t *rp, const char *key, uint64_t mask)
{
    kvp_json_arr(&rp->j, key);
    for (uint32_t k = 0; k < rp->n; k++) {
        if (mask & BIT(k)) {
            kvp_json_str(&rp->j, NULL, kvp_cluster_peer(rp->cl, k));
        }
    }
    kvp_json_close(&rp->j);
}

/* A failed call on node k: print it, and forget the node for the rest of the run when it is
 * unreachable (its later work fails at once instead of waiting for a deadline each time). */
static kvp_status_t node_fail(repair_t *rp, repair_plan_t *pl, uint32_t k, const char *what,
                              kvp_status_t s)
{
    fprintf(stderr, "kvpack repair: %s: session %s: %s: %s (%s)\n", kvp_cluster_peer(rp->cl, k),
            pl->e->sid, what, kvp_status_str(s), kvp_status_name(s));
    if (kvp_cluster_status_unreachable(s)) {
        rp->alive &= ~BIT(k);
    }
    pl->error = pl->error ? pl->error : what;
    return s;
}

/* The newest version over the nodes' records (holders) and tombstones (tombs); a tombstone at
 * least as new as every record makes the session a deleted one. fresh: holders of the newest. */
static void repair_newest(repair_t *rp, repair_plan_t *pl, const uint64_t *versions)
{
    uint64_t rec = 0, tomb = 0;

    for (uint32_t k = 0; k < rp->n; k++) {
        if (pl->holders & BIT(k)) {
            rec = versions[k] > rec ? versions[k] : rec;
        } else if (pl->tombs & BIT(k)) {
            tomb = versions[k] > tomb ? versions[k] : tomb;
        }
    }
    pl->tombstoned = pl->tombs != 0 && tomb >= rec;
    pl->version    = pl->tombstoned ? tomb : rec;
    for (uint32_t k = 0; k < rp->n; k++) {
        pl->fresh |= (pl->holders & BIT(k)) && versions[k] == rec ? BIT(k) : 0;
    }
}

/* Targets: the first r nodes of the rank that answered the list; the rest follows. A damaged copy
 * (its node lost a page of it: never served there) counts as no copy: it is put again where it
 * is a target, deleted where it is not. */
static kvp_status_t repair_plan(repair_t *rp, const kvp_session_info_t *e, uint64_t holders,
                                uint64_t damaged, uint64_t on_disk, uint64_t tombs,
                                const uint64_t *versions, repair_plan_t *pl)
{
    uint32_t     got = 0;
    kvp_status_t s;

    memset(pl, 0, sizeof(*pl));
    pl->e        = e;
    pl->versions = versions;
    pl->damaged = holders & damaged;
    pl->holders = holders & ~damaged;
    pl->on_disk = on_disk & pl->holders;
    pl->tombs   = tombs;
    repair_newest(rp, pl, versions);
    s           = kvp_cluster_rank(rp->cl, e->ns, e->sid, pl->order);
    for (uint32_t k = 0; s == KVP_OK && k < rp->n && got < rp->r; k++) {
        if (rp->listed & BIT(pl->order[k])) {
            pl->targets |= BIT(pl->order[k]);
            got++;
        }
    }
    for (uint32_t k = 0; s == KVP_OK && k < rp->r; k++) {
        if (!(rp->listed & BIT(pl->order[k]))) { /* its copy there could not be checked */
            rp->sum.unverifiable++;
            break;
        }
    }
    for (uint32_t k = rp->n; s == KVP_OK && k-- > 0;) {
        pl->src = (pl->fresh & BIT(pl->order[k])) ? pl->order[k] : pl->src; /* first by rank */
    }
    if (pl->tombstoned) { /* deleted: every copy goes, nothing is copied */
        pl->delete_from = holders;
        return s;
    }
    pl->copy_to     = pl->targets & ~pl->fresh; /* absent, older or damaged: replaced */
    pl->delete_from = holders & ~pl->targets;
    return s;
}

/* Fetch the session from the first holder of the newest version in rank order that serves it
 * (CRC-checked; its version comes with it), at that version or newer: a holder that serves an
 * older one (it restarted and lost a put held in DRAM) is passed over, else that older copy
 * would stand in for the newest at the drops. */
static kvp_status_t fetch(repair_t *rp, repair_plan_t *pl, kvp_session_pages_t **sp_p)
{
    kvp_status_t s = KVP_ERR_NOT_FOUND;

    for (uint32_t i = 0; i < rp->n; i++) {
        uint32_t     k = pl->order[i];
        kvp_client_h c;

        if (!(pl->fresh & rp->alive & BIT(k))) {
            continue;
        }
        s = kvp_cluster_client(rp->cl, k, &c);
        s = s == KVP_OK ? kvp_client_get_session(c, pl->e->ns, pl->e->sid, sp_p) : s;
        if (s == KVP_OK && (*sp_p)->version >= pl->version) {
            pl->src = k;
            return KVP_OK;
        }
        if (s == KVP_OK) {
            kvp_session_pages_free(*sp_p);
            *sp_p = NULL;
            s     = KVP_ERR_STALE;
            node_fail(rp, pl, k, "get (to copy from): it served an older version than it listed", s);
            continue;
        }
        node_fail(rp, pl, k, "get (to copy from)", s);
    }
    pl->error = pl->fresh == 0 ? "every copy is damaged" : "no holder could serve it";
    return s;
}

/* The version a drop of node k's copy must name: a damaged copy may be newer than every healthy
 * one (a re-put that reached only that node, which then lost a page of it): its node still
 * refuses anything older than its record, so it is dropped at its own version. */
static uint64_t drop_version(const repair_plan_t *pl, uint32_t k)
{
    return (pl->damaged & BIT(k)) && pl->versions[k] > pl->version ? pl->versions[k] : pl->version;
}

/* Put the fetched session to every node of copy_to; KVP_OK when all took it. A damaged copy
 * newer than the one put goes first (drop_version), else the node would refuse the put as
 * older than what it holds, and no repair would ever heal it. */
static kvp_status_t copy_all(repair_t *rp, repair_plan_t *pl)
{
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         s  = fetch(rp, pl, &sp);
    kvp_status_t         first = s;
    uint64_t             bytes = 0;

    for (uint32_t i = 0; s == KVP_OK && i < sp->n_pages; i++) {
        bytes += sp->page_lens[i];
    }
    bytes += s == KVP_OK ? sp->desc.tail_len : 0;
    for (uint32_t i = 0; sp != NULL && i < rp->n; i++) { /* a failed target: on to the next */
        uint32_t k = pl->order[i];

        if (!(pl->copy_to & BIT(k))) {
            continue;
        }
        if ((rp->alive & BIT(k)) && drop_version(pl, k) > sp->version) {
            kvp_client_h c;
            kvp_status_t ds = kvp_cluster_client(rp->cl, k, &c);

            ds = ds == KVP_OK ? kvp_client_drop_session(c, pl->e->ns, pl->e->sid,
                                                        drop_version(pl, k))
                              : ds;
            if (ds != KVP_OK && ds != KVP_ERR_NOT_FOUND) {
                first = first == KVP_OK ? node_fail(rp, pl, k, "drop of a newer damaged copy", ds)
                                        : first;
                continue;
            }
        }
        s = (rp->alive & BIT(k)) ? kvp_cluster_put_node(rp->cl, k, pl->e->ns, pl->e->sid,
                                                                (const void *const *)sp->pages,
                                                                sp->page_lens, sp->n_pages,
                                                                &sp->desc, sp->version, NULL)
                                 : KVP_ERR_PEER_UNREACHABLE;
        if (s == KVP_OK) {
            rp->sum.copied++;
            rp->sum.replaced_stale += (pl->holders & BIT(k)) != 0;
            rp->sum.replaced_damaged += (pl->damaged & BIT(k)) != 0;
            rp->sum.bytes += bytes;
        } else {
            first = first == KVP_OK ? node_fail(rp, pl, k, "copy", s) : first;
        }
    }
    kvp_session_pages_free(sp);
    return first;
}

/* Delete the copies on pl->delete_from. A deleted session (newest entry a tombstone): delete at
 * the tombstone's version, which leaves that tombstone on the node; else drop surplus copies
 * (no tombstone; refused where the copy became newer meanwhile). NOT_FOUND: gone meanwhile. */
static kvp_status_t delete_copies(repair_t *rp, repair_plan_t *pl)
{
    kvp_status_t s = KVP_OK;

    for (uint32_t k = 0; k < rp->n; k++) {
        kvp_client_h c;
        kvp_status_t ds;

        if (!(pl->delete_from & BIT(k))) {
            continue;
        }
        ds = (rp->alive & BIT(k)) ? kvp_cluster_client(rp->cl, k, &c) : KVP_ERR_PEER_UNREACHABLE;
        if (ds == KVP_OK) { /* a damaged copy newer than the tombstone (a put after the rm that
                             * lost a page) goes at its own version: at the tombstone's the
                             * node refused it, ERR_STALE, on every pass */
            ds = pl->tombstoned
                     ? kvp_client_delete_session_version(c, pl->e->ns, pl->e->sid,
                                                         drop_version(pl, k))
                     : kvp_client_drop_session(c, pl->e->ns, pl->e->sid, drop_version(pl, k));
        }
        if (ds == KVP_OK || ds == KVP_ERR_NOT_FOUND) {
            *(pl->tombstoned ? &rp->sum.deleted_tombstoned : &rp->sum.deleted) += ds == KVP_OK;
        } else {
            s = s == KVP_OK ? node_fail(rp, pl, k, pl->tombstoned ? "delete (tombstoned)"
                                                                  : "delete surplus", ds)
                            : s;
        }
    }
    return s;
}

/* KVP_REPAIR_PAUSE_FILE (tests: a node restarted between the list and a drop), once a process */
static void pause_hook(void)
{
    static int  done;
    const char *path = getenv("KVP_REPAIR_PAUSE_FILE");
    FILE       *f;

    if (done || path == NULL || (f = fopen(path, "w")) == NULL) {
        return;
    }
    done = 1;
    fclose(f);
    for (int i = 0; i < 6000 && access(path, F_OK) == 0; i++) {
        usleep(20000);
    }
}

/* STAT node k: when it started into *boot_ms (wall-clock ms less its uptime), give or take
 * *err_ms (the STAT's round trip, and a millisecond of each clock's reading). The STAT's status */
static kvp_status_t node_boot_ms(repair_t *rp, uint32_t k, uint64_t *boot_ms, uint64_t *err_ms)
{
    kvp_node_stat_t st;
    uint64_t        t0 = kvp_time_ns();
    kvp_status_t    s  = kvp_cluster_stat(rp->cl, k, &st);

    if (s == KVP_OK) {
        *err_ms  = (kvp_time_ns() - t0) / 1000000u + 2;
        *boot_ms = kvp_version_now() / 1000000u - st.uptime_ms;
    }
    return s;
}

/* Whether target k's copy can stand in for the surplus copies about to be deleted; KVP_OK or
 * the failure (printed). It must answer and not have restarted since the pass began (a copy only
 * in its DRAM would be gone); have its copy on its disk (spilled now when only in its DRAM: a put
 * under --durability spill, this pass's copy too, is acknowledged from DRAM; a surplus node that
 * lists its copy in DRAM only may still hold an older record on disk, so every target is spilled,
 * not only when a surplus copy lists on disk); a node without --data-dir cannot, which keeps the
 * surplus only where a copy of it is on disk; and serve the planned version or a newer one,
 * whole, every page CRC-checked (a bad page not found yet, or a copy evicted or replaced by an
 * older one since the list, keeps the surplus). */
static kvp_status_t target_check(repair_t *rp, repair_plan_t *pl, uint32_t k)
{
    const char          *what = "target check before deleting surplus";
    const bool           disk = (pl->on_disk & pl->delete_from) != 0;
    kvp_session_info_t   info;
    kvp_session_pages_t *sp = NULL;
    kvp_client_h         c;
    uint64_t             boot = 0, err = 0;
    kvp_status_t         s = (rp->alive & BIT(k)) ? node_boot_ms(rp, k, &boot, &err)
                                                  : KVP_ERR_PEER_UNREACHABLE;

    if (s == KVP_OK && (rp->boot_ms[k] == 0 || boot > rp->boot_ms[k] + rp->boot_err_ms[k] + err)) {
        return node_fail(rp, pl, k, "target check before deleting surplus: it restarted since "
                         "this pass listed it (or its start is not known), so its copy is not "
                         "known to be there; the next pass lists it again", KVP_ERR_NODE_SUSPECT);
    }
    s = s == KVP_OK ? kvp_cluster_client(rp->cl, k, &c) : s;
    s = s == KVP_OK ? kvp_client_session_info(c, pl->e->ns, pl->e->sid, &info) : s;
    if (s == KVP_OK && (info.deleted || info.damaged || info.version < pl->version)) {
        return node_fail(rp, pl, k, info.deleted ? "target check: its copy was deleted meanwhile"
                                    : info.damaged ? "target check: its copy is damaged"
                                                   : "target check: it holds an older version now",
                         info.damaged ? KVP_ERR_CORRUPT : KVP_ERR_STALE);
    }
    if (s == KVP_OK && !(info.where & KVP_SESSION_ON_DISK)) {
        s = kvp_client_spill(c, pl->e->ns, pl->e->sid);
        if (s == KVP_ERR_UNSUPPORTED && disk) {
            return node_fail(rp, pl, k, "target check: it holds sessions in DRAM only (no "
                             "--data-dir) while a surplus copy is on disk: the surplus stays", s);
        }
        s    = s == KVP_ERR_UNSUPPORTED ? KVP_OK : s; /* no surplus lists its copy on disk */
        what = "target check: spill of its copy";
    }
    if (s == KVP_OK) {
        what = "target check: read back of its copy";
        s    = kvp_client_get_session(c, pl->e->ns, pl->e->sid, &sp);
        s    = s == KVP_OK && sp->version < pl->version ? KVP_ERR_STALE : s;
        kvp_session_pages_free(sp);
    }
    return s == KVP_OK ? s : node_fail(rp, pl, k, what, s);
}

/* Delete the copies outside the target set, once every target passes target_check. A delete that
 * fails leaves a copy. */
static kvp_status_t drop_surplus(repair_t *rp, repair_plan_t *pl)
{
    kvp_status_t s = KVP_OK;

    pause_hook();
    for (uint32_t k = 0; k < rp->n && s == KVP_OK; k++) {
        s = (pl->targets & BIT(k)) ? target_check(rp, pl, k) : KVP_OK;
    }
    if (s != KVP_OK || pl->targets == 0) { /* never the last copy */
        return s != KVP_OK ? s : KVP_ERR_INVALID;
    }
    return delete_copies(rp, pl);
}

/* Carry out (or, dry run, only print) one session's plan; tallies and reports it. */
static void repair_session(repair_t *rp, repair_plan_t *pl)
{
    kvp_status_t s = KVP_OK;
    char         a[1024], b[1024], c[1024], d[1024], e[1024], nsh[KVP_CLI_NS_HEX];
    char         idt[KVP_CLI_ID_TEXT];
    bool         work = (pl->copy_to | pl->delete_from) != 0;

    if (!work) {
        rp->sum.already_ok++;
        return;
    }
    if (!rp->dry_run && pl->tombstoned) {
        s = delete_copies(rp, pl);
    } else if (!rp->dry_run) {
        s = pl->copy_to ? copy_all(rp, pl) : KVP_OK;
        s = s == KVP_OK && pl->delete_from ? drop_surplus(rp, pl) : s;
    }
    rp->sum.failed += s != KVP_OK;
    rp->sum.repaired += s == KVP_OK && !rp->dry_run;
    if (rp->dry_run) { /* bytes: the session's pages and tail as the holder listed them */
        rp->sum.copied += (uint32_t)__builtin_popcountll(pl->copy_to);
        rp->sum.replaced_stale += (uint32_t)__builtin_popcountll(pl->copy_to & pl->holders);
        rp->sum.replaced_damaged += (uint32_t)__builtin_popcountll(pl->copy_to & pl->damaged);
        *(pl->tombstoned ? &rp->sum.deleted_tombstoned : &rp->sum.deleted) +=
            (uint32_t)__builtin_popcountll(pl->delete_from);
        rp->sum.bytes += pl->e->bytes * (uint64_t)__builtin_popcountll(pl->copy_to);
    }
    if (rp->json) {
        kvp_json_obj(&rp->j, NULL);
        kvp_json_str(&rp->j, "ns", kvp_cli_ns_hex(pl->e->ns, nsh));
        kvp_json_str(&rp->j, "session", pl->e->sid);
        json_nodes(rp, "holders", pl->holders);
        json_nodes(rp, "targets", pl->targets);
        json_nodes(rp, "copy_to", pl->copy_to);
        kvp_json_str(&rp->j, "from", pl->copy_to ? kvp_cluster_peer(rp->cl, pl->src) : "");
        json_nodes(rp, "delete_from", pl->delete_from);
        kvp_json_int(&rp->j, "version", (int64_t)pl->version);
        kvp_json_bool(&rp->j, "tombstoned", pl->tombstoned);
        json_nodes(rp, "replace_stale", pl->copy_to & pl->holders);
        json_nodes(rp, "damaged", pl->damaged);
        kvp_json_str(&rp->j, "status", rp->dry_run ? "planned" : s == KVP_OK ? "ok" : "failed");
        if (s != KVP_OK) {
            kvp_json_str(&rp->j, "error", pl->error ? pl->error : kvp_status_name(s));
        }
        kvp_json_close(&rp->j);
        return;
    }
    if (pl->tombstoned) {
        printf("%s %-24s %s deleted (a tombstone is the newest entry): delete on %s%s\n",
               kvp_cli_ns_hex(pl->e->ns, nsh), kvp_cli_id_text(pl->e->sid, idt),
               rp->dry_run ? "plan:" : s == KVP_OK ? "repaired:" : "FAILED:",
               kvp_cli_nodes_str(rp->cl, pl->delete_from, c, sizeof(c)),
               s != KVP_OK && pl->error ? " (see above)" : "");
        return;
    }
    printf("%s %-24s %s%s%s%s%s%s%s%s%s%s%s%s%s%s\n", kvp_cli_ns_hex(pl->e->ns, nsh), kvp_cli_id_text(pl->e->sid, idt),
           rp->dry_run ? "plan:" : s == KVP_OK ? "repaired:" : "FAILED:",
           pl->copy_to ? " copy to " : "", pl->copy_to ? kvp_cli_nodes_str(rp->cl, pl->copy_to, a, sizeof(a)) : "",
           pl->copy_to ? " from " : "", pl->copy_to ? kvp_cli_nodes_str(rp->cl, BIT(pl->src), b, sizeof(b)) : "",
           pl->copy_to & pl->holders ? " (replacing an older version on " : "",
           pl->copy_to & pl->holders ? kvp_cli_nodes_str(rp->cl, pl->copy_to & pl->holders, d, sizeof(d)) : "",
           pl->copy_to & pl->holders ? ")" : "",
           pl->copy_to & pl->damaged ? " (replacing a damaged copy on " : "",
           pl->copy_to & pl->damaged ? kvp_cli_nodes_str(rp->cl, pl->copy_to & pl->damaged, e, sizeof(e)) : "",
           pl->copy_to & pl->damaged ? ")" : "",
           pl->delete_from ? (pl->copy_to ? "; delete surplus on " : " delete surplus on ") : "",
           pl->delete_from ? kvp_cli_nodes_str(rp->cl, pl->delete_from, c, sizeof(c)) : "",
           s != KVP_OK && pl->error ? " (see above)" : "");
}

static void repair_summary(repair_t *rp, const char *node)
{
    char           un[1024], tg[64];
    const uint64_t down = ALL_NODES(rp->n) & ~rp->alive;
    uint32_t       live;

    if (rp->json) {
        kvp_json_close(&rp->j); /* actions */
        kvp_json_str(&rp->j, "node", node);
        if (rp->pass != 0) {
            kvp_json_int(&rp->j, "pass", rp->pass);
            kvp_json_str(&rp->j, "trigger", rp->trigger);
        }
        kvp_json_int(&rp->j, "replicas", rp->r);
        kvp_json_bool(&rp->j, "dry_run", rp->dry_run);
        kvp_json_int(&rp->j, "sessions", rp->sum.sessions);
        kvp_json_int(&rp->j, "already_ok", rp->sum.already_ok);
        kvp_json_int(&rp->j, "repaired", rp->sum.repaired);
        kvp_json_int(&rp->j, "failed", rp->sum.failed);
        kvp_json_int(&rp->j, "unverifiable", rp->sum.unverifiable);
        kvp_json_int(&rp->j, "copied", rp->sum.copied);
        kvp_json_int(&rp->j, "deleted_surplus", rp->sum.deleted);
        kvp_json_int(&rp->j, "deleted_tombstoned", rp->sum.deleted_tombstoned);
        kvp_json_int(&rp->j, "replaced_stale", rp->sum.replaced_stale);
        kvp_json_int(&rp->j, "replaced_damaged", rp->sum.replaced_damaged);
        kvp_json_int(&rp->j, "bytes_moved", (int64_t)rp->sum.bytes);
        json_nodes(rp, "unreachable", down);
        kvp_json_end(&rp->j);
        return;
    }
    if (rp->pass != 0) {
        printf("pass %u (%s): ", rp->pass, rp->trigger);
    }
    live = (uint32_t)__builtin_popcountll(rp->alive);
    if (live < rp->r) { /* the targets are the first r that answered: fewer when fewer did */
        snprintf(tg, sizeof(tg), "targets (N = %u, %u node%s live)", rp->r, live,
                 live == 1 ? "" : "s");
    } else {
        snprintf(tg, sizeof(tg), "%u target node%s", rp->r, rp->r == 1 ? "" : "s");
    }
    printf("%s%u session%s: %u already at their %s, %u %s, %u failed; %u %s, %u surplus %s, "
           "%llu bytes moved\n", rp->dry_run ? "dry run: " : "", rp->sum.sessions,
           rp->sum.sessions == 1 ? "" : "s", rp->sum.already_ok, tg,
           rp->dry_run ? rp->sum.sessions - rp->sum.already_ok : rp->sum.repaired,
           rp->dry_run ? "to repair" : "repaired", rp->sum.failed, rp->sum.copied,
           rp->dry_run ? (rp->sum.copied == 1 ? "copy planned" : "copies planned")
                       : (rp->sum.copied == 1 ? "copy made" : "copies made"),
           rp->sum.deleted,
           rp->dry_run ? (rp->sum.deleted == 1 ? "delete planned" : "deletes planned")
                       : (rp->sum.deleted == 1 ? "copy deleted" : "copies deleted"),
           (unsigned long long)rp->sum.bytes);
    if (down != 0) {
        printf("unreachable: %s (what it holds was not checked; %u sessions have it among "
               "their first %u nodes)\n",
               kvp_cli_nodes_str(rp->cl, down, un, sizeof(un)), rp->sum.unverifiable, rp->r);
    }
}

/* Parse the options; 0 to go on, else the exit status. */
static int repair_args(int argc, char **argv, kvp_cli_sess_opts_t *o, bool *dry_run,
                       kvp_repair_watch_t *w)
{
    const char *timing = NULL; /* --settle or --every, as given */

    w->settle_s = 30;
    w->every_s  = 600;
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_flag(argv, i, "--dry-run")) {
            *dry_run = true;
        } else if (kvp_opt_flag(argv, i, "--watch")) {
            w->on = true;
        } else if (kvp_opt_u64(argc, argv, &i, "--settle", &w->settle_s) ||
                   kvp_opt_u64(argc, argv, &i, "--every", &w->every_s)) {
            timing = argv[i - 1];
        } else if (!kvp_cli_sess_opt(argc, argv, &i, KVP_CLI_TAKES_REPLICAS, o)) {
            return kvp_opt_unknown("repair", argv[i]);
        }
    }
    if (o->replicas == 0) {
        return kvp_cli_usage_error("repair", "--replicas N is required (copies beyond a "
                                             "session's first N nodes are deleted)");
    }
    if (!w->on && timing != NULL) { /* it was taken and ignored */
        return kvp_cli_usage_error("repair", "%s goes with --watch only", timing);
    }
    if (w->on && (!kvp_cli_range("repair", "--every", w->every_s, 1, 31536000) ||
                  !kvp_cli_range("repair", "--settle", w->settle_s, 0, 31536000))) {
        return 2; /* seconds, a year at most */
    }
    return kvp_cli_sess_check("repair", o); /* --watch reads etcd itself, not once */
}

/* cmd_repair.h */
int kvp_repair_pass(const kvp_cli_sess_opts_t *o, bool dry_run, uint32_t pass,
                    const char *trigger)
{
    kvp_cluster_report_t rep;
    kvp_cluster_list_t  *l = NULL;
    repair_t             rp;
    const char          *stop_env = getenv("KVP_REPAIR_STOP_AFTER");
    uint32_t             stop_after = stop_env ? (uint32_t)strtoul(stop_env, NULL, 10) : 0;
    kvp_status_t         s;
    int                  rc;

    memset(&rp, 0, sizeof(rp));
    rp.dry_run = dry_run;
    rp.pass    = pass;
    rp.trigger = trigger;
    if ((rc = kvp_cli_open("repair", o, NULL, &rp.cl)) != 0) {
        return rc;
    }
    rp.n    = kvp_cluster_size(rp.cl);
    rp.r    = kvp_cluster_replicas(rp.cl);
    rp.json = o->json;
    /* when each node started, before the list: a node that restarts after this, also while the
     * other nodes are listed, is seen before any copy elsewhere is dropped (taken after the list,
     * the new process was the baseline, and its lost DRAM copy went unnoticed) */
    for (uint32_t k = 0; k < rp.n; k++) {
        (void)node_boot_ms(&rp, k, &rp.boot_ms[k], &rp.boot_err_ms[k]); /* failed: 0 */
    }
    s = kvp_cluster_list_sessions_ex(rp.cl, 0, 0, KVP_LIST_DELETED, &l, &rep);
    kvp_cli_report_fail("repair", rp.cl, &rep, "list", "list"); /* the nodes that did not answer */
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack repair: no node answered; nothing done\n");
        if (rp.json) { /* the pass's object all the same (every node unreachable): --watch
                        * readers saw a gap in the pass numbers */
            kvp_json_begin(&rp.j, stdout);
            kvp_json_arr(&rp.j, "actions");
            repair_summary(&rp, o->node);
            fflush(stdout);
        }
        kvp_cluster_destroy(rp.cl);
        return 1;
    }
    for (uint32_t i = 0; i < rep.n_tried; i++) {
        rp.listed |= rep.tried[i].status == KVP_OK ? BIT(rep.tried[i].node) : 0;
    }
    rp.alive       = rp.listed;
    for (uint32_t i = 0; i < l->n; i++) { /* sessions some node holds (not only tombstones) */
        rp.sum.sessions += l->holders[i] != 0;
    }
    if (rp.json) {
        kvp_json_begin(&rp.j, stdout);
        kvp_json_arr(&rp.j, "actions");
    }
    for (uint32_t i = 0, done = 0; i < l->n && !kvp_repair_stop; i++) {
        repair_plan_t pl;

        if (l->holders[i] == 0) {
            continue; /* a tombstone with no copy anywhere: nothing to do */
        }
        if (repair_plan(&rp, &l->sessions[i], l->holders[i], l->damaged[i], l->on_disk[i],
                        l->deleted[i], &l->versions[(size_t)i * l->stride], &pl) != KVP_OK) {
            rp.sum.failed++;
            continue;
        }
        repair_session(&rp, &pl);
        kvp_progress("repair sessions", ++done, rp.sum.sessions);
        if (stop_after != 0 && done == stop_after) {
            fflush(stdout);
            raise(SIGSTOP); /* test hook: the test kills a node, then SIGCONT */
        }
    }
    kvp_progress_done();
    repair_summary(&rp, o->node);
    fflush(stdout);
    rc = rp.sum.failed != 0 || rp.alive != ALL_NODES(rp.n) ||
                 (rp.dry_run && rp.sum.already_ok != rp.sum.sessions) /* work to do */
             ? 1
             : 0;
    kvp_cluster_list_free(l);
    kvp_cluster_destroy(rp.cl);
    return rc;
}

bool kvp_repair_clamp(kvp_cli_sess_opts_t *o, uint32_t n)
{
    if (o->replicas <= n || n == 0) {
        return false;
    }
    fprintf(stderr, "kvpack repair: only %u node%s, --replicas %llu: repairing to %u cop%s\n", n,
            n == 1 ? "" : "s", (unsigned long long)o->replicas, n, n == 1 ? "y" : "ies");
    o->replicas = n;
    return true;
}

int kvp_cmd_repair(int argc, char **argv)
{
    kvp_cli_sess_opts_t o = {0};
    kvp_repair_watch_t      w = {0};
    bool                dry_run = false, cut;
    int                 rc;

    if (kvp_opt_help(argc, argv)) {
        repair_usage(stdout);
        return 0;
    }
    rc = repair_args(argc, argv, &o, &dry_run, &w);
    if (rc != 0) {
        return rc;
    }
    if (w.on) {
        return kvp_repair_watch(&o, dry_run, &w);
    }
    if ((rc = kvp_cli_sess_peers("repair", &o)) != 0) { /* --etcd: the nodes from etcd, once */
        return rc;
    }
    /* etcd lists fewer nodes than r (some left): a runtime state, not a usage error; repair to
     * what there is, as the agent does, and exit 1, since no session can have its r copies */
    cut = o.etcd != NULL && kvp_repair_clamp(&o, kvp_cli_list_len(o.node));
    rc  = kvp_repair_pass(&o, dry_run, 0, NULL);
    return cut && rc == 0 ? 1 : rc;
}
