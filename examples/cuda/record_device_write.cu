// The backend side of device readiness, in CUDA C++: the storage worker copies a published
// artifact host -> device into a request-owned arena, and only once that copy has completed
// records it in the lease table with wp_record_device_write. Consumers that wake with
// readiness 'device' and the target (device UUID, arena, arena generation) then hit.
//
// Build and run: see README.md in this folder. Usage:
//   record_device_write <table name> [<artifact key digest, 64 hex chars>]
// It exits 0 only when every outcome is the one docs/device-readiness.md promises: both records
// made, the device bytes equal to the artifact's, the reused arena's old record a miss and the
// new one a hit (scripts/gpu-check.sh runs it on a GPU).
//
// What a record promises: the device write of this artifact (this key's published bytes) into
// this arena, at this arena generation, on this device, completed before the record was made.
// What it does not promise:
//   - that the transfer was free: the copy below is paid in full by the backend, on its stream;
//   - that model prefill is hidden: the engine still runs whatever it runs on those bytes;
//   - that the bytes are still there later: the arena can be reused. Whoever reuses an arena
//     (or lets anything overwrite it) first bumps its arena generation; a consumer asking with
//     the new generation then misses 'arena-generation-mismatch' on every older record, until
//     a new write is completed and recorded.
// The lease a hit returns pins the table slot (the host artifact), not the device arena: keeping
// the arena's bytes in place while the consumer uses them is the arena owner's job.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "waitprep.h"

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_));               \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// The table's single producer. wp_table is one client's handle and the device record is a
// seqlock with exactly one writer, so every producer call on it (reserve, publish, evict,
// record) must be serialized: the mutex covers the storage worker's own calls and the
// CUDA host-function callbacks, which run on a CUDA runtime thread.
struct Producer {
  wp_table *table = nullptr;
  std::mutex mu;
};

// A request-owned region of device memory.
struct DeviceArena {
  int ordinal = 0;          // CUDA device ordinal
  uint8_t uuid[16] = {};    // the device's UUID: the record's device_uuid ("GPU-..." as nvidia-smi prints it)
  uint64_t id = 0;          // the arena's id: the record's arena
  uint64_t generation = 0;  // bumped on every reuse: the record's arena_generation
  void *base = nullptr;
  size_t bytes = 0;
};

// Before the arena is handed to another request, or anything else may overwrite it: from now
// on no record naming the old generation can match a consumer that asks with the new one.
static void reuse_arena(DeviceArena &arena) { arena.generation++; }

// One device write waiting to be recorded. It must outlive the stream work that uses it.
struct PendingRecord {
  Producer *producer = nullptr;
  uint8_t digest[32] = {};
  wp_device_record record = {};
  int status = -1;  // set by the callback: WP_OK, or WP_ABSENT if the key was evicted meanwhile
};

static PendingRecord make_record(Producer &producer, const uint8_t digest[32], const DeviceArena &arena, uint64_t write_seq) {
  PendingRecord p;
  p.producer = &producer;
  std::memcpy(p.digest, digest, 32);
  std::memcpy(p.record.device_uuid, arena.uuid, 16);
  p.record.arena = arena.id;
  p.record.arena_generation = arena.generation;
  p.record.write_seq = write_seq;
  return p;
}

// Host function: CUDA runs it after every operation enqueued on the stream before it has
// completed, so here the copy is done. It must not call the CUDA API; wp_record_device_write
// makes no CUDA call and does not block (a few atomic stores), and the mutex is only ever held
// for such short producer calls.
static void CUDART_CB record_after_copy(void *arg) {
  PendingRecord *p = static_cast<PendingRecord *>(arg);
  std::lock_guard<std::mutex> lock(p->producer->mu);
  p->status = wp_record_device_write(p->producer->table, p->digest, &p->record);
}

