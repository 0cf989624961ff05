/* crash_child.c - a stand-in for kvpackd in the crash test: opens a store with durability sync
 * on argv[1], reads "put <sid> <prefix_seed> <seed> <chunks> <tail>" lines on stdin, puts the
 * session's pages and record, and prints "ack <sid>" only after kvp_store_session_put returned
 * OK (so an ack means durable). With argv[2] "spill" the store keeps durability spill (an ack
 * means nothing on disk) and a low watermark, so the background spiller writes groups all the
 * time; after each put the child prints "spilled <sid>" for every session the store lists as
 * newly on disk and out of DRAM (durable). With "interval" the store runs durability interval
 * with a 5 ms sync (an ack means written through: it survives a process kill). With "compact"
 * the store runs durability sync with 64 KiB segment files and compacts after every command
 * (and on its thread), and "del <sid>" lines delete sessions ("deleted <sid>" once done), so
 * kills land in the middle of moves. The parent SIGKILLs it at random points. */
#include "store_test_util.h"

#include "kvpack/log.h"

#include <stdbool.h>

static const tgeom_t G = {4, 2, 64, 16};
#define MAX_SIDS 512 /* test_crash's */

/* Print "spilled <sid>" for sessions (named sess-<n>) that went cold since the last call. */
static void report_spilled(kvp_store_h st, bool *cold)
{
    kvp_store_session_info_t info[64];
    uint32_t                 n;
    int                      more = 1;
    char                     after[KVP_SID_MAX] = "";
    uint64_t                 after_ns = 0;

    while (more) {
        CHECK_OK(kvp_store_session_list(st, after_ns, after[0] ? after : NULL, info, 64, &n,
                                        &more));
        for (uint32_t i = 0; i < n; i++) {
            int k;

            if (sscanf(info[i].sid, "sess-%d", &k) == 1 && k >= 0 && k < MAX_SIDS && !cold[k] &&
                info[i].where == KVP_STORE_ON_DISK) {
                cold[k] = true;
                printf("spilled %s\n", info[i].sid);
            }
        }
        if (n > 0) {
            after_ns = info[n - 1].ns;
            snprintf(after, sizeof(after), "%s", info[n - 1].sid);
        }
    }
}

/* compact mode: compact now; print "compacted <segments removed so far>" when that grew */
static void report_compacted(kvp_store_h st)
{
    static uint64_t   seen;
    kvp_store_stats_t s;

    CHECK_OK(kvp_store_compact(st, 0.25));
    kvp_store_stats(st, &s);
    if (s.compact_segments > seen) {
        seen = s.compact_segments;
        printf("compacted %llu\n", (unsigned long long)seen);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    char               line[256], sid[KVP_SID_MAX];
    unsigned long long pseed, seed;
    unsigned           chunks, tail;
    bool               spill = argc == 3 && strcmp(argv[2], "spill") == 0;
    bool               interval = argc == 3 && strcmp(argv[2], "interval") == 0;
    bool               compact = argc == 3 && strcmp(argv[2], "compact") == 0;
    static bool        cold[MAX_SIDS];

    if (argc != 2 && !spill && !interval && !compact) {
        fprintf(stderr, "usage: crash_child <db dir> [spill|interval|compact]\n");
        return 2;
    }
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    p.field_mask  = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY |
                    KVP_STORE_PARAM_DRAM_BUDGET;
    p.db_path     = argv[1];
    p.durability  = spill ? KVP_DURABILITY_SPILL
                          : (interval ? KVP_DURABILITY_INTERVAL : KVP_DURABILITY_SYNC);
    p.field_mask |= interval ? KVP_STORE_PARAM_SYNC_INTERVAL : 0;
    p.sync_interval_ms = 5;
    p.dram_budget = 2u << 20; /* small: eviction runs during the test too */
    if (compact) {
        p.field_mask |= KVP_STORE_PARAM_COMPACT | KVP_STORE_PARAM_SEGMENT_BYTES;
        p.compact_dead_ratio = 0.25;
        p.segment_bytes      = 64u << 10; /* a few pages per file: many files to empty */
    }
    if (spill) {
        p.field_mask |= KVP_STORE_PARAM_HIGH_WM | KVP_STORE_PARAM_LOW_WM;
        p.high_watermark = 0.6;
        p.low_watermark  = 0.2; /* rounds of several victims: groups */
    }
    CHECK_OK(kvp_store_open(&p, &st));
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        kvp_session_desc_t d;
        kvp_status_t       s;

        if (compact && sscanf(line, "del %127s", sid) == 1) {
            s = kvp_store_session_delete(st, 0x77, sid);
            printf("%s %s\n", s == KVP_OK || s == KVP_ERR_NOT_FOUND ? "deleted" : "err", sid);
            report_compacted(st);
            continue;
        }
        if (sscanf(line, "put %127s %llu %llu %u %u", sid, &pseed, &seed, &chunks, &tail) != 5) {
            fprintf(stderr, "crash_child: bad command %s", line);
            return 2;
        }
        t_session(&G, pseed, chunks, seed, chunks, tail, &d);
        s = t_put_session(st, 0x77, sid, &G, &d);
        kvp_session_desc_clear(&d);
        printf("%s %s\n", s == KVP_OK ? "ack" : "err", sid);
        if (spill) {
            int k;

            if (sscanf(sid, "sess-%d", &k) == 1 && k >= 0 && k < MAX_SIDS) {
                cold[k] = false; /* this version is not on disk yet */
            }
            report_spilled(st, cold);
        }
        if (compact) {
            report_compacted(st);
        }
        fflush(stdout);
    }
    kvp_store_close(st);
    return 0;
}
