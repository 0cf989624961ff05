/* test_seg.c - the segment files' sync bookkeeping (store/seg.c), which lets a background sync
 * run without the tier's lock: appends count as synced only once a sync that began after them
 * has ended; an append made while an unlocked sync runs stays dirty; a locked kvp_segs_sync
 * covers everything; reads through a plan see the bytes, also of a segment rolled meanwhile; the
 * spare segment made ahead of a roll; a hold keeps a file whose bytes are not named yet. */
#include "seg.h"
#include "kvpack/alloc.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static void *page(int v)
{
    void *p = kvp_aligned_alloc(KVP_SEG_ALIGN, KVP_SEG_ALIGN, "t page");

    CHECK(p != NULL);
    memset(p, v, KVP_SEG_ALIGN);
    return p;
}

/* one page appended; segments that died meanwhile (nothing names them here) unlinked, as the
 * tier does after its lock */
static void append(kvp_segs_t *s, void *buf, kvp_seg_ext_t *e)
{
    char **dead;
    size_t n;

    *e = (kvp_seg_ext_t){buf, KVP_SEG_ALIGN, 0, 0, KVP_OK};
    CHECK_OK(kvp_segs_append(s, e, 1, false));
    n = kvp_segs_take_dead(s, &dead);
    kvp_segs_unlink_dead(dead, n);
}

static int seg_files(const char *dir)
{
    char  cmd[128];
    int   n = -1;
    FILE *f;

    snprintf(cmd, sizeof(cmd), "ls %s/seg | grep -c '\\.seg$'", dir);
    f = popen(cmd, "r");
    CHECK(f != NULL && fscanf(f, "%d", &n) == 1);
    pclose(f);
    return n;
}

/* The spare segment: asked for only once the active file is half full, taken by the next roll
 * (the roll creates no file of its own); one made while a roll happened anyway is dropped
 * (segment ids keep growing); one never used is removed at close. */
static void test_spare(const char *dir, void *a)
{
    kvp_segs_t   *s;
    kvp_seg_ext_t e;
    uint64_t      id, id2;
    const char   *d;
    int           dfd, fd, before;

    CHECK_OK(kvp_segs_open(dir, 4 * KVP_SEG_ALIGN, &s)); /* a roll every 4 pages */
    append(s, a, &e);
    CHECK(!kvp_segs_spare_want(s, &id, &d, &dfd)); /* a quarter full */
    append(s, a, &e);
    CHECK(kvp_segs_spare_want(s, &id, &d, &dfd));
    CHECK(!kvp_segs_spare_want(s, &id2, &d, &dfd)); /* being made */
    fd = kvp_segs_spare_create(d, dfd, id);
    CHECK(fd >= 0);
    kvp_segs_spare_set(s, id, fd);
    append(s, a, &e);
    append(s, a, &e);
    before = seg_files(dir);
    append(s, a, &e); /* rolls onto the spare: no new file, the old one (named by nothing) goes */
    CHECK(e.seg == id && seg_files(dir) == before - 1);
    /* asked for, then a roll happens before it is set: dropped */
    append(s, a, &e);
    CHECK(kvp_segs_spare_want(s, &id, &d, &dfd));
    fd = kvp_segs_spare_create(d, dfd, id);
    append(s, a, &e);
    append(s, a, &e);
    append(s, a, &e); /* rolls without it */
    CHECK(e.seg > id);
    before = seg_files(dir);
    kvp_segs_spare_set(s, id, fd);
    CHECK(seg_files(dir) == before - 1);
    /* made and never used: gone after close */
    append(s, a, &e);
    CHECK(kvp_segs_spare_want(s, &id, &d, &dfd));
    kvp_segs_spare_set(s, id, kvp_segs_spare_create(d, dfd, id));
    before = seg_files(dir);
    kvp_segs_close(s);
    CHECK(seg_files(dir) == before - 1);
}

/* A held file (a commit's written pages whose locators are retried after a db reopen) outlives
 * what would unlink it, a roll away from it with nothing in it named, and a delete that takes
 * its live bytes to zero; releasing the hold unlinks it. */
