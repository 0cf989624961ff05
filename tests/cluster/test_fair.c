/* test_fair.c - one client flooding its connection does not starve another's, counted, never
 * timed: a child process keeps sending GET_PAGES of a stored 512 KiB page on one connection
 * without waiting for the answers (256 queued, the rest answered ERR_BUSY), and meanwhile a
 * second connection sends two STATs back to back, again and again. Each STAT reply carries the
 * node's count of requests received when it ran, so the second's count minus the first's is the
 * number of requests the node took in between: from the flooder, as the victim has nothing else
 * in flight. The second STAT is already at the node when the first runs, so a node that gives
 * each connection its turn takes at most a few turns of the flooder's in between; before, the
 * transport took in and answered everything the flooder had sent (tens of thousands of requests)
 * before the victim's next request. The median over ROUNDS pairs with the flood on around them
 * (more than a turn of the flooder's requests taken just before and just after: pairs made while
 * the flooder sent nothing are not counted, up to MAX_ROUNDS made) must stay under
 * FAIR_MAX_BETWEEN. Also checked: the flood is real (the flooder got ERR_BUSY answers, and ROUNDS
 * pairs had it on), and the victim's replies are all OK. */
#include "node_harness.h"

#define NS               0xFA1Bu
#define ROUNDS           15   /* pairs counted: each with the flood on around it */
#define MAX_ROUNDS       5000 /* pairs made at most to find ROUNDS of them */
/* the flood is on around a pair when the node took more than a turn of the flooder's requests
 * both between the previous pair and it and between it and the next (a flooder starved of CPU on
 * a busy machine, or held back while it takes none of its replies, sends nothing for a while: a
 * pair then shows nothing about fairness) */
#define FLOOD_ON         32u
/* requests of the flooder's the node may take between the victim's two STATs (median): 16 of
 * the flooder's turns of 32; one turn is usual, and the old node took 8,000-110,000 */
#define FAIR_MAX_BETWEEN 512u

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The flooder (a child process): GET_PAGES of the page without waiting for the answers, forever;
 * it writes 1 to busy_fd once an answer ERR_BUSY arrived (the flood is past the queue cap). */
static void flood_main(uint16_t port, kvp_key128_t key, int busy_fd)
{
    test_raw_t     r;
    kvp_wire_req_t req;
    uint8_t       *hdr;
    size_t         hl;
    int            told = 0;

    test_raw_open_up(&r, port);
    test_get_req(&req, 7, NS, &key, 1, 1u << 20);
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    for (;;) {
        for (int i = 0; i < 64; i++) {
            kvp_xfer_iov_t none = {NULL, 0};
            kvp_status_t   s    = kvp_xfer_send(r.conn, hdr, hl, &none, 0, NULL, NULL);

            CHECK(s == KVP_OK || s == KVP_INPROGRESS);
        }
        kvp_xfer_progress(r.x);
        if (!told && r.unpack == KVP_OK && r.rep.status == KVP_ERR_BUSY) {
            CHECK(write(busy_fd, "1", 1) == 1);
            told = 1;
        }
    }
}

/* The victim's connection: each STAT reply's request count, by req_id. */
typedef struct {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn;
    uint64_t        want;      /* req_id of the pair's first STAT */
    uint64_t        count[2];  /* its and the second's requests figure; 0: not answered yet */
    int             not_ok;
} victim_t;

static void victim_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    victim_t      *v = arg;
    kvp_wire_rep_t rep;
    size_t         hl, dl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);

    (void)conn;
    kvp_xfer_msg_data(msg, &dl);
    memset(&rep, 0, sizeof(rep));
    CHECK_OK(kvp_wire_rep_unpack(h, hl, dl, &rep));
    if (rep.status != KVP_OK) {
        fprintf(stderr, "the victim's STAT %llu answered %s\n", (unsigned long long)rep.req_id,
                kvp_status_name(rep.status));
        v->not_ok++;
    } else if (rep.req_id == v->want || rep.req_id == v->want + 1) {
        v->count[rep.req_id - v->want] = rep.stat.requests;
    }
    kvp_wire_rep_clear(&rep);
    kvp_xfer_msg_release(msg);
}

static void victim_open(victim_t *v, uint16_t port)
{
    memset(v, 0, sizeof(*v));
    test_xfer_open(port, victim_recv, v, &v->x, &v->conn);
}

/* Two STATs back to back on the victim's connection, both answers awaited; *first and *second:
 * the node's request count in each. */
