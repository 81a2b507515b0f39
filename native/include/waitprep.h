/*
 * waitprep: the C ABI of the shared-memory lease table.
 *
 * One POSIX shared-memory segment per table. Exactly one producer (the model
 * runtime's storage worker) reserves, publishes and evicts artifacts; any
 * number of consumers (up to WP_MAX_CLIENTS clients in all) pin READY
 * artifacts with a bounded, lock-free, allocation-free, syscall-free lookup.
 * The Node-API addon, libwaitprep.so and the JavaScript fallback
 * (lib/lease-table/layout.ts mirrors every constant below) share this layout.
 *
 * Segment layout (little-endian, every offset a multiple of 64):
 *
 *   0                 256                256 + 64*64              + capacity*128
 *   +-----------------+------------------+-------------------------+
 *   | header          | client registry  | slots                   |
 *   | (WP_HEADER_SIZE)| 64 x 64 bytes    | capacity x 128 bytes    |
 *   +-----------------+------------------+-------------------------+
 *
 * Header (offsets in bytes):
 *   0  magic u64 "WAITPREP"     8  abi_version u32   12 header_size u32
 *   16 capacity u32             20 probe_window u32  24 max_clients u32
 *   28 slot_size u32            32 client_size u32   36 (pad) u32
 *   40 segment_size u64         48 clients_offset u64 56 slots_offset u64
 *   64 producer u64 (atomic: 0, or client index + 1 | client serial << 8)
 *   72 reaped_clients u64 (atomic counter)
 *
 * Client entry (64 bytes):
 *   0  word u64 (atomic): state (2 bits) | pid (22 bits) << 2 | serial (40 bits) << 24
 *      (in state REAPING the pid bits name the reaper instead: 1 << 21 | the low 15 bits of
 *      its serial << 6 | its client index, or 0 for an unregistered reaper; a reap whose
 *      reaper is gone is taken over)
 *   8  start_time u64   (process start time, clock ticks since boot, /proc/PID/stat field 22)
 *   16 pid_ns u64       (inode of /proc/PID/ns/pid: clients of other namespaces are never reaped;
 *                        0: unknown, never reaped)
 *   24 flags u32        (WP_CLIENT_PRODUCER)
 *   40 time_ns u64      (inode of /proc/PID/ns/time, 0 without time namespaces: start times
 *                        compare only within one)
 *
 * Slot (128 bytes, two cache lines; the first holds everything a lookup reads):
 *   0  state_gen u64 (atomic): state (8 bits) | generation (56 bits) << 8
 *   8  pin_mask u64 (atomic): bit c set while client c holds at least one pin
 *   16 digest 32 bytes      (written only while the slot is FREE, by the producer)
 *   48 meta: size_bytes u64, location u64, checksum u64, codec_id u32, representation_version u32
 *   80 device record: seq u64 (seqlock: 0 absent, odd being written), device_uuid 16 bytes,
 *      arena u64, arena_generation u64, write_seq u64
 *
 * Slot states: FREE -> RESERVED (reserve) -> READY (publish) -> EVICTING (evict claim)
 * -> FREE with generation + 1 (no pins) or back to READY (pinned). RESERVED -> FREE with
 * generation + 1 (abandon). The generation never returns to an old value (56 bits), so a
 * lease, reservation or lookup that names (slot, generation) can never act on a reused slot.
 */
#ifndef WAITPREP_H
#define WAITPREP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: wp_unpin returns a status; WP_ERR_PERMISSION. 3: handles are thread-safe; wp_open_options
 * gained flags and trusted_uid; later within 3, new functions only (wp_try_pin_exact,
 * wp_try_pin_prefix, wp_unpin_many, wp_peek) and the status WP_MISS_STALE_HANDOFF. 4: a key may
 * live in either of two buckets of WP_PROBE_WINDOW slots (docs/lease-table.md, "Placement"), no
 * longer in a window from one home slot, so a segment of 3 would be misread; later within 4, new
 * functions only (wp_peek_many, wp_unpin_indexed). A segment's
 * header names the ABI that made it, and a segment of another ABI is refused
 * (WP_ERR_BAD_SEGMENT). */
