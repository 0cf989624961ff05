/* gguf.c - GGUF v2/v3 reader: a bounds-checked cursor walks the header, the metadata key/values
 * and the tensor table of a file image held in memory; tensor data stays in that image and is
 * dequantized on request (block formats as in the GGUF spec / ggml: Q4_0, Q4_1, Q8_0 with 32
 * elements per block, Q6_K with 256). Main flow: kvp_gguf_open -> gguf_parse. */
#include "gguf.h"

#include "kvpack/alloc.h"
#include "kvpack/file.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC     0x46554747u /* "GGUF" */
#define GGUF_MAX_DIMS  4u
#define GGUF_ALIGN_DEF 32u

typedef struct {
    char          *key;
    uint32_t       type;
    uint32_t       arr_type; /* for arrays */
    uint64_t       n;        /* array count or string length */
    const uint8_t *data;     /* string bytes, array elements, or the scalar */
} gguf_kv_t;

struct kvp_gguf {
    uint8_t           *buf;
    size_t             len;
    uint32_t           version;
    uint64_t           n_kv;
    gguf_kv_t         *kv;
    uint64_t           n_tensors;
    kvp_gguf_tensor_t *tensors;
};

/* ---- bounds-checked cursor ---- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cur_t;

static int cur_take(cur_t *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n) {
        return -1;
    }
    *out = c->p;
    c->p += n;
    return 0;
}

static int cur_u32(cur_t *c, uint32_t *v)
{
    const uint8_t *p;

    if (cur_take(c, 4, &p) != 0) {
        return -1;
    }
    memcpy(v, p, 4);
    return 0;
}

static int cur_u64(cur_t *c, uint64_t *v)
{
    const uint8_t *p;

    if (cur_take(c, 8, &p) != 0) {
        return -1;
    }
    memcpy(v, p, 8);
    return 0;
}

static int cur_str(cur_t *c, const uint8_t **s, uint64_t *n)
{
    if (cur_u64(c, n) != 0 || *n > (uint64_t)(c->end - c->p)) {
        return -1;
    }
    return cur_take(c, (size_t)*n, s);
}

static const size_t scalar_size[KVP_GGUF_NTYPES] = {
    [KVP_GGUF_U8] = 1,  [KVP_GGUF_I8] = 1,  [KVP_GGUF_U16] = 2, [KVP_GGUF_I16] = 2,
    [KVP_GGUF_U32] = 4, [KVP_GGUF_I32] = 4, [KVP_GGUF_F32] = 4, [KVP_GGUF_BOOL] = 1,
    [KVP_GGUF_U64] = 8, [KVP_GGUF_I64] = 8, [KVP_GGUF_F64] = 8,
};

/* Skip (validate) one value of type t; arrays of arrays are not used by models and rejected. */
static int cur_value(cur_t *c, uint32_t t, gguf_kv_t *kv)
{
    const uint8_t *p;
    uint64_t       n;

    if (t >= KVP_GGUF_NTYPES) {
        return -1;
    }
    if (t == KVP_GGUF_STR) {
        if (cur_str(c, &p, &n) != 0) {
            return -1;
        }
        kv->n    = n;
        kv->data = p;
        return 0;
    }
    if (t == KVP_GGUF_ARR) {
        uint32_t at;

        if (cur_u32(c, &at) != 0 || cur_u64(c, &n) != 0 || at >= KVP_GGUF_NTYPES ||
            at == KVP_GGUF_ARR) {
            return -1;
        }
        kv->arr_type = at;
        kv->n        = n;
        kv->data     = c->p;
        if (at == KVP_GGUF_STR) {
            for (uint64_t i = 0; i < n; i++) {
                uint64_t sl;

                if (cur_str(c, &p, &sl) != 0) {
                    return -1;
                }
            }
            return 0;
        }
        if (n > (uint64_t)(c->end - c->p) / scalar_size[at]) {
            return -1;
        }
        return cur_take(c, (size_t)n * scalar_size[at], &p);
    }
    kv->data = c->p;
    return cur_take(c, scalar_size[t], &p);
}

/* ---- block formats ---- */

typedef struct {
    uint32_t block;  /* elements per block */
    uint32_t bytes;  /* bytes per block */
} ggml_traits_t;