// Way 1: enqueue the copy, then the record, on the same stream. Nothing waits on the host.
// `host_src` should be pinned (cudaMallocHost / cudaHostRegister) for the copy to be async,
// and must stay valid (the artifact not destroyed) until the stream has passed the copy.
static void copy_then_record_hostfn(const void *host_src, size_t bytes, DeviceArena &arena, PendingRecord *pending,
                                    cudaStream_t stream) {
  CUDA_OK(cudaMemcpyAsync(arena.base, host_src, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaLaunchHostFunc(stream, record_after_copy, pending));
}

// Way 2: record an event after the copy; the backend's own worker thread (never the wake path,
// never the coordinator's event loop) waits for it and then records. Returns the status.
static int copy_then_record_event(const void *host_src, size_t bytes, DeviceArena &arena, PendingRecord *pending,
                                  cudaStream_t stream) {
  cudaEvent_t copied;
  CUDA_OK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  CUDA_OK(cudaMemcpyAsync(arena.base, host_src, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaEventRecord(copied, stream));
  CUDA_OK(cudaEventSynchronize(copied));  // in the backend worker: blocks this thread only
  CUDA_OK(cudaEventDestroy(copied));
  std::lock_guard<std::mutex> lock(pending->producer->mu);
  return pending->status = wp_record_device_write(pending->producer->table, pending->digest, &pending->record);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <table name> [<artifact key digest, 64 hex chars>]\n", argv[0]);
    return 2;
  }
  // The key's SHA-256 digest over its canonical encoding (the runtime computes it from the key
  // fields, exactly as artifactKey() does); a fixed demo digest when none is given.
  uint8_t digest[32];
  for (int i = 0; i < 32; i++) digest[i] = static_cast<uint8_t>(0xa0 + i);
  if (argc > 2) {
    if (std::strlen(argv[2]) != 64) return 2;
    for (int i = 0; i < 32; i++) std::sscanf(argv[2] + 2 * i, "%2hhx", &digest[i]);
  }

  // A prepared, validated host artifact (here: 1 MiB of pattern) and a request-owned arena.
  const size_t bytes = 1 << 20;
  uint8_t *host = nullptr;
  CUDA_OK(cudaMallocHost(&host, bytes));
  for (size_t i = 0; i < bytes; i++) host[i] = static_cast<uint8_t>(i * 131u);
  DeviceArena arena;
  arena.ordinal = 0;
  arena.id = 3;
  arena.generation = 7;
  arena.bytes = bytes;
  CUDA_OK(cudaSetDevice(arena.ordinal));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, arena.ordinal));
  std::memcpy(arena.uuid, prop.uuid.bytes, 16);
  CUDA_OK(cudaMalloc(&arena.base, arena.bytes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  Producer producer;
  int rc = wp_open(argv[1], 1, 0, &producer.table);
  if (rc == WP_ERR_NOT_FOUND) rc = wp_open(argv[1], 1, 64, &producer.table);
  if (rc != WP_OK) {
    std::fprintf(stderr, "wp_open: %s\n", wp_status_name(rc));
    return 1;
  }
  // Published first: a record is accepted only for a READY key (else WP_ABSENT).
  {
    std::lock_guard<std::mutex> lock(producer.mu);
    wp_reservation r;
    wp_meta meta = {bytes, reinterpret_cast<uintptr_t>(host), 0x1234, 1, 1};
    rc = wp_reserve(producer.table, digest, &r);
    if (rc == WP_OK) rc = wp_publish(producer.table, &r, &meta);
    if (rc != WP_OK && rc != WP_EXISTS) std::fprintf(stderr, "reserve/publish: %s\n", wp_status_name(rc));
  }

  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", arena.uuid[0],
                arena.uuid[1], arena.uuid[2], arena.uuid[3], arena.uuid[4], arena.uuid[5], arena.uuid[6], arena.uuid[7],
                arena.uuid[8], arena.uuid[9], arena.uuid[10], arena.uuid[11], arena.uuid[12], arena.uuid[13], arena.uuid[14],
                arena.uuid[15]);

  // Way 1: host function.
  PendingRecord first = make_record(producer, digest, arena, 1);
  copy_then_record_hostfn(host, bytes, arena, &first, stream);
  CUDA_OK(cudaStreamSynchronize(stream));  // only so this demo can print; a worker would not wait here
  std::printf("host function: %s (device %s arena %llu generation %llu)\n", wp_status_name(first.status), uuid,
              (unsigned long long)arena.id, (unsigned long long)arena.generation);
  int failed = first.status != WP_OK;

  // A consumer that hits reads the arena: its bytes are the artifact's.
  wp_lease lease_check;
  rc = wp_try_pin(producer.table, digest, &first.record, &lease_check);
  uint8_t *back = static_cast<uint8_t *>(std::malloc(bytes));
  if (back == nullptr) return 1;
  CUDA_OK(cudaMemcpy(back, arena.base, bytes, cudaMemcpyDeviceToHost));
  int same = std::memcmp(back, host, bytes) == 0;
  std::printf("pin with generation %llu: %s; device bytes %s the artifact's\n", (unsigned long long)arena.generation,
              wp_status_name(rc), same ? "equal" : "differ from");
  if (rc == WP_OK) wp_unpin(producer.table, &lease_check);
  failed |= rc != WP_OK || !same;
  std::free(back);

  // The arena is reused: bump its generation first. The record above no longer matches a
  // consumer that asks with the new generation.
  reuse_arena(arena);
  wp_device_record want = first.record;
  want.arena_generation = arena.generation;
  wp_lease lease;
  rc = wp_try_pin(producer.table, digest, &want, &lease);
  std::printf("pin with generation %llu before a new write: %s\n", (unsigned long long)arena.generation, wp_status_name(rc));
  if (rc == WP_OK) wp_unpin(producer.table, &lease);
  failed |= rc != WP_MISS_ARENA_GENERATION_MISMATCH;

  // Way 2: event synced in the backend worker, then the record for the new generation.
  PendingRecord second = make_record(producer, digest, arena, 2);
  rc = copy_then_record_event(host, bytes, arena, &second, stream);
  std::printf("event: %s\n", wp_status_name(rc));
  failed |= rc != WP_OK;
  rc = wp_try_pin(producer.table, digest, &want, &lease);
  std::printf("pin with generation %llu after it: %s\n", (unsigned long long)arena.generation, wp_status_name(rc));
  if (rc == WP_OK) wp_unpin(producer.table, &lease);
  failed |= rc != WP_OK;

  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(arena.base));
  CUDA_OK(cudaFreeHost(host));
  wp_close(producer.table);
  std::printf("%s\n", failed ? "FAILED: an outcome differs from the documented one" : "ok");
  return failed;
}
