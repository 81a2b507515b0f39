/*
 * Native benchmarks of the lease-table core (benchmarks, never checks of a time; each checks its
 * own counts). Built with the native tests (cmake -DWAITPREP_TESTS=ON) as core_bench.
 *
 *   core_bench pin     one thread's pin + unpin through a thread-safe handle and a
 *                      WP_OPEN_SINGLE_THREAD one [iterations, default 10^7]
 *   core_bench prefix  a 128-chunk prefix through wp_try_pin_prefix against 128 single pins
 *                      [iterations per round, default 10^5]
 *   core_bench peek    128 digests through one wp_peek_many against 128 wp_peek
 *                      [iterations per round, default 10^5]
 *   core_bench cold    pins of random READY keys in a large table at 25%, 50% and 75% load
 *                      (independent pins, then each waiting for the last), and a dependent
 *                      random load over 1 GiB beside it
 *                      [capacity, default 2^20; pins per round, default 10^6; MiB chased, 1024]
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "../../native/test/common.h"

/* ---- pinbench: what the consumer lock costs one thread (a benchmark, never a check) ------- */

static double ns_per_pin(wp_table *c, const uint8_t d[32], unsigned long long iterations) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  uint64_t hits = wp_pin_loop(c, d, iterations);
  clock_gettime(CLOCK_MONOTONIC, &b);
  CHECK(hits == iterations);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)iterations;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One thread pins and unpins one READY slot in a loop through a default (thread-safe) handle and
 * through a WP_OPEN_SINGLE_THREAD one, alternating rounds so drift hits both alike; prints the
 * median of each. docs/benchmarks.md records the figures. */
static void bench_pin(unsigned long long iterations) {
  char name[96];
  table_name(name, sizeof name, "pinbench");
  wp_table *p = NULL, *shared = NULL, *single = NULL;
  wp_open_options single_thread = {0, 0, WP_OPEN_SINGLE_THREAD, 0};
  CHECK_RC(wp_open(name, 1, 1024, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &shared), WP_OK);
  CHECK_RC(wp_open_ex(name, 0, &single_thread, &single), WP_OK);
  if (p == NULL || shared == NULL || single == NULL) return;
  publish(p, 1);
  uint8_t d[32];
  digest_for(1, d);
  enum { ROUNDS = 7 };
  double thread_safe[ROUNDS], one_thread[ROUNDS];
  ns_per_pin(shared, d, iterations / 10 + 1); /* warm both */
  ns_per_pin(single, d, iterations / 10 + 1);
  for (int r = 0; r < ROUNDS; r++) {
    thread_safe[r] = ns_per_pin(shared, d, iterations);
    one_thread[r] = ns_per_pin(single, d, iterations);
  }
  qsort(thread_safe, ROUNDS, sizeof thread_safe[0], compare_doubles);
  qsort(one_thread, ROUNDS, sizeof one_thread[0], compare_doubles);
  printf("pinbench: pin + unpin of one READY slot, %llu iterations x %d rounds, median ns: thread-safe handle %.1f, "
         "WP_OPEN_SINGLE_THREAD handle %.1f\n",
         iterations, ROUNDS, thread_safe[ROUNDS / 2], one_thread[ROUNDS / 2]);
  wp_close(single);
  wp_close(shared);
  wp_close(p);
  wp_unlink(name);
}

/* ---- prefixbench: 128 chunks through one prefix call against 128 single pins (a benchmark) ---- */

