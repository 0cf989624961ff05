/* test_scrub.c - scrubbing (store/scrub.c): a byte flipped on disk in one page of one session is
 * found without any get: the page is dropped (one CRC failure), the session lists as damaged and
 * answers ERR_CORRUPT, every other session stays byte-identical and healthy; a whole pass reads
 * every page on disk once. The background thread finds the same at a rate of 1 MiB/s.
 * Six sessions of 4 chunks x 4 layers, 8 KiB pages. Pages of 4 KiB or less live inline in
 * RocksDB: a byte flipped in the SST that holds one is found by the same pass. A bad copy the
 * page's key no longer names (it was put again meanwhile) is left alone. A dropped page put again
 * into a full pool while only an older version of its session named it is stored. */
#include "store_int.h"
#include "store_test_util.h"

#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16};
#define NS   0x5C4Bu
#define SESS 6

static kvp_store_h open_scrub_dur(const char *dir, uint64_t rate, kvp_durability_t dur)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask        = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                          KVP_STORE_PARAM_SCRUB | KVP_STORE_PARAM_DURABILITY;
    p.dram_budget       = 64u << 20;
    p.db_path           = dir;
    p.scrub_bytes_per_s = rate;
    p.durability        = dur;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static kvp_store_h open_scrub(const char *dir, uint64_t rate)
{
    return open_scrub_dur(dir, rate, KVP_DURABILITY_SPILL);
}

