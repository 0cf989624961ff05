/* test_store.c - unit tests of the node store: page validation and refs, sessions and prefix
 * sharing, lookup, spill/restore (and their timing), warm restart, eviction between watermarks, idle TTL, CRC on
 * disk reads (bytes flipped inside an SST file), injected disk-full, a session larger than the DRAM
 * budget refused at put, DRAM-only mode (and its drops counted right when allocations fail).
 * Run one case: test_store <case>; ctest registers each case as store.<case>. */
#include "store_test_util.h"

#include "kvpack/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16}; /* layers, heads, head_dim, P: 8 KiB pages */
#define NS 0x1234u

static kvp_store_h open_store(const char *dir, size_t budget, kvp_durability_t dur)
{
    return t_open_store(dir, budget, dur, 0, 0);
}

/* ---- cases ---- */

static void case_page_put_get(void)
{
    kvp_store_h        st = open_store(NULL, 8u << 20, KVP_DURABILITY_SPILL);
    kvp_session_desc_t d;
    size_t             len, glen;
    uint8_t           *p;
    kvp_page_ref_h     ref;

    t_session(&G, 1, 0, 1, 2, 0, &d);
    p = t_page(&G, d.chunk_keys[0], 1, 0, G.page_tokens, 0, &len);
    CHECK_OK(kvp_store_page_put(st, NS, p, len));
    CHECK_OK(kvp_store_page_put(st, NS, p, len)); /* identical key: no-op */
    CHECK(t_stats(st).dram_pages == 1);
    CHECK_OK(kvp_store_page_get(st, NS, d.chunk_keys[0], 1, &ref));
    CHECK(memcmp(kvp_page_ref_data(ref, &glen), p, len) == 0 && glen == len);
    kvp_page_ref_release(ref);
    CHECK_ST(kvp_store_page_get(st, NS + 1, d.chunk_keys[0], 1, &ref), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_store_page_get(st, NS, d.chunk_keys[0], 0, &ref), KVP_ERR_NOT_FOUND);
    /* a flipped payload byte fails the CRC; a truncated page is malformed */
    p[len - 3] ^= 0x10;
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_CORRUPT);
    p[len - 3] ^= 0x10;
    CHECK_ST(kvp_store_page_put(st, NS, p, len - 1), KVP_ERR_BAD_PAGE);
    CHECK_ST(kvp_store_page_put(st, NS, p, 10), KVP_ERR_BAD_PAGE);
    CHECK(t_stats(st).dram_pages == 1);
    /* a forged fp16 page holding -Inf, its CRC made to match: refused, nothing stored */
    {
        uint8_t *q = kvp_malloc(len, "test forged");

        CHECK(q != NULL);
        memcpy(q, p, len);
        q[KVP_PAGE_HDR_BYTES + 10] = 0x00;
        q[KVP_PAGE_HDR_BYTES + 11] = 0xFC;
        kvp_page_seal(q);
        CHECK_OK(kvp_page_parse(q, len, NULL));
        CHECK_ST(kvp_store_page_put(st, NS + 7, q, len), KVP_ERR_BAD_PAGE);
        CHECK(t_stats(st).dram_pages == 1);
        kvp_free(q);
    }
    /* a real fp16 page from the codec is accepted as well */
    {
        kvp_page_params_t pp = {KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, 3, 0,
                                d.chunk_keys[1], 0, 0};
        size_t            n  = (size_t)G.page_tokens * G.heads * G.head_dim;
        float            *kv = kvp_calloc(n, sizeof(float), "test kv");
        uint8_t          *out = kvp_malloc(kvp_page_max_bytes(&pp), "test page");
        size_t            olen;

        for (size_t i = 0; i < n; i++) {
            kv[i] = (float)((int)(i % 97) - 48) / 64.0f;
        }
        CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, kv, kv, G.page_tokens, out,
                                 kvp_page_max_bytes(&pp), &olen));
        CHECK_OK(kvp_store_page_put(st, NS, out, olen));
        CHECK_OK(kvp_store_page_get(st, NS, d.chunk_keys[1], 3, &ref));
        CHECK(memcmp(kvp_page_ref_data(ref, NULL), out, olen) == 0);
        kvp_page_ref_release(ref);
        kvp_free(kv);
        kvp_free(out);
    }
    kvp_free(p);
    kvp_session_desc_clear(&d);
    kvp_store_close(st);
}

static void case_session_roundtrip(void)
{
    kvp_store_h        st = open_store(NULL, 8u << 20, KVP_DURABILITY_SPILL);
    kvp_session_desc_t d, bad;
    uint32_t           hit;

    t_session(&G, 7, 0, 7, 5, 9, &d);
    /* pages missing -> NOT_FOUND, nothing registered */
    CHECK_ST(kvp_store_session_put(st, NS, "s1", &d), KVP_ERR_NOT_FOUND);
    CHECK_ST(t_check_session(st, NS, "s1", &G, &d), KVP_ERR_NOT_FOUND);
    CHECK_OK(t_put_session(st, NS, "s1", &G, &d));
    CHECK_OK(t_check_session(st, NS, "s1", &G, &d));
    CHECK_ST(t_check_session(st, NS + 1, "s1", &G, &d), KVP_ERR_NOT_FOUND);
    /* lookup: all 5 chunks; a wrong key in position 3 stops there; more layers than stored -> 0 */
    CHECK_OK(kvp_store_lookup(st, NS, d.chunk_keys, 5, G.layers, &hit));
    CHECK(hit == 5);
    CHECK_OK(kvp_session_desc_copy(&d, &bad));
    bad.chunk_keys[3].lo ^= 1;
    CHECK_OK(kvp_store_lookup(st, NS, bad.chunk_keys, 5, G.layers, &hit));
    CHECK(hit == 3);
    CHECK_OK(kvp_store_lookup(st, NS, d.chunk_keys, 5, G.layers + 1, &hit));
    CHECK(hit == 0);
    /* malformed records are rejected with a clear status */
    bad.tail[70] ^= 1; /* tail page CRC */
    CHECK_ST(kvp_store_session_put(st, NS, "s2", &bad), KVP_ERR_CORRUPT);
    bad.tail[70] ^= 1;
    bad.tail[KVP_PAGE_HDR_BYTES + 1] = 0x7E; /* a NaN in the tail page, CRC made to match */
    kvp_page_seal(bad.tail);
    CHECK_ST(kvp_store_session_put(st, NS, "s2", &bad), KVP_ERR_BAD_PAGE);
    CHECK_ST(t_check_session(st, NS, "s2", &G, &d), KVP_ERR_NOT_FOUND);
    memcpy(bad.tail, d.tail, d.tail_len);
    bad.tail_tokens = G.page_tokens;
    CHECK_ST(kvp_store_session_put(st, NS, "s2", &bad), KVP_ERR_INVALID);
    CHECK_ST(kvp_store_session_put(st, NS, "", &d), KVP_ERR_INVALID);
    /* one chunk key named twice (its pages all there): refused, s1 untouched */
    bad.tail_tokens    = d.tail_tokens;
    bad.chunk_keys[3]  = d.chunk_keys[1];
    CHECK_ST(kvp_store_session_put(st, NS, "s2", &bad), KVP_ERR_INVALID);
    CHECK_ST(t_check_session(st, NS, "s2", &G, &d), KVP_ERR_NOT_FOUND);
    CHECK_OK(t_check_session(st, NS, "s1", &G, &d));
    kvp_session_desc_clear(&bad);
    /* delete */
    CHECK_OK(kvp_store_session_delete(st, NS, "s1"));
    CHECK_ST(kvp_store_session_delete(st, NS, "s1"), KVP_ERR_NOT_FOUND);
    CHECK(t_stats(st).sessions == 0 && t_stats(st).dram_pages == 0);
    CHECK(t_stats(st).dram_bytes == 0);
    kvp_session_desc_clear(&d);
    kvp_store_close(st);
}

