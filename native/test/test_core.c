/*
 * Native tests for the lease-table core, run by ctest (its benchmarks are bench/native/). CI builds them under
 * AddressSanitizer + UBSan, and the threaded stress test under ThreadSanitizer.
 *
 *   test_core unit      protocol cases in one process (and a forked child on a small
 *                       /dev/shm, where a private mount namespace is permitted)
 *   test_core stress    1 producer thread + 3 pinner threads, each its own client
 *   test_core shared    4 pinner threads on one consumer handle (one pins prefixes, one adds
 *                       exact pins), 2 evictors on one producer handle [milliseconds, default 2000]
 *   test_core reap      a forked child pins, is SIGKILLed, and is reaped
 *   test_core reaper    a reaper is SIGKILLed mid-reap; the next reap finishes its work
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "waitprep.h"

/* A test hook of table.c (WAITPREP_TEST_HOOKS): the sum of a handle's private counts of further
 * leases, and how many slots have one. */
uint64_t wp_test_private_pins(const wp_table *t, uint32_t *multi);

#include "common.h"

static void test_unit(void) {
  char name[96];
  table_name(name, sizeof name, "unit");
  wp_table *p = NULL, *c = NULL, *p2 = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 64, &c), WP_ERR_EXISTS);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  CHECK_RC(wp_open(name, 1, 0, &p2), WP_ERR_WRITER_EXISTS);
  CHECK(wp_capacity(c) == 64);

  uint8_t d1[32], d2[32];
  digest_for(1, d1);
  digest_for(2, d2);
  wp_lease a, b;
  CHECK_RC(wp_try_pin(c, d1, NULL, &a), WP_MISS_ABSENT);
  wp_reservation r;
  CHECK_RC(wp_reserve(c, d1, &r), WP_ERR_NOT_PRODUCER);
  CHECK_RC(wp_reserve(p, d1, &r), WP_OK);
  CHECK_RC(wp_reserve(p, d1, &r), WP_EXISTS);
  CHECK_RC(wp_try_pin(c, d1, NULL, &a), WP_MISS_PREPARING);
  wp_meta meta = {100, 7, 99, 3, 2};
  CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
  CHECK_RC(wp_publish(p, &r, &meta), WP_STALE);

  CHECK_RC(wp_try_pin(c, d1, NULL, &a), WP_OK);
  CHECK(a.meta.size_bytes == 100 && a.meta.location == 7 && a.meta.codec_id == 3 && a.meta.representation_version == 2);
  CHECK(a.generation == r.generation && a.slot == r.slot);
  CHECK_RC(wp_try_pin(c, d1, NULL, &b), WP_OK);
  CHECK(wp_client_pins(c, a.slot) == 2);
  CHECK_RC(wp_try_evict(p, d1), WP_PINNED);
  CHECK_RC(wp_unpin(c, &a), WP_OK);
  CHECK_RC(wp_unpin(c, &a), WP_STALE); /* a second unpin of the same lease releases nothing */
  CHECK(wp_client_pins(c, a.slot) == 1);
  CHECK(wp_slot_pin_mask(c, a.slot) != 0);
  CHECK_RC(wp_try_evict(p, d1), WP_PINNED);
  CHECK_RC(wp_unpin(p, &b), WP_STALE); /* another client's lease: not the producer's to release */
  CHECK(wp_client_pins(c, b.slot) == 1);
  CHECK_RC(wp_unpin(c, &b), WP_OK);
  CHECK(wp_slot_pin_mask(c, a.slot) == 0);
  CHECK_RC(wp_try_evict(p, d1), WP_OK);
  CHECK_RC(wp_try_evict(p, d1), WP_ABSENT);
  CHECK((wp_slot_state_gen(c, a.slot) >> 8) == a.generation + 1);

  /* Reuse the slot for the same digest: the old lease names the old generation. */
  CHECK_RC(wp_reserve(p, d1, &r), WP_OK);
  CHECK(r.slot == a.slot && r.generation == a.generation + 1);
  CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
  wp_lease fresh;
  CHECK_RC(wp_try_pin(c, d1, NULL, &fresh), WP_OK);
  CHECK_RC(wp_unpin(c, &b), WP_STALE); /* stale token: releases nothing */
  CHECK(wp_client_pins(c, fresh.slot) == 1);
  wp_lease forged = fresh;
  forged.token += 1000; /* a record this handle never handed out */
  CHECK_RC(wp_unpin(c, &forged), WP_STALE);
  CHECK_RC(wp_unpin(c, &fresh), WP_OK);

  /* Abandon. */
  CHECK_RC(wp_reserve(p, d2, &r), WP_OK);
  CHECK_RC(wp_abandon(p, &r), WP_OK);
  CHECK_RC(wp_try_pin(c, d2, NULL, &a), WP_MISS_ABSENT);

  /* Device records: read only when asked for, after the pin. */
  wp_device_record want = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 5, 9, 0};
  CHECK_RC(wp_try_pin(c, d1, &want, &a), WP_MISS_NO_DEVICE_RECORD);
  CHECK(wp_client_pins(c, fresh.slot) == 0 && wp_slot_pin_mask(c, fresh.slot) == 0); /* a device miss leaves no pin */
  wp_device_record rec = want;
  rec.arena_generation = 8;
  rec.write_seq = 1;
  CHECK_RC(wp_record_device_write(p, d1, &rec), WP_OK);
  CHECK_RC(wp_try_pin(c, d1, &want, &a), WP_MISS_ARENA_GENERATION_MISMATCH);
  rec.arena_generation = 9;
  rec.write_seq = 2;
  CHECK_RC(wp_record_device_write(p, d1, &rec), WP_OK);
  CHECK_RC(wp_try_pin(c, d1, &want, &a), WP_OK);
  wp_unpin(c, &a);
  want.device_uuid[0] = 99;
  CHECK_RC(wp_try_pin(c, d1, &want, &a), WP_MISS_DEVICE_MISMATCH);
  CHECK(wp_slot_pin_mask(c, a.slot) == 0);

  /* FULL once the probe window is full of other keys. */
  int full = 0;
  for (uint32_t n = 100; n < 100 + 64 * 8 && !full; n++) {
    uint8_t d[32];
    digest_for(n, d);
    full = wp_reserve(p, d, &r) == WP_FULL;
  }
  CHECK(full);

  wp_close(c);
  wp_close(p);
  CHECK_RC(wp_open(name, 1, 0, &p2), WP_OK); /* the producer role is free again */
  wp_close(p2);
  CHECK_RC(wp_unlink(name), WP_OK);
  CHECK_RC(wp_open("bad/name", 0, 0, &c), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_open("", 0, 0, &c), WP_ERR_INVALID_ARGUMENT);
}

/* ---- stress: pins and evictions race; no pinned slot is ever evicted ------------------ */

#define KEYS 16
static char stress_name[96];
static volatile int stop_flag = 0;
static unsigned long long pins_done[3];
static int violations = 0;