#define WP_ABI_VERSION 4
#define WP_MAGIC 0x5045525054494157ULL /* "WAITPREP" read as a little-endian u64 */

#define WP_HEADER_SIZE 256u
#define WP_CLIENT_SIZE 64u
#define WP_SLOT_SIZE 128u
#define WP_MAX_CLIENTS 64u
#define WP_PROBE_WINDOW 8u /* slots per bucket */
#define WP_MAX_CAPACITY (1u << 24)
#define WP_MAX_NAME 200u

/* Header field offsets. */
#define WP_HDR_MAGIC 0u
#define WP_HDR_ABI_VERSION 8u
#define WP_HDR_HEADER_SIZE 12u
#define WP_HDR_CAPACITY 16u
#define WP_HDR_PROBE_WINDOW 20u
#define WP_HDR_MAX_CLIENTS 24u
#define WP_HDR_SLOT_SIZE 28u
#define WP_HDR_CLIENT_SIZE 32u
#define WP_HDR_SEGMENT_SIZE 40u
#define WP_HDR_CLIENTS_OFFSET 48u
#define WP_HDR_SLOTS_OFFSET 56u
#define WP_HDR_PRODUCER 64u
#define WP_HDR_REAPED 72u

/* Client entry offsets, states and flags. */
#define WP_CLI_WORD 0u
#define WP_CLI_START_TIME 8u
#define WP_CLI_PID_NS 16u
#define WP_CLI_FLAGS 24u
#define WP_CLI_TIME_NS 40u
#define WP_CLIENT_FREE 0u
#define WP_CLIENT_CLAIMING 1u
#define WP_CLIENT_ACTIVE 2u
#define WP_CLIENT_REAPING 3u
#define WP_CLIENT_PRODUCER 1u

/* Slot offsets and states. */
#define WP_SLOT_STATE_GEN 0u
#define WP_SLOT_PIN_MASK 8u
#define WP_SLOT_DIGEST 16u
#define WP_SLOT_META 48u
#define WP_SLOT_DEVICE 80u
#define WP_SLOT_FREE 0u
#define WP_SLOT_RESERVED 1u
#define WP_SLOT_READY 2u
#define WP_SLOT_EVICTING 3u

/* Status codes: 0 is success; every other outcome has a name (wp_status_name). WP_STATUSES
 * lists each once, by name and number, for what must enumerate them: the enum below and the
 * Node-API addon's status table, which lib/lease-table/native.ts compares with lib/lease-table/layout.ts
 * at load. */
#define WP_STATUSES(X)                                        \
  X(WP_OK, 0)                                                 \
  X(WP_MISS_ABSENT, 1)                                        \
  X(WP_MISS_PREPARING, 2)                                     \
  X(WP_MISS_EVICTING, 3)                                      \
  X(WP_MISS_CONTENDED, 4)                                     \
  X(WP_MISS_NO_DEVICE_RECORD, 5)                              \
  X(WP_MISS_DEVICE_MISMATCH, 6)                               \
  X(WP_MISS_ARENA_GENERATION_MISMATCH, 7)                     \
  X(WP_MISS_DEVICE_WRITE_INCOMPLETE, 8)                       \
  X(WP_MISS_STALE_HANDOFF, 9) /* wp_try_pin_exact: the slot no longer holds that generation of that digest */ \
  X(WP_EXISTS, 20)                                            \
  X(WP_FULL, 21)                                              \
  X(WP_PINNED, 22)                                            \
  X(WP_ABSENT, 23)                                            \
  X(WP_STALE, 24)                                             \
  X(WP_ERR_INVALID_ARGUMENT, 40)                              \
  X(WP_ERR_BAD_SEGMENT, 41)                                   \
  X(WP_ERR_WRITER_EXISTS, 42)                                 \
  X(WP_ERR_NOT_PRODUCER, 43)                                  \
  X(WP_ERR_NO_CLIENT_SLOT, 44)                                \
  X(WP_ERR_SYSTEM, 45) /* errno says which */                 \
  X(WP_ERR_NOT_FOUND, 46)                                     \
  X(WP_ERR_EXISTS, 47)                                        \
  X(WP_ERR_NO_MEMORY, 48)                                     \
  X(WP_ERR_NO_SPACE, 49) /* creation: /dev/shm lacks room */ \
  X(WP_ERR_PERMISSION, 50) /* file permissions refused it; errno: EACCES or EPERM */ \
  X(WP_ERR_UNTRUSTED_SEGMENT, 51) /* the file's owner or mode is not one this open trusts */