static void stat_pair(victim_t *v, uint64_t round, uint64_t *first, uint64_t *second)
{
    kvp_wire_req_t req;
    double         end = kvp_time_s() + 60;

    memset(&req, 0, sizeof(req));
    req.op      = KVP_WIRE_OP_STAT;
    v->want     = round * 2;
    v->count[0] = v->count[1] = 0;
    for (uint64_t i = 0; i < 2; i++) {
        kvp_xfer_iov_t none = {NULL, 0};
        uint8_t       *hdr;
        size_t         hl;
        kvp_status_t   s;

        req.req_id = v->want + i;
        CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
        s = kvp_xfer_send(v->conn, hdr, hl, &none, 0, NULL, NULL);
        CHECK(s == KVP_OK || s == KVP_INPROGRESS);
        kvp_free(hdr);
    }
    while ((v->count[0] == 0 || v->count[1] == 0) && v->not_ok == 0 && kvp_time_s() < end) {
        kvp_xfer_wait(v->x, 50);
    }
    CHECK(v->not_ok == 0);
    CHECK(v->count[0] != 0 && v->count[1] != 0); /* both answered within 60 s: else a hang */
    CHECK(v->count[1] >= v->count[0]); /* the second ran after the first (both may have been
                                        * received before the first ran: then it counts both) */
    *first  = v->count[0];
    *second = v->count[1];
}

int main(void)
{
    test_node_t  node;
    victim_t     victim;
    kvp_client_h c;
    kvp_key128_t key = {0xF00D, 0xFA1B};
    uint8_t     *page;
    size_t       len;
    const void  *pages[1];
    uint64_t     between[ROUNDS], first, second, prev, r0, r1, cand = 0;
    int          cand_on = 0; /* the last pair (between: cand) had the flood on before it */
    int          counted = 0, made = 0;
    int          busy_pipe[2];
    char         b;
    pid_t        flooder, parent = getpid();

    test_node_mkdir(&node);
    test_node_start(&node, NULL);
    page     = test_big_page(128, key, 1, &len);
    pages[0] = page;
    c        = test_client(node.addr, 20000);
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));
    kvp_client_destroy(c);

    CHECK(pipe(busy_pipe) == 0);
    flooder = fork();
    CHECK(flooder >= 0);
    if (flooder == 0) {
        kvp_test_child_of(parent);
        close(busy_pipe[0]);
        flood_main(node.port, key, busy_pipe[1]);
        _exit(0);
    }
    close(busy_pipe[1]);
    victim_open(&victim, node.port); /* after the fork: a child must not inherit a UCX context */
    stat_pair(&victim, 0, &first, &second); /* connected */
    CHECK(read(busy_pipe[0], &b, 1) == 1); /* the flood is past the connection's queue cap */
    stat_pair(&victim, 1, &r0, &prev);

    /* a pair counts when the node took more than FLOOD_ON of the flooder's requests both since
     * the pair before it and before the pair after it: the flood was on all through it */
    while (counted < ROUNDS && made < MAX_ROUNDS) {
        uint64_t gap; /* the flooder's requests since the pair before (and this first STAT) */

        stat_pair(&victim, 2 + (uint64_t)made++, &first, &second);
        gap = first - prev;
        if (cand_on && gap > FLOOD_ON) {
            between[counted++] = cand;
        }
        cand_on = gap > FLOOD_ON;
        cand    = second - first;
        prev    = second;
    }
    stat_pair(&victim, 2 + (uint64_t)made, &first, &r1);
    printf("the node took %llu requests while the victim made %d STAT pairs, %d of them with the "
           "flood on around them; between the two STATs of those:",
           (unsigned long long)(r1 - r0), made, counted);
    for (int i = 0; i < counted; i++) {
        printf(" %llu", (unsigned long long)between[i]);
    }
    printf("\n");
    EXPECT(counted == ROUNDS, "the flood was on around only %d of %d STAT pairs (the node took "
           "%llu requests meanwhile): fairness was not tested", counted, made,
           (unsigned long long)(r1 - r0));
    qsort(between, (size_t)counted, sizeof(between[0]), cmp_u64);
    EXPECT(counted == 0 || between[counted / 2] <= FAIR_MAX_BETWEEN,
           "the node took a median of %llu of the flooder's requests between the victim's two "
           "STATs, which were both at the node already (at most %u: the flooder must wait its turn)",
           (unsigned long long)between[counted / 2], FAIR_MAX_BETWEEN);

    kill(flooder, SIGKILL);
    CHECK(waitpid(flooder, NULL, 0) == flooder);
    kvp_xfer_conn_close(victim.conn);
    kvp_xfer_destroy(victim.x);
    CHECK(test_node_stop(&node, SIGTERM) == 0);
    test_node_rmdir(&node);
    kvp_free(page);
    return kvp_test_result("cluster.fair");
}
