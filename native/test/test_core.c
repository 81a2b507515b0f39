/* Native unit tests for the C core, run by ctest (under ASan/UBSan in CI). */
#include <stdio.h>

#include "waitprep.h"

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

int main(void) {
  CHECK(wp_abi_version() == WP_ABI_VERSION);
  if (failures == 0) printf("test_core: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
