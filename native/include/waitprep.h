/*
 * waitprep: the C ABI of the shared-memory lease table.
 *
 * This header is the contract between the Node-API addon, the plain shared
 * library libwaitprep.so (loaded by model runtimes in any language) and the
 * JavaScript fallback, which mirrors its layout constants.
 *
 * Status: the lease table itself lands with the lease-table issue; until then
 * the library exports only its ABI version so that builds, loading and the
 * fallback decision can be exercised end to end.
 */
#ifndef WAITPREP_H
#define WAITPREP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WP_ABI_VERSION 1

/* The ABI version this library was built with (WP_ABI_VERSION). */
uint32_t wp_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* WAITPREP_H */
