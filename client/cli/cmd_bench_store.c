/* cmd_bench_store.c - "kvpack bench store": session spill and restore GB/s of the node store
 * against raw sequential write/read of the same number of bytes to the same filesystem in the
 * same run (O_DIRECT when the filesystem allows it, buffered + fdatasync otherwise, and the JSON
 * says which), plus put/get/lookup ops/s on the in-memory index. Spill is timed until
 * kvp_store_session_spill returns, i.e. until the bytes are durable (segment file fdatasync'd,
 * then locators and record in an fsync'd WAL); restore is timed cold: after a restart, with the
 * db files dropped from the page cache (POSIX_FADV_DONTNEED; segment files are read with
 * O_DIRECT anyway), as is the raw file before its read. Then the background spiller's rate on
 * many small sessions, one sync per session (spill_group_max 1) against group commit, and one
 * segment compaction against a raw read + write of the bytes it moved. Never asserts on speed. */
#define _GNU_SOURCE /* O_DIRECT */
#include "cli.h"
#include "proc.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/page.h"
#include "kvpack/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS      0xbe4cu
#define RAW_BLK (16u << 20) /* the store's segment runs are up to 16 MiB per pwritev/preadv */

typedef struct {
    const char *dir;
    uint64_t    sessions, chunks, layers, heads, head_dim, tokens, index_pages;
    uint64_t    small_sessions, small_pages, group;
    bool        json, keep;
} opts_t;

/* The background spiller on small sessions at one spill_group_max. */
typedef struct {
    uint64_t group, spills, syncs, bytes;
    double   secs;
} spiller_run_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench store [options]\n"
            "  spill/restore GB/s of whole sessions vs raw sequential write/read of as many bytes\n"
            "  (rounded up to 16 MiB blocks)\n"
            "  on the same filesystem (O_DIRECT when possible), the background spiller on small\n"
            "  sessions, one compaction of half-dead segment files vs a raw copy of what it\n"
            "  moved, and index put/get/lookup ops/s.\n"
            "options:\n"
            "  --dir DIR          where the db and the raw file go (default $TMPDIR or /tmp)\n"
            "  --sessions N       sessions spilled and restored (default 8)\n"
            "  --chunks N         chunks per session (default 16)\n"
            "  --layers N         layers (default 16)\n"
            "  --heads N --head-dim N --tokens N   page geometry, fp16 pages (default 8 128 32:\n"
            "                     128 KiB pages, 32 MiB sessions, 256 MiB in all)\n"
            "  --index-pages N    pages in the in-memory index benchmark (default 65536)\n"
            "  --small-sessions N small sessions the background spiller writes (default 256; 0: skip)\n"
            "  --small-pages N    pages per small session (default 2, one chunk x N layers)\n"
            "  --group N          spill_group_max compared with 1 (default 64)\n"
            "  --keep             leave the files behind\n"
            "  --json             machine-readable output\n");
}

/* One fp16 page with random payload (sealed: it passes kvp_page_parse). */
static size_t make_page(const opts_t *o, kvp_key128_t key, uint32_t layer, uint8_t *out)
{
    return kvp_cli_fp16_page((uint32_t)o->heads, (uint32_t)o->head_dim, (uint32_t)o->tokens, key,
                             layer, key.lo ^ layer, out);
}

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);

    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void drop_cache_dir(const char *dir)
{
    DIR           *dp = opendir(dir);
    struct dirent *e;
    char           path[1024];

    if (dp == NULL) {
        return;
    }
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            drop_cache(path);
        }
    }
    closedir(dp);
}

/* The run's directory, removed at exit however the run ends (a failed step used to leave it,
 * with a raw file as large as the run's data); empty with --keep or once removed. */
static char bs_dir[PATH_MAX];

static void bs_dir_remove(void)
{
    if (bs_dir[0] == '\0') {
        return;
    }
    if (kvp_proc_rm_rf(bs_dir, 60000) != 0) {
        fprintf(stderr, "kvpack: could not remove %s\n", bs_dir);
    }
    bs_dir[0] = '\0';
}

