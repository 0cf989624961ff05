/* test_errmode.c - the KVP_UCX_ERR_MODE setting of the transport: peer and none create a
 * transport, anything else is refused with KVP_ERR_INVALID (and one log line), and an explicit
 * KVP_XFER_PARAM_PEER_ERRORS wins over the environment; each transport uses the mode it was given
 * (kvp_xfer_peer_errors: a setting parsed and then ignored passed before). */
#include "kvpack/log.h"
#include "kvpack/xfer.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mode_used = -1; /* kvp_xfer_peer_errors of the last transport made */

static kvp_status_t create_with(const char *env, int explicit_mode, int peer_errors)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        x = NULL;
    kvp_status_t      s;

    if (env != NULL) {
        setenv("KVP_UCX_ERR_MODE", env, 1);
    } else {
        unsetenv("KVP_UCX_ERR_MODE");
    }
    memset(&p, 0, sizeof(p));
    if (explicit_mode) {
        p.field_mask  = KVP_XFER_PARAM_PEER_ERRORS;
        p.peer_errors = peer_errors;
    }
    mode_used = -1;
    s         = kvp_xfer_create(&p, &x);
    if (s == KVP_OK) {
        uint16_t port = 0;

        mode_used = kvp_xfer_peer_errors(x);
        /* a usable transport: it can listen */
        CHECK_ST(kvp_xfer_listen(x, "127.0.0.1", 0, &port), KVP_OK);
        if (port == 0) {
            fprintf(stderr, "FAIL: no port bound\n");
            exit(1);
        }
        kvp_xfer_destroy(x);
    }
    return s;
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    CHECK_ST(create_with(NULL, 0, 0), KVP_OK);
    CHECK(mode_used == 1); /* the default: peer */
    CHECK_ST(create_with("", 0, 0), KVP_OK);
    CHECK(mode_used == 1);
    CHECK_ST(create_with("peer", 0, 0), KVP_OK);
    CHECK(mode_used == 1);
    CHECK_ST(create_with("none", 0, 0), KVP_OK);
    CHECK(mode_used == 0);
    CHECK_ST(create_with("PEER!", 0, 0), KVP_ERR_INVALID);
    CHECK_ST(create_with("nonee", 0, 0), KVP_ERR_INVALID);
    CHECK_ST(create_with("bogus", 1, 1), KVP_OK); /* the explicit param wins */
    CHECK(mode_used == 1);
    CHECK_ST(create_with("bogus", 1, 0), KVP_OK);
    CHECK(mode_used == 0);
    CHECK_ST(create_with("none", 1, 1), KVP_OK);
    CHECK(mode_used == 1);
    printf("test_errmode: ok\n");
    return 0;
}