static int ggml_traits(uint32_t type, ggml_traits_t *tr)
{
    switch (type) {
    case KVP_GGML_F32:  *tr = (ggml_traits_t){1, 4}; return 0;
    case KVP_GGML_F16:  *tr = (ggml_traits_t){1, 2}; return 0;
    case KVP_GGML_Q4_0: *tr = (ggml_traits_t){32, 18}; return 0;
    case KVP_GGML_Q4_1: *tr = (ggml_traits_t){32, 20}; return 0;
    case KVP_GGML_Q8_0: *tr = (ggml_traits_t){32, 34}; return 0;
    case KVP_GGML_Q6_K: *tr = (ggml_traits_t){256, 210}; return 0;
    default:            return -1;
    }
}

const char *kvp_ggml_type_name(uint32_t type)
{
    switch (type) {
    case KVP_GGML_F32:  return "f32";
    case KVP_GGML_F16:  return "f16";
    case KVP_GGML_Q4_0: return "q4_0";
    case KVP_GGML_Q4_1: return "q4_1";
    case KVP_GGML_Q8_0: return "q8_0";
    case KVP_GGML_Q6_K: return "q6_k";
    default:            return "unknown";
    }
}

static float h2f(const uint8_t *p)
{
    uint16_t h;

    memcpy(&h, p, 2);
    return kvp_f16_to_f32(h);
}