/* Raw sequential write then read of bytes to path: GB/s of each. */
static int raw_io(const char *path, uint64_t bytes, double *wr_gbs, double *rd_gbs, bool *direct_p)
{
    uint8_t *buf = kvp_aligned_alloc(4096, RAW_BLK, "bench raw");
    uint64_t s   = 7, done;
    int      fd;
    double   t0;
    bool     direct = true;

    if (buf == NULL) {
        return -1;
    }
    for (size_t i = 0; i < RAW_BLK; i += 8) {
        uint64_t r = kvp_splitmix64(&s);

        memcpy(buf + i, &r, 8);
    }
    bytes = (bytes + RAW_BLK - 1) / RAW_BLK * RAW_BLK;
    fd    = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        direct = false;
        fd     = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    }
    if (fd < 0) {
        fprintf(stderr, "kvpack: cannot create %s: %s\n", path, strerror(errno));
        kvp_free(buf);
        return -1;
    }
    t0 = kvp_time_s();
    for (done = 0; done < bytes; done += RAW_BLK) {
        ssize_t w;

        buf[0] = (uint8_t)done; /* every block distinct */
        if ((w = write(fd, buf, RAW_BLK)) != (ssize_t)RAW_BLK) { /* short: no errno set */
            fprintf(stderr, "kvpack: write to %s failed: %s\n", path,
                    w < 0 ? strerror(errno) : "short write (the disk is full?)");
            close(fd);
            kvp_free(buf);
            return -1;
        }
    }
    fdatasync(fd);
    *wr_gbs = (double)bytes / (kvp_time_s() - t0) / 1e9;
    close(fd);
    drop_cache(path);
    fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) {
        kvp_free(buf);
        return -1;
    }
    t0 = kvp_time_s();
    for (done = 0; done < bytes;) {
        ssize_t n = read(fd, buf, RAW_BLK);

        if (n <= 0) {
            break;
        }
        done += (uint64_t)n;
    }
    *rd_gbs = (double)done / (kvp_time_s() - t0) / 1e9;
    close(fd);
    kvp_free(buf);
    *direct_p = direct;
    return 0;
}

static kvp_store_h open_store(const char *dir, size_t budget)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    kvp_status_t       s;

    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | (dir ? KVP_STORE_PARAM_DB_PATH : 0);
    p.dram_budget = budget;
    p.db_path     = dir;
    s             = kvp_store_open(&p, &st);
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack: store open failed: %s\n", kvp_status_str(s));
        return NULL;
    }
    return st;
}

static kvp_key128_t key_of(uint64_t sess, uint64_t chunk)
{
    uint64_t     s = sess * 1000003ull + chunk + 1;
    kvp_key128_t k;

    k.lo = kvp_splitmix64(&s);
    k.hi = kvp_splitmix64(&s);
    return k;
}

/* Index micro-benchmark on a DRAM-only store: page put, page get+release, lookup. */
static int bench_index(const opts_t *o, double *put_ops, double *get_ops, double *lookup_ops,
                       double *probe_ops)
{
    opts_t       small = *o;
    uint8_t      page[KVP_PAGE_HDR_BYTES + 4096];
    uint64_t     n     = o->index_pages, layers = 4, nchunk = n / layers, lookups;
    size_t       len;
    kvp_store_h  st;
    kvp_key128_t keys[16];
    double       t0;

    small.heads = 1, small.head_dim = 32, small.tokens = 16; /* 2 KiB pages */
    st = open_store(NULL, (size_t)(n + 64) * 2176 * 2); /* stays under the high watermark */
    if (st == NULL) {
        return -1;
    }
    len = make_page(&small, key_of(0, 0), 0, page);
    t0  = kvp_time_s();
    for (uint64_t c = 0; c < nchunk; c++) {
        for (uint32_t l = 0; l < layers; l++) {
            kvp_page_info_t info = {0};

            /* re-key the template: header fields + seal (the CRC is part of a real put) */
            kvp_page_parse(page, len, &info);
            info.chunk_key = key_of(1, c);
            info.layer     = l;
            kvp_page_hdr_write(&info, page);
            kvp_page_seal(page);
            if (kvp_store_page_put(st, NS, page, len) != KVP_OK) {
                kvp_store_close(st);
                return -1;
            }
        }
    }
    *put_ops = (double)(nchunk * layers) / (kvp_time_s() - t0);
    t0       = kvp_time_s();
    for (uint64_t i = 0; i < nchunk * layers; i++) {
        kvp_page_ref_h ref;

        if (kvp_store_page_get(st, NS, key_of(1, (i * 7919) % nchunk), (uint32_t)(i % layers),
                               &ref) != KVP_OK) {
            kvp_store_close(st);
            return -1;
        }
        kvp_page_ref_release(ref);
    }
    *get_ops = (double)(nchunk * layers) / (kvp_time_s() - t0);
    lookups  = nchunk;
    t0       = kvp_time_s();
    for (uint64_t i = 0; i < lookups; i++) {
        uint32_t hit;
        uint64_t base = (i * 16) % (nchunk > 16 ? nchunk - 16 : 1);

        for (int k = 0; k < 16; k++) {
            keys[k] = key_of(1, base + (uint64_t)k);
        }
        kvp_store_lookup(st, NS, keys, 16, (uint32_t)layers, &hit);
    }
    *lookup_ops = (double)lookups / (kvp_time_s() - t0);
    *probe_ops  = *lookup_ops * 16 * (double)layers;
    kvp_store_close(st);
    return 0;
}