enum {
#define WP_STATUS_ENUMERATOR(name, value) name = value,
  WP_STATUSES(WP_STATUS_ENUMERATOR)
#undef WP_STATUS_ENUMERATOR
};

typedef struct wp_table wp_table;
typedef struct {
  uint64_t size_bytes, location, checksum;
  uint32_t codec_id, representation_version;
} wp_meta;
/* token: this pin's record in the client's private lease table, so a second unpin of the
 * same lease (or of a copy of it) releases nothing. */
typedef struct {
  uint32_t slot;
  uint64_t generation;
  wp_meta meta;
  uint64_t token;
} wp_lease;
typedef struct {
  uint32_t slot;
  uint64_t generation;
} wp_reservation;
typedef struct {
  uint8_t device_uuid[16];
  uint64_t arena, arena_generation, write_seq;
} wp_device_record;

/* Options for wp_open_ex. */
typedef struct {
  uint32_t create_capacity; /* 0: open an existing table */
  uint32_t mode;            /* creation mode; 0 means 0600 */
  uint32_t flags;           /* WP_OPEN_* below, or 0 */
  uint32_t trusted_uid;     /* with WP_OPEN_TRUST_UID: a second owner uid that opens accept */
} wp_open_options;

/* The caller promises that no two threads ever call into this handle at once (a Node isolate's
 * handle, say): pins and unpins then skip the handle's lock (see "Threads" below). */
#define WP_OPEN_SINGLE_THREAD 1u
/* Trust. Whoever can write a table's file can rewrite what consumers pin, or truncate it and
 * crash every client (SIGBUS), so an open accepts only a regular file owned by the caller's
 * effective uid and writable by nobody else; anything else is WP_ERR_UNTRUSTED_SEGMENT. These
 * flags widen that, for deployments that share a table across users on purpose. At creation the
 * same flags are needed for a mode that sets the group or others write bit (else
 * WP_ERR_INVALID_ARGUMENT), so a table is never created in a mode its own opens refuse. */
#define WP_OPEN_TRUST_UID 2u          /* also accept files owned by options.trusted_uid */
#define WP_OPEN_TRUST_GROUP_WRITE 4u  /* accept (create) a group-writable file */
#define WP_OPEN_TRUST_WORLD_WRITE 8u  /* accept (create) a file writable by others: anyone on the host */

/* Threads. Any number of threads of the process may share one handle, consumer or producer:
 * - wp_try_pin and wp_unpin take the handle's consumer lock around the private pin counts and
 *   lease records (never around a miss), so a slot's pin bit is set exactly while the handle holds
 *   a lease on it, and a lease may be released by any thread. wp_try_pin_exact, and
 *   wp_try_pin_prefix, wp_unpin_many and wp_unpin_indexed for each lease in turn, do the same;
 *   wp_peek and wp_peek_many take no lock.
 * - The producer's calls (wp_reserve, wp_publish, wp_abandon, wp_try_evict,
 *   wp_record_device_write) each run whole under the handle's producer lock.
 * - Both locks are private to the process and held for a bounded few instructions (and a realloc
 *   when a handle's lease records grow); a waiter spins, then yields. Between processes the table
 *   stays lock-free.
 * - wp_reap_dead_clients, wp_summarize and the introspection calls may run on any thread at any
 *   time. wp_close must be the handle's last call: no other thread may be inside, or enter, a call
 *   on the handle once it starts.
 * - WP_OPEN_SINGLE_THREAD drops the consumer lock for a handle only one thread uses at a time;
 *   sharing such a handle between threads at once can leave a lease without its pin bit.
 * For pins that never wait on another thread, give each thread its own handle (one client entry
 * each, WP_MAX_CLIENTS in all). */

