/*
 * The lease table core: see native/include/waitprep.h for the layout and
 * docs/lease-table.md for the protocol and its memory-order argument.
 *
 * Every shared word is accessed with a GCC __atomic builtin and an explicit
 * memory order; the comment beside each says why. Capacity (and the bucket
 * counts derived from it) and probe window are validated once at open and
 * cached in the private handle, never re-read from shared memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "waitprep.h"

_Static_assert(WP_HEADER_SIZE % 64 == 0, "header is cache-line aligned");
_Static_assert(WP_SLOT_SIZE == 128, "slot is two cache lines");
_Static_assert(WP_SLOT_DEVICE + 48 <= WP_SLOT_SIZE, "device record fits the slot");
_Static_assert(WP_SLOT_META + 32 == WP_SLOT_DEVICE, "meta is 32 bytes");
_Static_assert(WP_MAX_CLIENTS == 64, "one pin bit per client in a u64 mask");
_Static_assert(sizeof(wp_meta) == 32, "wp_meta is 32 bytes");
_Static_assert(offsetof(wp_meta, codec_id) == 24, "wp_meta layout");
_Static_assert(sizeof(wp_device_record) == 40, "wp_device_record is 40 bytes");

#define STATE_BITS 8
#define STATE_MASK 0xffull
#define CLIENT_STATE_MASK 0x3ull
#define PID_BITS 22
#define PID_MASK ((1ull << PID_BITS) - 1)
_Static_assert(PID_BITS == 22 && WP_MAX_CLIENTS == 64, "a reaper (flag, 15 serial bits, client index) fills the pid bits");
#define SERIAL_SHIFT 24
#define SLOTS_OFFSET (WP_HEADER_SIZE + (size_t)WP_MAX_CLIENTS * WP_CLIENT_SIZE)

/* One record per pin this handle holds: the lease token names it. */
typedef struct {
  uint32_t slot;
  uint32_t gen; /* bumped when the record is released, so its old token goes stale; starts at the handle's record_seed */
  uint32_t next_free;
  uint32_t live;
} lease_record;

/* Fields above `consumer_lock` are fixed at open. Threads of one process may share a handle
 * (waitprep.h, "Threads"): the handle's pin bits, its private counts of further leases and its
 * lease records change only under consumer_lock, so that a slot's pin bit is set exactly while
 * the handle holds a lease on it, and its count is that number less one; the
 * producer's operations run under producer_lock, so two threads never reserve one FREE slot or
 * write one device record at once. */
struct wp_table {
  uint8_t *base;
  size_t size;
  int fd;                 /* kept open for wp_check_segment's fstat */
  uint32_t capacity;
  uint32_t left;          /* buckets of a key's first choice: 0 .. left-1 */
  uint32_t right;         /* buckets of its second: left .. left+right-1 (0 when the table has one bucket) */
  uint32_t client;        /* index in the registry */
  uint64_t client_word;   /* the ACTIVE word this handle registered with */
  int producer;
  int single_thread;      /* WP_OPEN_SINGLE_THREAD: the caller serializes, consumer_lock is skipped */
  uint32_t consumer_lock; /* guards pins, multi, leases, lease_cap, lease_free */
  uint32_t producer_lock; /* serializes reserve, publish, abandon, evict, device writes */
  /* Per slot, this handle's leases on it beyond the first (relaxed atomics: wp_client_pins reads
   * without the lock). Whether it holds a first one is its own bit in the slot's shared pin mask,
   * which only this handle sets and clears while it lives (under consumer_lock, together with
   * these counts; other clients' atomic updates of the word leave it as it is), and its reaper
   * once it is dead. So a pin and an unpin of a slot the handle holds once, the usual
   * case, touch the slot's lines and the lease record, not this array of `capacity` entries,
   * which on a large table would be one more cold line per pin. */
  uint32_t *pins;
  uint32_t multi;         /* slots whose count in `pins` is above zero; while 0, no unpin reads `pins` */
  lease_record *leases;
  uint32_t lease_cap;
  uint32_t lease_free;    /* head of the free list, UINT32_MAX when empty */
  uint32_t record_seed;   /* the first generation of every lease record: differs between handles */
};

static uint32_t record_seed(const wp_table *t);

/* A per-handle spin lock, held for a bounded few instructions (a realloc of the lease records
 * at most). Uncontended it costs one atomic exchange and one plain store, which is why it is not
 * a pthread mutex (two atomic read-modify-writes). A waiter spins briefly, then yields the CPU,
 * so a holder that was preempted gets to run. It is private to the process: no other process
 * ever waits on it, so the table stays lock-free between processes. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void handle_lock(uint32_t *lock) {
  /* acquire: the previous holder's writes (released by handle_unlock) are visible to us. */
  while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE) != 0) {
    /* relaxed: only a hint to retry the exchange, which decides. */
    for (unsigned spins = 0; __atomic_load_n(lock, __ATOMIC_RELAXED) != 0; spins++) {
      if (spins < 100) cpu_relax();
      else sched_yield();
    }
  }
}

