/* xfer_nccl_none.c - xfer_nccl.h in a build without CUDA or NCCL (KVP_HAVE_NCCL unset): the link
 * API exists so callers build everywhere, and every call says why it cannot work. */
#include "kvpack/xfer_nccl.h"
#include "kvpack/log.h"

#include <string.h>

static kvp_status_t none(void)
{
    KVP_LOG_ERROR("nccl", "this kvpack was built without the nccl link (cuda or nccl not found, "
                          "or -DKVP_CUDA=OFF / -DKVP_NCCL=OFF)");
    return KVP_ERR_UNSUPPORTED;
}

kvp_status_t kvp_nccl_link_create(const kvp_nccl_params_t *params, kvp_nccl_link_h *link_p)
{
    (void)params, (void)link_p;
    return none();
}

void kvp_nccl_link_destroy(kvp_nccl_link_h link)
{
    (void)link;
}

kvp_status_t kvp_nccl_link_listen(kvp_nccl_link_h link, const char *host, uint16_t port,
                                  uint16_t *port_p)
{
    (void)link, (void)host, (void)port, (void)port_p;
    return none();
}

kvp_status_t kvp_nccl_link_accept(kvp_nccl_link_h link)
{
    (void)link;
    return none();
}

kvp_status_t kvp_nccl_link_connect(kvp_nccl_link_h link, const char *host, uint16_t port)
{
    (void)link, (void)host, (void)port;
    return none();
}

kvp_status_t kvp_nccl_link_send(kvp_nccl_link_h link, const void *const *pages,
                                const uint32_t *lens, uint32_t n)
{
    (void)link, (void)pages, (void)lens, (void)n;
    return none();
}

kvp_status_t kvp_nccl_link_recv(kvp_nccl_link_h link, void *buf, size_t cap, uint32_t *lens,
                                uint32_t lens_cap, uint32_t wait_ms, uint32_t *n_p,
                                kvp_status_t *page_status)
{
    (void)link, (void)buf, (void)cap, (void)lens, (void)lens_cap, (void)wait_ms, (void)n_p,
        (void)page_status;
    return none();
}

kvp_status_t kvp_nccl_link_status(kvp_nccl_link_h link)
{
    (void)link;
    return KVP_ERR_UNSUPPORTED;
}

void kvp_nccl_link_unique_id(kvp_nccl_link_h link, uint8_t id[KVP_NCCL_ID_BYTES])
{
    (void)link;
    memset(id, 0, KVP_NCCL_ID_BYTES);
}

int kvp_nccl_gpus(void)
{
    return 0;
}
