/* nsprof.c - namespace codec profiles: the codec, rotation flags and geometry (H, D, P, layers)
 * every page of a namespace must have, fixed by its first sealed page (layers by its first
 * session record), so a page or record under another codec or geometry is refused with
 * KVP_ERR_WRONG_CODEC. Profiles live in a small hash table and reach the meta column family
 * ("ns/<16 hex>", 24-byte value below) in the WriteBatch of the namespace's first session write;
 * kvp_store_open loads them back without reading a page. */
#include "store_int.h"
#include "kvpack/bytes.h"
#include "kvpack/num.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/num.h"

#include <stdio.h>
#include <string.h>

#define MOD "store"

/* Meta value (little-endian):
 *   offset size field
 *      0     4  magic     "KVNP"
 *      4     1  version   1
 *      5     1  codec     kvp_codec_id_t of sealed pages
 *      6     1  rot       KVP_PAGE_F_K_ROTATED | V_ROTATED | V_PREROT of sealed pages
 *      7     1  reserved  0
 *      8     2  heads
 *     10     2  head_dim
 *     12     2  capacity  P
 *     14     2  reserved  0
 *     16     4  layers    0 = not fixed yet
 *     20     4  crc32c    of bytes [0, 20) */
#define PROF_MAGIC   0x504E564Bu /* "KVNP" */
#define PROF_VERSION 1u
#define PROF_ROT     (KVP_PAGE_F_K_ROTATED | KVP_PAGE_F_V_ROTATED | KVP_PAGE_F_V_PREROT)

/* ---- private ---- */

static uint64_t prof_hash(uint64_t ns)
{
    return (ns * 0x9E3779B97F4A7C15ull) >> 32;
}

static const char *codec_name(uint32_t codec)
{
    return codec > 0 && codec < KVP_CODEC_MAX ? kvp_codec_name((kvp_codec_id_t)codec) : "?";
}

/* ---- internal API (store_int.h) ---- */

void kvp_nsprof_init(kvp_htab_t *t)
{
    kvp_htab_init(t, 16, "ns profile table");
}

void kvp_nsprof_cleanup(kvp_htab_t *t)
{
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    while ((l = kvp_htab_next(t, &it)) != NULL) {
        kvp_free(KVP_CONTAINER_OF(l, kvp_nsprof_t, hlink));
    }
    kvp_htab_cleanup(t);
}

kvp_nsprof_t *kvp_nsprof_find(const kvp_htab_t *t, uint64_t ns)
{
    uint64_t h = prof_hash(ns);

    for (kvp_hlink_t *l = kvp_htab_chain(t, h); l != NULL; l = l->next) {
        kvp_nsprof_t *p = KVP_CONTAINER_OF(l, kvp_nsprof_t, hlink);

        if (p->ns == ns) {
            return p;
        }
    }
    return NULL;
}

kvp_status_t kvp_nsprof_create(kvp_htab_t *t, uint64_t ns, const kvp_page_info_t *info,
                               kvp_nsprof_t **prof_p)
{
    kvp_nsprof_t *p = kvp_calloc(1, sizeof(*p), "ns profile");

    if (p == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the profile of namespace %016llx",
                      (unsigned long long)ns);
        return KVP_ERR_NO_MEMORY;
    }
    p->ns       = ns;
    p->codec    = (uint8_t)info->codec;
    p->rot      = (uint8_t)(info->flags & PROF_ROT);
    p->heads    = (uint16_t)info->heads;
    p->head_dim = (uint16_t)info->head_dim;
    p->capacity = (uint16_t)info->capacity;
    p->gen      = 1;
    if (kvp_htab_insert(t, &p->hlink, prof_hash(ns)) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "no memory for the namespace profile table");
        kvp_free(p);
        return KVP_ERR_NO_MEMORY;
    }
    KVP_LOG_DEBUG(MOD, "namespace %016llx: codec %s, %u heads x %u, P %u", (unsigned long long)ns,
                  codec_name(p->codec), p->heads, p->head_dim, p->capacity);
    *prof_p = p;
    return KVP_OK;
}