static double elapsed_ns(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

/* One thread pins and releases a 128-chunk prefix, all READY, `iterations` times per round: once
 * as wp_try_pin_prefix + wp_unpin_many, once as 128 wp_try_pin + 128 wp_unpin, alternating rounds;
 * prints the median ns per whole prefix of each, in the thread's CPU time (on a shared host the
 * time spent waiting for a core would swamp the difference). From C the two differ only by the calls saved;
 * bench/prefix.js measures what they save from Node. docs/benchmarks.md records the figures. */
static void bench_prefix(unsigned long long iterations) {
  enum { CHUNKS = 128, ROUNDS = 7 };
  char name[96];
  table_name(name, sizeof name, "prefixbench");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 1024, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  static uint8_t digests[CHUNKS][32];
  static wp_lease leases[CHUNKS];
  for (uint32_t i = 0; i < CHUNKS; i++) {
    publish(p, 1000 + i);
    digest_for(1000 + i, digests[i]);
  }
  double one_call[ROUNDS], single[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    struct timespec a, b;
    unsigned long long pinned = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (unsigned long long k = 0; k < iterations; k++) {
      int run = wp_try_pin_prefix(c, &digests[0][0], CHUNKS, NULL, leases);
      pinned += (unsigned long long)run;
      wp_unpin_many(c, leases, (uint32_t)run);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    CHECK(pinned == iterations * CHUNKS);
    one_call[r] = elapsed_ns(&a, &b) / (double)iterations;
    pinned = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (unsigned long long k = 0; k < iterations; k++) {
      uint32_t run = 0;
      while (run < CHUNKS && wp_try_pin(c, digests[run], NULL, &leases[run]) == WP_OK) run++;
      pinned += run;
      for (uint32_t i = 0; i < run; i++) wp_unpin(c, &leases[i]);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    CHECK(pinned == iterations * CHUNKS);
    single[r] = elapsed_ns(&a, &b) / (double)iterations;
  }
  qsort(one_call, ROUNDS, sizeof one_call[0], compare_doubles);
  qsort(single, ROUNDS, sizeof single[0], compare_doubles);
  printf("prefixbench: pin + release of a %d-chunk READY prefix, %llu iterations x %d rounds, median ns per prefix: "
         "wp_try_pin_prefix + wp_unpin_many %.0f, %d x (wp_try_pin + wp_unpin) %.0f\n",
         CHUNKS, iterations, ROUNDS, one_call[ROUNDS / 2], CHUNKS, single[ROUNDS / 2]);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* ---- peek: 128 digests through one wp_peek_many against 128 wp_peek (a benchmark) ---- */

/* One thread peeks 128 READY digests `iterations` times per round: as one wp_peek_many with a
 * status buffer, as one without (the leading count only), and as 128 wp_peek calls; prints the
 * median ns per batch of each, in the thread's CPU time. The loop of wp_peek is the floor a
 * batched call is read against from Python and Node (python/bench/engine_calls.py,
 * bench/peek-many.js). */
static void bench_peek(unsigned long long iterations) {
  enum { CHUNKS = 128, ROUNDS = 7 };
  char name[96];
  table_name(name, sizeof name, "peekbench");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 1024, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  static uint8_t digests[CHUNKS][32];
  uint8_t statuses[CHUNKS];
  for (uint32_t i = 0; i < CHUNKS; i++) {
    publish(p, 2000 + i);
    digest_for(2000 + i, digests[i]);
  }
  double many[ROUNDS], leading[ROUNDS], single[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    struct timespec a, b;
    unsigned long long ready = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (unsigned long long k = 0; k < iterations; k++) ready += (unsigned long long)wp_peek_many(c, &digests[0][0], CHUNKS, statuses);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    CHECK(ready == iterations * CHUNKS);
    many[r] = elapsed_ns(&a, &b) / (double)iterations;
    ready = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (unsigned long long k = 0; k < iterations; k++) ready += (unsigned long long)wp_peek_many(c, &digests[0][0], CHUNKS, NULL);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    CHECK(ready == iterations * CHUNKS);
    leading[r] = elapsed_ns(&a, &b) / (double)iterations;
    ready = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (unsigned long long k = 0; k < iterations; k++) {
      for (uint32_t i = 0; i < CHUNKS; i++) ready += wp_peek(c, digests[i]) == WP_OK;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    CHECK(ready == iterations * CHUNKS);
    single[r] = elapsed_ns(&a, &b) / (double)iterations;
  }
  qsort(many, ROUNDS, sizeof many[0], compare_doubles);
  qsort(leading, ROUNDS, sizeof leading[0], compare_doubles);
  qsort(single, ROUNDS, sizeof single[0], compare_doubles);
  printf("peekbench: %d READY digests, %llu iterations x %d rounds, median ns per batch: wp_peek_many with statuses %.0f, "
         "leading count only %.0f, %d x wp_peek %.0f\n",
         CHUNKS, iterations, ROUNDS, many[ROUNDS / 2], leading[ROUNDS / 2], CHUNKS, single[ROUNDS / 2]);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* ---- coldbench: a pin of a cold slot, against the same run's DRAM latency (a benchmark) ---- */

static uint64_t bench_rng = 0x9e3779b97f4a7c15ull;

static uint64_t bench_next(void) { /* xorshift64*: cheap, fixed seed, so runs shuffle alike */
  bench_rng ^= bench_rng >> 12;
  bench_rng ^= bench_rng << 25;
  bench_rng ^= bench_rng >> 27;
  return bench_rng * 2685821657736338717ull;
}

/* ns per load of a pointer chase over `bytes` (one pointer per 64-byte line, the lines in one
 * random cycle, so every load depends on the last and no prefetcher can guess the next line).
 * `huge`: ask for 2 MiB pages with MADV_HUGEPAGE (what the default heap, without it, does not get
 * here under transparent_hugepage=madvise); -1 when the memory cannot be had. */
static double chase_ns(size_t bytes, int huge, unsigned long long loads) {
  const size_t line = 64 / sizeof(size_t), lines = bytes / 64;
  size_t *a = NULL;
  if (posix_memalign((void **)&a, 2u << 20, bytes) != 0) return -1;
#ifdef MADV_HUGEPAGE
  if (huge) madvise(a, bytes, MADV_HUGEPAGE);
#else
  (void)huge;
#endif
  uint32_t *order = malloc(lines * sizeof *order);
  if (order == NULL) {
    free(a);
    return -1;
  }
  for (size_t i = 0; i < lines; i++) order[i] = (uint32_t)i;
  for (size_t i = lines - 1; i > 0; i--) { /* Sattolo: one cycle through every line */
    size_t j = (size_t)(bench_next() % i);
    uint32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t i = 0; i < lines; i++) a[(size_t)order[i] * line] = (size_t)order[(i + 1) % lines] * line;
  free(order);
  size_t at = 0;
  for (unsigned long long k = 0; k < loads / 4; k++) at = a[at]; /* warm the page tables a little */
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  for (unsigned long long k = 0; k < loads; k++) at = a[at];
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  volatile size_t sink = at;
  (void)sink;
  free(a);
  return elapsed_ns(&t0, &t1) / (double)loads;
}

/* A table of `capacity` slots is filled to 25%, 50% and 75% of it with READY keys (counting the
 * reserves that found their 8-slot window full, a fill from empty, not a steady churn), then one
 * thread pins and unpins the published keys in a shuffled order through a WP_OPEN_SINGLE_THREAD
 * handle (as the addon opens it): the digests are read in sequence, the slots at random, so the
 * figure is the protocol on a cold slot; once with independent pins and once with each pin
 * waiting for the last (see the loop). Beside it, the pointer chase over 1 GiB on this
 * machine's default pages and on 2 MiB pages (`chase_mib`, 1 GiB unless CI asks for less).
 * Thread CPU time, median of 5 rounds. bench:pin's
 * cold-slot rows are read against this; docs/benchmarks.md records the figures. */
static void bench_cold(uint32_t capacity, unsigned long long pins, size_t chase_mib) {
  enum { ROUNDS = 5 };
  static const int loads[] = {25, 50, 75};
  printf("coldbench: capacity %u, %llu pins x %d rounds per load, thread CPU time, median\n", capacity, pins, ROUNDS);
  for (size_t l = 0; l < sizeof loads / sizeof loads[0]; l++) {
    char name[96];
    table_name(name, sizeof name, "coldbench");
    wp_table *p = NULL, *c = NULL;
    wp_open_options single_thread = {0, 0, WP_OPEN_SINGLE_THREAD, 0};
    CHECK_RC(wp_open(name, 1, capacity, &p), WP_OK);
    CHECK_RC(wp_open_ex(name, 0, &single_thread, &c), WP_OK);
    if (p == NULL || c == NULL) return;
    uint32_t want = (uint32_t)((uint64_t)capacity * (uint64_t)loads[l] / 100), published = 0;
    unsigned long long attempts = 0, full = 0;
    uint8_t (*digests)[32] = malloc((size_t)want * 32);
    if (digests == NULL) return;
    for (uint32_t n = 1; published < want; n++) {
      wp_reservation r;
      digest_for(n, digests[published]);
      attempts++;
      int rc = wp_reserve(p, digests[published], &r);
      if (rc == WP_FULL) {
        full++;
        continue;
      }
      CHECK_RC(rc, WP_OK);
      wp_meta meta = {4096, n, 0xabcdu + n, 1, 1};
      CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
      published++;
    }
    for (uint32_t i = published - 1; i > 0; i--) {
      uint32_t j = (uint32_t)(bench_next() % i);
      uint8_t t[32];
      memcpy(t, digests[i], 32);
      memcpy(digests[i], digests[j], 32);
      memcpy(digests[j], t, 32);
    }
    /* Two loops over the same keys. `independent`: the next pin's digest and slot do not depend
     * on the last pin, so the CPU may overlap several pins' cache misses (then the figure is a
     * throughput, which can be below one memory access). `dependent`: the next digest's index is
     * XORed with a term from the last lease's size (4096 >> 40, always 0, which the compiler cannot
     * know: a data dependency, not a branch the CPU could predict past), so each pin waits for
     * the last one's slot: a latency, as one wake meets it. */
    double round_ns[2][ROUNDS];
    for (int dependent = 0; dependent < 2; dependent++) {
      uint32_t at = 0;
      for (int r = -1; r < ROUNDS; r++) { /* round -1 warms the handle's own records */
        struct timespec t0, t1;
        unsigned long long hits = 0;
        uint32_t carry = 0;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (unsigned long long k = 0; k < pins; k++) {
          wp_lease lease;
          if (wp_try_pin(c, digests[at ^ carry], NULL, &lease) == WP_OK) {
            hits++;
            if (dependent) carry = (uint32_t)(lease.meta.size_bytes >> 40);
            wp_unpin(c, &lease);
          }
          at = at + 1 == published ? 0 : at + 1;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        CHECK(hits == pins);
        if (r >= 0) round_ns[dependent][r] = elapsed_ns(&t0, &t1) / (double)pins;
      }
      qsort(round_ns[dependent], ROUNDS, sizeof round_ns[dependent][0], compare_doubles);
    }
    printf("coldbench: load %d%%: %u keys READY, %llu of %llu reserves found their 8-slot window full (%.3f%%), "
           "cold pin + unpin %.1f ns (independent pins), %.1f ns (each pin waits for the last)\n",
           loads[l], published, full, attempts, 100.0 * (double)full / (double)attempts, round_ns[0][ROUNDS / 2],
           round_ns[1][ROUNDS / 2]);
    free(digests);
    wp_close(c);
    wp_close(p);
    wp_unlink(name);
  }
  unsigned long long chase = pins < 1000000 ? pins : 1000000;
  double small_pages = chase_ns(chase_mib << 20, 0, chase), huge_pages = chase_ns(chase_mib << 20, 1, chase);
  printf("coldbench: dependent random load over %zu MiB: %.1f ns (default pages), %.1f ns (MADV_HUGEPAGE)\n", chase_mib, small_pages, huge_pages);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "";
  if (!strcmp(which, "pin")) {
    bench_pin(argc > 2 ? strtoull(argv[2], NULL, 10) : 10000000);
  } else if (!strcmp(which, "prefix")) {
    bench_prefix(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000);
  } else if (!strcmp(which, "peek")) {
    bench_peek(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000);
  } else if (!strcmp(which, "cold")) {
    bench_cold(argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1u << 20, argc > 3 ? strtoull(argv[3], NULL, 10) : 1000000,
               argc > 4 ? (size_t)strtoull(argv[4], NULL, 10) : 1024);
  } else {
    fprintf(stderr, "usage: core_bench pin|prefix|peek|cold [arguments]\n");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