static void dq_q4(const uint8_t *b, float *y, int has_min)
{
    float          d  = h2f(b);
    float          m  = has_min ? h2f(b + 2) : 0.0f;
    const uint8_t *qs = b + (has_min ? 4 : 2);
    int            off = has_min ? 0 : -8;

    for (int j = 0; j < 16; j++) {
        y[j]      = (float)((qs[j] & 0xF) + off) * d + m;
        y[j + 16] = (float)((qs[j] >> 4) + off) * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y)
{
    float d = h2f(b);

    for (int j = 0; j < 32; j++) {
        y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q6_K: ql[128] low nibbles, qh[64] high 2-bit pairs, int8 scales[16] (one per 16 values),
 * fp16 d; value = d * scale * (q6 - 32), laid out in two halves of 128. */
static void dq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const int8_t  *sc = (const int8_t *)(b + 192);
    float          d  = h2f(b + 208);

    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

            y[l]      = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

kvp_status_t kvp_ggml_dequant(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;
    ggml_traits_t  tr;

    if (ggml_traits(type, &tr) != 0) {
        KVP_LOG_ERROR("model", "ggml tensor type %u is not supported (f32 f16 q4_0 q4_1 q8_0 q6_k)",
                      type);
        return KVP_ERR_UNSUPPORTED;
    }
    if (n % tr.block != 0) {
        KVP_LOG_ERROR("model", "%llu elements is not a multiple of the %s block %u",
                      (unsigned long long)n, kvp_ggml_type_name(type), tr.block);
        return KVP_ERR_INVALID;
    }
    for (uint64_t i = 0, b = 0; i < n; i += tr.block, b++) {
        const uint8_t *blk = s + b * tr.bytes;

        switch (type) {
        case KVP_GGML_F32:  memcpy(dst + i, blk, 4); break;
        case KVP_GGML_F16:  dst[i] = h2f(blk); break;
        case KVP_GGML_Q4_0: dq_q4(blk, dst + i, 0); break;
        case KVP_GGML_Q4_1: dq_q4(blk, dst + i, 1); break;
        case KVP_GGML_Q8_0: dq_q8_0(blk, dst + i); break;
        default:            dq_q6_k(blk, dst + i); break;
        }
    }
    return KVP_OK;
}

kvp_status_t kvp_gguf_tensor_f32(const kvp_gguf_tensor_t *t, float *dst, uint64_t n)
{
    if (n != t->nelems) {
        KVP_LOG_ERROR("model", "tensor %s has %llu elements, expected %llu", t->name,
                      (unsigned long long)t->nelems, (unsigned long long)n);
        return KVP_ERR_INVALID;
    }
    if (t->type != KVP_GGML_F32 && t->type != KVP_GGML_F16 && t->type != KVP_GGML_Q4_0 &&
        t->type != KVP_GGML_Q4_1 && t->type != KVP_GGML_Q8_0 && t->type != KVP_GGML_Q6_K) {
        KVP_LOG_ERROR("model", "tensor %s has unsupported type %u (supported: f32 f16 q4_0 q4_1 "
                      "q8_0 q6_k)", t->name, t->type);
        return KVP_ERR_UNSUPPORTED;
    }
    return kvp_ggml_dequant(t->type, t->data, dst, n);
}

/* ---- parsing ---- */

static kvp_status_t bad(const char *what)
{
    KVP_LOG_ERROR("model", "malformed gguf: %s", what);
    return KVP_ERR_INVALID;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that is there twice among names[0..n) (sorted in place), or NULL. */
static const char *name_twice(const char **names, uint64_t n)
{
    qsort(names, n, sizeof(*names), name_cmp);
    for (uint64_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            return names[i];
        }
    }
    return NULL;
}

typedef struct {
    uint64_t off, end;
    const char *name;
} span_t;

static int span_cmp(const void *a, const void *b)
{
    const span_t *x = a, *y = b;

    return x->off < y->off ? -1 : x->off > y->off;
}

/* Tensor names each once, data spans that do not overlap (a file whose tensors share bytes or
 * whose second copy of a name is ignored loads and runs something else, exit 0). */
static kvp_status_t tensors_distinct(const kvp_gguf_t *g, const uint64_t *offs)
{
    const char **names = kvp_malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(*names), "gguf");
    span_t      *sp    = kvp_malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(*sp), "gguf");
    uint64_t     ns    = 0;
    const char  *twice;
    kvp_status_t s     = KVP_OK;

    if (names == NULL || sp == NULL) {
        kvp_free(names);
        kvp_free(sp);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        names[i] = g->tensors[i].name;
        if (g->tensors[i].data != NULL) { /* a supported type: its span is known */
            sp[ns++] = (span_t){offs[i], offs[i] + g->tensors[i].nbytes, g->tensors[i].name};
        }
    }
    if ((twice = name_twice(names, g->n_tensors)) != NULL) {
        KVP_LOG_ERROR("model", "malformed gguf: tensor %s is listed twice", twice);
        s = KVP_ERR_INVALID;
    }
    qsort(sp, ns, sizeof(*sp), span_cmp);
    for (uint64_t i = 1; s == KVP_OK && i < ns; i++) {
        if (sp[i].off < sp[i - 1].end) {
            KVP_LOG_ERROR("model", "malformed gguf: tensors %s and %s share data bytes",
                          sp[i - 1].name, sp[i].name);
            s = KVP_ERR_INVALID;
        }
    }
    kvp_free(names);
    kvp_free(sp);
    return s;
}

static kvp_status_t gguf_parse_tensors(kvp_gguf_t *g, cur_t *c, uint32_t align)
{
    kvp_status_t s;
    size_t   data_off;
    uint64_t *offs;

    offs = kvp_calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*offs), "gguf offsets");
    if (offs == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kvp_gguf_tensor_t *t = &g->tensors[i];
        const uint8_t     *s;
        uint64_t           n;

        if (cur_str(c, &s, &n) != 0 || n > 4096 || cur_u32(c, &t->n_dims) != 0) {
            kvp_free(offs);
            return bad("truncated tensor info");
        }
        t->name = kvp_malloc(n + 1, "gguf tensor name");
        if (t->name == NULL) {
            kvp_free(offs);
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(t->name, s, n);
        t->name[n] = '\0';
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
            KVP_LOG_ERROR("model", "malformed gguf: tensor %s has %u dims", t->name, t->n_dims);
            kvp_free(offs);
            return KVP_ERR_INVALID;
        }
        t->nelems = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d < t->n_dims && cur_u64(c, &t->ne[d]) != 0) {
                kvp_free(offs);
                return bad("truncated tensor dims");
            }
            if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) / t->nelems) {
                KVP_LOG_ERROR("model", "malformed gguf: tensor %s has a bad shape", t->name);
                kvp_free(offs);
                return KVP_ERR_INVALID;
            }
            t->nelems *= t->ne[d];
        }
        if (cur_u32(c, &t->type) != 0 || cur_u64(c, &offs[i]) != 0) {
            kvp_free(offs);
            return bad("truncated tensor info");
        }
    }
    data_off = (size_t)(c->p - g->buf);
    data_off = (data_off + align - 1) / align * align;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kvp_gguf_tensor_t *t = &g->tensors[i];
        ggml_traits_t      tr;

        if (offs[i] % align != 0) {
            KVP_LOG_ERROR("model", "malformed gguf: tensor %s data offset %llu is not a multiple "
                          "of the alignment %u", t->name, (unsigned long long)offs[i], align);
            kvp_free(offs);
            return KVP_ERR_INVALID;
        }
        if (ggml_traits(t->type, &tr) != 0) {
            continue; /* listed; reading it reports the unsupported type */
        }
        if (t->ne[0] % tr.block != 0) {
            KVP_LOG_ERROR("model", "malformed gguf: tensor %s row %llu not a multiple of %u",
                          t->name, (unsigned long long)t->ne[0], tr.block);
            kvp_free(offs);
            return KVP_ERR_INVALID;
        }
        t->nbytes = t->nelems / tr.block * tr.bytes;
        if (data_off > g->len || offs[i] > g->len - data_off ||
            t->nbytes > g->len - data_off - offs[i]) {
            KVP_LOG_ERROR("model", "malformed gguf: tensor %s data [%llu, +%llu) is past the end "
                          "of the file (%zu bytes)", t->name,
                          (unsigned long long)(data_off + offs[i]),
                          (unsigned long long)t->nbytes, g->len);
            kvp_free(offs);
            return KVP_ERR_INVALID;
        }
        t->data = g->buf + data_off + offs[i];
    }
    s = tensors_distinct(g, offs);
    kvp_free(offs);
    return s;
}

