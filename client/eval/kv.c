/* kv.c - KV tensors for evaluation: allocation, the documented synthetic generator (eval.h) and
 * the .kvd reader/writer (header validated against the file size before any allocation). */
#include "eval.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/rand.h"
#include "kvpack/file.h"
#include "kvpack/log.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOD "kvd" /* .kvd files and KV tensors: used by eval, put, get and model */

#define KVD_MAGIC   0x3144564Bu /* "KVD1" */
#define KVD_VERSION 1u
#define KVD_HDR     24u
#define KVD_MAX_ELEMS (1ull << 32) /* per tensor: 16 GiB of fp32 */

/* Elements per tensor of this geometry; 0 when a dimension is 0 or the count passes
 * KVD_MAX_ELEMS. Multiplied one factor at a time, each step checked: the plain 4-way product of
 * u32s can wrap (10256 x 6700417 x 4096 x 65536 = 2^64 + 2^32, each within the .kvd bounds), and
 * a wrapped count that matched a file's size would size buffers far smaller than the dimensions
 * they are read with. */
static uint64_t kv_elems(uint32_t layers, uint32_t tokens, uint32_t heads, uint32_t head_dim)
{
    const uint32_t dims[4] = {layers, tokens, heads, head_dim};
    uint64_t       n       = 1;

    for (int i = 0; i < 4; i++) { /* n <= 2^32 and dims[i] < 2^32: no step can overflow */
        n *= dims[i];
        if (n == 0 || n > KVD_MAX_ELEMS) {
            return 0;
        }
    }
    return n;
}

/* kvp_kv_alloc without its log line: for kvp_kvd_read, which prints nothing and says why in its
 * own words (the CLI's one error line would otherwise follow a second one from here). */
static kvp_status_t kv_alloc_quiet(kvp_kv_t *kv, uint32_t layers, uint32_t tokens,
                                   uint32_t heads, uint32_t head_dim)
{
    uint64_t n = kv_elems(layers, tokens, heads, head_dim);

    memset(kv, 0, sizeof(*kv));
    if (n == 0) {
        return KVP_ERR_INVALID;
    }
    kv->k = kvp_malloc(n * sizeof(float), "eval kv");
    kv->v = kvp_malloc(n * sizeof(float), "eval kv");
    if (kv->k == NULL || kv->v == NULL) {
        kvp_kv_free(kv);
        return KVP_ERR_NO_MEMORY;
    }
    kv->layers   = layers;
    kv->tokens   = tokens;
    kv->heads    = heads;
    kv->head_dim = head_dim;
    return KVP_OK;
}

kvp_status_t kvp_kv_alloc(kvp_kv_t *kv, uint32_t layers, uint32_t tokens, uint32_t heads,
                          uint32_t head_dim)
{
    kvp_status_t st = kv_alloc_quiet(kv, layers, tokens, heads, head_dim);

    if (st == KVP_ERR_INVALID) {
        KVP_LOG_ERROR(MOD, "kv of %u x %u x %u x %u elements is empty or too large", layers,
                      tokens, heads, head_dim);
    } else if (st != KVP_OK) {
        KVP_LOG_ERROR(MOD, "out of memory for kv of %llu elements",
                      (unsigned long long)kv_elems(layers, tokens, heads, head_dim));
    }
    return st;
}

void kvp_kv_free(kvp_kv_t *kv)
{
    if (kv == NULL) {
        return;
    }
    kvp_free(kv->k);
    kvp_free(kv->v);
    memset(kv, 0, sizeof(*kv));
}

/* ---- synthetic ---- */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) { return kvp_splitmix64(&r->s); }

static double rng_unif(rng_t *r) { return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0; }

static double rng_gauss(rng_t *r)
{
    return sqrt(-2.0 * log(rng_unif(r))) * cos(6.283185307179586 * rng_unif(r));
}

