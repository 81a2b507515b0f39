#include "waitprep.h"

uint32_t wp_abi_version(void) { return WP_ABI_VERSION; }