static void test_hold(const char *dir, void *a)
{
    kvp_segs_t   *s;
    kvp_seg_ext_t e, held;
    char        **dead;
    int           before;

    CHECK_OK(kvp_segs_open(dir, 2 * KVP_SEG_ALIGN, &s)); /* a roll every 2 pages */
    append(s, a, &e);
    kvp_segs_live_add(s, e.seg, (int64_t)kvp_seg_span(e.len)); /* named */
    append(s, a, &held);                                        /* written, not named yet */
    CHECK(held.seg == e.seg);
    kvp_segs_hold(s, held.seg, 1);
    append(s, a, &e); /* rolls away from it */
    CHECK(e.seg != held.seg);
    before = seg_files(dir);
    kvp_segs_live_add(s, held.seg, -(int64_t)kvp_seg_span(e.len)); /* its named page deleted */
    kvp_segs_unlink_dead(dead, kvp_segs_take_dead(s, &dead));
    CHECK(seg_files(dir) == before); /* held: still there */
    kvp_segs_hold(s, held.seg, -1); /* the retry failed after all: nothing names it */
    kvp_segs_unlink_dead(dead, kvp_segs_take_dead(s, &dead));
    CHECK(seg_files(dir) == before - 1);
    kvp_segs_close(s);
}

int main(void)
{
    char           dir[] = "/tmp/kvp_seg_XXXXXX", cmd[64];
    kvp_segs_t    *s;
    kvp_seg_ext_t  e1, e2, r;
    uint64_t       g1, g2;
    int            fd;
    void          *a = page(1), *b = page(2), *out = page(0);
    kvp_seg_read_t *plan;

    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(kvp_segs_open(dir, 0, &s));
    CHECK(kvp_segs_sync_begin(s, &g1) == -1); /* nothing written: nothing to sync */

    append(s, a, &e1);
    fd = kvp_segs_sync_begin(s, &g1);
    CHECK(fd >= 0);
    append(s, b, &e2); /* while the unlocked sync runs */
    CHECK_OK(kvp_segs_sync_run(fd));
    kvp_segs_sync_end(s, g1);
    fd = kvp_segs_sync_begin(s, &g2); /* the second append is still dirty */
    CHECK(fd >= 0 && g2 > g1);
    CHECK_OK(kvp_segs_sync_run(fd));
    kvp_segs_sync_end(s, g2);
    CHECK(kvp_segs_sync_begin(s, &g2) == -1);

    append(s, a, &e1); /* a locked sync covers it, and an older end does not undo that */
    fd = kvp_segs_sync_begin(s, &g1);
    CHECK(fd >= 0);
    CHECK_OK(kvp_segs_sync(s));
    CHECK(kvp_segs_sync_begin(s, &g2) == -1);
    CHECK_OK(kvp_segs_sync_run(fd));
    kvp_segs_sync_end(s, g1);
    CHECK(kvp_segs_sync_begin(s, &g2) == -1);

    /* a read planned under the lock, run after: the bytes of e2 */
    r    = (kvp_seg_ext_t){out, KVP_SEG_ALIGN, e2.seg, e2.off, KVP_ERR_IO};
    plan = kvp_segs_read_plan(s, &r, 1);
    CHECK(plan != NULL);
    kvp_segs_read_run(plan);
    CHECK_OK(r.status);
    CHECK(memcmp(out, b, KVP_SEG_ALIGN) == 0);
    r    = (kvp_seg_ext_t){out, KVP_SEG_ALIGN, e2.seg + 1000, 0, KVP_OK}; /* no such segment */
    plan = kvp_segs_read_plan(s, &r, 1);
    kvp_segs_read_run(plan);
    CHECK_ST(r.status, KVP_ERR_NOT_FOUND);

    kvp_segs_close(s);
    test_spare(dir, a);
    test_hold(dir, a);
    kvp_free(a);
    kvp_free(b);
    kvp_free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    printf("ok\n");
    return 0;
}