/* sessions put and spilled, the store closed, one byte of s2's chunk 1 layer 3 flipped */
static void setup(const char *dir, kvp_session_desc_t *d)
{
    kvp_store_h st = open_scrub(dir, 0);
    uint8_t    *page;
    size_t      len;

    for (int i = 0; i < SESS; i++) {
        char sid[8];

        snprintf(sid, sizeof(sid), "s%d", i);
        t_session(&G, 70 + (uint64_t)i, 0, 70 + (uint64_t)i, 4, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
    }
    kvp_store_close(st);
    page = t_page(&G, d[2].chunk_keys[1], 3, 1 * G.page_tokens, G.page_tokens, 0, &len);
    t_flip_on_disk(dir, page + 64);
    kvp_free(page);
}

/* only s2 damaged, it answers ERR_CORRUPT, the others are whole */
static void check_found(kvp_store_h st, const kvp_session_desc_t *d)
{
    kvp_store_session_info_t info[SESS];
    uint32_t                 got;
    int                      more;

    CHECK(t_stats(st).crc_failures == 1);
    CHECK_OK(kvp_store_session_list(st, 0, NULL, info, SESS, &got, &more));
    CHECK(got == SESS);
    for (uint32_t i = 0; i < got; i++) {
        CHECK(info[i].damaged == (strcmp(info[i].sid, "s2") == 0));
    }
    for (int i = 0; i < SESS; i++) {
        char sid[8];

        snprintf(sid, sizeof(sid), "s%d", i);
        if (i == 2) {
            CHECK_ST(t_check_session(st, NS, sid, &G, &d[i]), KVP_ERR_CORRUPT);
        } else {
            CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        }
    }
}

static void case_pass(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st;
    kvp_store_stats_t  s;
    size_t             len;
    uint8_t           *page;

    setup(dir, d);
    page = t_page(&G, d[0].chunk_keys[0], 0, 0, G.page_tokens, 0, &len);
    st   = open_scrub(dir, 0);
    CHECK(t_stats(st).crc_failures == 0);
    CHECK_OK(kvp_store_scrub(st, NULL));
    s = t_stats(st);
    printf("one pass: %llu bytes checked, %llu CRC failures\n", (unsigned long long)s.scrub_bytes,
           (unsigned long long)s.crc_failures);
    CHECK(s.scrub_passes == 1 && s.scrub_bytes == (uint64_t)SESS * 4 * G.layers * len);
    CHECK(s.restores == 0); /* found without a get */
    check_found(st, d);
    CHECK_OK(kvp_store_scrub(st, NULL)); /* the bad page is gone: nothing more to find */
    CHECK(t_stats(st).crc_failures == 1 && t_stats(st).scrub_passes == 2);
    kvp_store_close(st);
    kvp_free(page);
    for (int i = 0; i < SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

static void case_background(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st;
    int                i;

    setup(dir, d);
    st = open_scrub(dir, 1u << 20); /* about 0.8 MB on disk: a pass within a second or two */
    for (i = 0; i < 200 && t_stats(st).scrub_passes == 0; i++) {
        usleep(50 * 1000);
    }
    CHECK(i < 200); /* 10 s */
    check_found(st, d);
    kvp_store_close(st);
    for (i = 0; i < SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* The damaged page's session is hot (write-through: in DRAM and on disk) when its disk copy goes
 * bad: the DRAM copy was checked when it came in, so the scrub writes it again over the bad one;
 * after a restart (DRAM gone) the session reads back byte-identical from disk, and another pass
 * finds nothing. */
static void case_dram_copy(const char *dir)
{
    kvp_session_desc_t d;
    kvp_store_h        st = open_scrub_dur(dir, 0, KVP_DURABILITY_WRITE_THROUGH);
    uint8_t           *page;
    size_t             len;

    t_session(&G, 90, 0, 90, 4, 0, &d);
    CHECK_OK(t_put_session(st, NS, "hot", &G, &d));
    page = t_page(&G, d.chunk_keys[1], 3, 1 * G.page_tokens, G.page_tokens, 0, &len);
    t_flip_on_disk(dir, page + 64); /* under the open store: its disk copy only */
    kvp_free(page);
    CHECK_OK(kvp_store_scrub(st, NULL));
    CHECK(t_stats(st).crc_failures == 1 && t_stats(st).disk_errors == 0);
    CHECK_OK(t_check_session(st, NS, "hot", &G, &d));
    kvp_store_close(st);
    st = open_scrub(dir, 0); /* nothing in DRAM: every page comes from disk */
    CHECK_OK(t_check_session(st, NS, "hot", &G, &d));
    CHECK(t_stats(st).crc_failures == 0 && t_stats(st).restores == 1);
    CHECK_OK(kvp_store_scrub(st, NULL));
    CHECK(t_stats(st).crc_failures == 0);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

/* 1,088-byte pages (1 head x 16 dims x 16 tokens): inline in RocksDB. Put write-through, the
 * store closed and opened again (RocksDB writes the recovered WAL to an SST file), closed, one
 * byte of one page flipped in that SST; a pass finds it without a get, and only that session is
 * damaged. */
static void case_inline(const char *dir)
{
    static const tgeom_t S = {2, 1, 16, 16};
    kvp_session_desc_t   d[3];
    kvp_store_h          st = open_scrub_dur(dir, 0, KVP_DURABILITY_WRITE_THROUGH);
    kvp_store_stats_t    s;
    uint8_t             *page;
    size_t               len;

    for (int i = 0; i < 3; i++) {
        char sid[8];

        snprintf(sid, sizeof(sid), "i%d", i);
        t_session(&S, 40 + (uint64_t)i, 0, 40 + (uint64_t)i, 3, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &S, &d[i]));
    }
    kvp_store_close(st);
    kvp_store_close(open_scrub(dir, 0)); /* the WAL's batches into an SST */
    page = t_page(&S, d[1].chunk_keys[2], 1, 2 * S.page_tokens, S.page_tokens, 0, &len);
    CHECK(len <= 4096);
    t_flip_in(dir, "", page + 64);
    kvp_free(page);
    st = open_scrub(dir, 0);
    CHECK_OK(kvp_store_scrub(st, NULL));
    s = t_stats(st);
    printf("inline pass: %llu bytes checked, %llu CRC failures, %llu passes\n",
           (unsigned long long)s.scrub_bytes, (unsigned long long)s.crc_failures,
           (unsigned long long)s.scrub_passes);
    CHECK(s.crc_failures == 1 && s.scrub_passes == 1 && s.restores == 0);
    CHECK(s.scrub_bytes == 3 * 3 * S.layers * (uint64_t)len); /* every page read once */
    for (int i = 0; i < 3; i++) {
        char sid[8];

        snprintf(sid, sizeof(sid), "i%d", i);
        CHECK_ST(t_check_session(st, NS, sid, &S, &d[i]), i == 1 ? KVP_ERR_CORRUPT : KVP_OK);
    }
    CHECK_OK(kvp_store_scrub(st, NULL)); /* dropped: nothing more to find */
    CHECK(t_stats(st).crc_failures == 1 && t_stats(st).scrub_passes == 2);
    kvp_store_close(st);
    for (int i = 0; i < 3; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* Between a pass listing a segment's pages and reading the bad one, a get drops that page (its
 * copy failed), the session is put again (as `kvpack repair` does) and spilled: the page has a new,
 * good copy elsewhere. The pass then reads the old copy, still in its file: bad, but nobody's, so
 * the good copy stays (it used to be dropped by key, and the session was damaged again, also after
 * a restart), and no second CRC failure is counted. */
typedef struct {
    kvp_store_h               st;
    const kvp_session_desc_t *d;
    int                       fired;
    kvp_status_t              get_bad, put, get_good;
} repair_hook_t;

static void repair_during_read(void *arg)
{
    repair_hook_t *h = arg;

    if (h->fired++ > 0) {
        return;
    }
    h->get_bad = t_check_session(h->st, NS, "s2", &G, &h->d[2]); /* drops the bad copy */
    h->put     = t_put_session(h->st, NS, "s2", &G, &h->d[2]);   /* repaired */
    CHECK_OK(kvp_store_session_spill(h->st, NS, "s2"));           /* a new copy on disk */
    h->get_good = t_check_session(h->st, NS, "s2", &G, &h->d[2]);
    CHECK_OK(kvp_store_session_spill(h->st, NS, "s2")); /* disk only again */
}

static void case_stale_copy(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st;
    repair_hook_t      h = {0};

    setup(dir, d);
    st = open_scrub(dir, 0);
    h  = (repair_hook_t){st, d, 0, KVP_OK, KVP_OK, KVP_OK};
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, repair_during_read, &h);
    CHECK_OK(kvp_store_scrub(st, NULL));
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, NULL, NULL);
    CHECK(h.fired > 0);
    CHECK_ST(h.get_bad, KVP_ERR_CORRUPT);
    CHECK_OK(h.put);
    CHECK_OK(h.get_good);
    CHECK(t_stats(st).crc_failures == 1); /* the get's; the stale copy is not counted again */
    for (int i = 0; i < SESS; i++) {
        char sid[8];

        snprintf(sid, sizeof(sid), "s%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
    }
    kvp_store_close(st);
    st = open_scrub(dir, 0);
    CHECK_OK(t_check_session(st, NS, "s2", &G, &d[2]));
    CHECK_OK(kvp_store_scrub(st, NULL)); /* nothing bad is named any more */
    CHECK(t_stats(st).crc_failures == 0);
    kvp_store_close(st);
    for (int i = 0; i < SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* A page the scrub dropped (its only copy, on disk, was bad) that an update of its session no
 * longer names, put again into a full pool: making room spills the update, and letting go of
 * the older version's pages drops this entry's last name while the put fills it. The entry must
 * outlive the put (it was freed under it: the acknowledged page was not in the store, and the
 * put wrote into freed memory). */
static void case_reput_orphan(const char *dir)
{
    kvp_session_desc_t d[SESS], upd;
    kvp_store_h        st;
    kvp_page_ref_h     ref;
    uint8_t           *page;
    const void        *got;
    size_t             len, glen, slot;

    setup(dir, d);
    page = t_page(&G, d[2].chunk_keys[1], 3, 1 * G.page_tokens, G.page_tokens, 0, &len);
    slot = kvp_pool_slot_size(len);
    /* room for the update's 16 pages and no more; the spiller stays out of it (high mark 1) */
    st = t_open_store(dir, 16 * slot + slot / 2, KVP_DURABILITY_SPILL, 1.0, 0.9);
    /* make_room in the put itself, as when the spiller's round ends short of room (with it, the
     * put waits for the round and looks the entry up again) */
    kvp_store_spiller_stop(st);
    t_session(&G, 99, 0, 99, 4, 0, &upd);
    CHECK_OK(t_put_session(st, NS, "s2", &G, &upd)); /* hot, not on disk: s2's pages orphans */
    CHECK_OK(kvp_store_scrub(st, NULL));             /* the bad copy goes: no bytes anywhere */
    CHECK(t_stats(st).crc_failures == 1);
    CHECK_OK(kvp_store_page_put(st, NS, page, len)); /* the pool is full: the update spills */
    CHECK(t_stats(st).spills >= 1);
    CHECK_OK(kvp_store_page_get(st, NS, d[2].chunk_keys[1], 3, &ref));
    got = kvp_page_ref_data(ref, &glen);
    CHECK(got != NULL && glen == len && memcmp(got, page, len) == 0);
    kvp_page_ref_release(ref);
    CHECK_OK(t_check_session(st, NS, "s2", &G, &upd));
    kvp_store_close(st);
    kvp_free(page);
    kvp_session_desc_clear(&upd);
    for (int i = 0; i < SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {{"pass", case_pass}, {"background", case_background},
                                     {"dram_copy", case_dram_copy}, {"inline", case_inline},
                                     {"stale_copy", case_stale_copy},
                                     {"reput_orphan", case_reput_orphan}, {NULL, NULL}};

    return t_run_case(argc, argv, cases, "scrub");
}