static inline void handle_unlock(uint32_t *lock) {
  /* release: our writes under the lock happen before the next holder's acquire. */
  __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

/* The handle's private count of its further leases on a slot (beyond the first, which is its pin
 * bit). relaxed: written only under consumer_lock, which orders them; the atomics only keep
 * wp_client_pins' lock-free read defined. */
static inline uint32_t pins_of(const wp_table *t, uint32_t slot) { return __atomic_load_n(&t->pins[slot], __ATOMIC_RELAXED); }
static inline void set_pins(wp_table *t, uint32_t slot, uint32_t n) { __atomic_store_n(&t->pins[slot], n, __ATOMIC_RELAXED); }

static inline uint64_t *u64_at(const wp_table *t, size_t offset) { return (uint64_t *)(t->base + offset); }
static inline uint8_t *slot_at(const wp_table *t, uint32_t slot) {
  return t->base + SLOTS_OFFSET + (size_t)slot * WP_SLOT_SIZE;
}
static inline uint8_t *client_at(const wp_table *t, uint32_t index) {
  return t->base + WP_HEADER_SIZE + (size_t)index * WP_CLIENT_SIZE;
}
static inline uint64_t *slot_word(const wp_table *t, uint32_t slot, size_t field) {
  return (uint64_t *)(slot_at(t, slot) + field);
}

/* Whether this handle holds a lease on `slot`: its own bit in the slot's pin mask. relaxed: the
 * bit was last written by this thread, or by another thread of the handle before it released
 * consumer_lock to us (wp_client_pins reads it without the lock, as a snapshot); other clients'
 * bits may change meanwhile and are not read. */
static inline int holds_slot(const wp_table *t, uint32_t slot) {
  return (__atomic_load_n(slot_word(t, slot, WP_SLOT_PIN_MASK), __ATOMIC_RELAXED) & (1ull << t->client)) != 0;
}
/* A client word with state and pid cleared, its serial kept: what FREE and REAPING build on. */
static inline uint64_t serial_only(uint64_t client_word) { return client_word & ~CLIENT_STATE_MASK & ~(PID_MASK << 2); }
/* The producer header word of the client registered at `index` with `client_word`. */
static inline uint64_t producer_word_of(uint32_t index, uint64_t client_word) {
  return (uint64_t)(index + 1) | (client_word >> SERIAL_SHIFT) << 8;
}
static inline uint64_t state_of(uint64_t sg) { return sg & STATE_MASK; }
static inline uint64_t gen_of(uint64_t sg) { return sg >> STATE_BITS; }
static inline uint64_t make_sg(uint64_t state, uint64_t gen) { return (gen << STATE_BITS) | state; }

static size_t segment_size_for(uint32_t capacity) {
  return SLOTS_OFFSET + (size_t)capacity * WP_SLOT_SIZE;
}

/* Placement (docs/lease-table.md, "Placement"): the slots are cut into buckets of WP_PROBE_WINDOW
 * (the last may be shorter), the first `left` buckets for a key's first choice and the rest for
 * its second, and a key lives in one of its two. Each choice is a digest word scaled to its half
 * (multiply-shift: the same integer arithmetic as the JavaScript fallback): word 0 picks the first
 * bucket, word 1 the second. A table of one bucket gives both choices the same bucket. */
static inline uint32_t digest_word(const uint8_t digest[32], int word) {
  const uint8_t *b = digest + 4 * word;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint32_t bucket_of(const wp_table *t, const uint8_t digest[32], int choice) {
  if (choice == 0 || t->right == 0) return (uint32_t)(((uint64_t)digest_word(digest, 0) * t->left) >> 32);
  return t->left + (uint32_t)(((uint64_t)digest_word(digest, 1) * t->right) >> 32);
}
/* How many choices a key has: 2, or 1 in a table of one bucket. */
static inline int choices_of(const wp_table *t) { return t->right == 0 ? 1 : 2; }
static inline uint32_t bucket_end(const wp_table *t, uint32_t bucket) {
  uint32_t end = (bucket + 1) * WP_PROBE_WINDOW;
  return end < t->capacity ? end : t->capacity;
}

/* Digest compare with relaxed atomic loads: the producer writes digests only while a slot
 * is FREE, but a lookup may race with that write; the state re-check decides, and relaxed
 * loads keep the race defined. */
static int digest_equals(const wp_table *t, uint32_t slot, const uint8_t digest[32]) {
  const uint64_t *d = slot_word(t, slot, WP_SLOT_DIGEST);
  for (int i = 0; i < 4; i++) {
    uint64_t want;
    memcpy(&want, digest + 8 * i, 8);
    if (__atomic_load_n(&d[i], __ATOMIC_RELAXED) != want) return 0;
  }
  return 1;
}

static inline __attribute__((always_inline)) void read_meta(const wp_table *t, uint32_t slot, wp_meta *out) {
  const uint64_t *m = slot_word(t, slot, WP_SLOT_META);
  /* Relaxed: ordered after the acquire/seq_cst state reads that validated the slot. */
  out->size_bytes = __atomic_load_n(&m[0], __ATOMIC_RELAXED);
  out->location = __atomic_load_n(&m[1], __ATOMIC_RELAXED);
  out->checksum = __atomic_load_n(&m[2], __ATOMIC_RELAXED);
  uint64_t packed = __atomic_load_n(&m[3], __ATOMIC_RELAXED);
  out->codec_id = (uint32_t)packed;
  out->representation_version = (uint32_t)(packed >> 32);
}

/* ---- process liveness ---------------------------------------------------------------- */

/* Start time (field 22 of /proc/PID/stat) and state; returns 0 when the file is absent. */
static int read_proc_stat(uint32_t pid, uint64_t *start_time, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (p == NULL || p[1] != ' ') return 0;
  p += 2;
  *state = *p;
  /* Fields after the name start at 3 (state); start time is field 22. */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (p == NULL) return 0;
    p++;
  }
  *start_time = strtoull(p, NULL, 10);
  return 1;
}

static uint64_t ns_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* This process as other clients judge it: pid, start time, and the inodes of its pid and time
 * namespaces (start times in /proc are relative to the reader's time namespace, so a start
 * time means something only within one). pid_ns is 0 ("unknown") when /proc does not show this
 * process under its own pid (a pid namespace that kept the host's /proc): such a client is
 * never reaped by anyone, and reaps nobody. time_ns is 0 on kernels without time namespaces. */
typedef struct {
  uint32_t pid;
  uint64_t start_time, pid_ns, time_ns;
} identity;

static identity self_identity(void) {
  identity me = {(uint32_t)getpid(), 0, 0, 0};
  char link[32];
  ssize_t n = readlink("/proc/self", link, sizeof link - 1);
  if (n <= 0) return me;
  link[n] = 0;
  if (strtoul(link, NULL, 10) != me.pid) return me;
  char state;
  read_proc_stat(me.pid, &me.start_time, &state);
  me.pid_ns = ns_inode("/proc/self/ns/pid");
  me.time_ns = ns_inode("/proc/self/ns/time");
  return me;
}

/* 1 when the client entry's identity was recorded in our pid and time namespaces (else its pid
 * and start time mean nothing to us). relaxed: read after the acquire load of the word that
 * published them. */
static int same_namespaces(const uint8_t *entry, const identity *me) {
  return __atomic_load_n((const uint64_t *)(entry + WP_CLI_PID_NS), __ATOMIC_RELAXED) == me->pid_ns &&
         __atomic_load_n((const uint64_t *)(entry + WP_CLI_TIME_NS), __ATOMIC_RELAXED) == me->time_ns;
}

/* 1 when the process that registered (pid, start_time) is certainly gone. */
static int client_is_dead(uint32_t pid, uint64_t start_time) {
  uint64_t now_start;
  char state;
  if (read_proc_stat(pid, &now_start, &state)) {
    if (now_start != start_time && start_time != 0) return 1; /* pid reused by another process */
    return state == 'Z' || state == 'X';                       /* killed, not yet waited for */
  }
  /* No /proc entry: confirm, since hidepid can hide live processes. */
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* ---- client registry ----------------------------------------------------------------- */

static int register_client(wp_table *t, uint32_t flags) {
  identity me = self_identity();
  uint32_t pid = me.pid;
  if (pid > PID_MASK) return WP_ERR_SYSTEM;
  for (uint32_t i = 0; i < WP_MAX_CLIENTS; i++) {
    uint64_t *word = (uint64_t *)(client_at(t, i) + WP_CLI_WORD);
    uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if ((w & CLIENT_STATE_MASK) != WP_CLIENT_FREE) continue;
    uint64_t serial = (w >> SERIAL_SHIFT) + 1;
    uint64_t claiming = serial << SERIAL_SHIFT | (uint64_t)pid << 2 | WP_CLIENT_CLAIMING;
    /* acq_rel: the claim orders our later field writes after it and makes the previous
     * reaper's cleanup (released with FREE) visible to us. */
    if (!__atomic_compare_exchange_n(word, &w, claiming, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
    uint8_t *entry = client_at(t, i);
    __atomic_store_n((uint64_t *)(entry + WP_CLI_START_TIME), me.start_time, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(entry + WP_CLI_PID_NS), me.pid_ns, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(entry + WP_CLI_TIME_NS), me.time_ns, __ATOMIC_RELAXED);
    __atomic_store_n((uint32_t *)(entry + WP_CLI_FLAGS), flags, __ATOMIC_RELAXED);
    uint64_t active = (claiming & ~CLIENT_STATE_MASK) | WP_CLIENT_ACTIVE;
    /* CAS from our own CLAIMING word, not a plain store: a reaper that judged us dead
     * mid-registration (another pid namespace, where our pid means nothing) may have freed
     * the entry, and a third client may have claimed it since; then we look elsewhere.
     * release: a reaper that reads ACTIVE (acquire) sees pid, start time and namespace. */
    uint64_t expected = claiming;
    if (!__atomic_compare_exchange_n(word, &expected, active, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) continue;
    t->client = i;
    t->client_word = active;
    return WP_OK;
  }
  return WP_ERR_NO_CLIENT_SLOT;
}

/* Frees this handle's registry entry. Only its own ACTIVE word is cleared (a CAS, never a
 * store): a reaper that wrongly took the entry has moved on, and whoever holds it now keeps it.
 * release: everything this client did before (pin releases included) happens before the entry
 * is seen FREE. */
static void unregister_client(wp_table *t) {
  uint64_t w = t->client_word;
  __atomic_compare_exchange_n((uint64_t *)(client_at(t, t->client) + WP_CLI_WORD), &w, serial_only(w) | WP_CLIENT_FREE, 0,
                              __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

static void release_client_pins(wp_table *t, uint32_t client) {
  uint64_t bit = 1ull << client;
  for (uint32_t s = 0; s < t->capacity; s++) {
    uint64_t *mask = slot_word(t, s, WP_SLOT_PIN_MASK);
    /* Only slots that hold the bit are written, so closing or reaping a client does not dirty
     * every cache line of the segment. relaxed: only this client (or its reaper) sets or
     * clears this bit, so a clear bit stays clear. release on the clear: the client's reads
     * of the slot happen before an evictor can see the bit gone. */
    if (__atomic_load_n(mask, __ATOMIC_RELAXED) & bit) __atomic_fetch_and(mask, ~bit, __ATOMIC_RELEASE);
  }
}

/* A producer's unfinished work, after it died or when it closes: EVICTING goes back to
 * READY (EVICTING always means "data intact"), RESERVED is abandoned. Run by the new or
 * closing producer, or by the reaper of a dead one while the role still names it, so nobody
 * else writes these states meanwhile. */
static void settle_producer_slots(wp_table *t) {
  for (uint32_t s = 0; s < t->capacity; s++) {
    uint64_t *sg = slot_word(t, s, WP_SLOT_STATE_GEN);
    uint64_t v = __atomic_load_n(sg, __ATOMIC_ACQUIRE);
    uint64_t *rec = slot_word(t, s, WP_SLOT_DEVICE);
    uint64_t seq = __atomic_load_n(&rec[0], __ATOMIC_RELAXED);
    if (seq & 1) {
      /* Half-written by a dead producer: finish it as an absent record (all-zero UUID)
       * under the next even sequence. Readers may hold pins on this slot, so the sequence
       * only ever grows while it is READY: a reader that saw an older even value can never
       * see it again and accept a mix of two writes. release: fields before sequence. */
      for (int k = 1; k < 6; k++) __atomic_store_n(&rec[k], 0, __ATOMIC_RELAXED);
      __atomic_store_n(&rec[0], seq + 1, __ATOMIC_RELEASE);
    }
    /* CAS from the word just read, not a store: should anyone else have moved the slot on
     * meanwhile (which the role makes impossible), its newer state stands. */
    if (state_of(v) == WP_SLOT_EVICTING) {
      __atomic_compare_exchange_n(sg, &v, make_sg(WP_SLOT_READY, gen_of(v)), 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    } else if (state_of(v) == WP_SLOT_RESERVED) {
      __atomic_compare_exchange_n(sg, &v, make_sg(WP_SLOT_FREE, gen_of(v) + 1), 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    }
  }
}

/* A REAPING word names its reaper, in the 22 bits that hold a pid otherwise: bit 21 set, the
 * low 15 bits of the reaper's serial at bit 6, its client index in bits 0-5. A reaper is a
 * registered client, so its own entry says who it is (pid, start time, namespace) and whether it
 * is still there: the claim is one CAS, and names its reaper from the start. All zero: an
 * unregistered reaper (one that reaps to make room in a full registry), never taken over. */
#define REAPER_NAMED (1u << 21)

static uint64_t reaper_bits(const wp_table *t) {
  if ((t->client_word & CLIENT_STATE_MASK) != WP_CLIENT_ACTIVE) return 0;
  return (uint64_t)(REAPER_NAMED | ((t->client_word >> SERIAL_SHIFT) & 0x7fffu) << 6 | t->client) << 2;
}

/* 1 when the reaper a REAPING word names is certainly gone: its entry no longer holds that
 * client (closed or reaped since: it finished or died), or holds it and its process is dead.
 * A live reaper, one of another pid or time namespace, or an unregistered one is never gone. */
static int reaper_is_gone(const wp_table *t, uint32_t named, const identity *me) {
  if ((named & REAPER_NAMED) == 0) return 0;
  uint32_t index = named & (WP_MAX_CLIENTS - 1);
  uint32_t serial15 = (named >> 6) & 0x7fffu;
  uint8_t *entry = client_at(t, index);
  uint64_t w = __atomic_load_n((uint64_t *)(entry + WP_CLI_WORD), __ATOMIC_ACQUIRE);
  if ((w & CLIENT_STATE_MASK) != WP_CLIENT_ACTIVE || ((w >> SERIAL_SHIFT) & 0x7fffu) != serial15) return 1;
  /* The same client still (ourselves included: alive), or, after 32,768 registrations of that
   * entry, one that looks the same: judged alive or dead as itself, the safe side. */
  if (!same_namespaces(entry, me)) return 0;
  uint64_t start_time = __atomic_load_n((uint64_t *)(entry + WP_CLI_START_TIME), __ATOMIC_RELAXED);
  return client_is_dead((uint32_t)((w >> 2) & PID_MASK), start_time);
}

#ifdef WAITPREP_TEST_HOOKS
/* Test builds only (native/test): stop this process at a named point when the environment
 * asks, so a test can kill or resume a reaper exactly there. */
static void test_stop(const char *point) {
  const char *want = getenv("WAITPREP_TEST_STOP");
  if (want != NULL && strcmp(want, point) == 0) raise(SIGSTOP);
}

/* Test builds only: the sum of the handle's private counts of further leases, and its `multi`,
 * so a test can check that none is left behind once every lease is released (wp_client_pins
 * reads a count only where the bit is set, so it cannot see one stranded under a clear bit). */
uint64_t wp_test_private_pins(const wp_table *t, uint32_t *multi) {
  if (t == NULL || multi == NULL) return UINT64_MAX;
  uint64_t sum = 0;
  for (uint32_t s = 0; s < t->capacity; s++) sum += pins_of(t, s);
  *multi = t->multi;
  return sum;
}
#else
#define test_stop(point) ((void)0)
#endif

int wp_reap_dead_clients(wp_table *t) {
  if (t == NULL) return -WP_ERR_INVALID_ARGUMENT;
  if (wp_check_segment(t, NULL) != WP_OK) return -WP_ERR_BAD_SEGMENT;
  identity self = self_identity();
  if (self.pid_ns == 0) return 0; /* we cannot judge anyone's liveness (see self_identity) */
  uint64_t me = reaper_bits(t);
  int registered = me != 0; /* not yet when open reaps to make room in a full registry */
  int reaped = 0;
  for (uint32_t i = 0; i < WP_MAX_CLIENTS; i++) {
    if (registered && i == t->client) continue;
    uint8_t *entry = client_at(t, i);
    uint64_t *word = (uint64_t *)(entry + WP_CLI_WORD);
    uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    uint64_t state = w & CLIENT_STATE_MASK;
    if (state == WP_CLIENT_FREE) continue;
    if (state == WP_CLIENT_REAPING) {
      /* A reap in progress: take it over only from a reaper that is gone (killed mid-reap),
       * and only as a registered reaper, whose own claim can in turn be taken over. */
      if (!registered || !reaper_is_gone(t, (uint32_t)((w >> 2) & PID_MASK), &self)) continue;
    } else {
      uint32_t pid = (uint32_t)((w >> 2) & PID_MASK);
      uint64_t start_time = 0; /* CLAIMING: no identity yet; "our namespaces, any start time" */
      if (state == WP_CLIENT_ACTIVE) {
        if (!same_namespaces(entry, &self)) continue; /* its pid and start time mean nothing here */
        start_time = __atomic_load_n((uint64_t *)(entry + WP_CLI_START_TIME), __ATOMIC_RELAXED);
      }
      if (!client_is_dead(pid, start_time)) continue;
    }
    /* Claim the reap from the exact word found dead (a dead client's, or a gone reaper's),
     * naming ourselves, so two reapers never both clean, and a new client that took the entry
     * since is never touched. acq_rel: see the dead client's (or gone reaper's) writes; order
     * our cleanup after the claim. */
    uint64_t reaping = serial_only(w) | me | WP_CLIENT_REAPING;
    if (!__atomic_compare_exchange_n(word, &w, reaping, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
    test_stop("reap-claimed");
    /* Idempotent from here on, so a reaper taking over from a gone one redoes it all: while
     * the entry is REAPING nobody else can hold its bit, and a dead producer keeps its role. */
    release_client_pins(t, i);
    uint64_t producer_word = producer_word_of(i, w);
    if (__atomic_load_n(u64_at(t, WP_HDR_PRODUCER), __ATOMIC_SEQ_CST) == producer_word) {
      /* A dead producer: abandon its reservations and roll back its eviction now, before
       * the role is freed, so no new producer can be working on these slots meanwhile and
       * consumers stop seeing 'preparing' for keys nobody will publish. Only the reaper
       * holding the REAPING claim gets here. */
      settle_producer_slots(t);
      test_stop("reap-settled");
      uint64_t expected = producer_word;
      /* seq_cst: the producer word is a handshake with claim_producer's CAS. */
      __atomic_compare_exchange_n(u64_at(t, WP_HDR_PRODUCER), &expected, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    }
    /* FREE by CAS from our own REAPING word (never a store: we only free what we claimed).
     * release: a later claimant of this entry sees our cleanup done. */
    uint64_t expected = reaping;
    uint64_t freed = serial_only(w) | WP_CLIENT_FREE;
    if (!__atomic_compare_exchange_n(word, &expected, freed, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) continue;
    __atomic_fetch_add(u64_at(t, WP_HDR_REAPED), 1, __ATOMIC_RELAXED); /* a statistic */
    reaped++;
  }
  return reaped;
}

static int claim_producer(wp_table *t) {
  uint64_t mine = producer_word_of(t->client, t->client_word);
  for (int attempt = 0; attempt < 2; attempt++) {
    uint64_t expected = 0;
    if (__atomic_compare_exchange_n(u64_at(t, WP_HDR_PRODUCER), &expected, mine, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      t->producer = 1;
      settle_producer_slots(t); /* a previous producer may have died mid-operation */
      return WP_OK;
    }
    if (attempt == 0) wp_reap_dead_clients(t); /* the holder may be dead */
  }
  return WP_ERR_WRITER_EXISTS;
}

/* ---- open / close -------------------------------------------------------------------- */

/* The status for a failed system call, from errno: a refusal by file permissions (EACCES, EPERM)
 * has its own status, so a caller can tell it from everything else; errno still says which. */
static int system_status(void) { return errno == EACCES || errno == EPERM ? WP_ERR_PERMISSION : WP_ERR_SYSTEM; }

static int valid_name(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > WP_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return 0;
  }
  return name[0] != '.';
}

static int check_segment(const uint8_t *base, size_t size, uint32_t *capacity_out) {
  if (size < WP_HEADER_SIZE) return WP_ERR_BAD_SEGMENT;
  uint64_t magic;
  memcpy(&magic, base + WP_HDR_MAGIC, 8);
  uint32_t abi, header_size, capacity, window, max_clients, slot_size, client_size;
  uint64_t segment_size, clients_offset, slots_offset;
  memcpy(&abi, base + WP_HDR_ABI_VERSION, 4);
  memcpy(&header_size, base + WP_HDR_HEADER_SIZE, 4);
  memcpy(&capacity, base + WP_HDR_CAPACITY, 4);
  memcpy(&window, base + WP_HDR_PROBE_WINDOW, 4);
  memcpy(&max_clients, base + WP_HDR_MAX_CLIENTS, 4);
  memcpy(&slot_size, base + WP_HDR_SLOT_SIZE, 4);
  memcpy(&client_size, base + WP_HDR_CLIENT_SIZE, 4);
  memcpy(&segment_size, base + WP_HDR_SEGMENT_SIZE, 8);
  memcpy(&clients_offset, base + WP_HDR_CLIENTS_OFFSET, 8);
  memcpy(&slots_offset, base + WP_HDR_SLOTS_OFFSET, 8);
  if (magic != WP_MAGIC || abi != WP_ABI_VERSION || header_size != WP_HEADER_SIZE) return WP_ERR_BAD_SEGMENT;
  if (capacity == 0 || capacity > WP_MAX_CAPACITY || window != WP_PROBE_WINDOW) return WP_ERR_BAD_SEGMENT;
  if (max_clients != WP_MAX_CLIENTS || slot_size != WP_SLOT_SIZE || client_size != WP_CLIENT_SIZE) return WP_ERR_BAD_SEGMENT;
  if (clients_offset != WP_HEADER_SIZE || slots_offset != SLOTS_OFFSET) return WP_ERR_BAD_SEGMENT;
  if (segment_size != segment_size_for(capacity) || size < segment_size) return WP_ERR_BAD_SEGMENT;
  *capacity_out = capacity;
  return WP_OK;
}

static void init_header(uint8_t *base, uint32_t capacity) {
  uint32_t v32;
  uint64_t v64;
  v32 = WP_ABI_VERSION; memcpy(base + WP_HDR_ABI_VERSION, &v32, 4);
  v32 = WP_HEADER_SIZE; memcpy(base + WP_HDR_HEADER_SIZE, &v32, 4);
  memcpy(base + WP_HDR_CAPACITY, &capacity, 4);
  v32 = WP_PROBE_WINDOW; memcpy(base + WP_HDR_PROBE_WINDOW, &v32, 4);
  v32 = WP_MAX_CLIENTS; memcpy(base + WP_HDR_MAX_CLIENTS, &v32, 4);
  v32 = WP_SLOT_SIZE; memcpy(base + WP_HDR_SLOT_SIZE, &v32, 4);
  v32 = WP_CLIENT_SIZE; memcpy(base + WP_HDR_CLIENT_SIZE, &v32, 4);
  v64 = segment_size_for(capacity); memcpy(base + WP_HDR_SEGMENT_SIZE, &v64, 8);
  v64 = WP_HEADER_SIZE; memcpy(base + WP_HDR_CLIENTS_OFFSET, &v64, 8);
  v64 = SLOTS_OFFSET; memcpy(base + WP_HDR_SLOTS_OFFSET, &v64, 8);
  /* release: an opener that sees the magic (acquire) sees every field above. */
  __atomic_store_n((uint64_t *)(base + WP_HDR_MAGIC), WP_MAGIC, __ATOMIC_RELEASE);
}

int wp_open(const char *name, int producer, uint32_t create_capacity, wp_table **out) {
  wp_open_options options = {create_capacity, 0, 0, 0};
  return wp_open_ex(name, producer, &options, out);
}

#define KNOWN_OPEN_FLAGS (WP_OPEN_SINGLE_THREAD | WP_OPEN_TRUST_UID | WP_OPEN_TRUST_GROUP_WRITE | WP_OPEN_TRUST_WORLD_WRITE)

/* The write bits of `mode` that `flags` do not trust (0: none). */
static uint32_t untrusted_write_bits(uint32_t mode, uint32_t flags) {
  uint32_t bits = mode & 022u;
  if (flags & WP_OPEN_TRUST_GROUP_WRITE) bits &= ~020u;
  if (flags & WP_OPEN_TRUST_WORLD_WRITE) bits &= ~002u;
  return bits;
}

/* Whether an opened table's file is one this open may trust (waitprep.h, "Trust"): a regular
 * file, owned by our effective uid (or the trusted one), writable by nobody else unless trusted.
 * Checked on the open descriptor, so the file judged is the file mapped. */
static int trusted_file(const struct stat *st, const wp_open_options *options) {
  uint32_t flags = options ? options->flags : 0;
  if (!S_ISREG(st->st_mode)) return 0;
  int owner_ok = st->st_uid == geteuid() || ((flags & WP_OPEN_TRUST_UID) && st->st_uid == options->trusted_uid);
  return owner_ok && untrusted_write_bits((uint32_t)st->st_mode, flags) == 0;
}

int wp_open_ex(const char *name, int producer, const wp_open_options *options, wp_table **out) {
  if (out == NULL || !valid_name(name)) return WP_ERR_INVALID_ARGUMENT;
  *out = NULL;
  uint32_t create = options ? options->create_capacity : 0;
  uint32_t mode = options && options->mode ? options->mode : 0600;
  uint32_t flags = options ? options->flags : 0;
  if (create > WP_MAX_CAPACITY || (mode & ~0777u) != 0 || (flags & ~KNOWN_OPEN_FLAGS) != 0) return WP_ERR_INVALID_ARGUMENT;
  if (create && untrusted_write_bits(mode, flags) != 0) return WP_ERR_INVALID_ARGUMENT; /* a mode our own opens would refuse */
  char path[WP_MAX_NAME + 2];
  snprintf(path, sizeof path, "/%s", name);

  int fd;
  size_t size;
  if (create) {
    /* O_NOFOLLOW (glibc adds it too): a link planted under the name is never followed. */
    fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
    if (fd < 0) return errno == EEXIST ? WP_ERR_EXISTS : system_status();
    if (fchmod(fd, (mode_t)mode) != 0) { /* the umask must not narrow what the caller asked for */
      int err = errno;
      close(fd);
      shm_unlink(path);
      errno = err;
      return WP_ERR_SYSTEM;
    }
    size = segment_size_for(create);
    /* Reserve every page now: a sparse segment on a tmpfs without room for it maps fine and
     * then kills whoever first touches a page tmpfs cannot supply (init_header, or a client
     * far later) with SIGBUS. posix_fallocate returns the error rather than setting errno. */
    int rc;
    do rc = posix_fallocate(fd, 0, (off_t)size);
    while (rc == EINTR);
    if (rc != 0) {
      close(fd);
      shm_unlink(path); /* so that a retry with a smaller capacity can take the name */
      errno = rc;
      return rc == ENOSPC ? WP_ERR_NO_SPACE : WP_ERR_SYSTEM;
    }
  } else {
    fd = shm_open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) return errno == ENOENT ? WP_ERR_NOT_FOUND : errno == ELOOP ? WP_ERR_UNTRUSTED_SEGMENT : system_status();
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      return WP_ERR_SYSTEM;
    }
    /* Before reading a byte: a planted file must not even be waited on. */
    if (!trusted_file(&st, options)) {
      close(fd);
      return WP_ERR_UNTRUSTED_SEGMENT;
    }
    /* A creator sizes the file and then writes the magic last: give one that is still at
     * it a moment (up to ~100 ms) before calling an empty or magic-less segment bad. */
    for (int attempt = 0;; attempt++) {
      if (fstat(fd, &st) != 0) {
        close(fd);
        return WP_ERR_SYSTEM;
      }
      uint64_t magic = 0;
      if (st.st_size >= (off_t)WP_HEADER_SIZE && pread(fd, &magic, sizeof magic, WP_HDR_MAGIC) != (ssize_t)sizeof magic) magic = 0;
      if ((st.st_size >= (off_t)WP_HEADER_SIZE && magic != 0) || attempt == 100) break;
      usleep(1000);
    }
    if (st.st_size < (off_t)WP_HEADER_SIZE) {
      close(fd);
      return WP_ERR_BAD_SEGMENT;
    }
    size = (size_t)st.st_size;
  }
  uint8_t *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    if (create) shm_unlink(path);
    return WP_ERR_SYSTEM;
  }
  uint32_t capacity = create;
  if (create) {
    init_header(base, create); /* posix_fallocate zero-filled everything else: FREE slots, FREE clients */
  } else {
    /* acquire: pairs with init_header's release of the magic. */
    if (__atomic_load_n((uint64_t *)(base + WP_HDR_MAGIC), __ATOMIC_ACQUIRE) != WP_MAGIC ||
        check_segment(base, size, &capacity) != WP_OK) {
      munmap(base, size);
      close(fd);
      return WP_ERR_BAD_SEGMENT;
    }
  }
  wp_table *t = calloc(1, sizeof *t);
  uint32_t *pins = calloc(capacity, sizeof *pins);
  if (t == NULL || pins == NULL) {
    free(t);
    free(pins);
    munmap(base, size);
    close(fd);
    return WP_ERR_NO_MEMORY;
  }
  t->base = base;
  t->size = size;
  t->fd = fd;
  t->capacity = capacity;
  uint32_t buckets = (capacity + WP_PROBE_WINDOW - 1) / WP_PROBE_WINDOW;
  t->left = (buckets + 1) / 2;
  t->right = buckets - t->left;
  t->pins = pins;
  t->single_thread = (flags & WP_OPEN_SINGLE_THREAD) != 0;
  t->lease_free = UINT32_MAX;
  int rc = register_client(t, producer ? WP_CLIENT_PRODUCER : 0);
  if (rc == WP_ERR_NO_CLIENT_SLOT && wp_reap_dead_clients(t) > 0) rc = register_client(t, producer ? WP_CLIENT_PRODUCER : 0);
  t->record_seed = record_seed(t);
  if (rc == WP_OK && producer) {
    rc = claim_producer(t);
    if (rc != WP_OK) unregister_client(t);
  }
  if (rc != WP_OK) {
    free(pins);
    free(t);
    munmap(base, size);
    close(fd);
    return rc;
  }
  *out = t;
  return WP_OK;
}

int wp_segment_owner(const char *name, uint32_t *uid, uint32_t *mode) {
  if (!valid_name(name) || uid == NULL || mode == NULL) return WP_ERR_INVALID_ARGUMENT;
  char path[WP_MAX_NAME + 2];
  snprintf(path, sizeof path, "/%s", name);
  /* O_PATH: only to fstat it, without following a link or needing read access. Through
   * /dev/shm, where glibc's shm_open looks too. */
  char full[WP_MAX_NAME + 16];
  snprintf(full, sizeof full, "/dev/shm%s", path);
  int fd = open(full, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? WP_ERR_NOT_FOUND : system_status();
  struct stat st;
  int rc = fstat(fd, &st) == 0 ? WP_OK : WP_ERR_SYSTEM;
  close(fd);
  if (rc == WP_OK) {
    *uid = (uint32_t)st.st_uid;
    *mode = (uint32_t)st.st_mode;
  }
  return rc;
}

int wp_check_segment(const wp_table *t, uint64_t *file_size) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  struct stat st;
  if (fstat(t->fd, &st) != 0) return WP_ERR_SYSTEM;
  if (file_size) *file_size = (uint64_t)st.st_size;
  return (uint64_t)st.st_size >= (uint64_t)t->size ? WP_OK : WP_ERR_BAD_SEGMENT;
}

void wp_close(wp_table *t) {
  if (t == NULL) return;
  /* A truncated file: its lost pages would kill us on the first touch, and nobody can use the
   * table any more. Only let go of our own resources. */
  if (wp_check_segment(t, NULL) == WP_OK) {
    release_client_pins(t, t->client);
    uint64_t mine = producer_word_of(t->client, t->client_word);
    /* seq_cst, load and CAS: the producer word is a handshake with claim_producer's CAS and the
     * reaper's, as everywhere it is touched. */
    if (t->producer && __atomic_load_n(u64_at(t, WP_HDR_PRODUCER), __ATOMIC_SEQ_CST) == mine) {
      /* Still the producer (not reaped in between): abandon our reservations, then let go. */
      settle_producer_slots(t);
      __atomic_compare_exchange_n(u64_at(t, WP_HDR_PRODUCER), &mine, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    }
    unregister_client(t);
  }
  munmap(t->base, t->size);
  close(t->fd);
  free(t->pins);
  free(t->leases);
  free(t);
}

int wp_unlink(const char *name) {
  if (!valid_name(name)) return WP_ERR_INVALID_ARGUMENT;
  char path[WP_MAX_NAME + 2];
  snprintf(path, sizeof path, "/%s", name);
  if (shm_unlink(path) != 0) return errno == ENOENT ? WP_ERR_NOT_FOUND : system_status();
  return WP_OK;
}

/* ---- consumer side ------------------------------------------------------------------- */

/* Record generations start at a value of this handle's own, so that a token of another handle (or
 * another table) almost never names a live record here: one that did would release this handle's
 * pin on that slot. Mixed from the client word (pid and registration serial), the handle's
 * address and the clock; it needs to differ, not to be secret. */
static uint32_t record_seed(const wp_table *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t x = t->client_word ^ (uint64_t)(uintptr_t)t ^ ((uint64_t)now.tv_sec << 32) ^ (uint64_t)now.tv_nsec;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Doubles the lease records when none is free: the one allocation a pin can make, kept out of
 * line (cold) so the pin's fast path stays small. Runs under consumer_lock, which other threads
 * of the handle then wait on for the realloc (waitprep.h, "Threads"). */
static __attribute__((noinline, cold)) int lease_grow(wp_table *t) {
  uint32_t cap = t->lease_cap ? t->lease_cap * 2 : 256;
  lease_record *grown = realloc(t->leases, (size_t)cap * sizeof *grown);
  if (grown == NULL) return WP_ERR_NO_MEMORY;
  for (uint32_t i = t->lease_cap; i < cap; i++) {
    grown[i] = (lease_record){0, t->record_seed, i + 1 < cap ? i + 1 : UINT32_MAX, 0};
  }
  t->leases = grown;
  t->lease_free = t->lease_cap;
  t->lease_cap = cap;
  return WP_OK;
}

static inline __attribute__((always_inline)) int lease_acquire(wp_table *t, uint32_t slot, uint64_t *token) {
  if (t->lease_free == UINT32_MAX && lease_grow(t) != WP_OK) return WP_ERR_NO_MEMORY;
  uint32_t index = t->lease_free;
  lease_record *r = &t->leases[index];
  t->lease_free = r->next_free;
  r->slot = slot;
  r->live = 1;
  *token = (uint64_t)r->gen << 32 | index;
  return WP_OK;
}

/* Reads the slot's device record under its seqlock and compares it with the target. Called
 * while this client holds a pin on the slot, so the slot cannot be evicted or reused during
 * the read: only a newer record (a higher, even sequence) can race with it. */
static inline __attribute__((always_inline)) int check_device_record(const wp_table *t, uint32_t slot, const wp_device_record *target) {
  uint64_t *rec = slot_word(t, slot, WP_SLOT_DEVICE);
  for (int attempt = 0; attempt < 8; attempt++) {
    /* acquire: the fields written before this sequence was stored are visible. */
    uint64_t s1 = __atomic_load_n(&rec[0], __ATOMIC_ACQUIRE);
    if (s1 == 0) return WP_MISS_NO_DEVICE_RECORD;
    if (s1 & 1) continue; /* a write in progress */
    uint64_t uuid0 = __atomic_load_n(&rec[1], __ATOMIC_RELAXED);
    uint64_t uuid1 = __atomic_load_n(&rec[2], __ATOMIC_RELAXED);
    uint64_t arena = __atomic_load_n(&rec[3], __ATOMIC_RELAXED);
    uint64_t arena_generation = __atomic_load_n(&rec[4], __ATOMIC_RELAXED);
    /* acquire fence: the field loads above complete before the sequence is read again. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&rec[0], __ATOMIC_RELAXED) != s1) continue;
    if (uuid0 == 0 && uuid1 == 0) return WP_MISS_NO_DEVICE_RECORD; /* settled after a dead producer */
    uint64_t want0, want1;
    memcpy(&want0, target->device_uuid, 8);
    memcpy(&want1, target->device_uuid + 8, 8);
    if (uuid0 != want0 || uuid1 != want1 || arena != target->arena) return WP_MISS_DEVICE_MISMATCH;
    if (arena_generation != target->arena_generation) return WP_MISS_ARENA_GENERATION_MISMATCH;
    return WP_OK;
  }
  return WP_MISS_DEVICE_WRITE_INCOMPLETE;
}

/* Pins `slot`, found holding the digest in state READY or EVICTING with state word `sg`, for
 * this handle. Called under consumer_lock: the handle's bit and its count of further leases change
 * together, so no other thread of the handle sees the bit set while the handle holds no lease on
 * the slot, or a count above zero while the bit is clear. */
static inline __attribute__((always_inline)) int pin_found(wp_table *t, uint32_t slot, uint64_t sg, const wp_device_record *target, wp_lease *out) {
  const uint64_t bit = 1ull << t->client;
  uint64_t *sg_word = slot_word(t, slot, WP_SLOT_STATE_GEN);
  const int held = holds_slot(t, slot);
  if (!held) {
    if (state_of(sg) != WP_SLOT_READY) return WP_MISS_EVICTING;
    uint64_t *mask = slot_word(t, slot, WP_SLOT_PIN_MASK);
    /* Dekker handshake with wp_try_evict: publish the pin, then re-read the state, both
     * seq_cst. Either the evictor's mask load sees our bit, or its READY->EVICTING claim
     * precedes our re-read and we back out. */
    __atomic_fetch_or(mask, bit, __ATOMIC_SEQ_CST);
    uint64_t again = __atomic_load_n(sg_word, __ATOMIC_SEQ_CST);
    if (again != sg) {
      /* release: nothing read here is used; it only undoes the bit. */
      __atomic_fetch_and(mask, ~bit, __ATOMIC_RELEASE);
      return state_of(again) == WP_SLOT_EVICTING ? WP_MISS_EVICTING : WP_MISS_CONTENDED;
    }
  } else {
    /* This handle holds the bit (a lease of this thread or of another), so the slot can be neither evicted nor
     * reused now, though it may show EVICTING for a moment (that eviction rolls back). But `sg`
     * was read before we took the lock, when the bit may not have been held: the slot must
     * still be at that generation (a new one means it was freed and refilled meanwhile).
     * acquire: pairs with the producer's release of the state, as on the first read. */
    uint64_t again = __atomic_load_n(sg_word, __ATOMIC_ACQUIRE);
    if (gen_of(again) != gen_of(sg) || (state_of(again) != WP_SLOT_READY && state_of(again) != WP_SLOT_EVICTING)) {
      return WP_MISS_CONTENDED;
    }
  }
  int rc = target == NULL ? WP_OK : check_device_record(t, slot, target);
  uint64_t token;
  if (rc == WP_OK) rc = lease_acquire(t, slot, &token) == WP_OK ? WP_OK : WP_MISS_CONTENDED;
  if (rc != WP_OK) {
    /* release: the device-record reads above happen before an evictor sees the bit gone. */
    if (!held) __atomic_fetch_and(slot_word(t, slot, WP_SLOT_PIN_MASK), ~bit, __ATOMIC_RELEASE);
    return rc;
  }
  if (held) { /* a further lease on a slot this handle holds: count it */
    uint32_t more = pins_of(t, slot);
    if (more == 0) t->multi++;
    set_pins(t, slot, more + 1);
  }
  out->slot = slot;
  out->generation = gen_of(sg);
  out->token = token;
  read_meta(t, slot, &out->meta);
  return WP_OK;
}

/* wp_try_pin after its argument checks; wp_try_pin_prefix runs it once per digest. */
static inline __attribute__((always_inline)) int try_pin_checked(wp_table *t, const uint8_t digest[32], const wp_device_record *target, wp_lease *out) {
  int seen = WP_MISS_ABSENT;
  /* A key may be in its second bucket (about half are), and every miss probes both: start the
   * second bucket's first line on its way from memory now, so on a cold table its load overlaps
   * the first bucket's instead of following it. A hint only: no access, no fault. */
  if (choices_of(t) == 2) __builtin_prefetch(slot_at(t, bucket_of(t, digest, 1) * WP_PROBE_WINDOW), 0, 3);
  /* The probe reads shared words only and takes no lock: a miss never waits for another thread. */
  for (int choice = 0; choice < choices_of(t); choice++) {
    uint32_t bucket = bucket_of(t, digest, choice);
    for (uint32_t slot = bucket * WP_PROBE_WINDOW, end = bucket_end(t, bucket); slot < end; slot++) {
      /* acquire: the digest and meta the producer wrote before this state are visible. */
      uint64_t sg = __atomic_load_n(slot_word(t, slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE);
      uint64_t state = state_of(sg);
      if (state == WP_SLOT_FREE || !digest_equals(t, slot, digest)) continue;
      if (state == WP_SLOT_RESERVED) { seen = WP_MISS_PREPARING; continue; }
      if (!t->single_thread) handle_lock(&t->consumer_lock);
      int rc = pin_found(t, slot, sg, target, out);
      if (!t->single_thread) handle_unlock(&t->consumer_lock);
      if (rc != WP_MISS_EVICTING) return rc;
      seen = WP_MISS_EVICTING; /* EVICTING and not ours: as before, look on for the digest */
    }
  }
  return seen;
}

int wp_try_pin(wp_table *t, const uint8_t digest[32], const wp_device_record *target, wp_lease *out) {
  if (t == NULL || digest == NULL || out == NULL) return WP_ERR_INVALID_ARGUMENT;
  return try_pin_checked(t, digest, target, out);
}

/* How often wp_try_pin_exact looks again at a slot it found EVICTING at the right generation.
 * While the handing client holds its pin, an eviction claim always rolls back within a few of the
 * producer's instructions, so a few looks nearly always see READY again; the bound keeps the call
 * from waiting on a producer that was preempted or died mid-claim (the reaper settles that one). */
#define EXACT_EVICTING_RETRIES 64

int wp_try_pin_exact(wp_table *t, uint32_t slot, uint64_t generation, const uint8_t digest[32], const wp_device_record *target,
                     wp_lease *out) {
  if (t == NULL || digest == NULL || out == NULL || slot >= t->capacity || generation >> (64 - STATE_BITS) != 0) {
    return WP_ERR_INVALID_ARGUMENT;
  }
  uint64_t *sg_word = slot_word(t, slot, WP_SLOT_STATE_GEN);
  for (int attempt = 0;; attempt++) {
    /* acquire: as in wp_try_pin, the digest and meta written before this state are visible. */
    uint64_t sg = __atomic_load_n(sg_word, __ATOMIC_ACQUIRE);
    /* The digest is read after the state, as in the probe; a slot freed and refilled meanwhile
     * has a new generation, which pin_found's re-read of the state word catches. */
    if (gen_of(sg) != generation || state_of(sg) == WP_SLOT_FREE || !digest_equals(t, slot, digest)) return WP_MISS_STALE_HANDOFF;
    if (state_of(sg) == WP_SLOT_RESERVED) return WP_MISS_PREPARING;
    if (!t->single_thread) handle_lock(&t->consumer_lock);
    int rc = pin_found(t, slot, sg, target, out);
    if (!t->single_thread) handle_unlock(&t->consumer_lock);
    if (rc == WP_MISS_CONTENDED && gen_of(__atomic_load_n(sg_word, __ATOMIC_ACQUIRE)) != generation) return WP_MISS_STALE_HANDOFF;
    if (rc != WP_MISS_EVICTING || attempt == EXACT_EVICTING_RETRIES) return rc;
    cpu_relax();
  }
}

int wp_try_pin_prefix(wp_table *t, const uint8_t *digests, uint32_t n, const wp_device_record *target, wp_lease *leases) {
  if (t == NULL || n > INT32_MAX || (n > 0 && (digests == NULL || leases == NULL))) return -WP_ERR_INVALID_ARGUMENT;
  /* Each pin takes and drops the consumer lock itself, as wp_try_pin does: another thread of
   * the handle never waits for a whole prefix. */
  uint32_t run = 0;
  while (run < n && try_pin_checked(t, digests + (size_t)run * 32, target, &leases[run]) == WP_OK) run++;
  return (int)run;
}

/* wp_peek after its argument check; wp_peek_many runs it once per digest. */
static inline __attribute__((always_inline)) int peek_checked(const wp_table *t, const uint8_t digest[32]) {
  int seen = WP_MISS_ABSENT;
  /* The probe of wp_try_pin, reading shared words only; no pin, no lock. */
  for (int choice = 0; choice < choices_of(t); choice++) {
    uint32_t bucket = bucket_of(t, digest, choice);
    for (uint32_t slot = bucket * WP_PROBE_WINDOW, end = bucket_end(t, bucket); slot < end; slot++) {
      /* acquire: pairs with the producer's release of the state, as in the probe. */
      uint64_t state = state_of(__atomic_load_n(slot_word(t, slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE));
      if (state == WP_SLOT_FREE || !digest_equals(t, slot, digest)) continue;
      if (state == WP_SLOT_READY) return WP_OK;
      seen = state == WP_SLOT_RESERVED ? WP_MISS_PREPARING : WP_MISS_EVICTING;
    }
  }
  return seen;
}

int wp_peek(const wp_table *t, const uint8_t digest[32]) {
  if (t == NULL || digest == NULL) return WP_ERR_INVALID_ARGUMENT;
  return peek_checked(t, digest);
}

/* Starts the first line of both of a digest's buckets on its way from memory: a hint only (no
 * access, no fault), so that on a cold table a batch's probes overlap their misses. */
static inline void prefetch_buckets(const wp_table *t, const uint8_t digest[32]) {
  __builtin_prefetch(slot_at(t, bucket_of(t, digest, 0) * WP_PROBE_WINDOW), 0, 3);
  if (choices_of(t) == 2) __builtin_prefetch(slot_at(t, bucket_of(t, digest, 1) * WP_PROBE_WINDOW), 0, 3);
}

int wp_peek_many(const wp_table *t, const uint8_t *digests, uint32_t n, uint8_t *statuses) {
  if (t == NULL || n > INT32_MAX || (n > 0 && digests == NULL)) return -WP_ERR_INVALID_ARGUMENT;
  uint32_t run = 0;
  int leading = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (i + 1 < n) prefetch_buckets(t, digests + (size_t)(i + 1) * 32);
    int status = peek_checked(t, digests + (size_t)i * 32);
    if (status == WP_OK && leading) run++;
    else leading = 0;
    if (statuses == NULL) {
      if (!leading) break; /* only the leading run is asked for */
    } else {
      statuses[i] = (uint8_t)status; /* WP_OK or a WP_MISS_*: each fits a byte */
    }
  }
  return (int)run;
}

/* wp_unpin after its argument check; wp_unpin_many runs it once per lease. */
static inline __attribute__((always_inline)) int unpin_checked(wp_table *t, const wp_lease *lease) {
  uint32_t index = (uint32_t)lease->token;
  uint32_t gen = (uint32_t)(lease->token >> 32);
  if (!t->single_thread) handle_lock(&t->consumer_lock);
  lease_record *r = index < t->lease_cap ? &t->leases[index] : NULL;
  if (r == NULL || !r->live || r->gen != gen || r->slot != lease->slot) { /* closed before, or not ours */
    if (!t->single_thread) handle_unlock(&t->consumer_lock);
    return WP_STALE;
  }
  r->live = 0;
  r->gen++;
  r->next_free = t->lease_free;
  t->lease_free = index;
  uint32_t more = t->multi == 0 ? 0 : pins_of(t, r->slot);
  if (more > 0) { /* another lease of this handle still holds the slot: keep the bit */
    set_pins(t, r->slot, more - 1);
    if (more == 1) t->multi--;
  } else {
    /* release: every read of the artifact under this pin happens before an evictor sees
     * the bit cleared. */
    __atomic_fetch_and(slot_word(t, r->slot, WP_SLOT_PIN_MASK), ~(1ull << t->client), __ATOMIC_RELEASE);
  }
  if (!t->single_thread) handle_unlock(&t->consumer_lock);
  return WP_OK;
}

int wp_unpin(wp_table *t, const wp_lease *lease) {
  if (t == NULL || lease == NULL) return WP_ERR_INVALID_ARGUMENT;
  return unpin_checked(t, lease);
}

int wp_unpin_many(wp_table *t, const wp_lease *leases, uint32_t n) {
  if (t == NULL || n > INT32_MAX || (n > 0 && leases == NULL)) return -WP_ERR_INVALID_ARGUMENT;
  int released = 0;
  for (uint32_t i = 0; i < n; i++) released += unpin_checked(t, &leases[i]) == WP_OK;
  return released;
}

int wp_unpin_indexed(wp_table *t, const wp_lease *leases, uint32_t n, const uint32_t *indexes, uint32_t m) {
  if (t == NULL || n > INT32_MAX || m > INT32_MAX || (m > 0 && (leases == NULL || indexes == NULL))) return -WP_ERR_INVALID_ARGUMENT;
  /* Every index is checked before any lease is released: a bad list releases nothing. */
  for (uint32_t k = 0; k < m; k++) {
    if (indexes[k] >= n) return -WP_ERR_INVALID_ARGUMENT;
  }
  int released = 0;
  for (uint32_t k = 0; k < m; k++) released += unpin_checked(t, &leases[indexes[k]]) == WP_OK;
  return released;
}

/* ---- producer side ------------------------------------------------------------------- */

/* The slot holding `digest` in any non-FREE state, or UINT32_MAX. Producer only: states
 * other than READY->(pins) change only by our hand, so plain acquire reads suffice. */
static uint32_t find_slot(const wp_table *t, const uint8_t digest[32], uint64_t *sg_out) {
  for (int choice = 0; choice < choices_of(t); choice++) {
    uint32_t bucket = bucket_of(t, digest, choice);
    for (uint32_t slot = bucket * WP_PROBE_WINDOW, end = bucket_end(t, bucket); slot < end; slot++) {
      uint64_t sg = __atomic_load_n(slot_word(t, slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE);
      if (state_of(sg) != WP_SLOT_FREE && digest_equals(t, slot, digest)) {
        *sg_out = sg;
        return slot;
      }
    }
  }
  return UINT32_MAX;
}

/* The first FREE slot of `bucket`, or UINT32_MAX; how many are FREE in `free_count`. Producer
 * only: a slot leaves or enters FREE only by our hand. */
static uint32_t first_free(const wp_table *t, uint32_t bucket, uint32_t *free_count) {
  uint32_t first = UINT32_MAX, n = 0;
  for (uint32_t slot = bucket * WP_PROBE_WINDOW, end = bucket_end(t, bucket); slot < end; slot++) {
    /* acquire, as in find_slot; only the producer moves a slot into or out of FREE. */
    if (state_of(__atomic_load_n(slot_word(t, slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE)) != WP_SLOT_FREE) continue;
    if (n++ == 0) first = slot;
  }
  *free_count = n;
  return first;
}

static int reserve_locked(wp_table *t, const uint8_t digest[32], wp_reservation *out) {
  if (t == NULL || digest == NULL || out == NULL) return WP_ERR_INVALID_ARGUMENT;
  if (!t->producer) return WP_ERR_NOT_PRODUCER;
  uint64_t sg;
  if (find_slot(t, digest, &sg) != UINT32_MAX) return WP_EXISTS;
  /* Two-choice placement, ties to the first: the key goes to the bucket with more FREE slots. */
  uint32_t free0, free1 = 0;
  uint32_t slot = first_free(t, bucket_of(t, digest, 0), &free0);
  if (choices_of(t) == 2) {
    uint32_t other = first_free(t, bucket_of(t, digest, 1), &free1);
    if (free1 > free0) slot = other;
  }
  if (slot == UINT32_MAX) return WP_FULL;
  uint64_t *sg_word = slot_word(t, slot, WP_SLOT_STATE_GEN);
  sg = __atomic_load_n(sg_word, __ATOMIC_ACQUIRE);
  uint64_t *d = slot_word(t, slot, WP_SLOT_DIGEST);
  for (int k = 0; k < 4; k++) {
    uint64_t v;
    memcpy(&v, digest + 8 * k, 8);
    __atomic_store_n(&d[k], v, __ATOMIC_RELAXED); /* published by the release below */
  }
  __atomic_store_n(slot_word(t, slot, WP_SLOT_DEVICE), 0, __ATOMIC_RELAXED); /* no device record */
  /* release: a lookup that reads RESERVED (acquire) sees the digest. */
  __atomic_store_n(sg_word, make_sg(WP_SLOT_RESERVED, gen_of(sg)), __ATOMIC_RELEASE);
  out->slot = slot;
  out->generation = gen_of(sg);
  return WP_OK;
}

static int reserved_slot(const wp_table *t, const wp_reservation *r) {
  if (t == NULL || r == NULL) return WP_ERR_INVALID_ARGUMENT;
  if (!t->producer) return WP_ERR_NOT_PRODUCER;
  /* 56 generation bits: a larger one would wrap, in make_sg, onto a live slot's word. */
  if (r->slot >= t->capacity || r->generation >> (64 - STATE_BITS) != 0) return WP_ERR_INVALID_ARGUMENT;
  uint64_t sg = __atomic_load_n(slot_word(t, r->slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE);
  return sg == make_sg(WP_SLOT_RESERVED, r->generation) ? WP_OK : WP_STALE;
}

static int publish_locked(wp_table *t, const wp_reservation *r, const wp_meta *meta) {
  int rc = reserved_slot(t, r);
  if (rc != WP_OK) return rc;
  if (meta == NULL) return WP_ERR_INVALID_ARGUMENT;
  uint64_t *m = slot_word(t, r->slot, WP_SLOT_META);
  __atomic_store_n(&m[0], meta->size_bytes, __ATOMIC_RELAXED); /* published by the release below */
  __atomic_store_n(&m[1], meta->location, __ATOMIC_RELAXED);
  __atomic_store_n(&m[2], meta->checksum, __ATOMIC_RELAXED);
  __atomic_store_n(&m[3], (uint64_t)meta->codec_id | (uint64_t)meta->representation_version << 32, __ATOMIC_RELAXED);
  /* release: a pinner that reads READY (acquire) sees the metadata. */
  __atomic_store_n(slot_word(t, r->slot, WP_SLOT_STATE_GEN), make_sg(WP_SLOT_READY, r->generation), __ATOMIC_RELEASE);
  return WP_OK;
}

static int abandon_locked(wp_table *t, const wp_reservation *r) {
  int rc = reserved_slot(t, r);
  if (rc != WP_OK) return rc;
  /* release: orders our digest writes before the slot is seen FREE (and reusable). */
  __atomic_store_n(slot_word(t, r->slot, WP_SLOT_STATE_GEN), make_sg(WP_SLOT_FREE, r->generation + 1), __ATOMIC_RELEASE);
  return WP_OK;
}

static int try_evict_locked(wp_table *t, const uint8_t digest[32]) {
  if (t == NULL || digest == NULL) return WP_ERR_INVALID_ARGUMENT;
  if (!t->producer) return WP_ERR_NOT_PRODUCER;
  uint64_t sg;
  uint32_t slot = find_slot(t, digest, &sg);
  if (slot == UINT32_MAX || state_of(sg) == WP_SLOT_RESERVED) return WP_ABSENT;
  if (state_of(sg) != WP_SLOT_READY) return WP_PINNED; /* EVICTING left by a dead producer: settled at claim */
  uint64_t *sg_word = slot_word(t, slot, WP_SLOT_STATE_GEN);
  uint64_t evicting = make_sg(WP_SLOT_EVICTING, gen_of(sg));
  /* The evictor's half of the Dekker handshake: claim, then read the pins, both seq_cst. */
  if (!__atomic_compare_exchange_n(sg_word, &sg, evicting, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return WP_PINNED;
  if (__atomic_load_n(slot_word(t, slot, WP_SLOT_PIN_MASK), __ATOMIC_SEQ_CST) != 0) {
    /* Pinned (or a pinner racing in that will back out): roll back, data untouched.
     * seq_cst so a holder's re-read that saw EVICTING is followed by READY in one order. */
    __atomic_store_n(sg_word, make_sg(WP_SLOT_READY, gen_of(sg)), __ATOMIC_SEQ_CST);
    return WP_PINNED;
  }
  /* Clear the device record's sequence, then store FREE with the next generation, so no lease
   * or lookup of generation g can match again. No reader is inside the record in between: the
   * pin mask was empty after our claim, and a pinner that comes later sees EVICTING or FREE on
   * its re-read and never reads the record (docs/lease-table.md, "Eviction"). */
  __atomic_store_n(slot_word(t, slot, WP_SLOT_DEVICE), 0, __ATOMIC_RELAXED);
  __atomic_store_n(sg_word, make_sg(WP_SLOT_FREE, gen_of(sg) + 1), __ATOMIC_RELEASE);
  return WP_OK;
}

static int record_device_write_locked(wp_table *t, const uint8_t digest[32], const wp_device_record *rec) {
  if (t == NULL || digest == NULL || rec == NULL) return WP_ERR_INVALID_ARGUMENT;
  if (!t->producer) return WP_ERR_NOT_PRODUCER;
  static const uint8_t no_device[16] = {0};
  if (memcmp(rec->device_uuid, no_device, 16) == 0) return WP_ERR_INVALID_ARGUMENT; /* all-zero UUID means "no record" */
  uint64_t sg;
  uint32_t slot = find_slot(t, digest, &sg);
  if (slot == UINT32_MAX || state_of(sg) != WP_SLOT_READY) return WP_ABSENT;
  uint64_t *r = slot_word(t, slot, WP_SLOT_DEVICE);
  /* Seqlock writer (the producer is the only one): odd while writing, then the next even.
   * relaxed store + release fence: the odd sequence is visible before any field changes. */
  uint64_t seq = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
  uint64_t odd = seq + 1 + (seq & 1); /* the next odd value, even if a dead producer left it odd */
  __atomic_store_n(&r[0], odd, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  uint64_t uuid0, uuid1;
  memcpy(&uuid0, rec->device_uuid, 8);
  memcpy(&uuid1, rec->device_uuid + 8, 8);
  __atomic_store_n(&r[1], uuid0, __ATOMIC_RELAXED);
  __atomic_store_n(&r[2], uuid1, __ATOMIC_RELAXED);
  __atomic_store_n(&r[3], rec->arena, __ATOMIC_RELAXED);
  __atomic_store_n(&r[4], rec->arena_generation, __ATOMIC_RELAXED);
  __atomic_store_n(&r[5], rec->write_seq, __ATOMIC_RELAXED);
  /* release: a reader that sees the even sequence (acquire) sees every field. */
  __atomic_store_n(&r[0], odd + 1, __ATOMIC_RELEASE);
  return WP_OK;
}

/* The producer's entry points: each runs whole under the handle's producer lock, so threads
 * sharing a producer handle take turns (waitprep.h, "Threads"). The checks of arguments and role
 * are inside each body. */
int wp_reserve(wp_table *t, const uint8_t digest[32], wp_reservation *out) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  handle_lock(&t->producer_lock);
  int rc = reserve_locked(t, digest, out);
  handle_unlock(&t->producer_lock);
  return rc;
}
int wp_publish(wp_table *t, const wp_reservation *r, const wp_meta *meta) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  handle_lock(&t->producer_lock);
  int rc = publish_locked(t, r, meta);
  handle_unlock(&t->producer_lock);
  return rc;
}
int wp_abandon(wp_table *t, const wp_reservation *r) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  handle_lock(&t->producer_lock);
  int rc = abandon_locked(t, r);
  handle_unlock(&t->producer_lock);
  return rc;
}
int wp_try_evict(wp_table *t, const uint8_t digest[32]) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  handle_lock(&t->producer_lock);
  int rc = try_evict_locked(t, digest);
  handle_unlock(&t->producer_lock);
  return rc;
}
int wp_record_device_write(wp_table *t, const uint8_t digest[32], const wp_device_record *rec) {
  if (t == NULL) return WP_ERR_INVALID_ARGUMENT;
  handle_lock(&t->producer_lock);
  int rc = record_device_write_locked(t, digest, rec);
  handle_unlock(&t->producer_lock);
  return rc;
}

/* ---- names and introspection --------------------------------------------------------- */

const char *wp_status_name(int status) {
  switch (status) {
#define WP_STATUS_CASE(name, value) \
  case name:                        \
    return #name;
    WP_STATUSES(WP_STATUS_CASE)
#undef WP_STATUS_CASE
    default:
      return "WP_UNKNOWN";
  }
}

uint32_t wp_abi_version(void) { return WP_ABI_VERSION; }
uint32_t wp_capacity(const wp_table *t) { return t ? t->capacity : 0; }
int wp_client_index(const wp_table *t) { return t ? (int)t->client : -1; }
int wp_is_producer(const wp_table *t) { return t ? t->producer : 0; }

uint64_t wp_slot_state_gen(const wp_table *t, uint32_t slot) {
  return t && slot < t->capacity ? __atomic_load_n(slot_word(t, slot, WP_SLOT_STATE_GEN), __ATOMIC_ACQUIRE) : 0;
}
uint64_t wp_slot_pin_mask(const wp_table *t, uint32_t slot) {
  return t && slot < t->capacity ? __atomic_load_n(slot_word(t, slot, WP_SLOT_PIN_MASK), __ATOMIC_ACQUIRE) : 0;
}
uint32_t wp_client_pins(const wp_table *t, uint32_t slot) {
  if (t == NULL || slot >= t->capacity) return 0;
  /* A snapshot for tests and inspection, as the header says. */
  if (!holds_slot(t, slot)) return 0;
  return 1 + pins_of(t, slot);
}

const void *wp_segment(const wp_table *t, size_t *size) {
  if (t == NULL) return NULL;
  if (size) *size = t->size;
  return t->base;
}

int wp_summarize(const wp_table *t, wp_summary *out) {
  if (t == NULL || out == NULL) return WP_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (wp_check_segment(t, NULL) != WP_OK) return WP_ERR_BAD_SEGMENT; /* before touching a byte */
  /* The counts use the capacity fixed at open; a header that no longer says it, or a producer
   * word naming no client index, is a segment someone overwrote: reported, not counted. */
  uint32_t header_capacity = __atomic_load_n((const uint32_t *)(t->base + WP_HDR_CAPACITY), __ATOMIC_RELAXED);
  uint64_t producer = __atomic_load_n(u64_at(t, WP_HDR_PRODUCER), __ATOMIC_RELAXED);
  uint64_t producer_index = producer & 0xffu;
  if (header_capacity != t->capacity || (producer != 0 && (producer_index == 0 || producer_index > WP_MAX_CLIENTS))) {
    return WP_ERR_BAD_SEGMENT;
  }
  /* Relaxed loads throughout: these are monitoring counts, each word read atomically, and no
   * decision is taken on them. Only each slot's first cache line is read. */
  for (uint32_t s = 0; s < t->capacity; s++) {
    uint64_t v = __atomic_load_n(slot_word(t, s, WP_SLOT_STATE_GEN), __ATOMIC_RELAXED);
    out->slots[state_of(v) & 3u]++;
    out->pinned_slots += __atomic_load_n(slot_word(t, s, WP_SLOT_PIN_MASK), __ATOMIC_RELAXED) != 0;
  }
  for (uint32_t i = 0; i < WP_MAX_CLIENTS; i++) {
    uint64_t w = __atomic_load_n((uint64_t *)(client_at(t, i) + WP_CLI_WORD), __ATOMIC_RELAXED);
    out->clients[w & CLIENT_STATE_MASK]++;
  }
  out->producer_client = producer == 0 ? -1 : (int32_t)producer_index - 1;
  out->reaped_clients = __atomic_load_n(u64_at(t, WP_HDR_REAPED), __ATOMIC_RELAXED);
  return WP_OK;
}

uint64_t wp_pin_loop(wp_table *t, const uint8_t digest[32], uint64_t iterations) {
  if (t == NULL || digest == NULL) return 0;
  uint64_t hits = 0;
  wp_lease lease;
  for (uint64_t i = 0; i < iterations; i++) {
    if (wp_try_pin(t, digest, NULL, &lease) == WP_OK) {
      hits++;
      wp_unpin(t, &lease);
    }
  }
  return hits;
}
