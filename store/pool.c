/* pool.c - the DRAM page pool: size-class slabs carved from mmap'd regions, with a byte budget.
 * A class is the page length rounded up (64 B below 4 KiB, 4 KiB above); a slab holds up to 512
 * slots of one class (about 2 MiB). Allocation pops a free slot or bumps into a fresh one: no
 * malloc once a class has a slab. A slab that empties stays mapped and resident (refilling it
 * costs no page faults, which on this VM are as slow as the disk) while mapped bytes stay within
 * pool->retain (the store sets its high watermark); beyond it, and before a new slab would pass
 * it, empty slabs are unmapped. A slab that keeps one live slot is never empty, so while mapped
 * bytes are beyond retain a freed slot of 16 KiB or more also gives its memory back
 * (MADV_DONTNEED on its whole 4 KiB pages past the first, which holds the free-list link):
 * with page sizes that vary, each class would otherwise keep about a budget's worth resident.
 * The budget counts slot bytes in use; eviction policy lives in evict.c, not here. */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <string.h>
#include <sys/mman.h>

#define MOD            "store"
#define SLAB_TARGET    (2u << 20)
#define SLAB_MAX_SLOTS 512u
#define RELEASE_SLOT   (16u << 10) /* freed slots this large give memory back beyond retain */
#define OS_PAGE        4096u

struct kvp_slab {
    kvp_slab_t *next;      /* in the class's partial list */
    kvp_slab_t *prev;
    uint8_t    *base;
    size_t      bytes;     /* mapped */
    uint32_t    cls;       /* index in pool->classes */
    uint32_t    nfree;     /* free slots (free list + never used) */
    uint32_t    nfresh;    /* slots handed out at least once (bump pointer) */
    bool        partial;   /* on the partial list */
    void       *free_head; /* freed slots, linked through their first 8 bytes */
};

/* The slot a page of len bytes takes: never 0 (a class of 0-byte slots would divide by zero when
 * its slab is sized), so len 0 takes the smallest slot. */
size_t kvp_pool_slot_size(size_t len)
{
    if (len <= 4096) {
        return ((len ? len : 1) + 63) & ~(size_t)63;
    }
    return (len + 4095) & ~(size_t)4095;
}

void kvp_pool_init(kvp_pool_t *pool, size_t budget)
{
    memset(pool, 0, sizeof(*pool));
    pool->budget = budget;
    pool->retain = budget;
}

static void slab_unmap(kvp_pool_t *pool, kvp_slab_t *slab)
{
    munmap(slab->base, slab->bytes);
    pool->mapped -= slab->bytes;
    kvp_free(slab);
}

static void partial_add(kvp_pool_class_t *c, kvp_slab_t *s)
{
    s->prev = NULL;
    s->next = c->partial;
    if (c->partial != NULL) {
        c->partial->prev = s;
    }
    c->partial = s;
    s->partial = true;
}

static void partial_del(kvp_pool_class_t *c, kvp_slab_t *s)
{
    if (s->prev != NULL) {
        s->prev->next = s->next;
    } else {
        c->partial = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    s->next = s->prev = NULL;
    s->partial = false;
}

void kvp_pool_cleanup(kvp_pool_t *pool)
{
    for (uint32_t i = 0; i < pool->nclasses; i++) {
        kvp_pool_class_t *c = &pool->classes[i];

        while (c->partial != NULL) {
            kvp_slab_t *s = c->partial;

            partial_del(c, s);
            slab_unmap(pool, s);
        }
        while (c->empty != NULL) {
            kvp_slab_t *e = c->empty;

            c->empty = e->next;
            slab_unmap(pool, e);
        }
    }
    /* full slabs are not listed: their pages are freed by the store before cleanup */
    kvp_free(pool->classes);
    memset(pool, 0, sizeof(*pool));
}

static kvp_status_t class_get(kvp_pool_t *pool, size_t slot_bytes, uint32_t *cls_p)
{
    kvp_pool_class_t *c;

    for (uint32_t i = 0; i < pool->nclasses; i++) {
        if (pool->classes[i].slot_bytes == slot_bytes) {
            *cls_p = i;
            return KVP_OK;
        }
    }
    c = kvp_array_room(pool->classes, &pool->cap_classes, pool->nclasses, sizeof(*c), 8,
                       "pool classes");
    if (c == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for pool class of %zu bytes", slot_bytes);
        return KVP_ERR_NO_MEMORY;
    }
    pool->classes = c;
    memset(&pool->classes[pool->nclasses], 0, sizeof(pool->classes[0]));
    pool->classes[pool->nclasses].slot_bytes = slot_bytes;
    pool->classes[pool->nclasses].slots =
        slot_bytes >= SLAB_TARGET ? 1u
                                  : (uint32_t)(SLAB_TARGET / slot_bytes < SLAB_MAX_SLOTS
                                                   ? SLAB_TARGET / slot_bytes
                                                   : SLAB_MAX_SLOTS);
    *cls_p = pool->nclasses++;
    return KVP_OK;
}

static kvp_status_t slab_map(kvp_pool_t *pool, uint32_t cls, kvp_slab_t **slab_p)
{
    kvp_pool_class_t *c = &pool->classes[cls];
    kvp_slab_t       *s = kvp_calloc(1, sizeof(*s), "pool slab");

    if (s == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for a slab header");
        return KVP_ERR_NO_MEMORY;
    }
    s->bytes = c->slot_bytes * c->slots;
    s->base  = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->base == MAP_FAILED) {
        KVP_LOG_ERROR(MOD, "mmap of a %zu-byte slab failed: %m", s->bytes);
        kvp_free(s);
        return KVP_ERR_NO_MEMORY;
    }
    s->cls   = cls;
    s->nfree = c->slots;
    pool->mapped += s->bytes;
    *slab_p = s;
    return KVP_OK;
}