kvp_status_t kvp_kv_synthetic(kvp_kv_t *kv, uint32_t layers, uint32_t tokens, uint32_t heads,
                              uint32_t head_dim, uint64_t seed)
{
    kvp_status_t st = kvp_kv_alloc(kv, layers, tokens, heads, head_dim);
    uint32_t     D = head_dim, nsink = tokens / 256 > 1 ? tokens / 256 : 1;
    uint32_t     jump = (uint32_t)(0.55 * tokens) + 3, nout = D / 32 > 1 ? D / 32 : 1;
    rng_t        r = {seed * 0x2545F4914F6CDD1Dull + 1};
    double      *mu, *sg, *nu, *tau, *nt, *mt;

    if (st != KVP_OK) {
        return st;
    }
    mu = kvp_malloc(sizeof(double) * (4 * (size_t)D + 2 * (size_t)tokens), "eval synth");
    if (mu == NULL) {
        kvp_kv_free(kv);
        return KVP_ERR_NO_MEMORY;
    }
    sg = mu + D, nu = sg + D, tau = nu + D, nt = tau + D, mt = nt + tokens;
    for (uint32_t l = 0; l < layers; l++) {
        for (uint32_t t = 0; t < tokens; t++) {
            nt[t] = exp(0.2 * rng_gauss(&r));
            mt[t] = exp(0.2 * rng_gauss(&r));
            if (t < nsink) {
                nt[t] *= 0.1;
                mt[t] *= 0.1;
            }
            if (t >= jump) {
                nt[t] *= 2.5;
                mt[t] *= 1.5;
            }
        }
        for (uint32_t h = 0; h < heads; h++) {
            for (uint32_t d = 0; d < D; d++) {
                sg[d]  = exp(0.5 * rng_gauss(&r));
                mu[d]  = 0.3 * sg[d] * rng_gauss(&r);
                tau[d] = exp(0.5 * rng_gauss(&r));
                nu[d]  = 0.2 * tau[d] * rng_gauss(&r);
            }
            for (uint32_t o = 0; o < nout; o++) {
                uint32_t d = (uint32_t)(rng_next(&r) % D);
                double   f = 10.0 + 40.0 * rng_unif(&r);

                mu[d] = (rng_next(&r) & 1 ? f : -f) * sg[d]; /* magnitude x f, noise as is */
            }
            for (uint32_t t = 0; t < tokens; t++) {
                size_t base = (((size_t)l * tokens + t) * heads + h) * D;

                for (uint32_t d = 0; d < D; d++) {
                    kv->k[base + d] = (float)(nt[t] * (mu[d] + sg[d] * rng_gauss(&r)));
                    kv->v[base + d] = (float)(mt[t] * (nu[d] + tau[d] * rng_gauss(&r)));
                }
            }
        }
    }
    kvp_free(mu);
    return KVP_OK;
}

/* ---- .kvd ---- */

/* The reason a read failed into why (why_cap bytes; NULL: dropped); returns s. */
static kvp_status_t kvd_fail(kvp_status_t s, char *why, size_t why_cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kvp_status_t kvd_fail(kvp_status_t s, char *why, size_t why_cap, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && why_cap > 0) {
        va_start(ap, fmt);
        vsnprintf(why, why_cap, fmt, ap);
        va_end(ap);
    }
    return s;
}

