/* cmd_repair_watch.c - "kvpack repair --watch": the repair agent. A pass at start, one once the
 * members (etcd, followed by a watch; a --node list never changes) have been stable for --settle
 * seconds after a change (or 3 x --settle after the first of changes that never settle), one
 * every --every seconds, and after a pass that failed another --settle later, doubling up to
 * --every. Each pass is kvp_repair_pass over a static snapshot of the members, so node indices
 * cannot move under it. SIGTERM/SIGINT stop it between two sessions. Not on the data path: it
 * moves copies the way one `kvpack repair` does. */
#include "cmd_repair.h"

#include "kvpack/alloc.h"
#include "kvpack/etcd.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void repair_on_signal(int sig)
{
    (void)sig;
    kvp_repair_stop = 1;
}

/* Until a node registers under prefix (or SIGTERM/SIGINT): a watch of its own, polled quietly
 * (a cluster create every 500 ms logged two errors each time). */
static void wait_for_member(const char *etcd, const char *prefix)
{
    kvp_etcd_watch_h   w = NULL;
    kvp_etcd_member_t *m;
    uint32_t           n = 0;
    uint64_t           gen;

    while (!kvp_repair_stop && w == NULL &&
           kvp_etcd_watch_start(etcd, prefix ? prefix : KVP_ETCD_DEFAULT_PREFIX, &w) != KVP_OK) {
        nanosleep(&(struct timespec){1, 0}, NULL); /* etcd down: said by the watch */
    }
    while (!kvp_repair_stop && n == 0 && w != NULL) {
        if (kvp_etcd_watch_members(w, &m, &n, &gen) == KVP_OK) {
            kvp_free(m);
        }
        if (n == 0) {
            nanosleep(&(struct timespec){0, 200000000}, NULL);
        }
    }
    kvp_etcd_watch_stop(w);
}

/* cmd_repair.h: membership from an etcd handle (params.etcd, kept current by its watch) or the
 * static list. */
int kvp_repair_watch(kvp_cli_sess_opts_t *o, bool dry_run, const kvp_repair_watch_t *w)
{
    static char          peers[KVP_CLUSTER_MAX_NODES * KVP_ETCD_ADDR_MAX];
    kvp_cluster_params_t p;
    kvp_cluster_h        cl = NULL;
    struct sigaction     sa;
    const uint64_t       s_ns = 1000000000ull;
    uint64_t             gen = 0, seen = 0, changed = kvp_time_ns(), first = changed, last = 0;
    uint64_t             settle_ns = w->settle_s * s_ns, every_ns = w->every_s * s_ns, retry = 0;
    /* the longest a pass waits for the members to settle: 3 x --settle, or --every if shorter,
     * and never less than --settle */
    uint64_t             flap_ns = 3 * settle_ns < every_ns ? 3 * settle_ns : every_ns;
    uint64_t             retry_base = settle_ns > s_ns ? settle_ns : s_ns;
    uint32_t             pass = 0, n_static = 0;
    bool                 pending = true, empty_said = false, failed;
    kvp_status_t         s;

    flap_ns = flap_ns > settle_ns ? flap_ns : settle_ns;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = repair_on_signal; /* no SA_RESTART: the sleep below ends at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (o->etcd != NULL) {
        memset(&p, 0, sizeof(p));
        p.field_mask  = KVP_CLUSTER_PARAM_ETCD | KVP_CLUSTER_PARAM_REPLICAS;
        p.etcd        = o->etcd;
        p.etcd_prefix = o->etcd_prefix;
        p.replicas    = 1; /* only its members are used */
        s = kvp_cluster_create(&p, &cl);
        if (s != KVP_OK && s != KVP_ERR_NOT_FOUND) {
            fprintf(stderr, "kvpack repair: etcd %s: cannot read the members: %s (%s)\n", o->etcd,
                    kvp_status_str(s), kvp_status_name(s));
            return 1;
        }
        if (s == KVP_ERR_NOT_FOUND) {
            fprintf(stderr, "kvpack repair: etcd %s: no kvpack node registered yet; waiting\n",
                    o->etcd);
            empty_said = true;
            wait_for_member(o->etcd, o->etcd_prefix);
            while (cl == NULL && !kvp_repair_stop && kvp_cluster_create(&p, &cl) != KVP_OK) {
                wait_for_member(o->etcd, o->etcd_prefix); /* it left again before the read */
            }
        }
        if (cl != NULL) {
            kvp_cluster_sync(cl, &seen); /* a change is one after this, not the list found now */
        }
    } else {
        snprintf(peers, sizeof(peers), "%s", o->node);
        n_static = kvp_cli_list_len(peers);
    }
    fprintf(stderr, "kvpack repair: watching %s (r = %llu, settle %llu s, every %llu s)\n",
            o->etcd ? o->etcd : o->node, (unsigned long long)o->replicas,
            (unsigned long long)w->settle_s, (unsigned long long)w->every_s);
    while (!kvp_repair_stop) {
        uint64_t            now = kvp_time_ns();
        const char         *why = NULL;
        kvp_cli_sess_opts_t po  = *o;
        uint32_t            n   = n_static; /* etcd: its members at the pass */

        if (cl != NULL && kvp_cluster_sync(cl, &gen) == KVP_OK && gen != seen) {
            seen    = gen;
            changed = now;
            first   = pending ? first : now;
            pending = true;
            fprintf(stderr, "kvpack repair: members changed: %u node%s\n", kvp_cluster_size(cl),
                    kvp_cluster_size(cl) == 1 ? "" : "s");
        }
        if (pending && (pass == 0 || now - changed >= settle_ns)) {
            why = pass == 0 ? "start" : "membership";
        } else if (pending && now - first >= flap_ns) {
            /* members that never stay still for --settle (a node crash-looping, churn) used to
             * hold off every pass, so a dead node's sessions stayed at r - 1 for as long */
            why = "unsettled";
        } else if (pass > 0 && !pending && now - last >= (retry ? retry : every_ns)) {
            why = retry ? "retry" : "interval"; /* not while a change settles: that pass would
                                                 * copy a restarting node's sessions elsewhere
                                                 * before --settle, and skip its own */
        }
        if (why != NULL && cl != NULL) {
            n = kvp_cluster_size(cl);
            kvp_cli_nodes_str(cl, UINT64_MAX, peers, sizeof(peers));
        }
        if (why != NULL && n == 0) {
            first = now; /* members that come back after none settle from then: the first to
                          * re-register got an unsettled pass at once */
            if (!empty_said) {
                fprintf(stderr, "kvpack repair: no node registered; waiting\n");
                empty_said = true;
            }
        } else if (why != NULL) {
            empty_said = false;
            po.etcd    = NULL;
            po.node    = peers;
            kvp_repair_clamp(&po, n); /* fewer nodes than r: all of them */
            failed  = kvp_repair_pass(&po, dry_run, ++pass, why) != 0 && !dry_run; /* a dry
                                                     * run's 1 is work to do, not a failure */
            pending = false;
            last    = kvp_time_ns();
            /* a node that did not answer or a session not repaired: again after --settle,
             * doubling up to --every (it used to wait the whole --every) */
            retry   = failed ? (retry == 0 ? retry_base : retry * 2) : 0;
            retry   = retry > every_ns ? every_ns : retry;
        }
        nanosleep(&(struct timespec){0, 200000000}, NULL);
    }
    fprintf(stderr, "kvpack repair: stopped after %u passes\n", pass);
    kvp_cluster_destroy(cl);
    return 0;
}