/* Arguments: every entry point checks its pointers. One returning a status answers
 * WP_ERR_INVALID_ARGUMENT for a NULL it needs (wp_reap_dead_clients: its negation); the others
 * answer as their comments say. Only documented NULLs (a NULL target, NULL options) mean
 * something. */

/* Opens (capacity 0) or creates (capacity > 0, fails WP_ERR_EXISTS if present) a table and
 * registers the caller as a client. producer != 0 claims the single producer role. Creation
 * allocates the whole segment up front and fails WP_ERR_NO_SPACE (nothing left behind) when
 * the filesystem under /dev/shm cannot hold it. */
int wp_open(const char *name, int producer, uint32_t create_capacity, wp_table **out);
/* options NULL: open an existing table. A shm_open refused by file permissions is
 * WP_ERR_PERMISSION, any other failed system call WP_ERR_SYSTEM; errno says which. The name is
 * opened without following a symbolic link, and its owner and mode are checked (see "Trust"
 * above); wp_segment_owner tells a refused caller what was found. */
int wp_open_ex(const char *name, int producer, const wp_open_options *options, wp_table **out);
/* The owner uid and st_mode (file type and permission bits) of table `name`'s file, not following a link,
 * for a message after WP_ERR_UNTRUSTED_SEGMENT. WP_OK, WP_ERR_NOT_FOUND, WP_ERR_INVALID_ARGUMENT
 * (a bad name, NULL outputs), or WP_ERR_SYSTEM (errno set). */
int wp_segment_owner(const char *name, uint32_t *uid, uint32_t *mode);
/* Releases every pin this client holds, gives up the producer role, unregisters, unmaps.
 * wp_close(NULL) does nothing. On a segment whose file was truncated since open (see
 * wp_check_segment) it only unmaps: touching the lost pages would kill the process. */
void wp_close(wp_table *t);
/* Removes the table's name; mapped handles keep working until closed. WP_ERR_NOT_FOUND when there
 * is no such table, WP_ERR_PERMISSION when the caller may not remove it (errno set). */
int wp_unlink(const char *name);

int wp_try_pin(wp_table *t, const uint8_t digest[32], const wp_device_record *target /* NULL: host */, wp_lease *out);
/* WP_OK: released. WP_STALE: nothing released, because the lease was released already (or is a
 * copy of one that was), or names no live record of this handle's. Tokens are per handle (a
 * handle's record generations start at a value of its own), so a lease of another handle is
 * stale here but for a 1-in-2^32 coincidence, which would release this handle's pin on that slot.
 * Release a lease through the handle that pinned it; to move a pin to another client, hand it off
 * (wp_try_pin_exact). */
int wp_unpin(wp_table *t, const wp_lease *lease);