static void case_prefix_sharing(void)
{
    char               dir[256];
    kvp_store_h        st;
    kvp_session_desc_t a, b;
    uint32_t           hit;
    uint64_t           pages_both;

    t_tmpdir(dir, sizeof(dir), "prefix");
    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    t_session(&G, 42, 3, 1, 5, 0, &a); /* a and b share their first 3 chunks */
    t_session(&G, 42, 3, 2, 6, 4, &b);
    CHECK(memcmp(&a.chunk_keys[2], &b.chunk_keys[2], sizeof(kvp_key128_t)) == 0);
    CHECK(memcmp(&a.chunk_keys[3], &b.chunk_keys[3], sizeof(kvp_key128_t)) != 0);
    CHECK_OK(t_put_session(st, NS, "a", &G, &a));
    CHECK_OK(t_put_session(st, NS, "b", &G, &b));
    pages_both = t_stats(st).dram_pages;
    CHECK(pages_both == (uint64_t)(5 + 6 - 3) * G.layers);
    /* lookup of b's keys from a's perspective: the shared prefix, on all layers */
    CHECK_OK(kvp_store_lookup(st, NS, b.chunk_keys, 6, G.layers, &hit));
    CHECK(hit == 6);
    /* spilling a keeps the pages b still uses in DRAM */
    CHECK_OK(kvp_store_session_spill(st, NS, "a"));
    CHECK(t_stats(st).dram_pages == (uint64_t)6 * G.layers);
    CHECK(t_stats(st).spills == 1);
    CHECK_OK(t_check_session(st, NS, "b", &G, &b));
    CHECK_OK(t_check_session(st, NS, "a", &G, &a)); /* restores a's 2 own chunks */
    CHECK(t_stats(st).restores == 1);
    CHECK(t_stats(st).restore_bytes > 0);
    /* deleting b leaves a whole */
    CHECK_OK(kvp_store_session_delete(st, NS, "b"));
    CHECK(t_stats(st).dram_pages == (uint64_t)5 * G.layers);
    CHECK_OK(t_check_session(st, NS, "a", &G, &a));
    CHECK_OK(kvp_store_lookup(st, NS, b.chunk_keys, 6, G.layers, &hit));
    CHECK(hit == 3);
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
    t_rmrf(dir);
}

static void case_spill_restore_reopen(void)
{
    char               dir[256];
    kvp_store_h        st;
    kvp_session_desc_t d[6];
    char               sid[32];
    kvp_store_stats_t  s;
    uint32_t           hit;

    for (int dur = 0; dur <= 2; dur++) {
        t_tmpdir(dir, sizeof(dir), "reopen");
        st = open_store(dir, 16u << 20, (kvp_durability_t)dur);
        for (int i = 0; i < 6; i++) {
            snprintf(sid, sizeof(sid), "d%d-s%d", dur, i);
            t_session(&G, 100 + i, 0, 100 + i + 10 * dur, 3 + i, i % 3 ? 5 : 0, &d[i]);
            CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        }
        /* spill half explicitly (under SPILL only those reach disk) */
        for (int i = 0; i < 6; i += 2) {
            snprintf(sid, sizeof(sid), "d%d-s%d", dur, i);
            CHECK_OK(kvp_store_session_spill(st, NS, sid));
        }
        s = t_stats(st);
        CHECK(s.spills == 3);
        CHECK(s.sessions_on_disk == (dur == 0 ? 3u : 6u));
        snprintf(sid, sizeof(sid), "d%d-s%d", dur, 2);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[2]));
        CHECK(t_stats(st).restores == 1);
        kvp_store_close(st);

        /* warm restart: indexes rebuilt from the sessions column family, no page read */
        st = open_store(dir, 16u << 20, (kvp_durability_t)dur);
        s  = t_stats(st);
        CHECK(s.dram_pages == 0 && s.restores == 0);
        for (int i = 0; i < 6; i++) { /* spill: the close spilled the 3 only in DRAM */
            snprintf(sid, sizeof(sid), "d%d-s%d", dur, i);
            CHECK_OK(kvp_store_lookup(st, NS, d[i].chunk_keys, d[i].n_chunks, G.layers, &hit));
            CHECK(hit == d[i].n_chunks);
            CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        }
        CHECK(t_stats(st).restores == 6u);
        kvp_store_close(st);
        for (int i = 0; i < 6; i++) {
            kvp_session_desc_clear(&d[i]);
        }
        t_rmrf(dir);
    }
}

/* Slot counts of a per-session duration histogram, their total, and whether sum_ns fits them:
 * every duration lies in (previous bound, its bound], so the sum lies between the totals of
 * those edges (no upper edge once +Inf has a count). */
static uint64_t hist_check(const uint64_t *hist, uint64_t sum_ns)
{
    uint64_t n = 0, lo = 0, hi = 0;

    for (uint32_t b = 0; b <= KVP_HIST_BUCKETS; b++) {
        n += hist[b];
        lo += hist[b] * (b ? kvp_hist_bounds[b - 1].ns : 0);
        hi += b < KVP_HIST_BUCKETS ? hist[b] * kvp_hist_bounds[b].ns
                                   : (hist[b] ? UINT64_MAX / 2 : 0);
    }
    CHECK(sum_ns >= lo && sum_ns <= hi);
    return n;
}

/* Spill and restore time histograms: after each explicit spill, restore and background-spiller
 * round, each histogram's counts add up to its counter and its sum grows; a failed spill and a
 * get of a hot session add nothing. */
