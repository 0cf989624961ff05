/* watch_driver.c - one long-lived kvp_cluster_h made from etcd (params.etcd, so its members follow
 * a watch), driven line by line on stdin by check_etcd_watch.py, one reply line per command:
 *   members      kvp_cluster_sync, then "GEN ADDR,ADDR,..." ("GEN -" when empty)
 *   put SID      a synthetic session (node_harness.h, seeded by SID) -> "ok ADDR,..." (the nodes
 *                that took it, in order) or "err STATUS"
 *   get SID      -> "ok SERVED_BY" after checking it byte-identical to what was put (a difference
 *                exits 1), or "err STATUS"
 *   rank SID     -> "ok ADDR,..." or "err STATUS"
 *   quit         destroys the handle -> "destroyed MS" (how long destroy took), exits 0
 * usage: watch_driver ETCD_URL REPLICAS [PREFIX] (built by hand under -fsanitize=thread too) */
#include "node_harness.h"

#include "kvpack/cluster.h"
#include "kvpack/log.h"

#define NS       0x5151ull
#define MAX_SESS 64

typedef struct {
    char           sid[64];
    test_session_t ts;
} sess_t;

static sess_t   sess[MAX_SESS];
static uint32_t n_sess;

/* "ADDR,ADDR" of the report's nodes that answered OK, in call order. */
static void print_ok_nodes(kvp_cluster_h cl, const kvp_cluster_report_t *r)
{
    const char *sep = "";

    printf("ok ");
    for (uint32_t i = 0; i < r->n_tried; i++) {
        if (r->tried[i].status == KVP_OK) {
            printf("%s%s", sep, kvp_cluster_peer(cl, r->tried[i].node));
            sep = ",";
        }
    }
    printf("\n");
}

static sess_t *sess_find(const char *sid)
{
    for (uint32_t i = 0; i < n_sess; i++) {
        if (strcmp(sess[i].sid, sid) == 0) {
            return &sess[i];
        }
    }
    return NULL;
}

static void cmd_put(kvp_cluster_h cl, const char *sid)
{
    kvp_cluster_report_t rep;
    sess_t              *s = sess_find(sid);
    uint32_t             seed = 7;
    kvp_status_t         st;

    if (s == NULL) {
        CHECK(n_sess < MAX_SESS && strlen(sid) < sizeof(s->sid));
        s = &sess[n_sess++];
        snprintf(s->sid, sizeof(s->sid), "%s", sid);
        for (const char *p = sid; *p; p++) {
            seed = seed * 31u + (uint8_t)*p;
        }
        test_session_make(&s->ts, 2, 2, 5, seed % 1000u);
    }
    st = kvp_cluster_put_session(cl, NS, sid, (const void *const *)s->ts.pages, s->ts.lens,
                                 s->ts.n_pages, &s->ts.desc, &rep);
    if (st != KVP_OK) {
        printf("err %s\n", kvp_status_name(st));
        return;
    }
    print_ok_nodes(cl, &rep);
}

static void cmd_get(kvp_cluster_h cl, const char *sid)
{
    kvp_cluster_report_t rep;
    kvp_session_pages_t *sp = NULL;
    sess_t              *s = sess_find(sid);
    kvp_status_t         st = kvp_cluster_get_session(cl, NS, sid, NULL, &sp, &rep);

    if (st != KVP_OK) {
        printf("err %s\n", kvp_status_name(st));
        return;
    }
    CHECK(s != NULL);
    test_session_check(&s->ts, sp); /* exits 1 on any difference */
    kvp_session_pages_free(sp);
    printf("ok %s\n", kvp_cluster_peer(cl, rep.served_by));
}

static void cmd_rank(kvp_cluster_h cl, const char *sid)
{
    uint32_t     order[KVP_CLUSTER_MAX_NODES];
    kvp_status_t st = kvp_cluster_rank(cl, NS, sid, order);

    if (st != KVP_OK) {
        printf("err %s\n", kvp_status_name(st));
        return;
    }
    printf("ok ");
    for (uint32_t i = 0; i < kvp_cluster_size(cl); i++) {
        printf("%s%s", i ? "," : "", kvp_cluster_peer(cl, order[i]));
    }
    printf("\n");
}

static void cmd_members(kvp_cluster_h cl)
{
    uint64_t gen = 0;

    CHECK_OK(kvp_cluster_sync(cl, &gen));
    printf("%llu ", (unsigned long long)gen);
    for (uint32_t i = 0; i < kvp_cluster_size(cl); i++) {
        printf("%s%s", i ? "," : "", kvp_cluster_peer(cl, i));
    }
    printf("%s\n", kvp_cluster_size(cl) ? "" : "-");
}

int main(int argc, char **argv)
{
    kvp_client_params_t  cp = {0};
    kvp_cluster_params_t p = {0};
    kvp_cluster_h        cl;
    char                 line[256], arg[200];
    kvp_status_t         st;

    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: watch_driver ETCD_URL REPLICAS [PREFIX]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cp.field_mask = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = 3000;
    p.field_mask  = KVP_CLUSTER_PARAM_ETCD | KVP_CLUSTER_PARAM_REPLICAS | KVP_CLUSTER_PARAM_CLIENT;
    p.etcd        = argv[1];
    p.etcd_prefix = argc == 4 ? argv[3] : NULL;
    p.replicas    = (uint32_t)atoi(argv[2]);
    p.client      = &cp;
    st            = kvp_cluster_create(&p, &cl);
    if (st != KVP_OK) {
        printf("err %s\n", kvp_status_name(st));
        return 1;
    }
    printf("ready\n");
    while (fgets(line, sizeof(line), stdin) != NULL) {
        arg[0] = '\0';
        sscanf(line, "%*s %199s", arg);
        if (strncmp(line, "members", 7) == 0) {
            cmd_members(cl);
        } else if (strncmp(line, "put ", 4) == 0) {
            cmd_put(cl, arg);
        } else if (strncmp(line, "get ", 4) == 0) {
            cmd_get(cl, arg);
        } else if (strncmp(line, "rank ", 5) == 0) {
            cmd_rank(cl, arg);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            printf("err unknown command\n");
        }
    }
    {
        double t0 = kvp_time_s();

        kvp_cluster_destroy(cl);
        printf("destroyed %.0f\n", (kvp_time_s() - t0) * 1000.0);
    }
    for (uint32_t i = 0; i < n_sess; i++) {
        test_session_free(&sess[i].ts);
    }
    return 0;
}