/* Handoff. Another client (the orchestrator, say) holds a lease on (slot, generation) of
 * `digest` and passes those three to this one (an engine), which pins the very same artifact for
 * itself: WP_OK (out filled, a lease of this handle, released with wp_unpin) only while `slot`
 * still holds `generation` of `digest` in READY; the same Dekker handshake and consumer lock as
 * wp_try_pin, and `target` as there. Misses: WP_MISS_STALE_HANDOFF when the slot holds another
 * generation or another digest (evicted and freed, recycled for another artifact, or a made-up
 * triple: one naming something this table never held looks the same as a stale one),
 * WP_MISS_PREPARING,
 * WP_MISS_EVICTING (a claim the evictor rolls back while the handing client still holds its pin:
 * retried a bounded few times inside, then reported), WP_MISS_CONTENDED, and the device misses.
 * WP_ERR_INVALID_ARGUMENT for NULL t, digest or out, a slot >= capacity or a generation beyond 56
 * bits. The rule that makes a handoff safe: the handing client keeps its lease until this one has
 * WP_OK, then releases its own (docs/lease-table.md, "Handing a lease to another process"). */
int wp_try_pin_exact(wp_table *t, uint32_t slot, uint64_t generation, const uint8_t digest[32],
                     const wp_device_record *target /* NULL: host */, wp_lease *out);

/* Prefix lookup, one call for a chunked request: pins digests[0], digests[1], ... in order (each
 * as wp_try_pin would, into leases[i]) and stops at the first that misses. Returns the length of
 * the pinned leading run (0..n; leases[0..run) are this handle's leases, the rest untouched), or
 * -WP_ERR_INVALID_ARGUMENT for a NULL t, a NULL digests or leases with n > 0, or n > INT32_MAX.
 * `digests` holds n digests of 32 bytes back to back. Why the run stopped is not returned: call
 * wp_peek on digests[run] when it matters. Release the run with wp_unpin_many (or wp_unpin each). */
int wp_try_pin_prefix(wp_table *t, const uint8_t *digests, uint32_t n, const wp_device_record *target /* NULL: host */,
                      wp_lease *leases);
/* Releases leases[0..n) as wp_unpin does each; a stale one releases nothing. Returns how many
 * were released (0..n), or -WP_ERR_INVALID_ARGUMENT for a NULL t, NULL leases with n > 0, or
 * n > INT32_MAX. */
int wp_unpin_many(wp_table *t, const wp_lease *leases, uint32_t n);
/* Releases leases[indexes[0]], leases[indexes[1]], ... (m indexes into an array of n leases, in
 * any order) as wp_unpin does each: part of a prefix run given back by position, without copying
 * its leases out. A repeated index, or a lease released before, releases nothing. Returns how many
 * were released (0..m), or -WP_ERR_INVALID_ARGUMENT, releasing nothing, for a NULL t, NULL leases
 * or indexes with m > 0, n or m > INT32_MAX, or any index >= n. */
int wp_unpin_indexed(wp_table *t, const wp_lease *leases, uint32_t n, const uint32_t *indexes, uint32_t m);
/* What wp_try_pin(t, digest, NULL, ...) would answer now, without pinning: WP_OK (READY),
 * WP_MISS_PREPARING, WP_MISS_EVICTING or WP_MISS_ABSENT (WP_ERR_INVALID_ARGUMENT for NULL t or
 * digest). A hint only: the artifact may be evicted the moment after. Host readiness only (a
 * device record is read safely only under a pin). For engines whose lookup must not pin. */
int wp_peek(const wp_table *t, const uint8_t digest[32]);
/* wp_peek for n digests back to back (32 bytes each) in one call: an engine's batched lookup
 * (SGLang's batch_exists, LMCache's batched_contains). Returns how many leading digests are READY
 * (0..n), or -WP_ERR_INVALID_ARGUMENT for a NULL t, NULL digests with n > 0, or n > INT32_MAX.
 * With `statuses` (n bytes), every digest is peeked and statuses[i] is what wp_peek(digests[i])
 * answers (WP_OK or a WP_MISS_*); with NULL, it stops at the first digest that is not READY. Each
 * answer is a hint, as wp_peek's, and the batch is not one snapshot. No lock, no pin. */
int wp_peek_many(const wp_table *t, const uint8_t *digests, uint32_t n, uint8_t *statuses);

