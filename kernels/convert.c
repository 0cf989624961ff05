/* convert.c - dtype conversion for the codec front door (codec.c): the portable reference and
 * the once-chosen dispatch between it and the F16C twin (convert_avx2.c). Input checks reject
 * NaN/Inf and values outside the fp16 range, since every codec stores fp16 scales. */
#include "codec_ops.h"
#include "quant_hd.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static kvp_status_t ref_load_f16(const uint16_t *in, size_t n, float *out)
{
    uint16_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        bad |= (uint16_t)((in[i] & 0x7C00u) == 0x7C00u);
        out[i] = kvp_hd_f32(in[i]);
    }
    return bad ? KVP_ERR_BAD_INPUT_DATA : KVP_OK;
}

static kvp_status_t ref_check_f32(const float *in, size_t n)
{
    int bad = 0;

    for (size_t i = 0; i < n; i++) {
        bad |= !(fabsf(in[i]) <= 65504.0f);
    }
    return bad ? KVP_ERR_BAD_INPUT_DATA : KVP_OK;
}

static void ref_store_f16(const float *in, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = kvp_hd_f16_sat(in[i]);
    }
}

static int ref_f16_finite(const uint8_t *p, size_t n) { return kvp_hd_f16_all_finite(p, n); }

const kvp_cvt_ops_t kvp_cvt_ref = {ref_load_f16, ref_check_f32, ref_store_f16, ref_f16_finite};

static const kvp_cvt_ops_t *cvt;
static pthread_once_t       cvt_once = PTHREAD_ONCE_INIT;

static void cvt_init(void)
{
    const char *env = getenv("KVPACK_CODEC_IMPL");

    cvt = &kvp_cvt_ref;
    if (kvp_cpu_has_avx2() && !(env != NULL && strcmp(env, "ref") == 0)) {
        cvt = &kvp_cvt_avx2;
    }
}

const kvp_cvt_ops_t *kvp_cvt_ops(void)
{
    pthread_once(&cvt_once, cvt_init);
    return cvt;
}

uint16_t kvp_f32_to_f16(float f) { return kvp_hd_f16(f); }
float    kvp_f16_to_f32(uint16_t h) { return kvp_hd_f32(h); }

kvp_status_t kvp_values_check(kvp_dtype_t dtype, const void *x, size_t n)
{
    if (dtype == KVP_DTYPE_F16) {
        return kvp_cvt_ops()->f16_finite(x, n) ? KVP_OK : KVP_ERR_BAD_INPUT_DATA;
    }
    return kvp_cvt_ops()->check_f32(x, n);
}
