/* log.c - the stderr log writer and level control behind log.h. */
#include "kvpack/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kvp_log_level_current = -1; /* -1: not yet read from the environment */
static kvp_log_cb_t log_cb;
static _Thread_local char last_error[256]; /* kvp_log_last_error */

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static int level_from_env(void)
{
    const char *s = getenv("KVP_LOG_LEVEL");

    if (s != NULL) {
        for (int i = 0; i < 5; i++) {
            if (strcmp(s, level_names[i]) == 0) {
                return i;
            }
        }
    }
    return KVP_LOG_LVL_WARN;
}

/* Run once from a constructor so the macro's level check is a plain load. */
__attribute__((constructor)) static void log_init(void)
{
    if (kvp_log_level_current < 0) {
        kvp_log_level_current = level_from_env();
    }
}

void kvp_log_set_level(kvp_log_level_t level)
{
    kvp_log_level_current = (int)level;
}

void kvp_log_set_cb(kvp_log_cb_t cb)
{
    log_cb = cb;
}

void kvp_log_write(kvp_log_level_t level, const char *module, const char *file, int line,
                   const char *fmt, ...)
{
    char    msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == KVP_LOG_LVL_ERROR) {
        size_t l = strnlen(msg, sizeof(last_error) - 1);

        memcpy(last_error, msg, l);
        last_error[l] = '\0';
    }
    if (log_cb != NULL) {
        log_cb(level, module, msg);
        return;
    }
    if (level >= KVP_LOG_LVL_DEBUG) {
        fprintf(stderr, "kvpack %s [%s] %s (%s:%d)\n", level_names[level], module, msg, file, line);
    } else {
        fprintf(stderr, "kvpack %s [%s] %s\n", level_names[level], module, msg);
    }
}

const char *kvp_log_last_error(void)
{
    return last_error;
}

void kvp_log_error_clear(void)
{
    last_error[0] = '\0';
}