static void *pinner(void *arg) {
  int id = (int)(intptr_t)arg;
  wp_table *c = NULL;
  if (wp_open(stress_name, 0, 0, &c) != WP_OK) {
    __atomic_fetch_add(&violations, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  uint8_t d[KEYS][32];
  for (uint32_t k = 0; k < KEYS; k++) digest_for(k, d[k]);
  unsigned long long n = 0;
  while (!__atomic_load_n(&stop_flag, __ATOMIC_RELAXED)) {
    uint32_t k = (uint32_t)(n % KEYS);
    wp_lease lease;
    if (wp_try_pin(c, d[k], NULL, &lease) == WP_OK) {
      /* The lease's metadata must belong to this key, and the slot must stay READY at our
       * generation while we hold it. */
      uint64_t sg = wp_slot_state_gen(c, lease.slot);
      if (lease.meta.location != k || (sg >> 8) != lease.generation || ((sg & 0xff) != WP_SLOT_READY && (sg & 0xff) != WP_SLOT_EVICTING)) {
        __atomic_fetch_add(&violations, 1, __ATOMIC_RELAXED);
      }
      wp_unpin(c, &lease);
    }
    n++;
  }
  pins_done[id] = n;
  wp_close(c);
  return NULL;
}

static void test_stress(unsigned long long rounds) {
  table_name(stress_name, sizeof stress_name, "stress");
  wp_table *p = NULL;
  CHECK_RC(wp_open(stress_name, 1, 256, &p), WP_OK);
  if (p == NULL) return;
  for (uint32_t k = 0; k < KEYS; k++) publish(p, k);
  pthread_t threads[3];
  for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, pinner, (void *)(intptr_t)i);
  unsigned long long evicted = 0;
  for (unsigned long long i = 0; i < rounds; i++) {
    uint32_t k = (uint32_t)(i % KEYS);
    uint8_t d[32];
    digest_for(k, d);
    if (wp_try_evict(p, d) == WP_OK) {
      evicted++;
      publish(p, k);
    }
  }
  __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
  for (uint32_t s = 0; s < 256; s++) CHECK(wp_slot_pin_mask(p, s) == 0);
  CHECK(violations == 0);
  printf("stress: %llu pin attempts, %llu evictions, %d violations\n",
         pins_done[0] + pins_done[1] + pins_done[2], evicted, violations);
  wp_close(p);
  wp_unlink(stress_name);
}

/* ---- shared handles: one consumer handle and one producer handle, several threads each ---- */

/* Model runtimes pin from several threads through one handle (ctypes releases the GIL on every
 * call). Four threads pin through one consumer handle, on keys they share and keys of their own,
 * while two threads evict and republish through one producer handle. Whenever a thread holds a
 * lease, the slot must still be READY (or EVICTING, about to roll back) at the lease's
 * generation, and the handle's pin bit must be set; when all is done no pin may be left. */
#define SHARED_PINNERS 4
#define SHARED_KEYS 24 /* keys 0-7 shared by every pinner, 8 + 4i .. 11 + 4i pinner i's own */
static char shared_name[96];
static wp_table *shared_consumer, *shared_producer;
static int shared_stop = 0;
static int evicted_while_held = 0, held_without_bit = 0, stale_unpins = 0, stale_publishes = 0, duplicate_digests = 0;
static uint32_t evictor_picks = 0;
static unsigned long long shared_pins[SHARED_PINNERS], shared_evictions[2];

static void *shared_pinner(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t bit = 1ull << wp_client_index(shared_consumer);
  uint8_t d[SHARED_KEYS][32];
  for (uint32_t k = 0; k < SHARED_KEYS; k++) digest_for(k, d[k]);
  wp_lease held[4];
  uint32_t held_key[4];
  uint8_t run[3][32];
  unsigned long long n = 0;
  while (!__atomic_load_n(&shared_stop, __ATOMIC_RELAXED)) {
    /* Hold up to three leases at once (a shared key twice, and an own key), so that pins and
     * unpins of one slot by different threads interleave at every count, not only 0 <-> 1. The
     * last pinner takes its three as one prefix and releases them with wp_unpin_many; the one
     * before it also takes a fourth, an exact pin of its first lease's slot and generation. */
    int holding = 0;
    uint32_t keys[3] = {(uint32_t)(n % 8), (uint32_t)((n + 1) % 8), 8 + 4 * (uint32_t)id + (uint32_t)(n % 4)};
    if (n % 3 == 0) keys[1] = keys[0];
    if (id == SHARED_PINNERS - 1) {
      for (int j = 0; j < 3; j++) memcpy(run[j], d[keys[j]], 32);
      holding = wp_try_pin_prefix(shared_consumer, &run[0][0], 3, NULL, held);
      for (int j = 0; j < holding; j++) held_key[j] = keys[j];
    } else {
      for (int j = 0; j < 3; j++) {
        if (wp_try_pin(shared_consumer, d[keys[j]], NULL, &held[holding]) == WP_OK) held_key[holding++] = keys[j];
      }
    }
    if (id == SHARED_PINNERS - 2 && holding > 0 &&
        wp_try_pin_exact(shared_consumer, held[0].slot, held[0].generation, d[held_key[0]], NULL, &held[holding]) == WP_OK) {
      held_key[holding] = held_key[0];
      holding++;
    }
    for (int j = 0; j < holding; j++) {
      uint64_t sg = wp_slot_state_gen(shared_consumer, held[j].slot);
      uint64_t state = sg & 0xff;
      if ((sg >> 8) != held[j].generation || (state != WP_SLOT_READY && state != WP_SLOT_EVICTING) || held[j].meta.location != held_key[j]) {
        __atomic_fetch_add(&evicted_while_held, 1, __ATOMIC_RELAXED);
      }
      if ((wp_slot_pin_mask(shared_consumer, held[j].slot) & bit) == 0) __atomic_fetch_add(&held_without_bit, 1, __ATOMIC_RELAXED);
    }
    if (id == SHARED_PINNERS - 1) {
      if (wp_unpin_many(shared_consumer, held, (uint32_t)holding) != holding) __atomic_fetch_add(&stale_unpins, 1, __ATOMIC_RELAXED);
    } else {
      for (int j = holding - 1; j >= 0; j--) {
        if (wp_unpin(shared_consumer, &held[j]) != WP_OK) __atomic_fetch_add(&stale_unpins, 1, __ATOMIC_RELAXED);
      }
    }
    n++;
  }
  shared_pins[id] = n;
  return NULL;
}

/* Two threads on one producer handle, over the same keys at the same time (consecutive picks of
 * a shared counter name the same key): each evicts the key and, when that succeeds or the key is
 * absent, reserves and republishes it. A reservation never lands on a slot the other thread
 * reserved, so every publish succeeds and no digest is ever held by two slots. */
static void *shared_evictor(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned long long evictions = 0;
  while (!__atomic_load_n(&shared_stop, __ATOMIC_RELAXED)) {
    uint32_t k = (__atomic_fetch_add(&evictor_picks, 1, __ATOMIC_RELAXED) / 2 * 7) % SHARED_KEYS;
    uint8_t d[32];
    digest_for(k, d);
    int rc = wp_try_evict(shared_producer, d);
    if (rc == WP_OK) evictions++;
    if (rc == WP_OK || rc == WP_ABSENT) {
      wp_reservation r;
      if (wp_reserve(shared_producer, d, &r) == WP_OK) {
        wp_meta m = {64, k, k, 1, 1};
        if (wp_publish(shared_producer, &r, &m) != WP_OK) __atomic_fetch_add(&stale_publishes, 1, __ATOMIC_RELAXED);
      }
    }
  }
  shared_evictions[id] = evictions;
  return NULL;
}

static void count_duplicate_digests(wp_table *p) {
  size_t size;
  const uint8_t *base = wp_segment(p, &size);
  const uint8_t *slots = base + WP_HEADER_SIZE + (size_t)WP_MAX_CLIENTS * WP_CLIENT_SIZE;
  for (uint32_t a = 0; a < wp_capacity(p); a++) {
    if ((wp_slot_state_gen(p, a) & 0xff) == WP_SLOT_FREE) continue;
    for (uint32_t b = a + 1; b < wp_capacity(p); b++) {
      if ((wp_slot_state_gen(p, b) & 0xff) == WP_SLOT_FREE) continue;
      if (memcmp(slots + (size_t)a * WP_SLOT_SIZE + WP_SLOT_DIGEST, slots + (size_t)b * WP_SLOT_SIZE + WP_SLOT_DIGEST, 32) == 0) {
        duplicate_digests++;
      }
    }
  }
}

static void test_shared_handles(unsigned long long millis) {
  table_name(shared_name, sizeof shared_name, "shared");
  CHECK_RC(wp_open(shared_name, 1, 64, &shared_producer), WP_OK);
  CHECK_RC(wp_open(shared_name, 0, 0, &shared_consumer), WP_OK);
  if (shared_producer == NULL || shared_consumer == NULL) return;
  for (uint32_t k = 0; k < SHARED_KEYS; k++) publish(shared_producer, k);
  pthread_t pinners[SHARED_PINNERS], evictors[2];
  for (int i = 0; i < SHARED_PINNERS; i++) pthread_create(&pinners[i], NULL, shared_pinner, (void *)(intptr_t)i);
  for (int i = 0; i < 2; i++) pthread_create(&evictors[i], NULL, shared_evictor, (void *)(intptr_t)i);
  struct timespec pause = {(time_t)(millis / 1000), (long)(millis % 1000) * 1000000L};
  nanosleep(&pause, NULL);
  __atomic_store_n(&shared_stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < SHARED_PINNERS; i++) pthread_join(pinners[i], NULL);
  for (int i = 0; i < 2; i++) pthread_join(evictors[i], NULL);
  count_duplicate_digests(shared_producer);
  /* Every lease was released: no pin bit, no private count, and every key can be evicted. */
  int leaked_bits = 0, leaked_counts = 0, unevictable = 0;
  for (uint32_t s = 0; s < wp_capacity(shared_producer); s++) {
    leaked_bits += wp_slot_pin_mask(shared_producer, s) != 0;
    leaked_counts += wp_client_pins(shared_consumer, s) != 0;
  }
  for (uint32_t k = 0; k < SHARED_KEYS; k++) {
    uint8_t d[32];
    digest_for(k, d);
    int rc = wp_try_evict(shared_producer, d);
    unevictable += rc != WP_OK && rc != WP_ABSENT;
  }
  /* And no private count of further leases is left where the bit is clear (wp_client_pins does
   * not read those). */
  uint32_t multi = 0;
  leaked_counts += wp_test_private_pins(shared_consumer, &multi) != 0;
  leaked_counts += multi != 0;
  unsigned long long pins = 0;
  for (int i = 0; i < SHARED_PINNERS; i++) pins += shared_pins[i];
  printf("shared handles: %llu pin rounds on one consumer handle by %d threads, %llu evictions by 2 threads on one "
         "producer handle; %d leases held while evicted, %d leases without the pin bit, %d unpins refused, "
         "%d publishes refused, %d duplicate digests, %d leaked pin bits, %d leaked pin counts, %d keys left "
         "unevictable\n",
         pins, SHARED_PINNERS, shared_evictions[0] + shared_evictions[1], evicted_while_held, held_without_bit,
         stale_unpins, stale_publishes, duplicate_digests, leaked_bits, leaked_counts, unevictable);
  CHECK(pins > 0 && shared_evictions[0] + shared_evictions[1] > 0);
  CHECK(evicted_while_held == 0);
  CHECK(held_without_bit == 0);
  CHECK(stale_unpins == 0 && stale_publishes == 0);
  CHECK(duplicate_digests == 0);
  CHECK(leaked_bits == 0 && leaked_counts == 0 && unevictable == 0);
  wp_close(shared_consumer);
  wp_close(shared_producer);
  wp_unlink(shared_name);
}

/* ---- handoff: one client's lease taken over by another with wp_try_pin_exact ------------ */

/* The state word of `slot`, writable: the tests put a slot in EVICTING by hand to stand for a
 * producer stopped between its claim and its rollback. */
static uint64_t *state_word(wp_table *t, uint32_t slot) {
  uint8_t *base = (uint8_t *)wp_segment(t, NULL);
  return (uint64_t *)(base + WP_HEADER_SIZE + (size_t)WP_MAX_CLIENTS * WP_CLIENT_SIZE + (size_t)slot * WP_SLOT_SIZE + WP_SLOT_STATE_GEN);
}

static void test_handoff(void) {
  char name[96];
  table_name(name, sizeof name, "handoff");
  wp_table *p = NULL, *orch = NULL, *engine = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &orch), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &engine), WP_OK);
  if (p == NULL || orch == NULL || engine == NULL) return;
  publish(p, 1);
  uint8_t d1[32], d2[32];
  digest_for(1, d1);
  digest_for(2, d2);
  uint64_t orch_bit = 1ull << wp_client_index(orch), engine_bit = 1ull << wp_client_index(engine);

  /* The rule: the orchestrator holds its lease until the engine holds its own, then closes. */
  wp_lease held, taken, again;
  CHECK_RC(wp_try_pin(orch, d1, NULL, &held), WP_OK);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, held.generation, d1, NULL, &taken), WP_OK);
  CHECK(taken.slot == held.slot && taken.generation == held.generation);
  CHECK(taken.meta.location == held.meta.location && taken.meta.checksum == held.meta.checksum);
  CHECK(wp_client_pins(engine, held.slot) == 1 && wp_client_pins(orch, held.slot) == 1);
  CHECK(wp_slot_pin_mask(p, held.slot) == (orch_bit | engine_bit));
  /* Each handle's tokens are its own: the orchestrator's lease, given to the engine's wp_unpin,
   * names no record of the engine's (both hold their first record on the same slot), so the
   * engine's pin stays. */
  CHECK_RC(wp_unpin(engine, &held), WP_STALE);
  CHECK(wp_client_pins(engine, held.slot) == 1);
  CHECK_RC(wp_unpin(orch, &held), WP_OK);
  CHECK_RC(wp_try_evict(p, d1), WP_PINNED); /* the engine's pin holds it alone now */
  /* A second exact pin by the holder goes through the held-bit path and counts. */
  CHECK_RC(wp_try_pin_exact(engine, taken.slot, taken.generation, d1, NULL, &again), WP_OK);
  CHECK(wp_client_pins(engine, taken.slot) == 2);
  CHECK(wp_unpin_many(engine, (wp_lease[]){taken, again}, 2) == 2);
  CHECK(wp_slot_pin_mask(p, taken.slot) == 0 && wp_client_pins(engine, taken.slot) == 0);

  /* A device target is checked as wp_try_pin checks it, and a device miss leaves no pin. */
  wp_device_record target = {{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, 3, 1, 0};
  CHECK_RC(wp_try_pin_exact(engine, taken.slot, taken.generation, d1, &target, &again), WP_MISS_NO_DEVICE_RECORD);
  CHECK(wp_slot_pin_mask(p, taken.slot) == 0);

  /* A producer stopped mid-claim: EVICTING at the right generation is retried a bounded few
   * times, then reported; nothing is left pinned. */
  uint64_t *sg = state_word(p, taken.slot);
  uint64_t ready = __atomic_load_n(sg, __ATOMIC_ACQUIRE);
  __atomic_store_n(sg, (ready & ~0xffull) | WP_SLOT_EVICTING, __ATOMIC_SEQ_CST);
  CHECK_RC(wp_try_pin_exact(engine, taken.slot, taken.generation, d1, NULL, &again), WP_MISS_EVICTING);
  CHECK(wp_slot_pin_mask(p, taken.slot) == 0 && wp_client_pins(engine, taken.slot) == 0);
  __atomic_store_n(sg, ready, __ATOMIC_SEQ_CST);

  /* A stale token: the artifact was evicted since (slot FREE, generation + 1). */
  CHECK_RC(wp_try_evict(p, d1), WP_OK);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, held.generation, d1, NULL, &again), WP_MISS_STALE_HANDOFF);
  /* A recycled slot: the same digest published again in the same slot, one generation on. */
  publish(p, 1);
  CHECK_RC(wp_try_pin(orch, d1, NULL, &again), WP_OK);
  CHECK(again.slot == held.slot && again.generation == held.generation + 1);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, held.generation, d1, NULL, &taken), WP_MISS_STALE_HANDOFF);
  CHECK(wp_client_pins(engine, held.slot) == 0 && (wp_slot_pin_mask(p, held.slot) & engine_bit) == 0);
  CHECK_RC(wp_unpin(orch, &again), WP_OK);

  /* Forged tokens: a slot beyond the capacity or a generation beyond 56 bits cannot name
   * anything (invalid); a generation never reached, or the right slot and generation under
   * another digest, looks stale. */
  CHECK_RC(wp_try_pin_exact(engine, 64, 0, d1, NULL, &taken), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(engine, UINT32_MAX, 0, d1, NULL, &taken), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, 1ull << 56, d1, NULL, &taken), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, held.generation + 5, d1, NULL, &taken), WP_MISS_STALE_HANDOFF);
  CHECK_RC(wp_try_pin_exact(engine, held.slot, held.generation + 1, d2, NULL, &taken), WP_MISS_STALE_HANDOFF);
  CHECK_RC(wp_try_pin_exact(engine, (held.slot + 1) % 64, 0, d1, NULL, &taken), WP_MISS_STALE_HANDOFF); /* a FREE slot */
  /* A reservation's slot and generation: not published yet. */
  wp_reservation r;
  CHECK_RC(wp_reserve(p, d2, &r), WP_OK);
  CHECK_RC(wp_try_pin_exact(engine, r.slot, r.generation, d2, NULL, &taken), WP_MISS_PREPARING);
  CHECK_RC(wp_abandon(p, &r), WP_OK);
  CHECK_RC(wp_try_pin_exact(engine, r.slot, r.generation, d2, NULL, &taken), WP_MISS_STALE_HANDOFF);
  for (uint32_t s = 0; s < 64; s++) CHECK(wp_slot_pin_mask(p, s) == 0);
  wp_close(engine);
  wp_close(orch);
  wp_close(p);
  wp_unlink(name);
}