static kvp_status_t gguf_parse(kvp_gguf_t *g)
{
    cur_t    c = {g->buf, g->buf + g->len};
    uint32_t magic, align = GGUF_ALIGN_DEF;

    if (cur_u32(&c, &magic) != 0 || magic != GGUF_MAGIC) {
        return bad("not a gguf file (bad magic)");
    }
    if (cur_u32(&c, &g->version) != 0 || (g->version != 2 && g->version != 3)) {
        KVP_LOG_ERROR("model", "gguf version %u is not supported (2 or 3)", g->version);
        return KVP_ERR_UNSUPPORTED;
    }
    if (cur_u64(&c, &g->n_tensors) != 0 || cur_u64(&c, &g->n_kv) != 0) {
        return bad("truncated header");
    }
    /* Each kv needs >= 12 bytes and each tensor >= 24: reject absurd counts before allocating. */
    if (g->n_kv > g->len / 12 || g->n_tensors > g->len / 24) {
        return bad("counts larger than the file");
    }
    g->kv      = kvp_calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv), "gguf kv");
    g->tensors = kvp_calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors), "gguf tensors");
    if (g->kv == NULL || g->tensors == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_kv_t     *kv = &g->kv[i];
        const uint8_t *s;
        uint64_t       n;

        if (cur_str(&c, &s, &n) != 0 || n > 65536 || cur_u32(&c, &kv->type) != 0) {
            return bad("truncated metadata key");
        }
        kv->key = kvp_malloc(n + 1, "gguf key");
        if (kv->key == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(kv->key, s, n);
        kv->key[n] = '\0';
        if (cur_value(&c, kv->type, kv) != 0) {
            KVP_LOG_ERROR("model", "malformed gguf: metadata %s (type %u) is truncated or has a "
                          "bad type", kv->key, kv->type);
            return KVP_ERR_INVALID;
        }
    }
    {
        const char **keys = kvp_malloc((g->n_kv ? g->n_kv : 1) * sizeof(*keys), "gguf keys");
        const char  *twice;

        if (keys == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        for (uint64_t i = 0; i < g->n_kv; i++) {
            keys[i] = g->kv[i].key;
        }
        twice = name_twice(keys, g->n_kv);
        kvp_free(keys);
        if (twice != NULL) { /* the first would win, silently */
            KVP_LOG_ERROR("model", "malformed gguf: metadata key %s is there twice", twice);
            return KVP_ERR_INVALID;
        }
    }
    if (kvp_gguf_opt_u32(g, "general.alignment", align, &align) != KVP_OK) {
        return bad("general.alignment is not an unsigned integer");
    }
    if (align == 0 || (align & (align - 1)) != 0) {
        return bad("general.alignment is not a power of two");
    }
    return gguf_parse_tensors(g, &c, align);
}

kvp_status_t kvp_gguf_parse(uint8_t *buf, size_t len, kvp_gguf_t **g_p)
{
    kvp_gguf_t  *g;
    kvp_status_t status;

    g = kvp_calloc(1, sizeof(*g), "gguf");
    if (g == NULL) {
        kvp_free(buf);
        return KVP_ERR_NO_MEMORY;
    }
    g->buf = buf;
    g->len = len;
    status = gguf_parse(g);
    if (status != KVP_OK) {
        kvp_gguf_close(g);
        return status;
    }
    *g_p = g;
    return KVP_OK;
}

kvp_status_t kvp_gguf_open(const char *path, kvp_gguf_t **g_p)
{
    FILE    *f = kvp_file_open(path, "rb");
    uint8_t *buf;
    long     len;

    if (f == NULL) {
        KVP_LOG_ERROR("model", "cannot open %s: %m", path);
        return KVP_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        KVP_LOG_ERROR("model", "cannot size %s: %m", path);
        fclose(f);
        return KVP_ERR_IO;
    }
    buf = kvp_malloc((size_t)len, "gguf image");
    if (buf == NULL) {
        fclose(f);
        return KVP_ERR_NO_MEMORY;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        KVP_LOG_ERROR("model", "short read on %s", path);
        kvp_free(buf);
        fclose(f);
        return KVP_ERR_IO;
    }
    fclose(f);
    return kvp_gguf_parse(buf, (size_t)len, g_p);
}

void kvp_gguf_close(kvp_gguf_t *g)
{
    if (g == NULL) {
        return;
    }
    if (g->kv != NULL) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            kvp_free(g->kv[i].key);
        }
    }
    if (g->tensors != NULL) {
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            kvp_free(g->tensors[i].name);
        }
    }
    kvp_free(g->kv);
    kvp_free(g->tensors);
    kvp_free(g->buf);
    kvp_free(g);
}