kvp_status_t kvp_nsprof_check_page(const kvp_nsprof_t *prof, const kvp_page_info_t *info,
                                   const char *what)
{
    bool        tail = (info->flags & KVP_PAGE_F_TAIL) != 0;
    bool        sink = (info->flags & KVP_PAGE_F_SINK) != 0; /* fp16 by kvp_page_parse */
    const char *why  = NULL;

    if (tail && info->codec != KVP_CODEC_FP16) {
        why = "a tail page must be fp16";
    } else if (prof == NULL) {
        return KVP_OK;
    } else if (info->heads != prof->heads || info->head_dim != prof->head_dim ||
               info->capacity != prof->capacity) {
        why = "geometry differs";
    } else if (!tail && !sink &&
               (info->codec != prof->codec || (info->flags & PROF_ROT) != prof->rot)) {
        why = "codec differs";
    } else if (prof->layers != 0 && info->layer >= prof->layers) {
        why = "layer index beyond the namespace's layers";
    }
    if (why == NULL) {
        return KVP_OK;
    }
    if (prof == NULL) {
        KVP_LOG_ERROR(MOD, "%s refused: %s (%s)", what, why, codec_name(info->codec));
    } else {
        KVP_LOG_ERROR(MOD, "%s refused: %s: page is %s%s flags 0x%x, %u x %u, P %u, layer %u; "
                      "namespace %016llx is %s flags 0x%x, %u x %u, P %u, %u layers", what, why,
                      codec_name(info->codec), tail ? " tail" : "", info->flags & PROF_ROT,
                      info->heads, info->head_dim, info->capacity, info->layer,
                      (unsigned long long)prof->ns, codec_name(prof->codec), prof->rot,
                      prof->heads, prof->head_dim, prof->capacity, prof->layers);
    }
    return KVP_ERR_WRONG_CODEC;
}

void kvp_nsprof_key(uint64_t ns, char *key)
{
    snprintf(key, KVP_NSPROF_KEY_MAX, "ns/%016llx", (unsigned long long)ns);
}

void kvp_nsprof_pack(const kvp_nsprof_t *p, uint8_t *val)
{
    memset(val, 0, KVP_NSPROF_VAL_BYTES);
    kvp_st32(val, PROF_MAGIC);
    val[4] = PROF_VERSION;
    val[5] = p->codec;
    val[6] = p->rot;
    kvp_st16(val + 8, p->heads);
    kvp_st16(val + 10, p->head_dim);
    kvp_st16(val + 12, p->capacity);
    kvp_st32(val + 16, p->layers);
    kvp_st32(val + 20, kvp_crc32c(0, val, 20));
}

kvp_status_t kvp_nsprof_load(kvp_htab_t *t, const char *key, size_t klen,
                             const uint8_t *val, size_t vlen)
{
    uint64_t           ns;
    kvp_page_info_t    info;
    kvp_nsprof_t      *p;
    kvp_status_t       status;

    if (klen != 19 || kvp_hex16_parse(key + 3, &ns) != 0) {
        KVP_LOG_ERROR(MOD, "meta key %.*s is not a namespace profile; skipped",
                      (int)(klen < 40 ? klen : 40), key);
        return KVP_ERR_CORRUPT;
    }
    if (vlen != KVP_NSPROF_VAL_BYTES || kvp_ld32(val) != PROF_MAGIC || val[4] != PROF_VERSION ||
        kvp_ld32(val + 20) != kvp_crc32c(0, val, 20) || val[5] == 0 || val[5] >= KVP_CODEC_MAX) {
        KVP_LOG_ERROR(MOD, "profile of namespace %016llx on disk is unreadable (%zu bytes); "
                      "its next sealed page fixes it again", (unsigned long long)ns, vlen);
        return KVP_ERR_CORRUPT;
    }
    memset(&info, 0, sizeof(info));
    info.codec    = val[5];
    info.flags    = val[6];
    info.heads    = kvp_ld16(val + 8);
    info.head_dim = kvp_ld16(val + 10);
    info.capacity = kvp_ld16(val + 12);
    status        = kvp_nsprof_create(t, ns, &info, &p);
    if (status == KVP_OK) {
        p->layers    = kvp_ld32(val + 16);
        p->saved_gen = p->gen;
    }
    return status;
}

/* ---- store glue ---- */

kvp_status_t kvp_store_ns_page_loaded(kvp_store_h st, kvp_page_t *page, const kvp_page_info_t *info)
{
    kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, page->ns);
    kvp_status_t  status;

    page->codec = (uint8_t)info->codec;
    page->tail  = (info->flags & KVP_PAGE_F_TAIL) != 0;
    page->sink  = (info->flags & KVP_PAGE_F_SINK) != 0;
    status      = kvp_nsprof_check_page(prof, info, "page read from disk");
    if (status == KVP_OK && prof == NULL && !page->tail && !page->sink) {
        status = kvp_nsprof_create(&st->profiles, page->ns, info, &prof); /* an older db */
    }
    return status;
}

kvp_status_t kvp_store_ns_check_append(kvp_store_h st, uint64_t ns, const char *sid,
                                       const kvp_store_append_t *a)
{
    kvp_nsprof_t *prof;
    kvp_status_t  status = KVP_OK;

    pthread_mutex_lock(&st->lock);
    prof = kvp_nsprof_find(&st->profiles, ns);
    if (prof != NULL && (a->codec != prof->codec || a->heads != prof->heads ||
                         a->head_dim != prof->head_dim || a->page_tokens != prof->capacity ||
                         (prof->layers != 0 && a->layers != prof->layers))) {
        KVP_LOG_ERROR(MOD, "append to session %s refused: it says %s, %u layers, %u x %u, P %u; "
                      "namespace %016llx is %s, %u layers, %u x %u, P %u", sid,
                      codec_name(a->codec), a->layers, a->heads, a->head_dim, a->page_tokens,
                      (unsigned long long)ns, codec_name(prof->codec), prof->layers, prof->heads,
                      prof->head_dim, prof->capacity);
        status = KVP_ERR_WRONG_CODEC;
    }
    pthread_mutex_unlock(&st->lock);
    return status;
}

