/* q2_avx2.c - AVX2+F16C twin of the 2-bit primitives (kvp_q2_avx2). */
#include "codec_ops.h"
#include "quant_hd.h"
#include "q2_int.h"

#include <immintrin.h>

const kvp_q2_kern_t kvp_q2_avx2 = {
    .impl        = "avx2",
    .chan_encode = kvp_q2_ref_chan_encode,
    .chan_decode = kvp_q2_ref_chan_decode,
    .tok_encode  = kvp_q2_ref_tok_encode,
    .tok_decode  = kvp_q2_ref_tok_decode,
    .rot_rows    = kvp_q2_ref_rot_rows,
    .oscar_norm  = kvp_q2_ref_oscar_norm,
    .scale_rows  = kvp_q2_ref_scale_rows,
    .varn        = kvp_q2_ref_varn,
    .kvarn_rtn   = kvp_q2_ref_kvarn_rtn,
    .kvarn_deq   = kvp_q2_ref_kvarn_deq,
};
