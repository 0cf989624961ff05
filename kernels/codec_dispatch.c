/* codec_dispatch.c - picks one implementation per codec once, at first use: the AVX2+F16C twin
 * when the CPU has it, else the portable reference. KVPACK_CODEC_IMPL=ref forces the reference.
 * Also the per-thread scratch buffers the codecs use instead of a malloc per page. The scratch is
 * allocated with plain posix_memalign, not kvp_malloc: it lives as long as its thread, and
 * counting it would show as a leak in every test that checks kvp_alloc_live_count. */
#include "codec_ops.h"
#include "kvpack/log.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const kvp_codec_ops_t *ref;
    const kvp_codec_ops_t *avx2;
} impl_pair_t;

static const impl_pair_t impls[KVP_CODEC_MAX] = {
    [KVP_CODEC_FP16]    = {&kvp_codec_fp16_ref, NULL},
    [KVP_CODEC_KIVI]    = {&kvp_codec_kivi_ref, &kvp_codec_kivi_avx2},
    [KVP_CODEC_KIVI128] = {&kvp_codec_kivi128_ref, &kvp_codec_kivi128_avx2},
    [KVP_CODEC_OSCAR]   = {&kvp_codec_oscar_ref, &kvp_codec_oscar_avx2},
    [KVP_CODEC_KVARN]   = {&kvp_codec_kvarn_ref, &kvp_codec_kvarn_avx2},
    [KVP_CODEC_NAIVE2]  = {&kvp_codec_naive2_ref, &kvp_codec_naive2_avx2},
};

static const kvp_codec_ops_t *table[KVP_CODEC_MAX];
static pthread_once_t         table_once = PTHREAD_ONCE_INIT;
static int                    cpu_avx2;
static int                    force_ref;

int kvp_cpu_has_avx2(void)
{
    static int known = -1;

    if (known < 0) { /* CPUID and XGETBV (the OS saves AVX state); clang has no "f16c" builtin */
        unsigned a, b, c, d, xcr0_lo = 0, xcr0_hi = 0;
        int      ok = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) &&
                      (c & bit_FMA) && (c & bit_F16C);

        if (ok) {
            __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
            ok = (xcr0_lo & 6u) == 6u && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
                 (b & bit_AVX2);
        }
        (void)xcr0_hi;
        known = ok ? 1 : 0;
    }
    return known;
}

static void table_init(void)
{
    const char *env = getenv("KVPACK_CODEC_IMPL");

    cpu_avx2  = kvp_cpu_has_avx2();
    force_ref = env != NULL && strcmp(env, "ref") == 0;
    if (env != NULL && !force_ref && strcmp(env, "auto") != 0 && strcmp(env, "avx2") != 0) {
        KVP_LOG_WARN("codec", "KVPACK_CODEC_IMPL %s unknown, using auto", env);
    }
    for (int c = 0; c < KVP_CODEC_MAX; c++) {
        table[c] = impls[c].ref;
        if (!force_ref && cpu_avx2 && impls[c].avx2 != NULL) {
            table[c] = impls[c].avx2;
        }
    }
}

const kvp_codec_ops_t *const *kvp_codec_ops_table(void)
{
    pthread_once(&table_once, table_init);
    return table;
}

const kvp_codec_ops_t *kvp_codec_ops_find(kvp_codec_id_t codec, const char *impl)
{
    if ((unsigned)codec >= KVP_CODEC_MAX || impls[codec].ref == NULL) {
        return NULL;
    }
    if (strcmp(impl, "ref") == 0) {
        return impls[codec].ref;
    }
    if (strcmp(impl, "avx2") == 0 && kvp_cpu_has_avx2()) {
        return impls[codec].avx2;
    }
    return NULL;
}

kvp_status_t kvp_codec_set_impl(kvp_codec_id_t codec, const char *impl)
{
    const kvp_codec_ops_t *ops = kvp_codec_ops_find(codec, impl);

    kvp_codec_ops_table();
    if (ops == NULL) {
        KVP_LOG_DEBUG("codec", "codec %u has no implementation %s here", (unsigned)codec, impl);
        return KVP_ERR_UNSUPPORTED;
    }
    table[codec] = ops;
    return KVP_OK;
}

size_t kvp_codec_impls(kvp_codec_id_t codec, const char **names, size_t max)
{
    size_t n = 0;

    if ((unsigned)codec >= KVP_CODEC_MAX || impls[codec].ref == NULL) {
        return 0;
    }
    if (n < max) {
        names[n] = "ref";
    }
    n++;
    if (impls[codec].avx2 != NULL && kvp_cpu_has_avx2()) {
        if (n < max) {
            names[n] = "avx2";
        }
        n++;
    }
    return n;
}

/* ---- per-thread scratch ---- */

#define SCRATCH_SLOTS 6

typedef struct {
    void  *buf[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} scratch_t;

static pthread_key_t  scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    scratch_t *s = arg;

    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        free(s->buf[i]);
    }
    free(s);
}

static void scratch_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
}

void *kvp_codec_scratch(unsigned slot, size_t bytes)
{
    scratch_t *s;

    pthread_once(&scratch_once, scratch_init);
    s = pthread_getspecific(scratch_key);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            KVP_LOG_ERROR("codec", "scratch table: out of memory");
            return NULL;
        }
    }
    if (slot >= SCRATCH_SLOTS) {
        return NULL;
    }
    if (s->cap[slot] < bytes) {
        size_t cap = bytes + bytes / 4 + 4096;
        void  *p   = NULL;

        if (posix_memalign(&p, 64, cap) != 0) {
            KVP_LOG_ERROR("codec", "scratch of %zu bytes: out of memory", cap);
            return NULL;
        }
        free(s->buf[slot]);
        s->buf[slot] = p;
        s->cap[slot] = cap;
    }
    return s->buf[slot];
}