int wp_reserve(wp_table *t, const uint8_t digest[32], wp_reservation *out);
int wp_publish(wp_table *t, const wp_reservation *r, const wp_meta *meta);
int wp_abandon(wp_table *t, const wp_reservation *r);
/* WP_OK (evicted), WP_PINNED (pinned, or a pin racing in: retry later), WP_ABSENT. */
int wp_try_evict(wp_table *t, const uint8_t digest[32]);
int wp_record_device_write(wp_table *t, const uint8_t digest[32], const wp_device_record *rec);
/* >= 0: clients reaped; < 0: -status (-WP_ERR_BAD_SEGMENT on a truncated file). */
int wp_reap_dead_clients(wp_table *t);

const char *wp_status_name(int status);
uint32_t wp_abi_version(void);

/* CUDA presence (native/src/cuda.c): dlopens libcuda.so.1 on call, never at load or on a
 * pin. Fills up to `max` devices and returns how many, or -1 with `reason` set when the
 * driver is absent or unusable. */
typedef struct {
  uint32_t ordinal;
  uint8_t uuid[16];
} wp_cuda_device;
int wp_cuda_devices(wp_cuda_device *out, int max, char *reason, size_t reason_size);

/* Introspection for tools and tests: for a NULL table these answer 0 (wp_client_index: -1,
 * wp_segment: NULL). */
uint32_t wp_capacity(const wp_table *t);
int wp_client_index(const wp_table *t);
int wp_is_producer(const wp_table *t);
/* The slot's state word and pin mask (acquire loads); 0 for an out-of-range slot. */
uint64_t wp_slot_state_gen(const wp_table *t, uint32_t slot);
uint64_t wp_slot_pin_mask(const wp_table *t, uint32_t slot);
/* Pins this client holds on a slot: 0 while its bit in the slot's mask is clear, else 1 plus its
 * private count of the further ones. A snapshot for tests and inspection (two relaxed loads, no
 * lock): while other threads of the handle pin or unpin the slot, it may mix two moments, or
 * count a pin that then backs out. */
uint32_t wp_client_pins(const wp_table *t, uint32_t slot);
/* The mapped segment, for read-only inspection. Check wp_check_segment first: bytes past the
 * file's current size must never be read. */
const void *wp_segment(const wp_table *t, size_t *size);
/* WP_OK while the segment's file still holds every byte this handle mapped. WP_ERR_BAD_SEGMENT
 * once it has been truncated (by a process with write access to it): any access to the lost
 * pages raises SIGBUS, so tools must stop here. file_size (may be NULL) receives the file's
 * size. One fstat: never on the wake path. WP_ERR_SYSTEM when fstat fails (errno set). */
int wp_check_segment(const wp_table *t, uint64_t *file_size);
/* Counts for monitoring, read in place (no copy of the segment): slots by state (indexed by
 * WP_SLOT_*), slots whose pin mask is non-zero, client entries by state (indexed by
 * WP_CLIENT_*), the reaped-clients counter, and the producer's client index (-1: none). Each
 * word is read atomically but the whole is not one snapshot. WP_OK, WP_ERR_INVALID_ARGUMENT for
 * a NULL argument, or WP_ERR_BAD_SEGMENT when the file was truncated (wp_check_segment), the
 * header's capacity is no longer the one fixed at open or its producer word names no client
 * index (0-63). */
typedef struct {
  uint32_t slots[4];
  uint32_t pinned_slots;
  uint32_t clients[4];
  int32_t producer_client;
  uint64_t reaped_clients;
} wp_summary;
int wp_summarize(const wp_table *t, wp_summary *out);
/* Pins `iterations` times then unpins, in C with no JS crossing (the benchmark's floor).
 * Returns the number of successful pins (0 for a NULL argument). */
uint64_t wp_pin_loop(wp_table *t, const uint8_t digest[32], uint64_t iterations);

#ifdef __cplusplus
}
#endif

#endif /* WAITPREP_H */