/* A slot recycled for another artifact: in a one-slot table every digest lands in slot 0, so the
 * slot the token names now holds a different key at the next generation. */
static void test_handoff_recycled(void) {
  char name[96];
  table_name(name, sizeof name, "recycled");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 1, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  uint8_t a[32], b[32];
  digest_for(10, a);
  digest_for(11, b);
  publish(p, 10);
  wp_lease first, lease;
  CHECK_RC(wp_try_pin(p, a, NULL, &first), WP_OK);
  CHECK_RC(wp_unpin(p, &first), WP_OK);
  CHECK_RC(wp_try_evict(p, a), WP_OK);
  publish(p, 11);
  CHECK((wp_slot_state_gen(c, 0) >> 8) == first.generation + 1);
  CHECK_RC(wp_try_pin_exact(c, first.slot, first.generation, a, NULL, &lease), WP_MISS_STALE_HANDOFF);
  CHECK_RC(wp_try_pin_exact(c, first.slot, first.generation + 1, a, NULL, &lease), WP_MISS_STALE_HANDOFF);
  CHECK_RC(wp_try_pin_exact(c, first.slot, first.generation, b, NULL, &lease), WP_MISS_STALE_HANDOFF);
  CHECK(wp_slot_pin_mask(c, 0) == 0);
  CHECK_RC(wp_try_pin_exact(c, first.slot, first.generation + 1, b, NULL, &lease), WP_OK);
  CHECK(lease.meta.location == 11);
  CHECK_RC(wp_unpin(c, &lease), WP_OK);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* ---- prefix: one call pins the longest ready leading run; peek reads without pinning ---- */

static void test_prefix(void) {
  char name[96];
  table_name(name, sizeof name, "prefix");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 256, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  enum { N = 8 };
  uint8_t digests[N][32];
  for (uint32_t i = 0; i < N; i++) digest_for(100 + i, digests[i]);
  for (uint32_t i = 0; i < 5; i++) publish(p, 100 + i); /* chunks 0-4 ready */
  wp_reservation r;
  CHECK_RC(wp_reserve(p, digests[5], &r), WP_OK); /* chunk 5 preparing */
  publish(p, 106);                                  /* chunk 6 ready, after the gap */
  wp_lease leases[N];
  memset(leases, 0, sizeof leases);
  CHECK(wp_try_pin_prefix(c, &digests[0][0], N, NULL, leases) == 5);
  for (uint32_t i = 0; i < 5; i++) {
    CHECK(leases[i].meta.location == 100 + i);
    CHECK(wp_client_pins(c, leases[i].slot) == 1);
    CHECK_RC(wp_try_evict(p, digests[i]), WP_PINNED);
  }
  CHECK(leases[5].token == 0 && leases[6].token == 0); /* past the run: untouched */
  wp_lease chunk6;
  CHECK_RC(wp_try_pin(c, digests[6], NULL, &chunk6), WP_OK);
  CHECK(wp_client_pins(c, chunk6.slot) == 1);
  CHECK_RC(wp_unpin(c, &chunk6), WP_OK);

  /* peek: what a pin would answer, and no pin taken. */
  CHECK_RC(wp_peek(c, digests[0]), WP_OK);
  CHECK_RC(wp_peek(c, digests[5]), WP_MISS_PREPARING);
  CHECK_RC(wp_peek(c, digests[7]), WP_MISS_ABSENT);
  CHECK_RC(wp_peek(c, digests[6]), WP_OK);
  uint32_t slot6 = chunk6.slot;
  CHECK(wp_slot_pin_mask(p, slot6) == 0 && wp_client_pins(c, slot6) == 0);
  uint64_t *sg = state_word(p, slot6);
  uint64_t ready = __atomic_load_n(sg, __ATOMIC_ACQUIRE);
  __atomic_store_n(sg, (ready & ~0xffull) | WP_SLOT_EVICTING, __ATOMIC_SEQ_CST);
  CHECK_RC(wp_peek(c, digests[6]), WP_MISS_EVICTING);
  __atomic_store_n(sg, ready, __ATOMIC_SEQ_CST);

  /* unpin_many releases the run once; a second time, nothing. */
  CHECK(wp_unpin_many(c, leases, 5) == 5);
  CHECK(wp_unpin_many(c, leases, 5) == 0);
  for (uint32_t i = 0; i < 5; i++) CHECK(wp_slot_pin_mask(p, leases[i].slot) == 0);
  /* A run that starts with a miss is empty; a device target applies to every chunk. */
  CHECK(wp_try_pin_prefix(c, &digests[5][0], 3, NULL, leases) == 0);
  wp_device_record target = {{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, 1, 1, 0};
  CHECK(wp_try_pin_prefix(c, &digests[0][0], N, &target, leases) == 0);
  CHECK_RC(wp_record_device_write(p, digests[0], &target), WP_OK);
  CHECK_RC(wp_record_device_write(p, digests[1], &target), WP_OK);
  CHECK(wp_try_pin_prefix(c, &digests[0][0], N, &target, leases) == 2);
  CHECK(wp_unpin_many(c, leases, 2) == 2);
  /* The whole prefix, once chunk 5 is published. */
  wp_meta meta = {4096, 105, 1, 1, 1};
  CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
  CHECK(wp_try_pin_prefix(c, &digests[0][0], 7, NULL, leases) == 7);
  CHECK(wp_unpin_many(c, leases, 7) == 7);
  for (uint32_t s = 0; s < 256; s++) CHECK(wp_slot_pin_mask(p, s) == 0 && wp_client_pins(c, s) == 0);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* wp_peek_many answers, digest by digest, what wp_peek answers, and counts the leading READY run;
 * without statuses it stops at the first digest that is not READY. It pins nothing. */
static void test_peek_many(void) {
  char name[96];
  table_name(name, sizeof name, "peekmany");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  enum { N = 12 };
  uint8_t digests[N][32];
  for (uint32_t i = 0; i < N; i++) digest_for(300 + i, digests[i]);
  for (uint32_t i = 0; i < 4; i++) publish(p, 300 + i); /* 0-3 ready */
  wp_reservation r;
  CHECK_RC(wp_reserve(p, digests[4], &r), WP_OK);     /* 4 preparing */
  publish(p, 305);                                      /* 5 ready after the gap; 6.. absent */
  publish(p, 307);
  uint64_t *sg = NULL;
  wp_lease probe;
  CHECK_RC(wp_try_pin(c, digests[7], NULL, &probe), WP_OK);
  uint32_t slot7 = probe.slot;
  CHECK_RC(wp_unpin(c, &probe), WP_OK);
  sg = state_word(p, slot7);
  uint64_t ready = __atomic_load_n(sg, __ATOMIC_ACQUIRE);
  __atomic_store_n(sg, (ready & ~0xffull) | WP_SLOT_EVICTING, __ATOMIC_SEQ_CST); /* 7 evicting */
  uint8_t statuses[N];
  memset(statuses, 0xee, sizeof statuses);
  CHECK(wp_peek_many(c, &digests[0][0], N, statuses) == 4);
  for (uint32_t i = 0; i < N; i++) CHECK_RC(statuses[i], wp_peek(c, digests[i]));
  CHECK_RC(statuses[4], WP_MISS_PREPARING);
  CHECK_RC(statuses[5], WP_OK);
  CHECK_RC(statuses[7], WP_MISS_EVICTING);
  CHECK_RC(statuses[11], WP_MISS_ABSENT);
  /* Without statuses: the same leading count, and nothing written anywhere. */
  CHECK(wp_peek_many(c, &digests[0][0], N, NULL) == 4);
  CHECK(wp_peek_many(c, &digests[5][0], 1, NULL) == 1);
  CHECK(wp_peek_many(c, &digests[4][0], 2, NULL) == 0);
  /* A batch that starts with a miss has an empty run, and still fills every status. */
  memset(statuses, 0xee, sizeof statuses);
  CHECK(wp_peek_many(c, &digests[4][0], 3, statuses) == 0);
  CHECK(statuses[0] == WP_MISS_PREPARING && statuses[1] == WP_OK && statuses[2] == WP_MISS_ABSENT && statuses[3] == 0xee);
  CHECK(wp_peek_many(c, NULL, 0, NULL) == 0);
  __atomic_store_n(sg, ready, __ATOMIC_SEQ_CST);
  for (uint32_t s = 0; s < 64; s++) CHECK(wp_slot_pin_mask(p, s) == 0);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* wp_unpin_indexed releases the run's leases named by position, in any order, each once; a bad
 * index releases nothing at all. */
static void test_unpin_indexed(void) {
  char name[96];
  table_name(name, sizeof name, "unpinindexed");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  enum { N = 6 };
  uint8_t digests[N][32];
  for (uint32_t i = 0; i < N; i++) {
    digest_for(400 + i, digests[i]);
    publish(p, 400 + i);
  }
  /* Two runs over the same blocks (two requests loading them): each holds its own pins. */
  wp_lease a[N], b[N];
  CHECK(wp_try_pin_prefix(c, &digests[0][0], N, NULL, a) == N);
  CHECK(wp_try_pin_prefix(c, &digests[0][0], N, NULL, b) == N);
  for (uint32_t i = 0; i < N; i++) CHECK(wp_client_pins(c, a[i].slot) == 2);
  const uint32_t bad[] = {1, N};
  CHECK_RC(-wp_unpin_indexed(c, a, N, bad, 2), WP_ERR_INVALID_ARGUMENT);
  CHECK(wp_client_pins(c, a[1].slot) == 2); /* nothing released */
  const uint32_t some[] = {4, 0, 2, 4};  /* out of order, one repeated */
  CHECK(wp_unpin_indexed(c, a, N, some, 4) == 3);
  CHECK(wp_client_pins(c, a[0].slot) == 1 && wp_client_pins(c, a[2].slot) == 1 && wp_client_pins(c, a[4].slot) == 1);
  CHECK(wp_client_pins(c, a[1].slot) == 2);
  CHECK_RC(wp_try_evict(p, digests[0]), WP_PINNED); /* the other run still holds it */
  CHECK(wp_unpin_many(c, a, N) == 3);                /* the rest of run a; the released ones skipped */
  const uint32_t all[] = {5, 4, 3, 2, 1, 0};
  CHECK(wp_unpin_indexed(c, b, N, all, N) == N);
  CHECK(wp_unpin_indexed(c, b, N, all, N) == 0);
  CHECK(wp_unpin_indexed(c, b, N, NULL, 0) == 0);
  for (uint32_t i = 0; i < N; i++) CHECK_RC(wp_try_evict(p, digests[i]), WP_OK);
  wp_close(c);
  wp_close(p);
  wp_unlink(name);
}

/* ---- reap: a SIGKILLed client's pins are released, a live one's are not --------------- */

static void test_reap(void) {
  char name[96];
  table_name(name, sizeof name, "reap");
  wp_table *p = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  if (p == NULL) return;
  publish(p, 1);
  uint8_t d[32];
  digest_for(1, d);
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    wp_table *c = NULL;
    wp_lease lease;
    if (wp_open(name, 0, 0, &c) != WP_OK || wp_try_pin(c, d, NULL, &lease) != WP_OK) _exit(2);
    char ok = 1;
    if (write(ready[1], &ok, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  char ok = 0;
  CHECK(read(ready[0], &ok, 1) == 1 && ok == 1);
  CHECK_RC(wp_try_evict(p, d), WP_PINNED);
  CHECK(wp_reap_dead_clients(p) == 0); /* the child is alive */
  kill(child, SIGKILL);
  /* Not waited for yet: a zombie with the same start time still counts as dead. */
  for (int i = 0; i < 1000 && wp_reap_dead_clients(p) == 0; i++) usleep(1000);
  CHECK_RC(wp_try_evict(p, d), WP_OK);
  int status;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  wp_close(p);
  wp_unlink(name);
}

/* ---- summary: counts read in place ------------------------------------------------------ */

static void test_summary(void) {
  char name[96];
  table_name(name, sizeof name, "summary");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 16, &p), WP_OK);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  if (p == NULL || c == NULL) return;
  publish(p, 1);
  publish(p, 2);
  uint8_t d[32];
  digest_for(3, d);
  wp_reservation r;
  CHECK_RC(wp_reserve(p, d, &r), WP_OK);
  digest_for(1, d);
  wp_lease lease;
  CHECK_RC(wp_try_pin(c, d, NULL, &lease), WP_OK);
  wp_summary sum;
  CHECK_RC(wp_summarize(c, &sum), WP_OK);
  CHECK(sum.slots[WP_SLOT_FREE] == 13 && sum.slots[WP_SLOT_RESERVED] == 1 && sum.slots[WP_SLOT_READY] == 2 && sum.slots[WP_SLOT_EVICTING] == 0);
  CHECK(sum.pinned_slots == 1);
  CHECK(sum.clients[WP_CLIENT_ACTIVE] == 2 && sum.clients[WP_CLIENT_FREE] == WP_MAX_CLIENTS - 2);
  CHECK(sum.producer_client == wp_client_index(p));
  CHECK(sum.reaped_clients == 0);
  CHECK_RC(wp_summarize(NULL, &sum), WP_ERR_INVALID_ARGUMENT);
  wp_unpin(c, &lease);
  wp_close(p);
  CHECK_RC(wp_summarize(c, &sum), WP_OK);
  CHECK(sum.pinned_slots == 0 && sum.producer_client == -1 && sum.slots[WP_SLOT_RESERVED] == 0);
  wp_close(c);
  wp_unlink(name);
}

/* ---- reaper: a reaper killed mid-reap is taken over -------------------------------------- */

/* The client word of entry i, in the mapped segment (tests write it to stage a crash). */
static uint64_t *client_word(wp_table *t, uint32_t i) {
  size_t size = 0;
  uint8_t *base = (uint8_t *)wp_segment(t, &size);
  return (uint64_t *)(base + WP_HEADER_SIZE + (size_t)i * WP_CLIENT_SIZE + WP_CLI_WORD);
}

/* Forks a client that opens `name`, pins digest d (host) and waits; returns its pid once it
 * holds the pin, and its client index through *index. */
static pid_t fork_pinner(const char *name, const uint8_t d[32], int *index) {
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    wp_table *c = NULL;
    wp_lease lease;
    if (wp_open(name, 0, 0, &c) != WP_OK || wp_try_pin(c, d, NULL, &lease) != WP_OK) _exit(2);
    int i = wp_client_index(c);
    if (write(ready[1], &i, sizeof i) != sizeof i) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);
  *index = -1;
  CHECK(read(ready[0], index, sizeof *index) == sizeof *index);
  close(ready[0]);
  return child;
}

static void kill_and_wait(pid_t pid) {
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

static int entries_in_state(wp_table *t, uint64_t state) {
  int n = 0;
  for (uint32_t i = 0; i < WP_MAX_CLIENTS; i++) n += (__atomic_load_n(client_word(t, i), __ATOMIC_ACQUIRE) & 3u) == state;
  return n;
}

/* Forks a reaper that opens `name` and reaps with WAITPREP_TEST_STOP=point (the core raises
 * SIGSTOP there); returns once it has stopped. */
static pid_t fork_stopped_reaper(const char *name, const char *point) {
  pid_t child = fork();
  if (child == 0) {
    setenv("WAITPREP_TEST_STOP", point, 1);
    wp_table *r = NULL;
    if (wp_open(name, 0, 0, &r) != WP_OK) _exit(2);
    wp_reap_dead_clients(r);
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(child, &status, WUNTRACED) == child && WIFSTOPPED(status));
  return child;
}

/* A dead producer's reaper killed before and after settling its slots: the next reap settles
 * (again: it is idempotent) and frees the role. */
static void test_reaper_producer(const char *point) {
  char name[96];
  table_name(name, sizeof name, point);
  wp_table *c = NULL;
  CHECK_RC(wp_open(name, 0, 64, &c), WP_OK); /* creates the table as a consumer */
  if (c == NULL) return;
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t producer = fork();
  if (producer == 0) {
    wp_table *p = NULL;
    uint8_t d[32];
    wp_reservation r;
    if (wp_open(name, 1, 0, &p) != WP_OK) _exit(2);
    publish(p, 1);
    digest_for(2, d);
    if (wp_reserve(p, d, &r) != WP_OK) _exit(3);
    char ok = 1;
    if (write(ready[1], &ok, 1) != 1) _exit(4);
    pause();
    _exit(0);
  }
  char ok = 0;
  CHECK(read(ready[0], &ok, 1) == 1);
  kill_and_wait(producer);
  uint8_t d1[32], d2[32];
  digest_for(1, d1);
  digest_for(2, d2);
  wp_lease lease;
  CHECK_RC(wp_try_pin(c, d2, NULL, &lease), WP_MISS_PREPARING);
  pid_t reaper = fork_stopped_reaper(name, point);
  kill_and_wait(reaper);
  CHECK(wp_reap_dead_clients(c) == 2); /* the producer (taken over) and the reaper */
  CHECK_RC(wp_try_pin(c, d2, NULL, &lease), WP_MISS_ABSENT);
  CHECK_RC(wp_try_pin(c, d1, NULL, &lease), WP_OK);
  wp_unpin(c, &lease);
  wp_table *next = NULL;
  CHECK_RC(wp_open(name, 1, 0, &next), WP_OK); /* the role is free */
  if (next) wp_close(next);
  wp_close(c);
  wp_unlink(name);
}

/* A live reaper of another pid namespace, stopped mid-reap, is never taken over: its pid means
 * nothing here. Needs CLONE_NEWPID (root or user namespaces); skipped with a note without it. */
static void test_reaper_other_namespace(void) {
  char name[96];
  table_name(name, sizeof name, "reaper-ns");
  wp_table *p = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  if (p == NULL) return;
  publish(p, 1);
  uint8_t d[32];
  digest_for(1, d);
  int report[2], go[2];
  CHECK(pipe(report) == 0 && pipe(go) == 0);
  pid_t outer = fork();
  if (outer == 0) {
    /* In a new pid namespace, with its own /proc (a container's view): `init` (its pid 1)
     * forks the victim and then the reaper. */
    char msg = 'S';
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
      if (write(report[1], &msg, 1) != 1) _exit(3);
      _exit(0);
    }
    pid_t init = fork();
    if (init != 0) {
      int st;
      waitpid(init, &st, 0);
      _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 9);
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 || mount("proc", "/proc", "proc", 0, NULL) != 0) {
      if (write(report[1], &msg, 1) != 1) _exit(3);
      _exit(0);
    }
    int index;
    pid_t victim = fork_pinner(name, d, &index);
    kill_and_wait(victim);
    pid_t reaper = fork_stopped_reaper(name, "reap-claimed");
    msg = 'R'; /* the reaper stopped right after claiming the victim's entry */
    if (write(report[1], &msg, 1) != 1) _exit(4);
    if (read(go[0], &msg, 1) != 1) _exit(5);
    kill(reaper, SIGCONT);
    int st;
    waitpid(reaper, &st, 0);
    msg = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 'D' : 'F';
    if (write(report[1], &msg, 1) != 1) _exit(6);
    _exit(0);
  }
  char msg = 0;
  CHECK(read(report[0], &msg, 1) == 1);
  if (msg == 'S') {
    printf("test_core reaper: other-namespace case skipped (a new pid namespace with its own /proc is not permitted here)\n");
  } else {
    CHECK(msg == 'R');
    CHECK_RC(wp_try_evict(p, d), WP_PINNED);
    CHECK(wp_reap_dead_clients(p) == 0); /* the reaper's pid is not ours to judge */
    CHECK_RC(wp_try_evict(p, d), WP_PINNED);
    CHECK(write(go[1], &msg, 1) == 1);
    CHECK(read(report[0], &msg, 1) == 1 && msg == 'D');
    CHECK_RC(wp_try_evict(p, d), WP_OK); /* it finished its own reap */
  }
  int st;
  waitpid(outer, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  wp_close(p);
  wp_unlink(name);
}

/* A live client of another time namespace (its start time reads differently from here) is not
 * judged dead: start times compare only within one time namespace. Needs CLONE_NEWTIME; skipped
 * with a note without it. */
static void test_reaper_other_time_namespace(void) {
  char name[96];
  table_name(name, sizeof name, "reaper-timens");
  wp_table *p = NULL;
  CHECK_RC(wp_open(name, 1, 64, &p), WP_OK);
  if (p == NULL) return;
  publish(p, 1);
  uint8_t d[32];
  digest_for(1, d);
  int report[2], done[2];
  CHECK(pipe(report) == 0 && pipe(done) == 0);
  pid_t outer = fork();
  if (outer == 0) {
    char msg = 'S';
    int fd = -1;
    if (unshare(CLONE_NEWTIME) != 0 || (fd = open("/proc/self/timens_offsets", O_WRONLY)) < 0 ||
        write(fd, "boottime 100000 0", 17) != 17) {
      if (write(report[1], &msg, 1) != 1) _exit(3);
      _exit(0);
    }
    close(fd);
    int index; /* the pinner is the first process in the new time namespace */
    pid_t pinner = fork_pinner(name, d, &index);
    msg = 'P';
    if (write(report[1], &msg, 1) != 1) _exit(4);
    if (read(done[0], &msg, 1) != 1) _exit(5);
    kill_and_wait(pinner);
    _exit(0);
  }
  char msg = 0;
  CHECK(read(report[0], &msg, 1) == 1);
  if (msg == 'S') {
    printf("test_core reaper: other-time-namespace case skipped (CLONE_NEWTIME not permitted)\n");
  } else {
    CHECK(msg == 'P');
    CHECK(wp_reap_dead_clients(p) == 0); /* alive, though its start time differs from here */
    CHECK_RC(wp_try_evict(p, d), WP_PINNED);
  }
  CHECK(write(done[1], &msg, 1) == 1);
  int st;
  waitpid(outer, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  wp_close(p);
  wp_unlink(name);
}

static void test_reaper(void) {
  char name[96];
  table_name(name, sizeof name, "reaper");
  wp_table *p = NULL;
  /* Large enough that clearing a client's bit in every slot takes a while (the window in which
   * a reaper can be killed mid-reap). */
  const uint32_t capacity = 1u << 19;
  wp_open_options options = {capacity, 0600, 0, 0};
  CHECK_RC(wp_open_ex(name, 1, &options, &p), WP_OK);
  if (p == NULL) return;
  publish(p, 1);
  uint8_t d[32];
  digest_for(1, d);

  /* Deterministic: a reaper stopped right after its claim (test hook), then SIGKILLed. */
  int victim_index;
  pid_t victim = fork_pinner(name, d, &victim_index);
  kill_and_wait(victim);
  pid_t reaper = fork_stopped_reaper(name, "reap-claimed");
  uint64_t *word = client_word(p, (uint32_t)victim_index);
  uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  CHECK((w & 3u) == WP_CLIENT_REAPING);
  CHECK_RC(wp_try_evict(p, d), WP_PINNED); /* the dead client's bit is still set */
  CHECK(wp_reap_dead_clients(p) == 0);       /* its reaper is alive (stopped): left alone */
  kill_and_wait(reaper);
  CHECK(wp_reap_dead_clients(p) == 2); /* the victim's entry (taken over) and the reaper's own */
  CHECK((__atomic_load_n(word, __ATOMIC_ACQUIRE) & 3u) == WP_CLIENT_FREE);
  CHECK_RC(wp_try_evict(p, d), WP_OK);
  publish(p, 1);

  /* Real: a reaper process SIGKILLed at a random moment of its reap, many times. Wherever it
   * died, the next reap must leave no REAPING entry and no dead client's bit. */
  unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  int rounds = 24, caught = 0;
  for (int round = 0; round < rounds; round++) {
    victim = fork_pinner(name, d, &victim_index);
    kill_and_wait(victim);
    int go[2];
    CHECK(pipe(go) == 0);
    reaper = fork();
    if (reaper == 0) {
      close(go[1]);
      wp_table *r = NULL;
      if (wp_open(name, 0, 0, &r) != WP_OK) _exit(2);
      char byte;
      if (read(go[0], &byte, 1) != 1) _exit(3);
      wp_reap_dead_clients(r);
      pause(); /* killed here if not before */
      _exit(0);
    }
    close(go[0]);
    usleep(2000); /* let it open (an unopened reaper is simply a reaper that did nothing) */
    char byte = 1;
    CHECK(write(go[1], &byte, 1) == 1);
    usleep((useconds_t)(rand_r(&seed) % 12000)); /* before, during or after its reap (~10 ms here) */
    kill_and_wait(reaper);
    close(go[1]);
    caught += entries_in_state(p, WP_CLIENT_REAPING) > 0;
    wp_reap_dead_clients(p);
    CHECK(entries_in_state(p, WP_CLIENT_REAPING) == 0);
    CHECK(entries_in_state(p, WP_CLIENT_ACTIVE) == 1); /* only the producer */
    CHECK_RC(wp_try_evict(p, d), WP_OK);
    publish(p, 1);
  }
  printf("test_core reaper: %d of %d reapers were killed mid-reap and taken over\n", caught, rounds);
  wp_close(p);
  wp_unlink(name);
}

/* Every entry point given a NULL it needs answers WP_ERR_INVALID_ARGUMENT (or its documented
 * neutral value) instead of dereferencing it: run under ASan/UBSan, a crash or a read of NULL
 * fails the test. */
static void test_null_arguments(void) {
  char name[96];
  table_name(name, sizeof name, "null");
  wp_table *p = NULL;
  CHECK_RC(wp_open(name, 1, 16, &p), WP_OK);
  if (p == NULL) return;
  uint8_t d[32];
  digest_for(1, d);
  wp_lease lease;
  wp_reservation r = {0, 0};
  wp_meta meta = {1, 2, 3, 4, 5};
  wp_device_record rec = {{1}, 1, 1, 1};
  wp_summary sum;
  wp_table *none = NULL;
  CHECK_RC(wp_open(NULL, 0, 0, &none), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_open(name, 0, 0, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_open_ex(NULL, 0, NULL, &none), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_open_ex(name, 0, NULL, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK(none == NULL);
  wp_close(NULL);
  CHECK_RC(wp_unlink(NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin(NULL, d, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin(p, NULL, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin(p, d, NULL, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin(p, d, &rec, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_unpin(NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_unpin(p, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK(wp_pin_loop(NULL, d, 10) == 0);
  CHECK(wp_pin_loop(p, NULL, 10) == 0);
  CHECK_RC(wp_try_pin_exact(NULL, 0, 0, d, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(p, 0, 0, NULL, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(p, 0, 0, d, NULL, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_pin_exact(p, 0, 0, d, &rec, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_try_pin_prefix(NULL, d, 1, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_try_pin_prefix(p, NULL, 1, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_try_pin_prefix(p, d, 1, NULL, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_try_pin_prefix(p, d, 0x80000000u, NULL, &lease), WP_ERR_INVALID_ARGUMENT);
  CHECK(wp_try_pin_prefix(p, NULL, 0, NULL, NULL) == 0); /* nothing to pin needs no arrays */
  CHECK_RC(-wp_unpin_many(NULL, &lease, 1), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_unpin_many(p, NULL, 1), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_unpin_many(p, &lease, 0x80000000u), WP_ERR_INVALID_ARGUMENT);
  CHECK(wp_unpin_many(p, NULL, 0) == 0);
  CHECK_RC(wp_peek(NULL, d), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_peek(p, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_reserve(NULL, d, &r), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_reserve(p, NULL, &r), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_reserve(p, d, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_publish(NULL, &r, &meta), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_publish(p, NULL, &meta), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_reserve(p, d, &r), WP_OK);
  CHECK_RC(wp_publish(p, &r, NULL), WP_ERR_INVALID_ARGUMENT);
  /* A generation past its 56 bits would wrap onto the slot's live word: refused, not published. */
  wp_reservation wrapped = {r.slot, r.generation + (1ull << 56)};
  CHECK_RC(wp_publish(p, &wrapped, &meta), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_abandon(p, &wrapped), WP_ERR_INVALID_ARGUMENT);
  CHECK((wp_slot_state_gen(p, r.slot) & 0xff) == WP_SLOT_RESERVED);
  CHECK_RC(wp_abandon(NULL, &r), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_abandon(p, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_publish(p, &r, &meta), WP_OK);
  CHECK_RC(wp_try_evict(NULL, d), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_try_evict(p, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_record_device_write(NULL, d, &rec), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_record_device_write(p, NULL, &rec), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_record_device_write(p, d, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(-wp_reap_dead_clients(NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_summarize(NULL, &sum), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_summarize(p, NULL), WP_ERR_INVALID_ARGUMENT);
  uint64_t file_size = 0;
  uint32_t uid, mode;
  CHECK_RC(wp_check_segment(NULL, &file_size), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_check_segment(p, NULL), WP_OK);
  CHECK_RC(wp_segment_owner(NULL, &uid, &mode), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_segment_owner(name, NULL, &mode), WP_ERR_INVALID_ARGUMENT);
  CHECK_RC(wp_segment_owner(name, &uid, NULL), WP_ERR_INVALID_ARGUMENT);
  CHECK(wp_capacity(NULL) == 0 && wp_client_index(NULL) == -1 && wp_is_producer(NULL) == 0);
  CHECK(wp_slot_state_gen(NULL, 0) == 0 && wp_slot_pin_mask(NULL, 0) == 0 && wp_client_pins(NULL, 0) == 0);
  size_t size = 1;
  CHECK(wp_segment(NULL, &size) == NULL && size == 1);
  CHECK(wp_segment(p, NULL) != NULL);
  /* A header overwritten after open: a capacity other than the one fixed at open, or a producer
   * word naming no client index, is reported, not counted. */
  uint32_t *header_capacity = (uint32_t *)((uint8_t *)wp_segment(p, NULL) + WP_HDR_CAPACITY);
  uint64_t *producer_word = (uint64_t *)((uint8_t *)wp_segment(p, NULL) + WP_HDR_PRODUCER);
  *header_capacity = 0xffffffffu;
  CHECK_RC(wp_summarize(p, &sum), WP_ERR_BAD_SEGMENT);
  *header_capacity = 16;
  uint64_t saved = *producer_word;
  *producer_word = 65; /* client index 64 */
  CHECK_RC(wp_summarize(p, &sum), WP_ERR_BAD_SEGMENT);
  *producer_word = saved;
  CHECK_RC(wp_summarize(p, &sum), WP_OK);
  /* The table still works after all of that. */
  CHECK_RC(wp_try_pin(p, d, NULL, &lease), WP_OK);
  CHECK_RC(wp_unpin(p, &lease), WP_OK);
  CHECK_RC(wp_try_evict(p, d), WP_OK);
  wp_close(p);
  CHECK_RC(wp_unlink(name), WP_OK);
}

/* A segment whose header names another ABI version (one made by ABI 1, before wp_unpin returned
 * a status) is refused at open, never used. */
static void test_other_abi(void) {
  char name[96];
  table_name(name, sizeof name, "abi");
  wp_table *p = NULL, *c = NULL;
  CHECK_RC(wp_open(name, 1, 16, &p), WP_OK);
  if (p == NULL) return;
  wp_close(p);
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  if (fd >= 0) {
    uint32_t old = 1;
    CHECK(pwrite(fd, &old, 4, WP_HDR_ABI_VERSION) == 4);
    close(fd);
  }
  CHECK_RC(wp_open(name, 0, 0, &c), WP_ERR_BAD_SEGMENT);
  CHECK(c == NULL);
  CHECK_RC(wp_unlink(name), WP_OK);
}

/* A table name the caller may not open or remove is WP_ERR_PERMISSION, not WP_ERR_SYSTEM. Runs in
 * a forked child that drops to uid/gid 65534 (nobody) against a root-owned mode-0600 table;
 * skipped with a note where the test is not root. */
static void test_permission(void) {
  if (geteuid() != 0) {
    printf("test_core unit: permission case skipped (needs root to drop to another uid)\n");
    return;
  }
  char name[96];
  table_name(name, sizeof name, "perm");
  wp_table *p = NULL;
  CHECK_RC(wp_open(name, 1, 16, &p), WP_OK);
  if (p == NULL) return;
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    wp_table *t = NULL;
    CHECK_RC(wp_open(name, 0, 0, &t), WP_ERR_PERMISSION);
    CHECK(t == NULL);
    CHECK_RC(wp_unlink(name), WP_ERR_PERMISSION);
    CHECK_RC(wp_unlink("waitprep-test-no-such-table"), WP_ERR_NOT_FOUND);
    _exit(failures == 0 ? 0 : 1);
  }
  int st;
  CHECK(waitpid(child, &st, 0) == child);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
    printf("test_core unit: permission case skipped (setuid to nobody refused)\n");
  } else {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  wp_close(p);
  CHECK_RC(wp_unlink(name), WP_OK);
}

/* Trust (waitprep.h): an open refuses a file writable by group or others, one owned by another
 * uid, and a symbolic link under the name, each as WP_ERR_UNTRUSTED_SEGMENT, unless a flag trusts
 * it; a creation mode that sets a write bit for others needs the same flag. The owner case needs
 * root (to chown the file to nobody) and is skipped with a note otherwise. */
static void test_trust(void) {
  char name[96], link_name[112], path[128], link_path[144];
  table_name(name, sizeof name, "trust");
  snprintf(link_name, sizeof link_name, "%s-link", name);
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  snprintf(link_path, sizeof link_path, "/dev/shm/%s", link_name);
  wp_table *p = NULL, *c = NULL;
  wp_open_options world = {16, 0666, 0, 0};
  CHECK_RC(wp_open_ex(name, 1, &world, &p), WP_ERR_INVALID_ARGUMENT); /* a mode its own opens would refuse */
  wp_open_options group = {16, 0660, 0, 0};
  CHECK_RC(wp_open_ex(name, 1, &group, &p), WP_ERR_INVALID_ARGUMENT);
  wp_open_options unknown_flag = {16, 0600, 1u << 20, 0};
  CHECK_RC(wp_open_ex(name, 1, &unknown_flag, &p), WP_ERR_INVALID_ARGUMENT);
  CHECK(access(path, F_OK) != 0); /* none of those left a file */
  CHECK_RC(wp_open(name, 1, 16, &p), WP_OK);
  if (p == NULL) return;
  uint32_t uid = 1, mode = 0;
  CHECK_RC(wp_segment_owner(name, &uid, &mode), WP_OK);
  CHECK(uid == (uint32_t)geteuid() && S_ISREG(mode) && (mode & 07777) == 0600);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_OK);
  wp_close(c);

  CHECK(chmod(path, 0666) == 0); /* as a planter with write access would leave it */
  CHECK_RC(wp_open(name, 0, 0, &c), WP_ERR_UNTRUSTED_SEGMENT);
  CHECK(c == NULL);
  CHECK_RC(wp_segment_owner(name, &uid, &mode), WP_OK);
  CHECK((mode & 07777) == 0666);
  wp_open_options trust_group = {0, 0, WP_OPEN_TRUST_GROUP_WRITE, 0};
  CHECK_RC(wp_open_ex(name, 0, &trust_group, &c), WP_ERR_UNTRUSTED_SEGMENT); /* others may write too */
  wp_open_options trust_all = {0, 0, WP_OPEN_TRUST_GROUP_WRITE | WP_OPEN_TRUST_WORLD_WRITE, 0};
  CHECK_RC(wp_open_ex(name, 0, &trust_all, &c), WP_OK);
  wp_close(c);
  CHECK(chmod(path, 0620) == 0);
  CHECK_RC(wp_open(name, 0, 0, &c), WP_ERR_UNTRUSTED_SEGMENT);
  CHECK_RC(wp_open_ex(name, 0, &trust_group, &c), WP_OK);
  wp_close(c);
  CHECK(chmod(path, 0600) == 0);

  CHECK(symlink(path, link_path) == 0);
  CHECK_RC(wp_open(link_name, 0, 0, &c), WP_ERR_UNTRUSTED_SEGMENT); /* never followed */
  CHECK_RC(wp_segment_owner(link_name, &uid, &mode), WP_OK); /* the link itself, not its target */
  CHECK(S_ISLNK(mode));
  unlink(link_path);

  if (geteuid() != 0) {
    printf("test_core unit: trust case for another owner skipped (needs root to chown the file)\n");
  } else {
    CHECK(chown(path, 65534, (gid_t)-1) == 0);
    CHECK_RC(wp_open(name, 0, 0, &c), WP_ERR_UNTRUSTED_SEGMENT);
    CHECK_RC(wp_segment_owner(name, &uid, &mode), WP_OK);
    CHECK(uid == 65534);
    wp_open_options trust_other = {0, 0, WP_OPEN_TRUST_UID, 1234};
    CHECK_RC(wp_open_ex(name, 0, &trust_other, &c), WP_ERR_UNTRUSTED_SEGMENT); /* not that uid */
    trust_other.trusted_uid = 65534;
    CHECK_RC(wp_open_ex(name, 0, &trust_other, &c), WP_OK);
    wp_close(c);
    CHECK(chown(path, geteuid(), (gid_t)-1) == 0);
  }
  wp_close(p);
  CHECK_RC(wp_unlink(name), WP_OK);
}

/* A table's file truncated under attached clients (which nothing can prevent its owner, or root,
 * from doing): wp_check_segment, wp_summarize and wp_reap_dead_clients say WP_ERR_BAD_SEGMENT
 * without touching the lost pages, and wp_close lets go without touching them either. In a forked
 * child, so that a SIGBUS shows as a failed check rather than killing the test. */
static void test_truncated(void) {
  char name[96], path[128];
  table_name(name, sizeof name, "truncated");
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  pid_t child = fork();
  if (child == 0) {
    wp_table *p = NULL, *c = NULL;
    if (wp_open(name, 1, 4096, &p) != WP_OK || wp_open(name, 0, 0, &c) != WP_OK) _exit(2);
    publish(p, 1);
    uint8_t d[32];
    digest_for(1, d);
    wp_lease lease;
    CHECK_RC(wp_try_pin(c, d, NULL, &lease), WP_OK);
    uint64_t size = 0;
    CHECK_RC(wp_check_segment(c, &size), WP_OK);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0) _exit(3);
    close(fd);
    CHECK_RC(wp_check_segment(c, &size), WP_ERR_BAD_SEGMENT);
    CHECK(size == 4096);
    wp_summary sum;
    CHECK_RC(wp_summarize(p, &sum), WP_ERR_BAD_SEGMENT);
    CHECK(wp_reap_dead_clients(p) == -WP_ERR_BAD_SEGMENT);
    wp_close(c); /* holding a pin on a page that is gone */
    wp_close(p);
    _exit(failures == 0 ? 0 : 1);
  }
  int st;
  CHECK(waitpid(child, &st, 0) == child);
  if (WIFSIGNALED(st)) fprintf(stderr, "test_core unit: truncated-segment child killed by signal %d\n", WTERMSIG(st));
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  wp_unlink(name);
}

/* A table larger than the tmpfs under /dev/shm is refused with WP_ERR_NO_SPACE and leaves no
 * file behind (not a SIGBUS at the first touch of an unbacked page), and a smaller one then takes
 * the name. Runs in a forked child with a private mount namespace and an 8 MiB tmpfs on /dev/shm;
 * skipped with a note where that is not permitted (not root). */
static void test_no_space(void) {
  char name[96];
  table_name(name, sizeof name, "no-space");
  pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=8m") != 0) {
      _exit(77);
    }
    wp_table *t = (wp_table *)1;
    CHECK_RC(wp_open(name, 1, 1u << 20, &t), WP_ERR_NO_SPACE); /* 128 MiB */
    CHECK(t == NULL);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    CHECK(access(path, F_OK) != 0);
    CHECK_RC(wp_open(name, 1, 1024, &t), WP_OK);
    if (t != NULL) {
      CHECK(wp_capacity(t) == 1024);
      wp_close(t);
    }
    CHECK_RC(wp_unlink(name), WP_OK);
    _exit(failures == 0 ? 0 : 1);
  }
  int st;
  CHECK(waitpid(child, &st, 0) == child);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
    printf("test_core unit: no-space case skipped (a private mount namespace with a tmpfs on /dev/shm is not permitted here)\n");
    return;
  }
  if (WIFSIGNALED(st)) fprintf(stderr, "test_core unit: no-space child killed by signal %d\n", WTERMSIG(st));
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  if (!strcmp(which, "unit") || !strcmp(which, "all")) {
    test_unit();
    test_handoff();
    test_handoff_recycled();
    test_prefix();
    test_summary();
    test_null_arguments();
    test_other_abi();
    test_permission();
    test_trust();
    test_truncated();
    test_no_space();
    test_peek_many();
    test_unpin_indexed();
  }
  if (!strcmp(which, "stress") || !strcmp(which, "all")) test_stress(argc > 2 ? strtoull(argv[2], NULL, 10) : 200000);
  if (!strcmp(which, "shared") || !strcmp(which, "all")) test_shared_handles(argc > 2 ? strtoull(argv[2], NULL, 10) : 2000);
  if (!strcmp(which, "reap") || !strcmp(which, "all")) test_reap();
  if (!strcmp(which, "reaper") || !strcmp(which, "all")) {
    test_reaper();
    test_reaper_producer("reap-claimed");
    test_reaper_producer("reap-settled");
    test_reaper_other_namespace();
    test_reaper_other_time_namespace();
  }
  if (failures == 0) printf("test_core %s: all checks passed\n", which);
  return failures == 0 ? 0 : 1;
}
