/* version.h - the version of this kvpack build (CMake's project version), for --version, the
 * node's /metrics and anything else that reports it. */
#ifndef KVPACK_VERSION_H
#define KVPACK_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

const char *kvp_version(void); /* "0.1.0"; static */

#ifdef __cplusplus
}
#endif
#endif