/* Unmap empty slabs of any class until a new slab of bytes keeps mapped within the retain cap. */
static void release_empty(kvp_pool_t *pool, size_t bytes)
{
    for (uint32_t i = 0; i < pool->nclasses && pool->mapped + bytes > pool->retain; i++) {
        kvp_pool_class_t *c = &pool->classes[i];

        while (c->empty != NULL && pool->mapped + bytes > pool->retain) {
            kvp_slab_t *e = c->empty;

            c->empty = e->next;
            slab_unmap(pool, e);
        }
    }
}

kvp_status_t kvp_pool_alloc(kvp_pool_t *pool, size_t len, kvp_pool_slot_t *slot_p)
{
    size_t            slot_bytes = kvp_pool_slot_size(len);
    uint32_t          cls;
    kvp_pool_class_t *c;
    kvp_slab_t       *s;
    void             *p;
    kvp_status_t      status;

    if (pool->used + slot_bytes > pool->budget) {
        return KVP_ERR_NO_SPACE; /* the caller evicts and retries, and logs if it gives up */
    }
    status = class_get(pool, slot_bytes, &cls);
    if (status != KVP_OK) {
        return status;
    }
    c = &pool->classes[cls];
    if (c->partial == NULL) {
        if (c->empty != NULL) {
            s        = c->empty;
            c->empty = s->next;
            s->next  = NULL;
        } else {
            release_empty(pool, c->slot_bytes * c->slots);
            status = slab_map(pool, cls, &s);
            if (status != KVP_OK) {
                return status;
            }
        }
        partial_add(c, s);
    }
    s = c->partial;
    if (s->free_head != NULL) {
        p            = s->free_head;
        s->free_head = *(void **)p;
    } else {
        p = s->base + (size_t)s->nfresh * slot_bytes;
        s->nfresh++;
    }
    if (--s->nfree == 0) {
        partial_del(c, s);
    }
    pool->used += slot_bytes;
    pool->nslots++;
    slot_p->ptr  = p;
    slot_p->slab = s;
    return KVP_OK;
}

/* Give back the resident memory of a free slot of bytes at p: its whole OS pages past the first
 * (which holds the free-list link). They read as zeros when the slot is used again. */
static void slot_release(void *p, size_t bytes)
{
    uintptr_t from = ((uintptr_t)p + sizeof(void *) + OS_PAGE - 1) & ~(uintptr_t)(OS_PAGE - 1);
    uintptr_t to   = ((uintptr_t)p + bytes) & ~(uintptr_t)(OS_PAGE - 1);

    if (to > from) {
        (void)madvise((void *)from, to - from, MADV_DONTNEED); /* advice: nothing to undo */
    }
}

void kvp_pool_free(kvp_pool_t *pool, const kvp_pool_slot_t *slot)
{
    kvp_slab_t       *s = slot->slab;
    kvp_pool_class_t *c;

    if (slot->ptr == NULL) {
        return;
    }
    c = &pool->classes[s->cls];
    *(void **)slot->ptr = s->free_head;
    s->free_head        = slot->ptr;
    s->nfree++;
    pool->used -= c->slot_bytes;
    pool->nslots--;
    if (!s->partial) {
        partial_add(c, s);
    }
    if (s->nfree == c->slots) {
        partial_del(c, s);
        if (pool->mapped <= pool->retain) { /* stays resident: the next fill is warm */
            s->free_head = NULL;
            s->nfresh    = 0;
            s->next      = c->empty;
            c->empty     = s;
        } else {
            slab_unmap(pool, s);
        }
    } else if (c->slot_bytes >= RELEASE_SLOT && pool->mapped > pool->retain) {
        slot_release(slot->ptr, c->slot_bytes);
    }
}
