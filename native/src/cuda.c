/*
 * CUDA presence, for describing devices (count, UUIDs) when validating device targets.
 * libcuda.so.1 is opened with dlopen on each call (the loader keeps one copy), never at load and never on a pin;
 * nothing links against CUDA, and without the driver everything else works unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "waitprep.h"

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_device_get_count_fn)(int *);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_device_get_uuid_fn)(unsigned char *, int); /* CUuuid is 16 bytes */

int wp_cuda_devices(wp_cuda_device *out, int max, char *reason, size_t reason_size) {
  if (reason_size > 0) reason[0] = 0;
  /* The handle stays open for the life of the process, as CUDA expects (dlopen is thread-safe;
   * a second call finds the library already loaded). */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    snprintf(reason, reason_size, "the CUDA driver library is not present: %s", dlerror());
    return -1;
  }
  cu_init_fn cu_init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_device_get_count_fn get_count = (cu_device_get_count_fn)dlsym(lib, "cuDeviceGetCount");
  cu_device_get_fn get_device = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
  cu_device_get_uuid_fn get_uuid = (cu_device_get_uuid_fn)dlsym(lib, "cuDeviceGetUuid_v2");
  if (get_uuid == NULL) get_uuid = (cu_device_get_uuid_fn)dlsym(lib, "cuDeviceGetUuid");
  if (!cu_init || !get_count || !get_device || !get_uuid) {
    snprintf(reason, reason_size, "libcuda.so.1 lacks cuInit, cuDeviceGetCount, cuDeviceGet or cuDeviceGetUuid");
    return -1;
  }
  int rc = cu_init(0);
  if (rc != 0) {
    snprintf(reason, reason_size, "cuInit failed with CUresult %d (no usable GPU or driver)", rc);
    return -1;
  }
  int count = 0;
  rc = get_count(&count);
  if (rc != 0) {
    snprintf(reason, reason_size, "cuDeviceGetCount failed with CUresult %d", rc);
    return -1;
  }
  int n = 0;
  for (int i = 0; i < count && n < max; i++) {
    int device;
    if (get_device(&device, i) != 0) continue;
    unsigned char uuid[16];
    if (get_uuid(uuid, device) != 0) continue;
    out[n].ordinal = (uint32_t)i;
    memcpy(out[n].uuid, uuid, 16);
    n++;
  }
  return n;
}