/* The background spiller on o->small_sessions sessions of small_pages pages: every session is put
 * with the high watermark just below the last one, so that put starts a round down to 1 %: time
 * from its return to kvp_store_quiesce, i.e. the spiller's own rate with no puts competing. */
static int bench_spiller(const opts_t *o, const char *db, uint64_t group, spiller_run_t *r)
{
    kvp_store_params_t p   = {0};
    size_t             slot = (size_t)((KVP_PAGE_HDR_BYTES + 2 * o->heads * o->head_dim *
                                        o->tokens * 2 + 4095) & ~4095ull);
    size_t             sess = slot * o->small_pages, total = sess * o->small_sessions;
    uint8_t           *page = kvp_malloc(slot, "bench page");
    kvp_session_desc_t d;
    kvp_key128_t       key;
    kvp_store_h        st;
    kvp_store_stats_t  stats;
    kvp_status_t       status = KVP_OK;
    size_t             plen;
    double             t0;

    p.field_mask      = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                        KVP_STORE_PARAM_HIGH_WM | KVP_STORE_PARAM_LOW_WM |
                        KVP_STORE_PARAM_SPILL_GROUP;
    p.dram_budget     = total + (1u << 20);
    p.high_watermark  = ((double)total - (double)sess / 2) / (double)p.dram_budget;
    p.low_watermark   = 0.01;
    p.db_path         = db;
    p.spill_group_max = (uint32_t)group;
    if (page == NULL || kvp_store_open(&p, &st) != KVP_OK) {
        kvp_free(page);
        return -1;
    }
    memset(&d, 0, sizeof(d));
    d.layers      = (uint32_t)o->small_pages;
    d.page_tokens = (uint32_t)o->tokens;
    d.n_chunks    = 1;
    d.chunk_keys  = &key;
    t0            = kvp_time_s();
    for (uint64_t s = 0; s < o->small_sessions && status == KVP_OK; s++) {
        char sid[32];

        snprintf(sid, sizeof(sid), "small-%llu", (unsigned long long)s);
        key = key_of(s + 1000003, 0);
        for (uint32_t l = 0; l < d.layers && status == KVP_OK; l++) {
            plen   = make_page(o, key, l, page);
            status = kvp_store_page_put(st, NS, page, plen);
        }
        if (status == KVP_OK) {
            status = kvp_store_session_put(st, NS, sid, &d);
        }
        t0 = kvp_time_s(); /* the last put is the one that starts the round */
    }
    if (status == KVP_OK) {
        (void)kvp_store_quiesce(st);
    }
    r->secs = kvp_time_s() - t0;
    kvp_store_stats(st, &stats);
    kvp_store_close(st);
    kvp_free(page);
    r->group  = group;
    r->spills = stats.spills;
    r->syncs  = stats.spill_syncs;
    r->bytes  = stats.spill_bytes;
    if (status != KVP_OK || stats.disk_errors != 0) {
        fprintf(stderr, "kvpack: bench store: small sessions: %s\n", kvp_status_str(status));
        return -1;
    }
    return 0;
}

/* Compaction: o->sessions sessions put and spilled two per segment file, every odd one deleted
 * (each full file half dead), then one kvp_store_compact after a restart, timed; every kept
 * session is read back afterwards (not timed). */
typedef struct {
    uint64_t moved, freed, segments, errors, lock_max_ns;
    double   secs;
} compact_run_t;

