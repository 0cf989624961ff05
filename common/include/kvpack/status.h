/* status.h - the one status type of kvpack (kvp_status_t) and its strings.
 * Codes come from one X-macro table so names, values and messages cannot drift apart.
 * Ranges tell callers the blast radius: -1..-39 generic, -40..-59 peer/link (retry elsewhere),
 * -60..-79 node (mark suspect), -80..-99 data (corrupt: drop the object). The wire carries the
 * numeric value, so append only; never renumber. */
#ifndef KVPACK_STATUS_H
#define KVPACK_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_STATUS_MAP(X)                                                    \
    X(OK,                   0,  "success")                                   \
    X(INPROGRESS,           1,  "operation in progress")                     \
    X(ERR_NO_MEMORY,       -1,  "out of memory")                             \
    X(ERR_INVALID,         -2,  "invalid argument")                          \
    X(ERR_NOT_FOUND,       -3,  "not found")                                 \
    X(ERR_EXISTS,          -4,  "already exists")                            \
    X(ERR_UNSUPPORTED,     -5,  "unsupported")                               \
    X(ERR_TIMEOUT,         -6,  "deadline exceeded")                         \
    X(ERR_NO_SPACE,        -7,  "no space left (budget or disk full)")       \
    X(ERR_IO,              -8,  "i/o error")                                 \
    X(ERR_BUSY,            -9,  "resource busy")                             \
    X(ERR_TOO_LARGE,      -10,  "message or object too large")               \
    X(ERR_CANCELED,       -11,  "operation canceled")                        \
    X(ERR_DEVICE,         -12,  "gpu device error")                          \
    X(ERR_STALE,          -13,  "an older version than the node holds")      \
    X(ERR_PEER_UNREACHABLE,-40, "peer unreachable")                          \
    X(ERR_PEER_GONE,      -41,  "peer connection lost")                      \
    X(ERR_PROTOCOL,       -42,  "malformed or truncated wire message")       \
    X(ERR_NODE_SUSPECT,   -60,  "node marked suspect")                       \
    X(ERR_NODE_STORE,     -61,  "node storage failure")                      \
    X(ERR_SHUTTING_DOWN,  -62,  "node is shutting down")                     \
    X(ERR_CORRUPT,        -80,  "checksum mismatch")                         \
    X(ERR_BAD_PAGE,       -81,  "malformed page")                            \
    X(ERR_WRONG_CODEC,    -82,  "page codec or geometry does not match")     \
    X(ERR_BAD_INPUT_DATA, -83,  "input has NaN, Inf or a value past fp16 range (|x| > 65504)")

typedef enum {
#define KVP_STATUS_ENUM(_n, _v, _s) KVP_##_n = (_v),
    KVP_STATUS_MAP(KVP_STATUS_ENUM)
#undef KVP_STATUS_ENUM
} kvp_status_t;

/* Message for a status; never NULL (unknown values give "unknown status"). */
const char *kvp_status_str(kvp_status_t status);
/* Symbolic name without the KVP_ prefix, e.g. "ERR_CORRUPT"; never NULL. */
const char *kvp_status_name(kvp_status_t status);

#define KVP_BIT(n) (1ull << (n))

#ifdef __cplusplus
}
#endif
#endif
