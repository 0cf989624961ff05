/* version.c - kvp_version (see version.h); KVP_VERSION_STRING comes from common/CMakeLists.txt
 * (a build outside CMake, such as .ci/gpu-check's, has no version to give). */
#include "kvpack/version.h"

#ifndef KVP_VERSION_STRING
#define KVP_VERSION_STRING "unknown"
#endif

const char *kvp_version(void)
{
    return KVP_VERSION_STRING;
}
