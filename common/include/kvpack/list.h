/* list.h - the one intrusive doubly linked list (circular, with a sentinel head): the store's LRU,
 * idle and unsynced lists, the transport's receives in flight. An entry that is in no list has
 * next == NULL (zeroed memory qualifies); kvp_list_del leaves it so. KVP_CONTAINER_OF
 * (kvpack/htab.h) gets from the link to the entry. */
#ifndef KVPACK_LIST_H
#define KVPACK_LIST_H

#include <stdbool.h>

typedef struct kvp_list {
    struct kvp_list *prev;
    struct kvp_list *next;
} kvp_list_t;

static inline void kvp_list_init(kvp_list_t *h) { h->prev = h->next = h; }
static inline bool kvp_list_empty(const kvp_list_t *h) { return h->next == h; }
static inline bool kvp_list_linked(const kvp_list_t *e) { return e->next != NULL; }
static inline void kvp_list_del(kvp_list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
}
static inline void kvp_list_push_tail(kvp_list_t *h, kvp_list_t *e) /* tail = most recent */
{
    e->prev       = h->prev;
    e->next       = h;
    h->prev->next = e;
    h->prev       = e;
}

#endif
