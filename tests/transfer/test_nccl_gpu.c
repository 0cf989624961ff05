/* test_nccl_gpu.c - the NCCL link between two processes on two GPUs (exits 77 unless at least
 * two are usable: NCCL refuses two ranks of one communicator on one GPU). This binary runs
 * itself again as the decode side on device 1 (fork + exec, so no CUDA state crosses a fork);
 * the prefill side, device 0, sends real pages from device memory. Checked: set-up, a batch
 * arriving byte-identical and passing the GPU check, one sent back, a page changed on the
 * sender's GPU after it was sealed is KVP_ERR_CORRUPT on both sides with that page named, and a
 * batch over the receiver's buffer is KVP_ERR_TOO_LARGE on both with the link still usable.
 * The decode side reports through its exit status. */
#include "kvpack/xfer_nccl.h"
#include "kvpack/log.h"
#include "kvpack/page.h"

#include "check.h"
#include "devmem.h"
#include "pages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOST   "127.0.0.1"
#define NPAGES 12
#define SEED   5

static kvp_nccl_link_h link_on(int device)
{
    kvp_nccl_params_t p = {.field_mask = KVP_NCCL_PARAM_DEVICE | KVP_NCCL_PARAM_TIMEOUT_MS,
                           .device = device, .timeout_ms = 60000};
    kvp_nccl_link_h   l;

    CHECK_OK(kvp_nccl_link_create(&p, &l));
    return l;
}

/* Receive one batch into a cap-byte buffer; compare with the expected host pages h. */
static kvp_status_t recv_check(kvp_nccl_link_h l, size_t cap, const uint8_t *h, size_t total,
                               const uint32_t *want_lens, uint32_t bad_page)
{
    uint32_t     lens[NPAGES], n = 0;
    kvp_status_t pst[NPAGES], st;
    uint8_t     *d = dev_alloc(cap), *got;

    st = kvp_nccl_link_recv(l, d, cap, lens, NPAGES, 60000, &n, pst);
    if (st == KVP_OK || st == KVP_ERR_CORRUPT) {
        CHECK(n == NPAGES && memcmp(lens, want_lens, sizeof(lens)) == 0);
        got = malloc(total);
        CHECK(got != NULL);
        dev_get(got, d, total);
        for (uint32_t i = 0, at = 0; i < n; at += lens[i], i++) {
            int same = memcmp(got + at, h + at, lens[i]) == 0;

            EXPECT(pst[i] == (i == bad_page ? KVP_ERR_CORRUPT : KVP_OK), "page %u %s", i,
                   kvp_status_name(pst[i]));
            EXPECT(same == (i != bad_page), "page %u bytes", i);
        }
        free(got);
    }
    dev_free(d);
    return st;
}

static int decode_main(int fd)
{
    uint32_t        lens[NPAGES];
    uint8_t        *h;
    size_t          total = test_pages_make(SEED, NPAGES, &h, lens);
    uint16_t        port;
    kvp_nccl_link_h l = link_on(1);
    const void     *pages[NPAGES];
    uint8_t        *d;

    CHECK_OK(kvp_nccl_link_listen(l, HOST, 0, &port));
    CHECK(write(fd, &port, sizeof(port)) == sizeof(port));
    close(fd);
    CHECK_OK(kvp_nccl_link_accept(l));
    CHECK_OK(recv_check(l, total, h, total, lens, NPAGES));
    d = dev_alloc(total); /* send them back */
    dev_put(d, h, total);
    for (uint32_t i = 0, at = 0; i < NPAGES; at += lens[i], i++) {
        pages[i] = d + at;
    }
    CHECK_OK(kvp_nccl_link_send(l, pages, lens, NPAGES));
    CHECK_ST(recv_check(l, total, h, total, lens, 3), KVP_ERR_CORRUPT);
    CHECK_ST(recv_check(l, total - 1, h, total, lens, NPAGES), KVP_ERR_TOO_LARGE);
    CHECK_OK(recv_check(l, total, h, total, lens, NPAGES));
    dev_free(d);
    kvp_nccl_link_destroy(l);
    free(h);
    return kvp_test_result("test_nccl_gpu decode");
}

int main(int argc, char **argv)
{
    uint32_t        lens[NPAGES], at[NPAGES];
    const void     *pages[NPAGES];
    uint8_t        *h, *d;
    size_t          total;
    uint16_t        port;
    int             fds[2], status;
    pid_t           pid;
    kvp_nccl_link_h l;
    char            fdarg[16];

    kvp_log_set_level(KVP_LOG_LVL_WARN);
    if (argc == 3 && strcmp(argv[1], "decode") == 0) {
        return decode_main(atoi(argv[2]));
    }
    if (kvp_nccl_gpus() < 2) { /* one GPU: NCCL takes one rank per device, a skip even then */
        if (kvp_nccl_gpus() == 0) {
            return kvp_test_no_gpu("test_nccl_gpu", "no usable gpu");
        }
        printf("test_nccl_gpu: %d usable gpu, two needed: skipped\n", kvp_nccl_gpus());
        return 77;
    }
    CHECK(pipe(fds) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        snprintf(fdarg, sizeof(fdarg), "%d", fds[1]);
        execl("/proc/self/exe", argv[0], "decode", fdarg, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    CHECK(read(fds[0], &port, sizeof(port)) == sizeof(port));
    total = test_pages_make(SEED, NPAGES, &h, lens);
    l     = link_on(0);
    CHECK_OK(kvp_nccl_link_connect(l, HOST, port));
    d = dev_alloc(total);
    dev_put(d, h, total);
    for (uint32_t i = 0, a = 0; i < NPAGES; a += lens[i], i++) {
        at[i]    = a;
        pages[i] = d + a;
    }
    CHECK_OK(kvp_nccl_link_send(l, pages, lens, NPAGES));
    CHECK_OK(recv_check(l, total, h, total, lens, NPAGES));
    h[at[3] + lens[3] / 2] ^= 0x04; /* page 3 changed after sealing, on the sender's gpu */
    dev_put(d, h, total);
    h[at[3] + lens[3] / 2] ^= 0x04;
    CHECK_ST(kvp_nccl_link_send(l, pages, lens, NPAGES), KVP_ERR_CORRUPT);
    dev_put(d, h, total);
    CHECK_ST(kvp_nccl_link_send(l, pages, lens, NPAGES), KVP_ERR_TOO_LARGE);
    CHECK_OK(kvp_nccl_link_status(l));
    CHECK_OK(kvp_nccl_link_send(l, pages, lens, NPAGES));
    CHECK(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "decode side exit status 0x%x", status);
    dev_free(d);
    kvp_nccl_link_destroy(l);
    free(h);
    return kvp_test_result("test_nccl_gpu");
}
