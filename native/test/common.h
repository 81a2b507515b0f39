/*
 * What the native tests (native/test/test_core.c) and the native benchmarks
 * (bench/native/core_bench.c) share: the CHECK macros and their failure count, distinct
 * digests, per-process table names, and a one-call publish. Header-only and static, so each
 * program has its own copy and its own count.
 */
#ifndef WAITPREP_TEST_COMMON_H
#define WAITPREP_TEST_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "waitprep.h"

static int failures = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                                \
    }                                                                            \
  } while (0)
#define CHECK_RC(expr, want)                                                     \
  do {                                                                           \
    int rc_ = (expr);                                                            \
    if (rc_ != (want)) {                                                         \
      fprintf(stderr, "%s:%d: %s = %s, want %s\n", __FILE__, __LINE__, #expr,    \
              wp_status_name(rc_), wp_status_name(want));                        \
      failures++;                                                                \
    }                                                                            \
  } while (0)

static inline void digest_for(uint32_t n, uint8_t out[32]) {
  /* Distinct, spread digests: a small integer hash in every word. */
  for (int i = 0; i < 8; i++) {
    uint32_t x = n * 2654435761u + (uint32_t)i * 40503u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    memcpy(out + 4 * i, &x, 4);
  }
}

static inline void table_name(char *buf, size_t n, const char *what) {
  snprintf(buf, n, "waitprep-test-%s-%d", what, (int)getpid());
}

static inline void publish(wp_table *p, uint32_t n) {
  uint8_t d[32];
  digest_for(n, d);
  wp_reservation r;
  CHECK_RC(wp_reserve(p, d, &r), WP_OK);
  wp_meta meta = {4096, n, 0xabcdu + n, 1, 1};
  CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
}

#endif