kvp_status_t kvp_kvd_read(const char *path, kvp_kv_t *kv, char *why, size_t why_cap)
{
    uint8_t      hdr[KVD_HDR];
    FILE        *f = kvp_file_open(path, "rb");
    struct stat  stt;
    uint64_t     n;
    uint32_t     L, T, H, D; /* layers, tokens, heads, head_dim */
    kvp_status_t st;

    memset(kv, 0, sizeof(*kv));
    if (f == NULL) {
        return kvd_fail(KVP_ERR_IO, why, why_cap, "cannot open %s: %s", path, strerror(errno));
    }
    if (fstat(fileno(f), &stt) != 0 || !S_ISREG(stt.st_mode)) {
        fclose(f);
        return kvd_fail(KVP_ERR_BAD_PAGE, why, why_cap, "%s: not a regular file", path);
    }
    if (fread(hdr, 1, KVD_HDR, f) != KVD_HDR) {
        fclose(f);
        return kvd_fail(KVP_ERR_BAD_PAGE, why, why_cap,
                        "%s: not a .kvd: shorter than the 24-byte kvd header", path);
    }
    if (kvp_ld32(hdr) != KVD_MAGIC || kvp_ld32(hdr + 4) != KVD_VERSION) {
        fclose(f);
        return kvd_fail(KVP_ERR_BAD_PAGE, why, why_cap,
                        "%s: not a .kvd v1 file (magic 0x%08x, want 0x%08x \"KVD1\"; version %u)",
                        path, kvp_ld32(hdr), KVD_MAGIC, kvp_ld32(hdr + 4));
    }
    L = kvp_ld32(hdr + 8), T = kvp_ld32(hdr + 12), H = kvp_ld32(hdr + 16), D = kvp_ld32(hdr + 20);
    n = kv_elems(L, T, H, D);
    if (n == 0 || L > KVP_LAYERS_MAX || T > (1u << 24) || H > 4096 || D > 65536) {
        fclose(f);
        return kvd_fail(KVP_ERR_BAD_PAGE, why, why_cap,
                        "%s: .kvd header %u x %u x %u x %u is out of bounds (each at least 1; at "
                        "most %u layers (a page's 16-bit layer index), 2^24 tokens, 4096 heads, "
                        "head_dim 65536, 2^32 elements per tensor)", path, L, T, H, D,
                        KVP_LAYERS_MAX);
    }
    if ((uint64_t)stt.st_size != KVD_HDR + 8 * n) {
        fclose(f);
        return kvd_fail(KVP_ERR_BAD_PAGE, why, why_cap,
                        "%s: .kvd header %u x %u x %u x %u needs %llu bytes, the file has %lld "
                        "(truncated or padded)", path, L, T, H, D,
                        (unsigned long long)(KVD_HDR + 8 * n), (long long)stt.st_size);
    }
    st = kv_alloc_quiet(kv, L, T, H, D);
    if (st != KVP_OK) {
        fclose(f);
        return kvd_fail(st, why, why_cap, "%s: %u x %u x %u x %u: %s", path, L, T, H, D,
                        kvp_status_str(st));
    }
    if (fread(kv->k, sizeof(float), n, f) != n || fread(kv->v, sizeof(float), n, f) != n) {
        st = kvd_fail(KVP_ERR_IO, why, why_cap, "%s: read failed: %s", path,
                      ferror(f) ? strerror(errno) : "the file got shorter while it was read");
        kvp_kv_free(kv);
        fclose(f);
        return st;
    }
    fclose(f);
    return KVP_OK;
}

int kvp_kv_find_unstorable(const kvp_kv_t *kv, char *where, size_t cap)
{
    const size_t n = (size_t)kv->layers * kv->tokens * kv->heads * kv->head_dim;

    for (int t = 0; t < 2; t++) {
        const float *x = t == 0 ? kv->k : kv->v;

        if (kvp_values_check(KVP_DTYPE_F32, x, n) == KVP_OK) { /* the encoder's own check */
            continue;
        }
        for (size_t i = 0; i < n; i++) { /* where: the same test, one value at a time */
            if (!(fabsf(x[i]) <= 65504.0f)) { /* NaN fails the comparison too */
                const size_t d = i % kv->head_dim, h = i / kv->head_dim % kv->heads;
                const size_t tok = i / kv->head_dim / kv->heads % kv->tokens;
                const size_t l   = i / kv->head_dim / kv->heads / kv->tokens;

                snprintf(where, cap, "%c[layer %zu][token %zu][head %zu][dim %zu] = %g",
                         t == 0 ? 'K' : 'V', l, tok, h, d, (double)x[i]);
                return 1;
            }
        }
    }
    return 0;
}

/* The header and data into f; false (errno set) if a write failed. */
static bool kvd_put(FILE *f, const kvp_kv_t *kv)
{
    uint8_t  hdr[KVD_HDR];
    uint64_t n = (uint64_t)kv->layers * kv->tokens * kv->heads * kv->head_dim;

    kvp_st32(hdr, KVD_MAGIC);
    kvp_st32(hdr + 4, KVD_VERSION);
    kvp_st32(hdr + 8, kv->layers);
    kvp_st32(hdr + 12, kv->tokens);
    kvp_st32(hdr + 16, kv->heads);
    kvp_st32(hdr + 20, kv->head_dim);
    return fwrite(hdr, 1, KVD_HDR, f) == KVD_HDR && fwrite(kv->k, sizeof(float), n, f) == n &&
           fwrite(kv->v, sizeof(float), n, f) == n && fflush(f) == 0;
}

/* Not a regular file (a device such as /dev/stdout, a FIFO): written in place, as a shell
 * redirection would, never replaced by a file. */
static kvp_status_t kvd_write_in_place(const char *path, const kvp_kv_t *kv)
{
    FILE *f  = fopen(path, "wb");
    bool  ok = f != NULL && kvd_put(f, kv);

    ok = f != NULL && fclose(f) == 0 && ok;
    if (!ok) {
        KVP_LOG_ERROR(MOD, "write %s failed: %s", path, strerror(errno));
        return KVP_ERR_IO;
    }
    return KVP_OK;
}

