/* crash_child.c - a stand-in for kvpackd in the crash test: opens a store with durability sync
 * on argv[1], reads "put <sid> <prefix_seed> <seed> <chunks> <tail>" lines on stdin, puts the
 * session's pages and record, and prints "ack <sid>" only after kvp_store_session_put returned
 * OK (so an ack means durable). The parent SIGKILLs it at random points. */
#include "store_test_util.h"

#include "kvpack/log.h"

static const tgeom_t G = {4, 2, 64, 16};

int main(int argc, char **argv)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    char               line[256], sid[KVP_SID_MAX];
    unsigned long long pseed, seed;
    unsigned           chunks, tail;

    if (argc != 2) {
        fprintf(stderr, "usage: crash_child <db dir>\n");
        return 2;
    }
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    p.field_mask  = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY |
                    KVP_STORE_PARAM_DRAM_BUDGET;
    p.db_path     = argv[1];
    p.durability  = KVP_DURABILITY_SYNC;
    p.dram_budget = 2u << 20; /* small: eviction runs during the test too */
    CHECK_OK(kvp_store_open(&p, &st));
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        kvp_session_desc_t d;
        kvp_status_t       s;

        if (sscanf(line, "put %127s %llu %llu %u %u", sid, &pseed, &seed, &chunks, &tail) != 5) {
            fprintf(stderr, "crash_child: bad command %s", line);
            return 2;
        }
        t_session(&G, pseed, chunks, seed, chunks, tail, &d);
        s = t_put_session(st, 0x77, sid, &G, &d);
        kvp_session_desc_clear(&d);
        printf("%s %s\n", s == KVP_OK ? "ack" : "err", sid);
        fflush(stdout);
    }
    kvp_store_close(st);
    return 0;
}
