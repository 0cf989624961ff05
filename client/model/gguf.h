/* gguf.h - a small reader for GGUF v2/v3 model files: header, metadata key/values, tensor table,
 * and dequantization of F32/F16/Q4_0/Q4_1/Q8_0/Q6_K tensors to fp32. Every length, count and
 * offset is checked against the file size; anything malformed or of an unsupported type is a
 * KVP_ERR_INVALID / KVP_ERR_UNSUPPORTED with one log line, never a crash.
 * Main flow: kvp_gguf_open -> gguf_parse (kv table, tensor table) -> kvp_gguf_tensor_f32. */
#ifndef KVPACK_MODEL_GGUF_H
#define KVPACK_MODEL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

/* ggml tensor types this reader knows (numbering from the GGUF spec). */
enum {
    KVP_GGML_F32  = 0,
    KVP_GGML_F16  = 1,
    KVP_GGML_Q4_0 = 2,
    KVP_GGML_Q4_1 = 3,
    KVP_GGML_Q8_0 = 8,
    KVP_GGML_Q6_K = 14,
};

/* GGUF metadata value types. */
enum {
    KVP_GGUF_U8 = 0, KVP_GGUF_I8, KVP_GGUF_U16, KVP_GGUF_I16, KVP_GGUF_U32, KVP_GGUF_I32,
    KVP_GGUF_F32, KVP_GGUF_BOOL, KVP_GGUF_STR, KVP_GGUF_ARR, KVP_GGUF_U64, KVP_GGUF_I64,
    KVP_GGUF_F64, KVP_GGUF_NTYPES
};

typedef struct {
    char          *name;     /* NUL-terminated copy */
    uint32_t       n_dims;   /* 1..4 */
    uint64_t       ne[4];    /* ne[0] is the row length (innermost) */
    uint32_t       type;     /* KVP_GGML_* (other types are listed but cannot be read) */
    uint64_t       nelems;
    uint64_t       nbytes;
    const uint8_t *data;     /* points into the file image owned by the kvp_gguf_t */
} kvp_gguf_tensor_t;

typedef struct kvp_gguf kvp_gguf_t;

/* Read and parse a file. */
kvp_status_t kvp_gguf_open(const char *path, kvp_gguf_t **g_p);
/* Parse an in-memory image; buf is transferred (freed with kvp_free by kvp_gguf_close, also on
 * error). */
kvp_status_t kvp_gguf_parse(uint8_t *buf, size_t len, kvp_gguf_t **g_p);
void         kvp_gguf_close(kvp_gguf_t *g); /* NULL is a no-op */

/* Metadata getters: KVP_ERR_NOT_FOUND when absent, KVP_ERR_INVALID on a type mismatch.
 * Integers of any width convert to u32 when they fit; f32/f64 convert to float. */
kvp_status_t kvp_gguf_get_u32(const kvp_gguf_t *g, const char *key, uint32_t *v_p);
kvp_status_t kvp_gguf_get_bool(const kvp_gguf_t *g, const char *key, int *v_p);
kvp_status_t kvp_gguf_get_f32(const kvp_gguf_t *g, const char *key, float *v_p);
/* The same for an optional key: absent, *v_p = dflt and KVP_OK; present but of a wrong type or
 * out of range, the getter's error (a malformed file is refused, not run with the default). */
kvp_status_t kvp_gguf_opt_u32(const kvp_gguf_t *g, const char *key, uint32_t dflt,
                              uint32_t *v_p);
kvp_status_t kvp_gguf_opt_bool(const kvp_gguf_t *g, const char *key, int dflt, int *v_p);
kvp_status_t kvp_gguf_opt_f32(const kvp_gguf_t *g, const char *key, float dflt, float *v_p);
/* String value (borrowed, not NUL-terminated) and its length. */
kvp_status_t kvp_gguf_get_str(const kvp_gguf_t *g, const char *key, const char **s_p,
                              size_t *len_p);
/* Array value: element type, count, and a pointer to the raw elements (borrowed). For string
 * arrays walk them with kvp_gguf_str_next. */
kvp_status_t kvp_gguf_get_arr(const kvp_gguf_t *g, const char *key, uint32_t *type_p,
                              uint64_t *n_p, const uint8_t **data_p);
/* Next string of a (validated) string array: returns its bytes and advances *cur. */
const char  *kvp_gguf_str_next(const uint8_t **cur, size_t *len_p);

size_t                   kvp_gguf_n_tensors(const kvp_gguf_t *g);
const kvp_gguf_tensor_t *kvp_gguf_tensor(const kvp_gguf_t *g, size_t i);
const kvp_gguf_tensor_t *kvp_gguf_find(const kvp_gguf_t *g, const char *name);

/* Name of a ggml type ("q4_1", ...), "unknown" for others. */
const char  *kvp_ggml_type_name(uint32_t type);
/* Dequantize n elements (a multiple of the type's block size) from src to dst. */
kvp_status_t kvp_ggml_dequant(uint32_t type, const void *src, float *dst, uint64_t n);
/* Dequantize a whole tensor; n must equal t->nelems (shape check by the caller). */
kvp_status_t kvp_gguf_tensor_f32(const kvp_gguf_tensor_t *t, float *dst, uint64_t n);

#endif