/* The file being written beside the target, removed if a signal ends the process first, so an
 * interrupted get or dump leaves no full-size stray file (only signals left at their default,
 * which would end the process anyway, are taken; the handler then ends it the same way). */
static char                  kvd_tmp_path[PATH_MAX + 8];
static volatile sig_atomic_t kvd_tmp_live;
static const int             kvd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void kvd_on_signal(int sig)
{
    if (kvd_tmp_live) {
        unlink(kvd_tmp_path);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void kvd_signals_take(struct sigaction *old, bool *taken)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = kvd_on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t k = 0; k < sizeof(kvd_signals) / sizeof(kvd_signals[0]); k++) {
        taken[k] = sigaction(kvd_signals[k], NULL, &old[k]) == 0 && old[k].sa_handler == SIG_DFL &&
                   !(old[k].sa_flags & SA_SIGINFO) && sigaction(kvd_signals[k], &sa, NULL) == 0;
    }
}

static void kvd_signals_give_back(const struct sigaction *old, const bool *taken)
{
    for (size_t k = 0; k < sizeof(kvd_signals) / sizeof(kvd_signals[0]); k++) {
        if (taken[k]) {
            sigaction(kvd_signals[k], &old[k], NULL);
        }
    }
}

/* Write kv to the new file fd (named tmp) with the mode a plain create gives, or the mode and
 * owner of the file it replaces (old, when there is one). */
static bool kvd_write_new(int fd, const struct stat *old, const kvp_kv_t *kv)
{
    FILE  *f = fdopen(fd, "wb");
    mode_t um;
    bool   ok;

    if (f == NULL) {
        close(fd);
        return false;
    }
    if (old != NULL) {
        (void)fchown(fd, old->st_uid, old->st_gid); /* only root may give it away: best effort */
        (void)fchmod(fd, old->st_mode & 07777);
    } else {
        um = umask(0); /* the mode a plain create would give, not mkstemp's 0600 */
        umask(um);
        (void)fchmod(fd, 0666 & ~um);
    }
    ok = kvd_put(f, kv) && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok;
}

kvp_status_t kvp_kvd_write(const char *path, const kvp_kv_t *kv)
{
    struct sigaction old_sa[sizeof(kvd_signals) / sizeof(kvd_signals[0])];
    bool             taken[sizeof(kvd_signals) / sizeof(kvd_signals[0])];
    char            *target, *tmp;
    int              fd, err;
    bool             ok, had_old;
    struct stat      st;
    kvp_status_t     s = KVP_OK;

    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        return kvd_write_in_place(path, kv);
    }
    target = kvp_file_link_target(path); /* through a symlink: its target replaced, link kept */
    if (target == NULL) {
        KVP_LOG_ERROR(MOD, "cannot follow %s: %s", path, strerror(errno));
        return KVP_ERR_IO;
    }
    had_old = stat(target, &st) == 0;
    tmp     = kvp_malloc(strlen(target) + 8, "kvd tmp path");
    if (tmp == NULL) {
        free(target);
        return KVP_ERR_NO_MEMORY;
    }
    sprintf(tmp, "%s.XXXXXX", target);
    kvd_signals_take(old_sa, taken);
    fd = mkstemp(tmp);
    if (fd < 0) {
        KVP_LOG_ERROR(MOD, "cannot create a file beside %s: %s", target, strerror(errno));
        s = KVP_ERR_IO;
    } else {
        if (strlen(tmp) < sizeof(kvd_tmp_path)) {
            memcpy(kvd_tmp_path, tmp, strlen(tmp) + 1);
            atomic_signal_fence(memory_order_seq_cst); /* the path whole before the flag */
            kvd_tmp_live = 1;
        }
        ok  = kvd_write_new(fd, had_old ? &st : NULL, kv) && rename(tmp, target) == 0;
        err = errno;
        if (!ok) {
            KVP_LOG_ERROR(MOD, "write %s failed: %s (it is as it was)", target, strerror(err));
            remove(tmp);
            s = KVP_ERR_IO;
        }
        kvd_tmp_live = 0;
    }
    kvd_signals_give_back(old_sa, taken);
    kvp_free(tmp);
    free(target);
    return s;
}
