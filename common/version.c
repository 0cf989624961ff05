/* version.c - kvp_version (see version.h); KVP_VERSION_STRING comes from common/CMakeLists.txt. */
#include "kvpack/version.h"

const char *kvp_version(void)
{
    return KVP_VERSION_STRING;
}