static int bench_compact(const opts_t *o, const char *db, size_t plen, compact_run_t *r)
{
    kvp_store_params_t p = {0};
    uint64_t           sess_disk = o->chunks * o->layers * ((plen + 4095) & ~(size_t)4095);
    uint8_t           *page = kvp_malloc(plen + 64, "bench page");
    kvp_key128_t      *keys = kvp_malloc(o->chunks * sizeof(*keys), "bench keys");
    kvp_session_desc_t d;
    kvp_store_h        st;
    kvp_store_stats_t  stats;
    kvp_status_t       status = KVP_OK;
    double             t0;

    memset(r, 0, sizeof(*r));
    p.field_mask         = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                           KVP_STORE_PARAM_COMPACT | KVP_STORE_PARAM_SEGMENT_BYTES;
    p.dram_budget        = (size_t)(sess_disk * 2 + (64u << 20));
    p.db_path            = db;
    p.compact_dead_ratio = 0; /* no thread: the pass below is the one timed */
    p.segment_bytes      = 2 * sess_disk;
    if (page == NULL || keys == NULL || kvp_store_open(&p, &st) != KVP_OK) {
        kvp_free(page);
        kvp_free(keys);
        return -1;
    }
    memset(&d, 0, sizeof(d));
    d.layers      = (uint32_t)o->layers;
    d.page_tokens = (uint32_t)o->tokens;
    d.n_chunks    = (uint32_t)o->chunks;
    d.chunk_keys  = keys;
    for (uint64_t sn = 0; sn < o->sessions && status == KVP_OK; sn++) {
        char sid[32];

        snprintf(sid, sizeof(sid), "compact-%llu", (unsigned long long)sn);
        for (uint64_t c = 0; c < o->chunks && status == KVP_OK; c++) {
            keys[c] = key_of(sn + 7000003, c);
            for (uint32_t l = 0; l < o->layers && status == KVP_OK; l++) {
                make_page(o, keys[c], l, page);
                status = kvp_store_page_put(st, NS, page, plen);
            }
        }
        status = status == KVP_OK ? kvp_store_session_put(st, NS, sid, &d) : status;
        status = status == KVP_OK ? kvp_store_session_spill(st, NS, sid) : status;
    }
    for (uint64_t sn = 1; sn < o->sessions && status == KVP_OK; sn += 2) {
        char sid[32];

        snprintf(sid, sizeof(sid), "compact-%llu", (unsigned long long)sn);
        status = kvp_store_session_delete(st, NS, sid);
    }
    kvp_store_close(st);
    drop_cache_dir(db);
    if (status == KVP_OK && kvp_store_open(&p, &st) == KVP_OK) {
        t0     = kvp_time_s();
        status = kvp_store_compact(st, 0.5);
        r->secs = kvp_time_s() - t0;
        for (uint64_t sn = 0; sn < o->sessions; sn += 2) {
            char               sid[32];
            kvp_session_desc_t got;

            snprintf(sid, sizeof(sid), "compact-%llu", (unsigned long long)sn);
            if (kvp_store_session_get(st, NS, sid, &got) == KVP_OK) {
                kvp_session_desc_clear(&got);
                kvp_store_session_spill(st, NS, sid);
            } else {
                r->errors++;
            }
        }
        kvp_store_stats(st, &stats);
        kvp_store_close(st);
        r->moved    = stats.compact_moved_bytes;
        r->freed    = stats.compact_freed_bytes;
        r->lock_max_ns = stats.compact_lock_max_ns;
        r->segments = stats.compact_segments;
        r->errors += stats.crc_failures + stats.disk_errors;
    } else if (status == KVP_OK) {
        status = KVP_ERR_IO;
    }
    kvp_free(page);
    kvp_free(keys);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack: bench store: compaction: %s\n", kvp_status_str(status));
        return -1;
    }
    return 0;
}

static void spiller_json(kvp_json_t *j, const spiller_run_t *r)
{
    kvp_json_obj(j, NULL);
    kvp_json_int(j, "spill_group_max", (int64_t)r->group);
    kvp_json_int(j, "spills", (int64_t)r->spills);
    kvp_json_int(j, "syncs", (int64_t)r->syncs);
    kvp_json_int(j, "bytes", (int64_t)r->bytes);
    kvp_json_num(j, "seconds", r->secs);
    kvp_json_num(j, "sessions_per_s", (double)r->spills / r->secs);
    kvp_json_num(j, "mb_per_s", (double)r->bytes / r->secs / 1e6);
    kvp_json_close(j);
}

