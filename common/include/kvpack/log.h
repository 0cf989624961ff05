/* log.h - levelled logging with a module tag. The level is checked before the arguments
 * are evaluated. Messages are lowercase, "node %s page %u" style, to stderr by default;
 * embedders may install a callback. Level from KVP_LOG_LEVEL=error|warn|info|debug|trace. */
#ifndef KVPACK_LOG_H
#define KVPACK_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KVP_LOG_LVL_ERROR = 0,
    KVP_LOG_LVL_WARN  = 1,
    KVP_LOG_LVL_INFO  = 2,
    KVP_LOG_LVL_DEBUG = 3,
    KVP_LOG_LVL_TRACE = 4
} kvp_log_level_t;

typedef void (*kvp_log_cb_t)(kvp_log_level_t level, const char *module, const char *msg);

extern int kvp_log_level_current;

void kvp_log_set_level(kvp_log_level_t level);
void kvp_log_set_cb(kvp_log_cb_t cb); /* NULL restores the stderr writer */
void kvp_log_write(kvp_log_level_t level, const char *module, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* This thread's last error message since kvp_log_error_clear ("" if none): the reason a server
 * sends with a refusal ("session a names chunk 0 layer 0, which is not in the store"). */
const char *kvp_log_last_error(void);
void        kvp_log_error_clear(void);

#define KVP_LOG(_lvl, _mod, ...)                                                  \
    do {                                                                          \
        if ((int)(_lvl) <= kvp_log_level_current) {                               \
            kvp_log_write((_lvl), (_mod), __FILE__, __LINE__, __VA_ARGS__);       \
        }                                                                         \
    } while (0)

#define KVP_LOG_ERROR(_mod, ...) KVP_LOG(KVP_LOG_LVL_ERROR, _mod, __VA_ARGS__)
#define KVP_LOG_WARN(_mod, ...)  KVP_LOG(KVP_LOG_LVL_WARN, _mod, __VA_ARGS__)
#define KVP_LOG_INFO(_mod, ...)  KVP_LOG(KVP_LOG_LVL_INFO, _mod, __VA_ARGS__)
#define KVP_LOG_DEBUG(_mod, ...) KVP_LOG(KVP_LOG_LVL_DEBUG, _mod, __VA_ARGS__)
#define KVP_LOG_TRACE(_mod, ...) KVP_LOG(KVP_LOG_LVL_TRACE, _mod, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