/* ---- lookups ---- */

static const gguf_kv_t *kv_find(const kvp_gguf_t *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (g->kv[i].key != NULL && strcmp(g->kv[i].key, key) == 0) {
            return &g->kv[i];
        }
    }
    return NULL;
}

kvp_status_t kvp_gguf_get_u32(const kvp_gguf_t *g, const char *key, uint32_t *v_p)
{
    const gguf_kv_t *kv = kv_find(g, key);
    uint64_t         u  = 0;
    int64_t          s  = 0;

    if (kv == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    switch (kv->type) {
    case KVP_GGUF_U8:  u = kv->data[0]; break;
    case KVP_GGUF_U16: { uint16_t x; memcpy(&x, kv->data, 2); u = x; } break;
    case KVP_GGUF_U32: { uint32_t x; memcpy(&x, kv->data, 4); u = x; } break;
    case KVP_GGUF_U64: memcpy(&u, kv->data, 8); break;
    case KVP_GGUF_I8:  s = (int8_t)kv->data[0]; goto sgn;
    case KVP_GGUF_I16: { int16_t x; memcpy(&x, kv->data, 2); s = x; } goto sgn;
    case KVP_GGUF_I32: { int32_t x; memcpy(&x, kv->data, 4); s = x; } goto sgn;
    case KVP_GGUF_I64: memcpy(&s, kv->data, 8); goto sgn;
    default:
        KVP_LOG_ERROR("model", "gguf key %s is not an integer (type %u)", key, kv->type);
        return KVP_ERR_INVALID;
    }
    goto fit;
sgn:
    if (s < 0) {
        KVP_LOG_ERROR("model", "gguf key %s is negative", key);
        return KVP_ERR_INVALID;
    }
    u = (uint64_t)s;
fit:
    if (u > UINT32_MAX) {
        KVP_LOG_ERROR("model", "gguf key %s is too large", key);
        return KVP_ERR_INVALID;
    }
    *v_p = (uint32_t)u;
    return KVP_OK;
}

kvp_status_t kvp_gguf_get_bool(const kvp_gguf_t *g, const char *key, int *v_p)
{
    const gguf_kv_t *kv = kv_find(g, key);

    if (kv == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    if (kv->type != KVP_GGUF_BOOL) {
        KVP_LOG_ERROR("model", "gguf key %s is not a bool (type %u)", key, kv->type);
        return KVP_ERR_INVALID;
    }
    *v_p = kv->data[0] != 0;
    return KVP_OK;
}

kvp_status_t kvp_gguf_get_f32(const kvp_gguf_t *g, const char *key, float *v_p)
{
    const gguf_kv_t *kv = kv_find(g, key);

    if (kv == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    if (kv->type == KVP_GGUF_F32) {
        memcpy(v_p, kv->data, 4);
    } else if (kv->type == KVP_GGUF_F64) {
        double d;

        memcpy(&d, kv->data, 8);
        *v_p = (float)d;
    } else {
        KVP_LOG_ERROR("model", "gguf key %s is not a float (type %u)", key, kv->type);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

kvp_status_t kvp_gguf_opt_u32(const kvp_gguf_t *g, const char *key, uint32_t dflt,
                              uint32_t *v_p)
{
    kvp_status_t s = kvp_gguf_get_u32(g, key, v_p);

    *v_p = s == KVP_ERR_NOT_FOUND ? dflt : *v_p;
    return s == KVP_ERR_NOT_FOUND ? KVP_OK : s;
}

kvp_status_t kvp_gguf_opt_bool(const kvp_gguf_t *g, const char *key, int dflt, int *v_p)
{
    kvp_status_t s = kvp_gguf_get_bool(g, key, v_p);

    *v_p = s == KVP_ERR_NOT_FOUND ? dflt : *v_p;
    return s == KVP_ERR_NOT_FOUND ? KVP_OK : s;
}

kvp_status_t kvp_gguf_opt_f32(const kvp_gguf_t *g, const char *key, float dflt, float *v_p)
{
    kvp_status_t s = kvp_gguf_get_f32(g, key, v_p);

    *v_p = s == KVP_ERR_NOT_FOUND ? dflt : *v_p;
    return s == KVP_ERR_NOT_FOUND ? KVP_OK : s;
}

kvp_status_t kvp_gguf_get_str(const kvp_gguf_t *g, const char *key, const char **s_p,
                              size_t *len_p)
{
    const gguf_kv_t *kv = kv_find(g, key);

    if (kv == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    if (kv->type != KVP_GGUF_STR) {
        KVP_LOG_ERROR("model", "gguf key %s is not a string (type %u)", key, kv->type);
        return KVP_ERR_INVALID;
    }
    *s_p   = (const char *)kv->data;
    *len_p = (size_t)kv->n;
    return KVP_OK;
}

kvp_status_t kvp_gguf_get_arr(const kvp_gguf_t *g, const char *key, uint32_t *type_p,
                              uint64_t *n_p, const uint8_t **data_p)
{
    const gguf_kv_t *kv = kv_find(g, key);

    if (kv == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    if (kv->type != KVP_GGUF_ARR) {
        KVP_LOG_ERROR("model", "gguf key %s is not an array (type %u)", key, kv->type);
        return KVP_ERR_INVALID;
    }
    *type_p = kv->arr_type;
    *n_p    = kv->n;
    *data_p = kv->data;
    return KVP_OK;
}

const char *kvp_gguf_str_next(const uint8_t **cur, size_t *len_p)
{
    uint64_t    n;
    const char *s;

    memcpy(&n, *cur, 8);
    s      = (const char *)(*cur + 8);
    *len_p = (size_t)n;
    *cur += 8 + n;
    return s;
}

size_t kvp_gguf_n_tensors(const kvp_gguf_t *g)
{
    return (size_t)g->n_tensors;
}

const kvp_gguf_tensor_t *kvp_gguf_tensor(const kvp_gguf_t *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const kvp_gguf_tensor_t *kvp_gguf_find(const kvp_gguf_t *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (strcmp(g->tensors[i].name, name) == 0) {
            return &g->tensors[i];
        }
    }
    return NULL;
}