kvp_status_t kvp_store_ns_check_session(kvp_store_h st, const kvp_sess_t *s,
                                        const kvp_page_info_t *tail, kvp_nsprof_t **prof_p)
{
    kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, s->key.ns);
    const char   *why  = NULL;
    uint32_t      bad  = 0, codec = 0;
    size_t        codec_from = SIZE_MAX; /* first page of a codec (non-sink) chunk */

    *prof_p = prof;
    for (size_t i = 0; i < kvp_store_sess_page_count(s) && why == NULL; i++) {
        const kvp_page_t *p = s->pages[i];

        bad = (uint32_t)i;
        if (p->codec == 0) {
            continue; /* on disk since the last open: checked when it was put */
        }
        if (p->tail) {
            why = "names a tail page as a sealed chunk";
        } else if (p->sink) { /* fp16 sink chunks only before the codec chunks */
            if (i / s->desc.layers >= codec_from / s->desc.layers && codec_from != SIZE_MAX) {
                why = "names an fp16 sink page after a codec page";
            }
            continue;
        } else if ((prof != NULL && p->codec != prof->codec) || (codec != 0 && p->codec != codec)) {
            why = "names pages of another codec";
        }
        codec      = p->codec;
        codec_from = codec_from == SIZE_MAX ? i : codec_from;
    }
    if (why != NULL) {
        KVP_LOG_ERROR(MOD, "session %s refused: it %s (chunk %u layer %u is %s)", s->key.sid, why,
                      bad / s->desc.layers, bad % s->desc.layers,
                      codec_name(s->pages[bad]->codec));
        return KVP_ERR_WRONG_CODEC;
    }
    if (prof == NULL) {
        return KVP_OK;
    }
    if (s->desc.page_tokens != prof->capacity) {
        why = "page tokens differ";
    } else if (prof->layers != 0 && s->desc.layers != prof->layers) {
        why = "layer count differs";
    } else if (tail != NULL && (tail->heads != prof->heads || tail->head_dim != prof->head_dim)) {
        why = "tail geometry differs";
    }
    for (uint32_t c = 0; why == NULL && prof->layers == 0 && c < s->desc.n_chunks; c++) {
        kvp_page_t *p = kvp_index_page_find(&st->pages, s->key.ns, s->desc.chunk_keys[c],
                                            s->desc.layers);

        if (p != NULL && (p->slot.ptr != NULL || p->on_disk)) {
            why = "its chunks have more layers than it names";
        }
    }
    if (why != NULL) {
        KVP_LOG_ERROR(MOD, "session %s refused: %s: record has %u layers, P %u, tail %u x %u; "
                      "namespace %016llx is %s, %u layers, %u x %u, P %u", s->key.sid, why,
                      s->desc.layers, s->desc.page_tokens, tail ? tail->heads : 0,
                      tail ? tail->head_dim : 0, (unsigned long long)s->key.ns,
                      codec_name(prof->codec), prof->layers, prof->heads, prof->head_dim,
                      prof->capacity);
        return KVP_ERR_WRONG_CODEC;
    }
    return KVP_OK;
}

void kvp_store_ns_batch_add(kvp_store_h st, uint64_t ns, kvp_tier_batch_t *b, uint32_t *gen_p)
{
    kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, ns);
    char          key[KVP_NSPROF_KEY_MAX];
    uint8_t       val[KVP_NSPROF_VAL_BYTES];

    *gen_p = 0;
    if (prof == NULL || prof->saved_gen == prof->gen) {
        return;
    }
    kvp_nsprof_key(ns, key);
    kvp_nsprof_pack(prof, val);
    kvp_tier_batch_put_meta(st->tier, b, key, val, sizeof(val));
    *gen_p = prof->gen;
}

void kvp_store_ns_batch_done(kvp_store_h st, uint64_t ns, uint32_t gen)
{
    kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, ns);

    if (prof != NULL && gen != 0 && gen > prof->saved_gen) {
        prof->saved_gen = gen;
    }
}

static kvp_status_t load_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                            size_t vlen)
{
    kvp_store_h  st     = arg;
    kvp_status_t status = kvp_nsprof_load(&st->profiles, key, klen, val, vlen);

    if (status == KVP_ERR_CORRUPT) {
        st->stats.crc_failures++;
        return KVP_OK; /* skipped: the namespace's next sealed page fixes its profile again */
    }
    return status;
}

kvp_status_t kvp_store_ns_load(kvp_store_h st)
{
    return kvp_tier_meta_scan(st->tier, "ns/", load_cb, st);
}