int kvp_cmd_bench_store(int argc, char **argv)
{
    opts_t            o = {NULL, 8, 16, 16, 8, 128, 32, 65536, 256, 2, 64, false, false};
    spiller_run_t     sp[2];
    compact_run_t     cr;
    double            raw_copy_s = 0;
    int64_t           wb0, spill_dev;
    uint64_t          spill_logical, spill_seg;
    int               nsp = 0;
    char              dir[512], db[600], raw[600];
    const char       *base;
    uint8_t          *page;
    size_t            plen = 0;
    uint64_t          sess_bytes, total;
    double            raw_wr = 0, raw_rd = 0, t_spill = 0, t_restore = 0, t0, restart_ms;
    double            put_ops = 0, get_ops = 0, lookup_ops = 0, probe_ops = 0;
    bool              direct = false;
    kvp_store_h       st;
    kvp_store_stats_t stats;
    kvp_session_desc_t d;
    kvp_key128_t     *keys;

    for (int i = 1; i < argc; i++) {
        if (kvp_opt_flag(argv, i, "--help") || kvp_opt_flag(argv, i, "-h")) {
            usage(stdout);
            return 0;
        } else if (kvp_opt_flag(argv, i, "--json")) {
            o.json = true;
        } else if (kvp_opt_flag(argv, i, "--keep")) {
            o.keep = true;
        } else if (kvp_opt_str(argc, argv, &i, "--dir", &o.dir) ||
                   kvp_opt_u64(argc, argv, &i, "--sessions", &o.sessions) ||
                   kvp_opt_u64(argc, argv, &i, "--chunks", &o.chunks) ||
                   kvp_opt_u64(argc, argv, &i, "--layers", &o.layers) ||
                   kvp_opt_u64(argc, argv, &i, "--heads", &o.heads) ||
                   kvp_opt_u64(argc, argv, &i, "--head-dim", &o.head_dim) ||
                   kvp_opt_u64(argc, argv, &i, "--tokens", &o.tokens) ||
                   kvp_opt_u64(argc, argv, &i, "--index-pages", &o.index_pages) ||
                   kvp_opt_u64(argc, argv, &i, "--small-sessions", &o.small_sessions) ||
                   kvp_opt_u64(argc, argv, &i, "--small-pages", &o.small_pages) ||
                   kvp_opt_u64(argc, argv, &i, "--group", &o.group)) {
            continue;
        } else {
            return kvp_opt_unknown("bench store", argv[i]);
        }
    }
    if (!kvp_cli_range("bench store", "--sessions", o.sessions, 1, 100000) ||
        !kvp_cli_range("bench store", "--chunks", o.chunks, 1, 65536) ||
        !kvp_cli_range("bench store", "--layers", o.layers, 1, 65535) ||
        !kvp_cli_range("bench store", "--index-pages", o.index_pages, 64, 1u << 26) ||
        !kvp_cli_range("bench store", "--small-sessions", o.small_sessions, 0, 1000000) ||
        !kvp_cli_range("bench store", "--small-pages", o.small_pages, 1, 65535) ||
        !kvp_cli_range("bench store", "--group", o.group, 1, 65536) ||
        !kvp_cli_geometry("bench store", "--heads", o.heads, "--head-dim", o.head_dim, "--tokens",
                          o.tokens)) {
        return 2;
    }
    if (kvp_codec_payload_bytes(KVP_CODEC_FP16, (uint32_t)o.heads, (uint32_t)o.head_dim,
                                (uint32_t)o.tokens, (uint32_t)o.tokens) == 0) {
        return kvp_cli_usage_error("bench store", "fp16 does not take --heads %llu x --head-dim "
                                   "%llu with --tokens %llu (it takes %s)",
                                   (unsigned long long)o.heads, (unsigned long long)o.head_dim,
                                   (unsigned long long)o.tokens,
                                   kvp_codec_geometry_rule(KVP_CODEC_FP16));
    }
    if (o.dir != NULL && o.dir[0] == '\0') { /* "" would put the store under / */
        return kvp_cli_usage_error("bench store", "--dir wants a directory, got ''");
    }
    if (getenv("KVP_LOG_LEVEL") == NULL) {
        kvp_log_set_level(KVP_LOG_LVL_WARN);
    }
    base = o.dir ? o.dir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(dir, sizeof(dir), "%s/kvp-bench-store-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "kvpack: cannot create a directory under %s: %s\n", base, strerror(errno));
        return 1;
    }
    if (!o.keep) {
        snprintf(bs_dir, sizeof(bs_dir), "%s", dir);
        atexit(bs_dir_remove);
    }
    snprintf(db, sizeof(db), "%s/db", dir);
    snprintf(raw, sizeof(raw), "%s/raw.bin", dir);
    page = kvp_malloc(KVP_PAGE_HDR_BYTES + 2 * o.heads * o.head_dim * o.tokens * 2 + 64,
                      "bench page");
    keys = kvp_malloc(o.chunks * sizeof(*keys), "bench keys");
    if (page == NULL || keys == NULL) {
        return 1;
    }
    plen       = make_page(&o, key_of(0, 0), 0, page);
    sess_bytes = o.chunks * o.layers * plen;
    total      = sess_bytes * o.sessions;

    /* 1. raw baseline on the same filesystem */
    if (raw_io(raw, total, &raw_wr, &raw_rd, &direct) != 0) {
        return 1;
    }
    unlink(raw);

    /* 2. spill: each session is put (untimed), then spilled (timed, durable on return) */
    st = open_store(db, (size_t)(sess_bytes * 2 + (64u << 20)));
    wb0 = kvp_proc_write_bytes();
    if (st == NULL) {
        return 1;
    }
    memset(&d, 0, sizeof(d));
    d.layers      = (uint32_t)o.layers;
    d.page_tokens = (uint32_t)o.tokens;
    d.n_chunks    = (uint32_t)o.chunks;
    d.chunk_keys  = keys;
    for (uint64_t s = 0; s < o.sessions; s++) {
        char         sid[32];
        kvp_status_t status = KVP_OK;

        snprintf(sid, sizeof(sid), "bench-%llu", (unsigned long long)s);
        for (uint64_t c = 0; c < o.chunks && status == KVP_OK; c++) {
            keys[c] = key_of(s + 2, c);
            for (uint32_t l = 0; l < o.layers && status == KVP_OK; l++) {
                make_page(&o, keys[c], l, page);
                status = kvp_store_page_put(st, NS, page, plen);
            }
        }
        if (status == KVP_OK) {
            status = kvp_store_session_put(st, NS, sid, &d);
        }
        t0 = kvp_time_s();
        if (status == KVP_OK) {
            status = kvp_store_session_spill(st, NS, sid);
        }
        t_spill += kvp_time_s() - t0;
        if (status != KVP_OK) {
            fprintf(stderr, "kvpack: bench store: session %s: %s\n", sid, kvp_status_str(status));
            kvp_store_close(st);
            return 1;
        }
        kvp_progress("spill", s + 1, o.sessions);
    }
    kvp_store_stats(st, &stats);
    kvp_store_close(st); /* its last WAL and memtable writes count too */
    spill_logical = stats.disk_logical_bytes;
    spill_seg     = stats.disk_segment_write_bytes;
    spill_dev     = wb0 >= 0 && kvp_proc_write_bytes() >= wb0 ? kvp_proc_write_bytes() - wb0 : -1;

    /* 3. restart, cold page cache, restore every session */
    drop_cache_dir(db);
    t0         = kvp_time_s();
    st         = open_store(db, (size_t)(sess_bytes * 2 + (64u << 20)));
    restart_ms = (kvp_time_s() - t0) * 1e3;
    if (st == NULL) {
        return 1;
    }
    for (uint64_t s = 0; s < o.sessions; s++) {
        char               sid[32];
        kvp_session_desc_t got;
        kvp_status_t       status;

        snprintf(sid, sizeof(sid), "bench-%llu", (unsigned long long)s);
        t0     = kvp_time_s();
        status = kvp_store_session_get(st, NS, sid, &got);
        t_restore += kvp_time_s() - t0;
        if (status != KVP_OK) {
            fprintf(stderr, "kvpack: bench store: restore %s: %s\n", sid, kvp_status_str(status));
            kvp_store_close(st);
            return 1;
        }
        kvp_session_desc_clear(&got);
        kvp_store_session_spill(st, NS, sid); /* clean: frees DRAM without writing */
        kvp_progress("restore", s + 1, o.sessions);
    }
    kvp_progress_done();
    kvp_store_stats(st, &stats);
    kvp_store_close(st);

    /* 4. the background spiller on small sessions: one sync per session, then group commit */
    for (int k = 0; k < 2 && o.small_sessions > 0; k++, nsp++) {
        char sdb[640];

        snprintf(sdb, sizeof(sdb), "%s/small-%d", dir, k);
        if (bench_spiller(&o, sdb, k == 0 ? 1 : o.group, &sp[k]) != 0) {
            return 1;
        }
        kvp_progress("small sessions", (uint64_t)k + 1, 2);
    }
    kvp_progress_done();

    /* 5. compaction of half-dead segment files, against copying the bytes it moved raw */
    {
        char cdb[640];

        snprintf(cdb, sizeof(cdb), "%s/compact", dir);
        if (bench_compact(&o, cdb, plen, &cr) != 0) {
            return 1;
        }
        raw_copy_s = (double)cr.moved / (raw_rd * 1e9) + (double)cr.moved / (raw_wr * 1e9);
        kvp_progress("compaction", 1, 1);
        kvp_progress_done();
    }

    /* 6. in-memory index */
    if (bench_index(&o, &put_ops, &get_ops, &lookup_ops, &probe_ops) != 0) {
        fprintf(stderr, "kvpack: bench store: index benchmark failed\n");
        return 1;
    }
    bs_dir_remove(); /* --keep: nothing to do */
    {
        double spill_gbs   = (double)total / t_spill / 1e9;
        double restore_gbs = (double)total / t_restore / 1e9;

        if (o.json) {
            kvp_json_t j;

            kvp_json_begin(&j, stdout);
            kvp_json_str(&j, "bench", "store");
            kvp_json_str(&j, "dir", base);
            kvp_json_bool(&j, "o_direct", direct);
            kvp_json_str(&j, "raw_io", direct ? "O_DIRECT 16 MiB blocks + fdatasync"
                                              : "buffered 16 MiB blocks + fdatasync (no O_DIRECT)");
            kvp_json_str(&j, "restore_cache", "cold (POSIX_FADV_DONTNEED after restart)");
            kvp_json_int(&j, "page_bytes", (int64_t)plen);
            kvp_json_int(&j, "session_bytes", (int64_t)sess_bytes);
            kvp_json_int(&j, "sessions", (int64_t)o.sessions);
            kvp_json_int(&j, "total_bytes", (int64_t)total);
            kvp_json_num(&j, "raw_write_gbs", raw_wr);
            kvp_json_num(&j, "raw_read_gbs", raw_rd);
            kvp_json_num(&j, "spill_gbs", spill_gbs);
            kvp_json_num(&j, "restore_gbs", restore_gbs);
            kvp_json_num(&j, "spill_vs_raw_write", spill_gbs / raw_wr);
            kvp_json_num(&j, "restore_vs_raw_read", restore_gbs / raw_rd);
            kvp_json_num(&j, "warm_restart_ms", restart_ms);
            /* what the spills wrote: logical (pages + records), segment file bytes, and all the
             * process's disk writes (segments, WAL, flushes, compactions) over the logical bytes */
            kvp_json_int(&j, "spill_logical_bytes", (int64_t)spill_logical);
            kvp_json_int(&j, "spill_segment_write_bytes", (int64_t)spill_seg);
            if (spill_dev >= 0) {
                kvp_json_int(&j, "spill_device_write_bytes", spill_dev);
                kvp_json_num(&j, "spill_write_amplification",
                             spill_logical ? (double)spill_dev / (double)spill_logical : 0.0);
            }
            kvp_json_int(&j, "spills", (int64_t)stats.spills);
            kvp_json_int(&j, "restores", (int64_t)stats.restores);
            kvp_json_int(&j, "crc_failures", (int64_t)stats.crc_failures);
            kvp_json_obj(&j, "small_sessions");
            kvp_json_int(&j, "sessions", (int64_t)o.small_sessions);
            kvp_json_int(&j, "session_bytes", (int64_t)(o.small_pages * plen));
            kvp_json_arr(&j, "runs");
            for (int k = 0; k < nsp; k++) {
                spiller_json(&j, &sp[k]);
            }
            kvp_json_close(&j);
            if (nsp == 2) {
                kvp_json_num(&j, "group_speedup", sp[0].secs / sp[1].secs);
                kvp_json_num(&j, "group_vs_raw_write",
                             (double)sp[1].bytes / sp[1].secs / 1e9 / raw_wr);
            }
            kvp_json_close(&j);
            kvp_json_obj(&j, "compaction");
            kvp_json_str(&j, "setup", "sessions two per segment file, every odd one deleted, "
                                      "one compaction after a restart (cold cache)");
            kvp_json_int(&j, "moved_bytes", (int64_t)cr.moved);
            kvp_json_int(&j, "segments_removed", (int64_t)cr.segments);
            kvp_json_int(&j, "freed_bytes", (int64_t)cr.freed);
            kvp_json_num(&j, "seconds", cr.secs);
            kvp_json_num(&j, "moved_gbs", (double)cr.moved / cr.secs / 1e9);
            kvp_json_num(&j, "raw_copy_seconds", raw_copy_s);
            kvp_json_num(&j, "compact_vs_raw_copy", raw_copy_s / cr.secs);
            kvp_json_int(&j, "errors", (int64_t)cr.errors);
            kvp_json_num(&j, "tier_lock_max_ms", (double)cr.lock_max_ns / 1e6);
            kvp_json_close(&j);
            kvp_json_obj(&j, "index");
            kvp_json_int(&j, "pages", (int64_t)(o.index_pages / 4 * 4));
            kvp_json_int(&j, "page_bytes", KVP_PAGE_HDR_BYTES + 2 * 16 * 32 * 2);
            kvp_json_num(&j, "put_ops", put_ops);
            kvp_json_num(&j, "get_ops", get_ops);
            kvp_json_num(&j, "lookup_ops", lookup_ops);
            kvp_json_num(&j, "lookup_probe_ops", probe_ops);
            kvp_json_close(&j);
            kvp_json_end(&j);
        } else {
            printf("store bench: %llu sessions x %.1f MiB (%zu-byte fp16 pages) in %s\n",
                   (unsigned long long)o.sessions, (double)sess_bytes / 1048576.0, plen, base);
            printf("  raw write %.2f GB/s, raw read %.2f GB/s (%s)\n", raw_wr, raw_rd,
                   direct ? "O_DIRECT" : "buffered, O_DIRECT unsupported here");
            printf("  spill     %.2f GB/s  = %.2f x raw write\n", spill_gbs, spill_gbs / raw_wr);
            printf("  restore   %.2f GB/s  = %.2f x raw read (cold cache)\n", restore_gbs,
                   restore_gbs / raw_rd);
            printf("  warm restart %.1f ms\n", restart_ms);
            if (spill_dev >= 0 && spill_logical > 0) {
                printf("  spill writes: %.1f MiB logical, %.1f MiB to segment files, %.1f MiB "
                       "sent to the device in all: write amplification %.3f\n",
                       (double)spill_logical / 1048576.0, (double)spill_seg / 1048576.0,
                       (double)spill_dev / 1048576.0, (double)spill_dev / (double)spill_logical);
            }
            for (int k = 0; k < nsp; k++) {
                printf("  spiller, %llu sessions of %llu pages, group %llu: %.0f sessions/s, "
                       "%.0f MB/s (%llu syncs for %llu spills)\n",
                       (unsigned long long)o.small_sessions, (unsigned long long)o.small_pages,
                       (unsigned long long)sp[k].group, (double)sp[k].spills / sp[k].secs,
                       (double)sp[k].bytes / sp[k].secs / 1e6, (unsigned long long)sp[k].syncs,
                       (unsigned long long)sp[k].spills);
            }
            printf("  compaction: moved %.1f MiB, removed %llu files (%.1f MiB) in %.3f s = %.2f x "
                   "a raw read + write of those bytes (%.3f s), tier lock held at most %.1f ms%s\n",
                   (double)cr.moved / 1048576.0, (unsigned long long)cr.segments,
                   (double)cr.freed / 1048576.0, cr.secs, raw_copy_s / cr.secs, raw_copy_s,
                   (double)cr.lock_max_ns / 1e6, cr.errors ? ", WITH ERRORS" : "");
            printf("  index: put %.0f/s, get %.0f/s, lookup %.0f/s (16 chunks x 4 layers each)\n",
                   put_ops, get_ops, lookup_ops);
        }
    }
    kvp_free(page);
    kvp_free(keys);
    return 0;
}