static void case_spill_restore_timing(void)
{
    char               dir[256], sid[32];
    kvp_session_desc_t d[8];
    kvp_store_stats_t  s, prev;
    kvp_store_h        st;

    t_tmpdir(dir, sizeof(dir), "timing");
    st = t_open_store(dir, 8u << 20, KVP_DURABILITY_SPILL, 0.5, 0.25);
    s  = t_stats(st);
    CHECK(hist_check(s.spill_hist, s.spill_ns) == 0 && s.spill_ns == 0);
    CHECK(hist_check(s.restore_hist, s.restore_ns) == 0 && s.restore_ns == 0);
    for (int i = 0; i < 4; i++) {
        snprintf(sid, sizeof(sid), "t%d", i);
        t_session(&G, 500 + i, 0, 500 + i, 4, 3, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
    for (int i = 0; i < 4; i++) { /* explicit spills: write + fdatasync each */
        prev = t_stats(st);
        snprintf(sid, sizeof(sid), "t%d", i);
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
        s = t_stats(st);
        CHECK(s.spills == prev.spills + 1 && hist_check(s.spill_hist, s.spill_ns) == s.spills);
        CHECK(s.spill_ns > prev.spill_ns);
    }
    for (int i = 0; i < 4; i++) { /* restores by get */
        prev = t_stats(st);
        snprintf(sid, sizeof(sid), "t%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        s = t_stats(st);
        CHECK(s.restores == prev.restores + 1);
        CHECK(hist_check(s.restore_hist, s.restore_ns) == s.restores);
        CHECK(s.restore_ns > prev.restore_ns);
    }
    prev = t_stats(st); /* a get of a hot session restores nothing */
    CHECK_OK(t_check_session(st, NS, "t0", &G, &d[0]));
    s = t_stats(st);
    CHECK(s.restores == prev.restores && s.restore_ns == prev.restore_ns);
    t_session(&G, 600, 0, 600, 4, 0, &d[4]); /* a failed spill is not timed */
    CHECK_OK(t_put_session(st, NS, "tf", &G, &d[4]));
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_IO);
    prev = t_stats(st);
    CHECK_ST(kvp_store_session_spill(st, NS, "tf"), KVP_ERR_IO);
    s = t_stats(st);
    CHECK(s.spills == prev.spills && s.spill_ns == prev.spill_ns);
    CHECK(hist_check(s.spill_hist, s.spill_ns) == s.spills);
    for (int i = 5; i < 8; i++) { /* past the high watermark: the background spiller's spills */
        snprintf(sid, sizeof(sid), "t%d", i);
        t_session(&G, 500 + i, 0, 500 + i, 32, 3, &d[i]); /* 1.5 MiB */
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
    CHECK_OK(kvp_store_quiesce(st));
    s = t_stats(st);
    fprintf(stderr, "timing: %llu spills in %.6f s, %llu restores in %.6f s\n",
            (unsigned long long)s.spills, (double)s.spill_ns / 1e9,
            (unsigned long long)s.restores, (double)s.restore_ns / 1e9);
    CHECK(s.spills > prev.spills && hist_check(s.spill_hist, s.spill_ns) == s.spills);
    CHECK(s.spill_ns > prev.spill_ns);
    kvp_store_close(st);
    for (int i = 0; i < 8; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    t_rmrf(dir);
}

static void case_evict_watermarks(void)
{
    char               dir[256];
    kvp_store_h        st;
    kvp_store_params_t p = {0};
    kvp_session_desc_t d[40];
    char               sid[32];
    kvp_store_stats_t  s;
    size_t             budget = 2u << 20; /* 256 pages of 8 KiB; each session is 32-64 pages */

    t_tmpdir(dir, sizeof(dir), "evict");
    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                    KVP_STORE_PARAM_HIGH_WM | KVP_STORE_PARAM_LOW_WM;
    p.dram_budget = budget;
    p.db_path     = dir;
    p.high_watermark = 0.8;
    p.low_watermark  = 0.5;
    CHECK_OK(kvp_store_open(&p, &st));
    for (int i = 0; i < 40; i++) {
        snprintf(sid, sizeof(sid), "e%d", i);
        t_session(&G, 500 + i, 0, 500 + i, 8 + i % 8, 3, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        CHECK_OK(kvp_store_quiesce(st)); /* the background spiller's round is done */
        s = t_stats(st);
        CHECK(s.dram_bytes <= budget * 8 / 10 + 64 * 1024); /* high watermark + one session */
    }
    s = t_stats(st);
    CHECK(s.spills > 0 && s.sessions == 40);
    /* the most recent session is hot; the oldest went to disk and comes back byte-identical */
    CHECK_OK(t_check_session(st, NS, "e39", &G, &d[39]));
    for (int i = 0; i < 40; i++) {
        snprintf(sid, sizeof(sid), "e%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        CHECK(t_stats(st).dram_bytes <= budget);
    }
    s = t_stats(st);
    CHECK(s.restores > 0);
    fprintf(stderr, "evict: spills %llu restores %llu spill_bytes %llu\n",
            (unsigned long long)s.spills, (unsigned long long)s.restores,
            (unsigned long long)s.spill_bytes);
    kvp_store_close(st);
    for (int i = 0; i < 40; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    t_rmrf(dir);
}

static void case_idle_ttl(void)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    kvp_session_desc_t a, b;

    p.field_mask = KVP_STORE_PARAM_IDLE_TTL;
    p.idle_ttl_s = 1;
    CHECK_OK(kvp_store_open(&p, &st));
    t_session(&G, 1, 0, 1, 2, 0, &a);
    t_session(&G, 2, 0, 2, 2, 0, &b);
    CHECK_OK(t_put_session(st, NS, "old", &G, &a));
    usleep(700 * 1000);
    CHECK_OK(t_put_session(st, NS, "young", &G, &b));
    usleep(600 * 1000); /* old idle 1.3 s, young 0.6 s */
    CHECK_ST(t_check_session(st, NS, "old", &G, &a), KVP_ERR_NOT_FOUND);
    CHECK_OK(t_check_session(st, NS, "young", &G, &b));
    CHECK(t_stats(st).expired == 1);
    CHECK(t_stats(st).dram_pages == (uint64_t)2 * G.layers);
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
}

/* The file directly under dir containing needle; returns its offset or -1. */
static long find_in_files(const char *dir, const uint8_t *needle, size_t n, char *path,
                          size_t plen)
{
    DIR           *dp = opendir(dir);
    struct dirent *e;
    long           found = -1;

    if (dp == NULL) {
        return -1;
    }
    while (found < 0 && (e = readdir(dp)) != NULL) {
        struct stat sb;
        uint8_t    *buf;
        FILE       *f;

        snprintf(path, plen, "%s/%s", dir, e->d_name);
        if ((strstr(e->d_name, ".sst") == NULL && strstr(e->d_name, ".blob") == NULL &&
             strstr(e->d_name, ".seg") == NULL) || stat(path, &sb) != 0 ||
            sb.st_size < (off_t)n) {
            continue;
        }
        buf = kvp_malloc((size_t)sb.st_size, "test file");
        f   = fopen(path, "rb");
        CHECK(buf != NULL && f != NULL);
        CHECK(fread(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size);
        fclose(f);
        for (size_t i = 0; i + n <= (size_t)sb.st_size; i++) {
            if (memcmp(buf + i, needle, n) == 0) {
                found = (long)i;
                break;
            }
        }
        kvp_free(buf);
    }
    closedir(dp);
    return found;
}

/* Find the file under dir (or dir/seg, where segment files live) containing needle; returns its
 * offset or -1. */
static long find_in_dir(const char *dir, const uint8_t *needle, size_t n, char *path, size_t plen)
{
    char sub[600];
    long found;

    snprintf(sub, sizeof(sub), "%s/seg", dir);
    found = find_in_files(sub, needle, n, path, plen);
    return found >= 0 ? found : find_in_files(dir, needle, n, path, plen);
}

static void case_corrupt_on_disk(void)
{
    char               dir[256], path[600];
    kvp_store_h        st;
    kvp_session_desc_t a, b;
    uint8_t           *page;
    size_t             len;
    long               off;
    int                fd;
    uint8_t            byte;
    uint32_t           hit;

    t_tmpdir(dir, sizeof(dir), "corrupt");
    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    t_session(&G, 11, 0, 11, 4, 0, &a);
    t_session(&G, 12, 0, 12, 4, 0, &b);
    CHECK_OK(t_put_session(st, NS, "victim", &G, &a));
    CHECK_OK(t_put_session(st, NS, "bystander", &G, &b));
    CHECK_OK(kvp_store_session_spill(st, NS, "victim"));
    CHECK_OK(kvp_store_session_spill(st, NS, "bystander"));
    kvp_store_close(st); /* everything is in SST files now (flushed on recovery at the latest) */
    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    kvp_store_close(st);

    /* flip one payload byte of the victim's chunk 2, layer 1, inside the SST file */
    page = t_page(&G, a.chunk_keys[2], 1, 2 * G.page_tokens, G.page_tokens, 0, &len);
    off  = find_in_dir(dir, page + 64, 256, path, sizeof(path));
    CHECK(off >= 0);
    fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pread(fd, &byte, 1, off + 100) == 1);
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, off + 100) == 1);
    close(fd);

    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    CHECK_ST(t_check_session(st, NS, "victim", &G, &a), KVP_ERR_CORRUPT);
    CHECK(t_stats(st).crc_failures == 1);
    CHECK_OK(t_check_session(st, NS, "bystander", &G, &b));
    /* the bad page is dropped, never served: lookup stops before chunk 2, get says corrupt */
    CHECK_OK(kvp_store_lookup(st, NS, a.chunk_keys, 4, G.layers, &hit));
    CHECK(hit == 2);
    {
        kvp_page_ref_h ref;

        CHECK_ST(kvp_store_page_get(st, NS, a.chunk_keys[2], 1, &ref), KVP_ERR_NOT_FOUND);
        CHECK_OK(kvp_store_page_get(st, NS, a.chunk_keys[2], 0, &ref));
        kvp_page_ref_release(ref);
    }
    CHECK_ST(t_check_session(st, NS, "victim", &G, &a), KVP_ERR_CORRUPT);
    kvp_store_close(st);
    /* after a restart the dropped page stays dropped: the victim is not resumable (never
     * served partly), lookup still stops before chunk 2 */
    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    CHECK_OK(kvp_store_lookup(st, NS, a.chunk_keys, 4, G.layers, &hit));
    CHECK(hit == 2);
    CHECK_ST(t_check_session(st, NS, "victim", &G, &a), KVP_ERR_CORRUPT);
    CHECK_OK(t_check_session(st, NS, "bystander", &G, &b));
    /* listed as damaged (the bystander is not); a put of the session heals it */
    {
        kvp_store_session_info_t info[4];
        uint32_t                 got;
        int                      more;

        CHECK_OK(kvp_store_session_list(st, 0, NULL, info, 4, &got, &more));
        CHECK(got == 2 && strcmp(info[0].sid, "bystander") == 0 && !info[0].damaged &&
              strcmp(info[1].sid, "victim") == 0 && info[1].damaged);
        CHECK_OK(t_put_session(st, NS, "victim", &G, &a));
        CHECK_OK(t_check_session(st, NS, "victim", &G, &a));
        CHECK_OK(kvp_store_session_list(st, 0, NULL, info, 4, &got, &more));
        CHECK(got == 2 && !info[1].damaged);
    }
    kvp_store_close(st);
    /* the healed copy was only in DRAM: the close spilled it, so it is whole after a restart */
    st = open_store(dir, 8u << 20, KVP_DURABILITY_SPILL);
    CHECK_OK(kvp_store_lookup(st, NS, a.chunk_keys, 4, G.layers, &hit));
    CHECK(hit == 4);
    CHECK_OK(t_check_session(st, NS, "victim", &G, &a));
    CHECK_OK(t_check_session(st, NS, "bystander", &G, &b));
    kvp_store_close(st);
    kvp_free(page);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
    t_rmrf(dir);
}

static void case_disk_full(void)
{
    char               dir[256];
    kvp_store_h        st;
    kvp_session_desc_t d[8];
    char               sid[32];
    kvp_store_stats_t  s;
    kvp_status_t       status = KVP_OK;
    int                n      = 0;

    t_tmpdir(dir, sizeof(dir), "full");
    /* write-through: the failing put reports the disk error; DRAM keeps serving */
    st = open_store(dir, 4u << 20, KVP_DURABILITY_WRITE_THROUGH);
    t_session(&G, 1, 0, 1, 3, 2, &d[0]);
    t_session(&G, 2, 0, 2, 3, 0, &d[1]);
    CHECK_OK(t_put_session(st, NS, "ok", &G, &d[0]));
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_NO_SPACE);
    CHECK_ST(t_put_session(st, NS, "full", &G, &d[1]), KVP_ERR_NO_SPACE);
    CHECK(t_stats(st).disk_errors == 1);
    CHECK_OK(t_check_session(st, NS, "ok", &G, &d[0]));
    CHECK_OK(kvp_store_session_put(st, NS, "full", &d[1])); /* disk is back */
    kvp_store_close(st);
    st = open_store(dir, 4u << 20, KVP_DURABILITY_SPILL);
    CHECK_OK(t_check_session(st, NS, "full", &G, &d[1]));
    kvp_store_close(st);
    kvp_session_desc_clear(&d[0]);
    kvp_session_desc_clear(&d[1]);
    t_rmrf(dir);

    /* spill: eviction cannot write; puts past the budget fail with the disk status, nothing
     * already stored is lost, and it recovers when the disk does */
    t_tmpdir(dir, sizeof(dir), "full");
    st = open_store(dir, 1u << 20, KVP_DURABILITY_SPILL); /* 128 pages */
    kvp_store_inject_disk_fail(st, 1000, KVP_ERR_IO);
    for (int i = 0; i < 8 && status == KVP_OK; i++) {
        snprintf(sid, sizeof(sid), "f%d", i);
        t_session(&G, 70 + i, 0, 70 + i, 8, 0, &d[i]); /* 32 pages each */
        status = t_put_session(st, NS, sid, &G, &d[i]);
        if (status != KVP_OK) {
            CHECK(i >= 2);
            CHECK(status == KVP_ERR_IO);
            s = t_stats(st);
            CHECK(s.disk_errors > 0 && s.dram_bytes <= (1u << 20));
            for (int j = 0; j < i; j++) {
                snprintf(sid, sizeof(sid), "f%d", j);
                CHECK_OK(t_check_session(st, NS, sid, &G, &d[j]));
            }
            kvp_store_inject_disk_fail(st, 0, KVP_OK);
            snprintf(sid, sizeof(sid), "f%d", i);
            CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
            CHECK_OK(kvp_store_quiesce(st));
            CHECK(t_stats(st).spills > 0);
            for (int j = 0; j <= i; j++) {
                snprintf(sid, sizeof(sid), "f%d", j);
                CHECK_OK(t_check_session(st, NS, sid, &G, &d[j]));
            }
            n = i + 1;
        }
    }
    CHECK(status != KVP_OK);
    for (int i = 0; i < n; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    kvp_store_close(st);
    t_rmrf(dir);
}

/* A session whose pages take more than the DRAM budget (20 chunks x 4 layers of 12 KiB slots into
 * 256 KiB): a get restores a session whole, so it could never be read back. With a tier its pages
 * spill as they come and the put used to be acknowledged, then every get failed ERR_NO_SPACE; it
 * must be refused at put (ERR_NO_SPACE, saying so), leaving nothing. DRAM-only, its pages are
 * dropped as they come and the put is refused too. Either way the store goes on serving. */
static void case_big_session(void)
{
    for (int tier = 0; tier < 2; tier++) {
        char               dir[256];
        kvp_store_h        st;
        kvp_session_desc_t big, ok;
        kvp_session_desc_t got;
        kvp_status_t       s;

        if (tier) {
            t_tmpdir(dir, sizeof(dir), "big");
        }
        st = open_store(tier ? dir : NULL, 256u << 10, KVP_DURABILITY_SPILL);
        t_session(&G, 30, 0, 30, 20, 3, &big);
        t_session(&G, 31, 0, 31, 2, 3, &ok);
        CHECK_OK(t_put_pages(st, NS, &G, &big));
        s = kvp_store_session_put(st, NS, "big", &big);
        if (tier) {
            CHECK_ST(s, KVP_ERR_NO_SPACE);
            CHECK(strstr(kvp_log_last_error(), "cannot fit the DRAM budget of 262144 bytes") !=
                  NULL);
        } else {
            CHECK(s != KVP_OK); /* its first pages were dropped: ERR_NOT_FOUND */
        }
        CHECK_ST(kvp_store_session_get(st, NS, "big", &got), KVP_ERR_NOT_FOUND);
        CHECK(t_stats(st).sessions == 0);
        CHECK_OK(t_put_session(st, NS, "ok", &G, &ok));
        CHECK_OK(t_check_session(st, NS, "ok", &G, &ok));
        kvp_session_desc_clear(&big);
        kvp_session_desc_clear(&ok);
        kvp_store_close(st);
        if (tier) {
            t_rmrf(dir);
        }
    }
}

static void case_dram_only(void)
{
    kvp_store_h        st = open_store(NULL, 1u << 20, KVP_DURABILITY_SPILL);
    kvp_session_desc_t d[8];
    char               sid[32];
    kvp_store_stats_t  s;

    CHECK_ST(kvp_store_session_spill(st, NS, "x"), KVP_ERR_UNSUPPORTED);
    for (int i = 0; i < 8; i++) {
        snprintf(sid, sizeof(sid), "m%d", i);
        t_session(&G, 90 + i, 0, 90 + i, 8, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
    CHECK_OK(kvp_store_quiesce(st)); /* no spiller without a tier: eviction was inline */
    s = t_stats(st);
    CHECK(s.dropped > 0 && s.dram_bytes <= (1u << 20));
    CHECK(s.sessions == 8 - s.dropped);
    CHECK_ST(t_check_session(st, NS, "m0", &G, &d[0]), KVP_ERR_NOT_FOUND);
    CHECK_OK(t_check_session(st, NS, "m7", &G, &d[7]));
    for (int i = 0; i < 8; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    kvp_store_close(st);
}

/* Random K/V for n tokens of every layer, [layers][n][H][D] f32, finite and fp16-representable
 * after rounding; ids random. */
static float *t_kv(uint32_t n, uint64_t seed)
{
    size_t   cnt = (size_t)G.layers * n * G.heads * G.head_dim;
    float   *x   = kvp_malloc(cnt * sizeof(float), "test kv");

    CHECK(x != NULL);
    for (size_t i = 0; i < cnt; i++) {
        x[i] = (float)((int64_t)(kvp_splitmix64(&seed) % 2001) - 1000) / 250.0f;
    }
    return x;
}

/* Layer l, tokens [from, from + n) of a [layers][total][H][D] array, as a [n][H][D] fp16 copy. */
static uint16_t *t_slice16(const float *x, uint32_t total, uint32_t l, uint32_t from, uint32_t n)
{
    size_t    row = (size_t)G.heads * G.head_dim;
    uint16_t *o   = kvp_malloc((size_t)n * row * 2 + 2, "test slice");

    CHECK(o != NULL);
    for (size_t i = 0; i < (size_t)n * row; i++) {
        o[i] = kvp_f32_to_f16(x[((size_t)l * total + from) * row + i]);
    }
    return o;
}

/* Append tokens [from, from + n) of the big arrays (total tokens) to sid. */
static kvp_status_t t_append(kvp_store_h st, const char *sid, const float *k, const float *v,
                             uint32_t total, const uint32_t *ids, uint32_t tail, uint32_t from,
                             uint32_t n, uint32_t *sealed)
{
    size_t             row = (size_t)G.heads * G.head_dim;
    float             *kk  = kvp_malloc((size_t)G.layers * n * row * sizeof(float), "test k");
    float             *vv  = kvp_malloc((size_t)G.layers * n * row * sizeof(float), "test v");
    kvp_status_t       s;

    CHECK(kk != NULL && vv != NULL);
    for (uint32_t l = 0; l < G.layers; l++) {
        memcpy(kk + (size_t)l * n * row, k + ((size_t)l * total + from) * row, n * row * 4);
        memcpy(vv + (size_t)l * n * row, v + ((size_t)l * total + from) * row, n * row * 4);
    }
    s = t_append_f32(st, NS, sid, &G, KVP_CODEC_KIVI, kk, vv, n, ids + from - tail, tail + n,
                     sealed);
    kvp_free(kk);
    kvp_free(vv);
    return s;
}

/* The session's record and pages match what appending tokens [0, n) should have produced:
 * chained keys over the ids, kivi pages byte-identical to encoding the fp16-rounded input, an
 * fp16 tail holding the last n % P tokens exactly, and lookup covering every sealed chunk. */
static void t_check_appended(kvp_store_h st, const char *sid, const float *k, const float *v,
                             uint32_t total, const uint32_t *ids, uint32_t n)
{
    uint32_t           P = G.page_tokens, nch = n / P, rem = n % P, hit;
    size_t             row = (size_t)G.heads * G.head_dim, off = 0;
    uint64_t           fp  = t_fingerprint(&G);
    kvp_session_desc_t d;
    uint8_t           *page = kvp_malloc(1u << 20, "test page");

    CHECK(page != NULL);
    CHECK_OK(kvp_store_session_get(st, NS, sid, &d));
    CHECK(d.n_chunks == nch && d.tail_tokens == rem && d.n_tail == (rem ? G.layers : 0u));
    for (uint32_t c = 0; c < nch; c++) {
        kvp_key128_t want = kvp_chunk_key(c ? &d.chunk_keys[c - 1] : NULL, fp, ids + c * P, P);

        CHECK(d.chunk_keys[c].lo == want.lo && d.chunk_keys[c].hi == want.hi);
        for (uint32_t l = 0; l < G.layers; l++) {
            kvp_page_params_t pp = {KVP_CODEC_KIVI, G.heads, G.head_dim, P, l, (uint64_t)c * P,
                                    want, 0, 0};
            uint16_t         *k16 = t_slice16(k, total, l, c * P, P);
            uint16_t         *v16 = t_slice16(v, total, l, c * P, P);
            kvp_page_ref_h    ref;
            size_t            len, glen;
            const void       *got;

            CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F16, k16, v16, P, page, 1u << 20, &len));
            CHECK_OK(kvp_store_page_get(st, NS, want, l, &ref));
            got = kvp_page_ref_data(ref, &glen);
            CHECK(glen == len && memcmp(got, page, len) == 0);
            kvp_page_ref_release(ref);
            kvp_free(k16);
            kvp_free(v16);
        }
    }
    for (uint32_t l = 0; rem > 0 && l < G.layers; l++) {
        kvp_page_info_t info;
        uint16_t       *k16 = t_slice16(k, total, l, nch * P, rem);
        uint16_t       *got = kvp_malloc((size_t)rem * row * 2, "test tail k");
        size_t          len;

        CHECK(got != NULL);
        len = KVP_PAGE_HDR_BYTES + (size_t)(d.tail[off + 48] | d.tail[off + 49] << 8 |
                                            d.tail[off + 50] << 16 | (uint32_t)d.tail[off + 51] << 24);
        CHECK_OK(kvp_page_decode(d.tail + off, len, KVP_DTYPE_F16, KVP_FRAME_ORIGINAL, got, NULL,
                                 &info));
        CHECK((info.flags & KVP_PAGE_F_TAIL) && info.valid == rem && info.layer == l &&
              info.first_pos == (uint64_t)nch * P);
        CHECK(memcmp(got, k16, (size_t)rem * row * 2) == 0); /* fp16 tail: exact */
        off += len;
        kvp_free(k16);
        kvp_free(got);
    }
    CHECK(off == d.tail_len);
    CHECK_OK(kvp_store_lookup(st, NS, d.chunk_keys, d.n_chunks, G.layers, &hit));
    CHECK(hit == nch);
    kvp_session_desc_clear(&d);
    kvp_free(page);
}

static void case_tail_append(void)
{
    char        dir[256];
    uint32_t    total = 64, ids[64], sealed = 99, P = G.page_tokens;
    float      *k = t_kv(total, 1), *v = t_kv(total, 2);
    uint64_t    seed = 3;
    kvp_store_h st;

    for (uint32_t i = 0; i < total; i++) {
        ids[i] = (uint32_t)(kvp_splitmix64(&seed) % 32000);
    }
    t_tmpdir(dir, sizeof(dir), "append");
    st = open_store(dir, 16u << 20, KVP_DURABILITY_WRITE_THROUGH);
    /* 10 tokens: all tail, nothing sealed */
    CHECK_OK(t_append(st, "a", k, v, total, ids, 0, 0, 10, &sealed));
    CHECK(sealed == 0);
    t_check_appended(st, "a", k, v, total, ids, 10);
    /* 10 more: the tail crosses P = 16, one chunk sealed with kivi, 4 tokens stay in the tail */
    CHECK_OK(t_append(st, "a", k, v, total, ids, 10, 10, 10, &sealed));
    CHECK(sealed == 1);
    t_check_appended(st, "a", k, v, total, ids, 20);
    /* 28 more (tail 4 + 28 = 32): two chunks sealed, each chained from the previous key; the
     * tail empties exactly */
    CHECK_OK(t_append(st, "a", k, v, total, ids, 4, 20, 28, &sealed));
    CHECK(sealed == 2);
    t_check_appended(st, "a", k, v, total, ids, 48);
    /* wrong number of ids, wrong geometry: rejected, session unchanged */
    CHECK_ST(t_append(st, "a", k, v, total, ids, 3, 48, 5, &sealed), KVP_ERR_INVALID);
    {
        kvp_store_append_t a = {0};

        a.codec = KVP_CODEC_KIVI, a.layers = G.layers + 1, a.heads = G.heads;
        a.head_dim = G.head_dim, a.page_tokens = P, a.dtype = KVP_DTYPE_F32;
        a.k = k, a.v = v, a.ntok = 1, a.ids = ids, a.n_ids = 1;
        CHECK_ST(kvp_store_session_append(st, NS, "a", &a, NULL), KVP_ERR_INVALID);
    }
    t_check_appended(st, "a", k, v, total, ids, 48);
    /* a second session with the same first 20 tokens shares the sealed chunk's pages */
    CHECK_OK(t_append(st, "b", k, v, total, ids, 0, 0, 20, &sealed));
    CHECK(sealed == 1 && t_stats(st).dram_pages == 3u * G.layers);
    /* spill, restart (write-through: everything is on disk), continue appending */
    CHECK_OK(kvp_store_session_spill(st, NS, "a"));
    kvp_store_close(st);
    st = open_store(dir, 16u << 20, KVP_DURABILITY_WRITE_THROUGH);
    t_check_appended(st, "a", k, v, total, ids, 48);
    t_check_appended(st, "b", k, v, total, ids, 20);
    CHECK_OK(t_append(st, "a", k, v, total, ids, 0, 48, 16, &sealed));
    CHECK(sealed == 1);
    t_check_appended(st, "a", k, v, total, ids, 64);
    kvp_store_close(st);
    kvp_free(k);
    kvp_free(v);
    t_rmrf(dir);
}

/* Pages no session names must not stay on disk: an update that drops chunks, a delete, and
 * loose pages evicted to disk (removed by the sweep at the next open). */
static void case_garbage(void)
{
    char               dir[256];
    kvp_store_h        st;
    kvp_session_desc_t a, b, c;
    kvp_store_stats_t  s;
    uint64_t           span = 12288; /* one 8256-byte test page on disk, 4 KiB aligned */

    t_tmpdir(dir, sizeof(dir), "garbage");
    st = open_store(dir, 16u << 20, KVP_DURABILITY_SPILL);
    t_session(&G, 31, 0, 31, 6, 0, &a);
    t_session(&G, 31, 2, 32, 4, 0, &b); /* shares a's first 2 chunks */
    CHECK_OK(t_put_session(st, NS, "g", &G, &a));
    CHECK_OK(kvp_store_session_spill(st, NS, "g"));
    s = t_stats(st);
    CHECK(s.disk_live_bytes == 6 * G.layers * span && s.disk_files == 1);
    /* update: a's chunks 2..5 are named by nobody now and leave the disk */
    CHECK_OK(t_put_session(st, NS, "g", &G, &b));
    CHECK_OK(kvp_store_session_spill(st, NS, "g"));
    CHECK(t_stats(st).disk_live_bytes == 4 * G.layers * span);
    CHECK_OK(t_check_session(st, NS, "g", &G, &b));
    CHECK_OK(kvp_store_session_delete(st, NS, "g"));
    CHECK(t_stats(st).disk_live_bytes == 0);
    kvp_store_close(st);
    st = open_store(dir, 16u << 20, KVP_DURABILITY_SPILL);
    s  = t_stats(st);
    CHECK(s.disk_files == 0 && s.disk_bytes == 0 && s.sessions == 0);
    kvp_store_close(st);

    /* loose pages pushed to disk by eviction, then a restart: swept */
    st = open_store(dir, 1u << 20, KVP_DURABILITY_SPILL); /* room for ~80 pages */
    t_session(&G, 41, 0, 41, 30, 0, &c);              /* 120 pages, no session put */
    CHECK_OK(t_put_pages(st, NS, &G, &c));
    CHECK(t_stats(st).disk_live_bytes > 0);
    kvp_store_close(st);
    st = open_store(dir, 1u << 20, KVP_DURABILITY_SPILL);
    s  = t_stats(st);
    CHECK(s.swept_pages > 0 && s.disk_live_bytes == 0 && s.disk_files == 0);
    kvp_store_close(st);

    /* write-through updates: a replaced version's pages leave DRAM as well as the disk (they used
     * to stay in DRAM as loose pages, which eviction wrote back to disk, named by nothing) */
    st = open_store(dir, 1u << 20, KVP_DURABILITY_WRITE_THROUGH);
    for (uint64_t v = 50; v < 58; v++) {
        kvp_session_desc_clear(&c);
        t_session(&G, v, 0, v, 4, 0, &c);
        CHECK_OK(t_put_session(st, NS, "w", &G, &c));
    }
    s = t_stats(st);
    CHECK(s.dram_pages == 4 * G.layers && s.disk_live_bytes == 4 * G.layers * span);
    /* its pages put again by a client, then the session naming them deleted before that client's
     * record came: kept for it (loose), the record is taken */
    CHECK_OK(t_put_pages(st, NS, &G, &c));
    CHECK_OK(kvp_store_session_delete(st, NS, "w"));
    CHECK_OK(kvp_store_session_put(st, NS, "w2", &c));
    CHECK_OK(t_check_session(st, NS, "w2", &G, &c));
    CHECK_OK(kvp_store_session_delete(st, NS, "w2")); /* named, not put since: they go */
    s = t_stats(st);
    CHECK(s.dram_pages == 0 && s.disk_live_bytes == 0);
    kvp_store_close(st);
    st = open_store(dir, 1u << 20, KVP_DURABILITY_WRITE_THROUGH);
    CHECK(t_stats(st).swept_pages == 0 && t_stats(st).disk_live_bytes == 0);
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
    kvp_session_desc_clear(&c);
    t_rmrf(dir);
}

/* Pages a client put for a record still on its way outlive their last name, another session's:
 * B puts a prefix's pages, C puts the same pages with its record and is deleted before B's record
 * comes, which is still taken (it used to be refused NOT_FOUND once a second record had named
 * them); once B's record is deleted too, the pages go with it. A put whose record never comes
 * keeps them only for the put grace (300 ms here), then they go from DRAM and disk. */
static void case_put_grace(void)
{
    char               dir[256];
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    kvp_session_desc_t a;
    kvp_store_stats_t  s;

    t_tmpdir(dir, sizeof(dir), "grace");
    p.field_mask   = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                     KVP_STORE_PARAM_DURABILITY | KVP_STORE_PARAM_PUT_GRACE;
    p.dram_budget  = 16u << 20;
    p.db_path      = dir;
    p.durability   = KVP_DURABILITY_WRITE_THROUGH;
    p.put_grace_ms = 300;
    CHECK_OK(kvp_store_open(&p, &st));
    t_session(&G, 61, 0, 61, 2, 0, &a);
    CHECK_OK(t_put_pages(st, NS, &G, &a));        /* B's pages; its record comes later */
    CHECK_OK(t_put_session(st, NS, "c", &G, &a)); /* C: the same pages and its record */
    CHECK_OK(kvp_store_session_delete(st, NS, "c"));
    CHECK_OK(kvp_store_session_put(st, NS, "b", &a)); /* B's record */
    CHECK_OK(t_check_session(st, NS, "b", &G, &a));
    CHECK_OK(kvp_store_session_delete(st, NS, "b")); /* every put matched: they go with it */
    s = t_stats(st);
    CHECK(s.dram_pages == 0 && s.disk_live_bytes == 0);

    CHECK_OK(t_put_session(st, NS, "d", &G, &a));
    CHECK_OK(t_put_pages(st, NS, &G, &a)); /* a put whose record never lands */
    CHECK_OK(kvp_store_session_delete(st, NS, "d"));
    CHECK(t_stats(st).dram_pages == 2 * G.layers); /* waiting out the grace */
    usleep(400 * 1000);
    CHECK_ST(kvp_store_session_delete(st, NS, "none"), KVP_ERR_NOT_FOUND); /* a call: a pass */
    s = t_stats(st);
    CHECK(s.dram_pages == 0 && s.disk_live_bytes == 0);
    kvp_store_close(st);
    CHECK_OK(kvp_store_open(&p, &st));
    CHECK(t_stats(st).swept_pages == 0 && t_stats(st).disk_live_bytes == 0);

    /* the same, with a reader holding the page when its session goes and the put comes: once
     * the reader lets go and the grace is over it goes too (it was never queued for the grace) */
    {
        kvp_page_ref_h ref;
        size_t         len;
        uint8_t       *pg = t_page(&G, a.chunk_keys[0], 0, 0, G.page_tokens, 0, &len);

        CHECK_OK(t_put_session(st, NS, "e", &G, &a));
        CHECK_OK(kvp_store_page_get(st, NS, a.chunk_keys[0], 0, &ref));
        CHECK_OK(kvp_store_session_delete(st, NS, "e"));
        CHECK_OK(kvp_store_page_put(st, NS, pg, len));
        kvp_free(pg);
        kvp_page_ref_release(ref);
        usleep(400 * 1000);
        CHECK_ST(kvp_store_session_delete(st, NS, "none"), KVP_ERR_NOT_FOUND);
        s = t_stats(st);
        CHECK(s.dram_pages == 0 && s.disk_live_bytes == 0);
    }
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    t_rmrf(dir);
}

/* Threads working on their own sessions (sharing a prefix) while the others spill, restore and
 * evict: every get is byte-identical, nothing deadlocks. Each thread runs the store's unlocked
 * disk paths (explicit spill, restore on get, eviction at the end of puts). */
typedef struct {
    kvp_store_h st;
    int         id;
    int         fails;
    uint64_t    ops;
} conc_arg_t;

static void *conc_worker(void *argp)
{
    conc_arg_t *a = argp;
    char        sid[32];

    for (int it = 0; it < 12 && a->fails == 0; it++) {
        kvp_session_desc_t d;

        snprintf(sid, sizeof(sid), "c%d-%d", a->id, it % 3);
        t_session(&G, 500, 2, 600 + (uint64_t)a->id * 100 + (uint64_t)it, 6, it % 2 ? 5 : 0, &d);
        a->fails += t_put_session(a->st, NS, sid, &G, &d) != KVP_OK;
        a->fails += t_check_session(a->st, NS, sid, &G, &d) != KVP_OK;
        a->fails += kvp_store_session_spill(a->st, NS, sid) != KVP_OK;
        a->fails += t_check_session(a->st, NS, sid, &G, &d) != KVP_OK; /* restore */
        if (it % 4 == 3) {
            a->fails += kvp_store_session_delete(a->st, NS, sid) != KVP_OK;
        }
        a->ops += 5;
        kvp_session_desc_clear(&d);
    }
    return NULL;
}

static void case_concurrent_io(void)
{
    char        dir[256];
    kvp_store_h st;
    pthread_t   th[3];
    conc_arg_t  args[3];

    t_tmpdir(dir, sizeof(dir), "conc");
    st = open_store(dir, 2u << 20, KVP_DURABILITY_SPILL); /* ~160 pages: evictions too */
    for (int i = 0; i < 3; i++) {
        args[i] = (conc_arg_t){st, i, 0, 0};
        CHECK(pthread_create(&th[i], NULL, conc_worker, &args[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        if (args[i].fails != 0) {
            fprintf(stderr, "thread %d: %d failed operations\n", i, args[i].fails);
        }
        CHECK(args[i].fails == 0 && args[i].ops == 60);
    }
    CHECK(t_stats(st).restores > 0 && t_stats(st).spills > 0);
    kvp_store_close(st);
    t_rmrf(dir);
}

static int t_key_cmp(const void *a, const void *b)
{
    const kvp_store_session_info_t *x = a, *y = b;

    if (x->ns != y->ns) {
        return x->ns < y->ns ? -1 : 1;
    }
    return strcmp(x->sid, y->sid);
}

/* Listing pages walk every session once in (ns, sid) order, whatever the page size, with "more"
 * set on every page but the last (the store walks its ordered index of sessions from the cursor). */
static void case_session_list_order(void)
{
    enum { N = 600 };
    kvp_store_h               st = open_store(NULL, 8u << 20, KVP_DURABILITY_SPILL);
    kvp_session_desc_t        d;
    kvp_store_session_info_t *want = kvp_calloc(N, sizeof(*want), "test want");
    kvp_store_session_info_t *got  = kvp_calloc(N + 1, sizeof(*got), "test got");
    uint64_t                  seed = 42;
    const uint32_t            pages[] = {1, 7, 64, N - 1, N, N + 1};
    uint32_t                  n;
    int                       more;

    CHECK(want != NULL && got != NULL);
    t_session(&G, 7, 0, 7, 1, 0, &d);
    for (uint64_t k = 0; k < 3; k++) {
        CHECK_OK(t_put_pages(st, NS + k * 977, &G, &d));
    }
    for (uint32_t i = 0; i < N; i++) { /* random sids, unique by the index suffix */
        want[i].ns = NS + (kvp_splitmix64(&seed) % 3) * 977;
        snprintf(want[i].sid, sizeof(want[i].sid), "%llx-%u",
                 (unsigned long long)(kvp_splitmix64(&seed) >> (kvp_splitmix64(&seed) % 60)), i);
        CHECK_OK(kvp_store_session_put(st, want[i].ns, want[i].sid, &d));
    }
    qsort(want, N, sizeof(*want), t_key_cmp);
    for (size_t p = 0; p < sizeof(pages) / sizeof(pages[0]); p++) {
        uint32_t    total = 0;
        uint64_t    cur_ns = 0;
        const char *cur = NULL;

        do {
            CHECK_OK(kvp_store_session_list(st, cur_ns, cur, got, pages[p], &n, &more));
            CHECK(n <= pages[p] && total + n <= N);
            for (uint32_t i = 0; i < n; i++) {
                CHECK(got[i].ns == want[total + i].ns && strcmp(got[i].sid, want[total + i].sid) == 0);
                CHECK(got[i].n_chunks == 1 && got[i].layers == G.layers);
            }
            total += n;
            CHECK(more == (total < N));
            if (n > 0) {
                cur_ns = want[total - 1].ns;
                cur    = want[total - 1].sid;
            }
        } while (more);
        CHECK(total == N);
    }
    CHECK_OK(kvp_store_session_list(st, 0, NULL, got, 0, &n, &more)); /* max 0: only "more" */
    CHECK(n == 0 && more == 1);
    CHECK_OK(kvp_store_session_list(st, want[N - 1].ns, want[N - 1].sid, got, 5, &n, &more));
    CHECK(n == 0 && more == 0);
    kvp_free(want);
    kvp_free(got);
    kvp_session_desc_clear(&d);
    kvp_store_close(st);
}

/* DRAM-only eviction with each allocation of a put in turn failing: the put of a third session
 * (pages, then record) into a budget that holds two drops sessions, and stats.dropped must count
 * each session that went exactly once (a drop whose remove ran out of memory used to be counted,
 * and the same session counted again when it was dropped for real). */
static void case_dram_only_oom(void)
{
    int fired = 1, short_of = 0;

    for (uint64_t n = 1; fired; n++) {
        kvp_store_h        st = open_store(NULL, 256u << 10, KVP_DURABILITY_SPILL);
        kvp_session_desc_t d[3];
        kvp_store_stats_t  a, b;
        char               sid[8];
        uint64_t           gone = 0;
        uint8_t           *pg[8];
        size_t             len[8];

        for (int i = 0; i < 3; i++) { /* 2 chunks x 4 layers of 12 KiB slots: 96 KiB each */
            t_session(&G, 40 + i, 0, 40 + i, 2, 0, &d[i]);
        }
        for (int k = 0; k < 8; k++) { /* made before the failure is armed: it is the store's */
            pg[k] = t_page(&G, d[2].chunk_keys[k / 4], k % 4, (uint64_t)(k / 4) * G.page_tokens,
                           G.page_tokens, 0, &len[k]);
        }
        CHECK_OK(t_put_session(st, NS, "s0", &G, &d[0]));
        CHECK_OK(t_put_session(st, NS, "s1", &G, &d[1]));
        a = t_stats(st);
        kvp_alloc_fail_at(n);
        for (int k = 0; k < 8; k++) {
            (void)kvp_store_page_put(st, NS, pg[k], len[k]);
        }
        (void)kvp_store_session_put(st, NS, "s2", &d[2]);
        fired = !kvp_alloc_fail_armed(); /* else the put needed fewer than n: done */
        kvp_alloc_fail_at(0);
        b = t_stats(st);
        for (int i = 0; i < 2; i++) {
            kvp_session_desc_t got;

            snprintf(sid, sizeof(sid), "s%d", i);
            if (kvp_store_session_get(st, NS, sid, &got) == KVP_OK) {
                kvp_session_desc_clear(&got);
            } else {
                gone++;
            }
        }
        short_of += b.dropped - a.dropped != gone;
        EXPECT(b.dropped - a.dropped == gone, "allocation %llu failing: stats.dropped +%llu, "
               "but %llu sessions were dropped", (unsigned long long)n,
               (unsigned long long)(b.dropped - a.dropped), (unsigned long long)gone);
        for (int i = 0; i < 3; i++) {
            kvp_session_desc_clear(&d[i]);
        }
        for (int k = 0; k < 8; k++) {
            kvp_free(pg[k]);
        }
        kvp_store_close(st);
    }
    CHECK(short_of == 0);
}

typedef struct {
    const char *name;
    void (*fn)(void);
} tcase_t;

static const tcase_t cases[] = {
    {"page_put_get", case_page_put_get},
    {"session_roundtrip", case_session_roundtrip},
    {"prefix_sharing", case_prefix_sharing},
    {"spill_restore_reopen", case_spill_restore_reopen},
    {"spill_restore_timing", case_spill_restore_timing},
    {"evict_watermarks", case_evict_watermarks},
    {"idle_ttl", case_idle_ttl},
    {"corrupt_on_disk", case_corrupt_on_disk},
    {"disk_full", case_disk_full},
    {"big_session", case_big_session},
    {"dram_only", case_dram_only},
    {"dram_only_oom", case_dram_only_oom},
    {"tail_append", case_tail_append},
    {"garbage", case_garbage},
    {"put_grace", case_put_grace},
    {"concurrent_io", case_concurrent_io},
    {"session_list_order", case_session_list_order},
};

int main(int argc, char **argv)
{
    int ran = 0;

    if (getenv("KVP_LOG_LEVEL") == NULL) {
        kvp_log_set_level(KVP_LOG_LVL_ERROR);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) {
            int64_t live = kvp_alloc_live_count();

            fprintf(stderr, "[ RUN ] %s\n", cases[i].name);
            cases[i].fn();
            if (kvp_alloc_live_count() != live) {
                fprintf(stderr, "%s: %lld allocations leaked\n", cases[i].name,
                        (long long)(kvp_alloc_live_count() - live));
                return 1;
            }
            fprintf(stderr, "[  OK ] %s\n", cases[i].name);
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    return kvp_test_result("test_store"); /* the EXPECTs' count */
}
