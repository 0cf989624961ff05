/* stories_data.h - the shared set-up of the stories260K tests: from argv[1] (REALDATA_DIR) load
 * stories260K.bin with tok512.bin and read the first max_bytes of emma.txt (NUL-terminated).
 * Returns -1 when all is loaded, else the exit status for main: 2 usage, 77 skipped (the data
 * is absent, said on stdout), 1 the model does not load. */
#ifndef KVPACK_TESTS_STORIES_DATA_H
#define KVPACK_TESTS_STORIES_DATA_H

#include "model/model.h"

#include "kvpack/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline int kvp_test_stories_load(int argc, char **argv, const char *prog, size_t max_bytes,
                                        kvp_model_t **m_p, char **emma_p, size_t *elen_p)
{
    char   model[512], tok[512], emma_path[512];
    FILE  *f;
    char  *buf;
    size_t n;

    if (argc < 2) {
        fprintf(stderr, "usage: %s REALDATA_DIR\n", prog);
        return 2;
    }
    snprintf(model, sizeof(model), "%s/stories260K.bin", argv[1]);
    snprintf(tok, sizeof(tok), "%s/tok512.bin", argv[1]);
    snprintf(emma_path, sizeof(emma_path), "%s/emma.txt", argv[1]);
    if (access(model, R_OK) != 0 || access(tok, R_OK) != 0 || access(emma_path, R_OK) != 0) {
        printf("SKIP: %s has no stories260K.bin / tok512.bin / emma.txt\n", argv[1]);
        return 77;
    }
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    if (kvp_model_load(model, tok, m_p) != KVP_OK) {
        fprintf(stderr, "FAIL: cannot load %s\n", model);
        return 1;
    }
    buf = malloc(max_bytes + 1);
    f   = fopen(emma_path, "rb");
    n   = f != NULL && buf != NULL ? fread(buf, 1, max_bytes, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    if (buf != NULL) {
        buf[n] = '\0';
    }
    *emma_p = buf;
    *elen_p = n;
    return -1;
}

#endif
