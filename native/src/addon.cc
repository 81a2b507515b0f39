// The Node-API binding: flat functions over opaque table handles. Argument
// checking lives in TypeScript (lib/lease-table/); this file trusts its
// (checked) arguments and turns nothing into exceptions: every outcome is a
// status code, and results go into the caller's scratch BigUint64Array.
#include <napi.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "waitprep.h"

namespace {

// The exchange buffer: a BigUint64Array that the caller hands to open() and
// keeps. Results come back in it, and the wake path's arguments go in through
// it, so a pin and an unpin cross into C with no arguments to convert.
//   words 0-7   out: a lease (slot, generation, token, 5 metadata words) or a reservation
//   words 8-11  in: the digest to pin (32 bytes)
//   words 12-16 in: the device target to pin against (a wp_device_record, 40 bytes)
//   word 17     in: the slot of the lease to unpin
//   word 18     in: the token of the lease to unpin
// lib/lease-table/layout.ts (EXCHANGE) mirrors these; native.ts compares them at load.
constexpr uint32_t kDigestWord = 8;
constexpr uint32_t kDeviceWord = 12;
constexpr uint32_t kUnpinSlotWord = 17;
constexpr uint32_t kUnpinTokenWord = 18;
constexpr uint32_t kExchangeWords = 19;
static_assert(kDeviceWord * 8 + sizeof(wp_device_record) <= kUnpinSlotWord * 8, "device record overlaps the unpin words");

// One open table. Owned jointly by the handle's External and its three bound wake-path
// functions (four references): each one's finalizer drops one, and the last deletes the
// Handle, so a bound function kept after its External was collected still finds it (closed).
// Finalizers of one environment run on its thread: a plain count suffices.
struct Handle {
  wp_table *table = nullptr;
  Napi::Reference<Napi::BigUint64Array> out_ref;
  uint64_t *out = nullptr;
  int refs = 0;
};

void Release(Handle *h) {
  if (--h->refs == 0) delete h;
}

// Handles opened in one environment (the main thread or a worker_thread).
// When the environment goes away, the cleanup hook closes what is still open,
// so a terminated worker releases its pins and its client entry.
struct Instance {
  std::unordered_set<Handle *> open;
};

void CloseHandle(Instance *instance, Handle *h) {
  if (h->table == nullptr) return;
  wp_close(h->table);
  h->table = nullptr;
  h->out = nullptr;
  if (instance) instance->open.erase(h);
}

Handle *HandleOf(const Napi::Value &v) { return v.As<Napi::External<Handle>>().Data(); }

// Every call on a closed handle answers this status instead of touching freed memory.
#define OPEN_OR_RETURN(h)                                                          \
  if ((h)->table == nullptr) return Napi::Number::New(info.Env(), WP_ERR_INVALID_ARGUMENT)

const uint8_t *BytesOf(const Napi::Value &v) {
  auto a = v.As<Napi::Uint8Array>();
  return a.Data();
}

// The three calls on the wake path are raw Node-API C callbacks bound to one
// handle (the function's data pointer), taking no arguments: node-addon-api's
// wrapper (CallbackInfo, typed wrappers) and converting arguments each cost
// more than the pin itself. Their inputs are in the exchange buffer.
// Each holds a reference to its Handle (see Handle); after close() they
// answer WP_ERR_INVALID_ARGUMENT.

Handle *BoundHandle(napi_env env, napi_callback_info cbinfo) {
  void *data = nullptr;
  napi_get_cb_info(env, cbinfo, nullptr, nullptr, nullptr, &data);
  Handle *h = static_cast<Handle *>(data);
  return h->table != nullptr ? h : nullptr;
}

// A lease into exchange words 0-7 (slot, generation, token, the five metadata words).
inline void WriteLease(uint64_t *o, const wp_lease &lease) {
  o[0] = lease.slot;
  o[1] = lease.generation;
  o[2] = lease.token;
  o[3] = lease.meta.size_bytes;
  o[4] = lease.meta.location;
  o[5] = lease.meta.checksum;
  o[6] = lease.meta.codec_id;
  o[7] = lease.meta.representation_version;
}

napi_value PinResult(napi_env env, Handle *h, const wp_device_record *target) {
  int rc = WP_ERR_INVALID_ARGUMENT;
  if (h != nullptr) {
    wp_lease lease;
    rc = wp_try_pin(h->table, reinterpret_cast<const uint8_t *>(h->out + kDigestWord), target, &lease);
    if (rc == WP_OK) WriteLease(h->out, lease);
  }
  napi_value result;
  napi_create_int32(env, rc, &result);
  return result;
}

// pinHost() -> status: tryPin of the digest in exchange words 8-11, host readiness.
napi_value PinHostRaw(napi_env env, napi_callback_info cbinfo) { return PinResult(env, BoundHandle(env, cbinfo), nullptr); }

// pinDevice() -> status: the same against the device target in exchange words 12-16.
napi_value PinDeviceRaw(napi_env env, napi_callback_info cbinfo) {
  Handle *h = BoundHandle(env, cbinfo);
  wp_device_record target;
  if (h != nullptr) std::memcpy(&target, h->out + kDeviceWord, sizeof target);
  return PinResult(env, h, &target);
}

// unpin() -> undefined: releases the lease whose slot and token are in exchange words 17-18.
napi_value UnpinRaw(napi_env env, napi_callback_info cbinfo) {
  Handle *h = BoundHandle(env, cbinfo);
  if (h != nullptr) {
    wp_lease lease{};
    lease.slot = static_cast<uint32_t>(h->out[kUnpinSlotWord]);
    lease.token = h->out[kUnpinTokenWord];
    // A stale lease (released before, or not this handle's) releases nothing, which is all a
    // close needs: lease.close is idempotent, so the status is not carried back.
    (void)wp_unpin(h->table, &lease);
  }
  return nullptr;
}

napi_value Bind(napi_env env, const char *name, napi_callback cb, Handle *h) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, h, &fn);
  napi_add_finalizer(
      env, fn, h, [](napi_env, void *data, void *) { Release(static_cast<Handle *>(data)); }, nullptr, nullptr);
  return fn;
}

Napi::Value Open(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>().Utf8Value();
  bool producer = info[1].As<Napi::Boolean>().Value();
  // info[5]: the WP_OPEN_TRUST_* flags, info[6]: the trusted uid. WP_OPEN_SINGLE_THREAD: a JS
  // handle lives in one isolate, so only that isolate's thread ever calls into it (its cleanup
  // hook included), and pins skip the handle's lock.
  auto optional_u32 = [&](size_t i) { return info[i].IsNumber() ? info[i].As<Napi::Number>().Uint32Value() : 0u; };
  wp_open_options options{info[2].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value(),
                          WP_OPEN_SINGLE_THREAD | optional_u32(5), optional_u32(6)};
  // The exchange buffer: a BigUint64Array of at least kExchangeWords words, which the caller
  // keeps private and never detaches (the Handle keeps a raw pointer to its memory).
  Napi::Value exchange = info[4];
  bool usable = exchange.IsTypedArray() && exchange.As<Napi::TypedArray>().TypedArrayType() == napi_biguint64_array &&
                exchange.As<Napi::TypedArray>().ElementLength() >= kExchangeWords;
  wp_table *table = nullptr;
  int rc = usable ? wp_open_ex(name.c_str(), producer ? 1 : 0, &options, &table) : WP_ERR_INVALID_ARGUMENT;
  int err = rc == WP_OK ? 0 : errno; // before any Node-API call can change it
  Napi::Array result = Napi::Array::New(env, 5);
  result.Set(0u, Napi::Number::New(env, rc));
  if (rc != WP_OK) {
    // A failed open: [status, null, errno] (errno means something for WP_ERR_SYSTEM and
    // WP_ERR_PERMISSION only).
    result.Set(1u, env.Null());
    result.Set(2u, Napi::Number::New(env, err));
    return result;
  }
  auto *instance = env.GetInstanceData<Instance>();
  auto *h = new Handle();
  h->table = table;
  auto out = exchange.As<Napi::BigUint64Array>();
  h->out_ref = Napi::Persistent(out);
  h->out = out.Data();
  h->refs = 4; // the External and the three bound functions
  instance->open.insert(h);
  auto external = Napi::External<Handle>::New(env, h, [](Napi::Env env, Handle *h) {
    CloseHandle(env.GetInstanceData<Instance>(), h);
    Release(h);
  });
  result.Set(1u, external);
  result.Set(2u, Bind(env, "pinHost", PinHostRaw, h));
  result.Set(3u, Bind(env, "pinDevice", PinDeviceRaw, h));
  result.Set(4u, Bind(env, "unpin", UnpinRaw, h));
  return result;
}

Napi::Value Close(const Napi::CallbackInfo &info) {
  CloseHandle(info.Env().GetInstanceData<Instance>(), HandleOf(info[0]));
  return info.Env().Undefined();
}

Napi::Value Reserve(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  OPEN_OR_RETURN(h);
  wp_reservation r;
  int rc = wp_reserve(h->table, BytesOf(info[1]), &r);
  if (rc == WP_OK) {
    h->out[0] = r.slot;
    h->out[1] = r.generation;
  }
  return Napi::Number::New(info.Env(), rc);
}

wp_reservation ReservationOf(const Napi::CallbackInfo &info) {
  bool lossless;
  return wp_reservation{info[1].As<Napi::Number>().Uint32Value(), info[2].As<Napi::BigInt>().Uint64Value(&lossless)};
}

Napi::Value Publish(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  OPEN_OR_RETURN(h);
  wp_reservation r = ReservationOf(info);
  const uint64_t *m = info[3].As<Napi::BigUint64Array>().Data();
  wp_meta meta{m[0], m[1], m[2], static_cast<uint32_t>(m[3]), static_cast<uint32_t>(m[4])};
  return Napi::Number::New(info.Env(), wp_publish(h->table, &r, &meta));
}

Napi::Value Abandon(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  wp_reservation r = ReservationOf(info);
  return Napi::Number::New(info.Env(), wp_abandon(HandleOf(info[0])->table, &r));
}

// Optional device target argument: null (host) or a 40-byte wp_device_record.
const wp_device_record *TargetOf(const Napi::Value &v, wp_device_record *storage) {
  if (!v.IsTypedArray()) return nullptr;
  std::memcpy(storage, BytesOf(v), sizeof *storage);
  return storage;
}

// tryPinExact(h, slot, generation, digest, device | null) -> status; a lease in exchange words 0-7.
Napi::Value TryPinExact(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  OPEN_OR_RETURN(h);
  bool lossless;
  uint64_t generation = info[2].As<Napi::BigInt>().Uint64Value(&lossless);
  wp_device_record storage;
  wp_lease lease;
  int rc = wp_try_pin_exact(h->table, info[1].As<Napi::Number>().Uint32Value(), generation, BytesOf(info[3]),
                            TargetOf(info[4], &storage), &lease);
  if (rc == WP_OK) WriteLease(h->out, lease);
  return Napi::Number::New(info.Env(), rc);
}

// Leases converted per batch on the stack, so a prefix of any length needs no allocation and
// still crosses once.
constexpr uint32_t kBatch = 64;

// tryPinPrefix(h, digests, n, device | null, leases) -> the pinned run's length, or -status:
// digests holds n 32-byte digests, and lease i comes back in words 8i..8i+7 of the
// BigUint64Array `leases` (the layout of exchange words 0-7).
Napi::Value TryPinPrefix(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  if (h->table == nullptr) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT); // a count call: minus the status
  auto digests = info[1].As<Napi::Uint8Array>();
  uint32_t n = info[2].As<Napi::Number>().Uint32Value();
  auto out = info[4].As<Napi::BigUint64Array>();
  if (digests.ByteLength() / 32 < n || out.ElementLength() / 8 < n) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT);
  wp_device_record storage;
  const wp_device_record *target = TargetOf(info[3], &storage);
  wp_lease batch[kBatch];
  uint32_t run = 0;
  while (run < n) {
    uint32_t want = n - run < kBatch ? n - run : kBatch;
    int got = wp_try_pin_prefix(h->table, digests.Data() + static_cast<size_t>(run) * 32, want, target, batch);
    if (got < 0) return Napi::Number::New(info.Env(), got);
    for (int i = 0; i < got; i++) WriteLease(out.Data() + static_cast<size_t>(run + i) * 8, batch[i]);
    run += static_cast<uint32_t>(got);
    if (static_cast<uint32_t>(got) < want) break;
  }
  return Napi::Number::New(info.Env(), run);
}

// unpinMany(h, tokens, n) -> how many were released: tokens holds (slot, token index, token
// generation) as three u32 per lease.
Napi::Value UnpinMany(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  if (h->table == nullptr) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT); // a count call: minus the status
  auto tokens = info[1].As<Napi::Uint32Array>();
  uint32_t n = info[2].As<Napi::Number>().Uint32Value();
  if (tokens.ElementLength() / 3 < n) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT);
  const uint32_t *w = tokens.Data();
  wp_lease batch[kBatch];
  int released = 0;
  for (uint32_t done = 0; done < n;) {
    uint32_t count = n - done < kBatch ? n - done : kBatch;
    for (uint32_t i = 0; i < count; i++, w += 3) {
      batch[i] = wp_lease{};
      batch[i].slot = w[0];
      batch[i].token = static_cast<uint64_t>(w[2]) << 32 | w[1];
    }
    released += wp_unpin_many(h->table, batch, count);
    done += count;
  }
  return Napi::Number::New(info.Env(), released);
}

// peek(h, digest) -> status: WP_OK when READY, else the miss a pin would report (no pin taken).
Napi::Value Peek(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  return Napi::Number::New(info.Env(), wp_peek(HandleOf(info[0])->table, BytesOf(info[1])));
}

// peekMany(h, digests, n, statuses | null) -> how many leading digests are READY, or -status:
// digests holds n 32-byte digests; `statuses` (n bytes) receives wp_peek's answer for each, and
// without it the call stops at the first digest that is not READY.
Napi::Value PeekMany(const Napi::CallbackInfo &info) {
  Handle *h = HandleOf(info[0]);
  if (h->table == nullptr) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT); // a count call: minus the status
  auto digests = info[1].As<Napi::Uint8Array>();
  uint32_t n = info[2].As<Napi::Number>().Uint32Value();
  uint8_t *statuses = nullptr;
  if (!info[3].IsNull()) {
    auto out = info[3].As<Napi::Uint8Array>();
    if (out.ByteLength() < n) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT);
    statuses = out.Data();
  }
  if (digests.ByteLength() / 32 < n) return Napi::Number::New(info.Env(), -WP_ERR_INVALID_ARGUMENT);
  return Napi::Number::New(info.Env(), wp_peek_many(h->table, digests.Data(), n, statuses));
}

Napi::Value TryEvict(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  return Napi::Number::New(info.Env(), wp_try_evict(HandleOf(info[0])->table, BytesOf(info[1])));
}

Napi::Value RecordDeviceWrite(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  wp_device_record rec;
  std::memcpy(&rec, BytesOf(info[2]), sizeof rec);
  return Napi::Number::New(info.Env(), wp_record_device_write(HandleOf(info[0])->table, BytesOf(info[1]), &rec));
}

Napi::Value Reap(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  return Napi::Number::New(info.Env(), wp_reap_dead_clients(HandleOf(info[0])->table));
}

Napi::Value ClientPins(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  return Napi::Number::New(info.Env(), wp_client_pins(HandleOf(info[0])->table, info[1].As<Napi::Number>().Uint32Value()));
}

Napi::Value Describe(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  Napi::Env env = info.Env();
  wp_table *t = HandleOf(info[0])->table;
  Napi::Object o = Napi::Object::New(env);
  o.Set("capacity", Napi::Number::New(env, wp_capacity(t)));
  o.Set("clientIndex", Napi::Number::New(env, wp_client_index(t)));
  o.Set("producer", Napi::Boolean::New(env, wp_is_producer(t) != 0));
  return o;
}

// A copy of the whole segment, for inspection (never on a hot path); a status number when the
// segment's file was truncated since open (then not a byte of it is read).
Napi::Value Segment(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  int rc = wp_check_segment(HandleOf(info[0])->table, nullptr);
  if (rc != WP_OK) return Napi::Number::New(info.Env(), rc);
  size_t size = 0;
  const void *base = wp_segment(HandleOf(info[0])->table, &size);
  return Napi::Buffer<uint8_t>::Copy(info.Env(), static_cast<const uint8_t *>(base), size);
}

// The size of the segment's file now, in bytes (-1 when fstat fails), for the message about a
// truncated one.
Napi::Value FileSize(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  uint64_t size = 0;
  int rc = wp_check_segment(HandleOf(info[0])->table, &size);
  return Napi::Number::New(info.Env(), rc == WP_ERR_SYSTEM ? -1.0 : static_cast<double>(size));
}

// Monitoring counts read in place (wp_summarize), far cheaper than Segment's copy.
Napi::Value Summary(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  Napi::Env env = info.Env();
  wp_summary sum;
  int rc = wp_summarize(HandleOf(info[0])->table, &sum);
  if (rc != WP_OK) return Napi::Number::New(env, rc);
  Napi::Array slots = Napi::Array::New(env, 4);
  Napi::Array clients = Napi::Array::New(env, 4);
  for (uint32_t i = 0; i < 4; i++) {
    slots.Set(i, Napi::Number::New(env, sum.slots[i]));
    clients.Set(i, Napi::Number::New(env, sum.clients[i]));
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("slots", slots);
  o.Set("pinnedSlots", Napi::Number::New(env, sum.pinned_slots));
  o.Set("clients", clients);
  o.Set("producer", Napi::Number::New(env, sum.producer_client));
  o.Set("reapedClients", Napi::BigInt::New(env, sum.reaped_clients));
  return o;
}

Napi::Value PinLoop(const Napi::CallbackInfo &info) {
  OPEN_OR_RETURN(HandleOf(info[0]));
  bool lossless;
  uint64_t n = info[2].As<Napi::BigInt>().Uint64Value(&lossless);
  return Napi::BigInt::New(info.Env(), wp_pin_loop(HandleOf(info[0])->table, BytesOf(info[1]), n));
}

// Describes CUDA devices; dlopens the driver on this call only (never at load, never on a pin).
Napi::Value CudaDevices(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  wp_cuda_device devices[64];
  char reason[512];
  int n = wp_cuda_devices(devices, 64, reason, sizeof reason);
  Napi::Object result = Napi::Object::New(env);
  if (n < 0) {
    result.Set("devices", env.Null());
    result.Set("reason", Napi::String::New(env, reason));
    return result;
  }
  Napi::Array list = Napi::Array::New(env, n);
  for (int i = 0; i < n; i++) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("ordinal", Napi::Number::New(env, devices[i].ordinal));
    d.Set("uuid", Napi::Buffer<uint8_t>::Copy(env, devices[i].uuid, 16));
    list.Set(static_cast<uint32_t>(i), d);
  }
  result.Set("devices", list);
  return result;
}

// unlink(name) -> [status, errno]: errno for WP_ERR_SYSTEM and WP_ERR_PERMISSION.
Napi::Value Unlink(const Napi::CallbackInfo &info) {
  std::string name = info[0].As<Napi::String>().Utf8Value();
  int rc = wp_unlink(name.c_str());
  int err = rc == WP_OK ? 0 : errno;
  Napi::Array result = Napi::Array::New(info.Env(), 2);
  result.Set(0u, Napi::Number::New(info.Env(), rc));
  result.Set(1u, Napi::Number::New(info.Env(), err));
  return result;
}

// [status, uid, mode] of a table's file (wp_segment_owner), for the message after a refused open.
Napi::Value SegmentOwner(const Napi::CallbackInfo &info) {
  std::string name = info[0].As<Napi::String>().Utf8Value();
  uint32_t uid = 0, mode = 0;
  int rc = wp_segment_owner(name.c_str(), &uid, &mode);
  Napi::Array result = Napi::Array::New(info.Env(), 3);
  result.Set(0u, Napi::Number::New(info.Env(), rc));
  result.Set(1u, Napi::Number::New(info.Env(), uid));
  result.Set(2u, Napi::Number::New(info.Env(), mode));
  return result;
}

Napi::Object Layout(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  auto set = [&](const char *name, double v) { o.Set(name, Napi::Number::New(env, v)); };
  set("WP_ABI_VERSION", WP_ABI_VERSION);
  set("WP_HEADER_SIZE", WP_HEADER_SIZE);
  set("WP_CLIENT_SIZE", WP_CLIENT_SIZE);
  set("WP_SLOT_SIZE", WP_SLOT_SIZE);
  set("WP_MAX_CLIENTS", WP_MAX_CLIENTS);
  set("WP_PROBE_WINDOW", WP_PROBE_WINDOW);
  set("WP_MAX_CAPACITY", WP_MAX_CAPACITY);
  set("WP_HDR_CAPACITY", WP_HDR_CAPACITY);
  set("WP_HDR_PRODUCER", WP_HDR_PRODUCER);
  set("WP_HDR_SEGMENT_SIZE", WP_HDR_SEGMENT_SIZE);
  set("WP_SLOT_STATE_GEN", WP_SLOT_STATE_GEN);
  set("WP_SLOT_PIN_MASK", WP_SLOT_PIN_MASK);
  set("WP_SLOT_DIGEST", WP_SLOT_DIGEST);
  set("WP_SLOT_META", WP_SLOT_META);
  set("WP_SLOT_DEVICE", WP_SLOT_DEVICE);
  set("WP_CLI_WORD", WP_CLI_WORD);
  set("WP_CLI_START_TIME", WP_CLI_START_TIME);
  set("WP_CLI_PID_NS", WP_CLI_PID_NS);
  set("WP_CLI_TIME_NS", WP_CLI_TIME_NS);
  set("WP_SLOT_READY", WP_SLOT_READY);
  set("WP_SLOT_EVICTING", WP_SLOT_EVICTING);
  set("ADDON_EXCHANGE_WORDS", kExchangeWords);
  set("ADDON_DIGEST_WORD", kDigestWord);
  set("ADDON_DEVICE_WORD", kDeviceWord);
  set("ADDON_UNPIN_SLOT_WORD", kUnpinSlotWord);
  set("ADDON_UNPIN_TOKEN_WORD", kUnpinTokenWord);
  return o;
}

// Every status code by name, from the header's one list: lib/lease-table/native.ts keeps the addon out
// when a status is missing or numbered differently on the JavaScript side.
Napi::Object Statuses(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
#define WP_STATUS_ENTRY(name, value) o.Set(#name, Napi::Number::New(env, name));
  WP_STATUSES(WP_STATUS_ENTRY)
#undef WP_STATUS_ENTRY
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto *instance = new Instance();
  env.SetInstanceData<Instance>(instance);
  env.AddCleanupHook([instance]() {
    for (Handle *h : std::unordered_set<Handle *>(instance->open)) CloseHandle(instance, h);
  });
  exports.Set("abiVersion", Napi::Number::New(env, wp_abi_version()));
  exports.Set("layout", Layout(env));
  exports.Set("statuses", Statuses(env));
  exports.Set("open", Napi::Function::New(env, Open, "open"));
  exports.Set("close", Napi::Function::New(env, Close, "close"));
  exports.Set("reserve", Napi::Function::New(env, Reserve, "reserve"));
  exports.Set("publish", Napi::Function::New(env, Publish, "publish"));
  exports.Set("abandon", Napi::Function::New(env, Abandon, "abandon"));
  exports.Set("tryEvict", Napi::Function::New(env, TryEvict, "tryEvict"));
  exports.Set("tryPinExact", Napi::Function::New(env, TryPinExact, "tryPinExact"));
  exports.Set("tryPinPrefix", Napi::Function::New(env, TryPinPrefix, "tryPinPrefix"));
  exports.Set("unpinMany", Napi::Function::New(env, UnpinMany, "unpinMany"));
  exports.Set("peek", Napi::Function::New(env, Peek, "peek"));
  exports.Set("peekMany", Napi::Function::New(env, PeekMany, "peekMany"));
  exports.Set("recordDeviceWrite", Napi::Function::New(env, RecordDeviceWrite, "recordDeviceWrite"));
  exports.Set("reapDeadClients", Napi::Function::New(env, Reap, "reapDeadClients"));
  exports.Set("clientPins", Napi::Function::New(env, ClientPins, "clientPins"));
  exports.Set("describe", Napi::Function::New(env, Describe, "describe"));
  exports.Set("segment", Napi::Function::New(env, Segment, "segment"));
  exports.Set("summary", Napi::Function::New(env, Summary, "summary"));
  exports.Set("pinLoop", Napi::Function::New(env, PinLoop, "pinLoop"));
  exports.Set("unlink", Napi::Function::New(env, Unlink, "unlink"));
  exports.Set("fileSize", Napi::Function::New(env, FileSize, "fileSize"));
  exports.Set("segmentOwner", Napi::Function::New(env, SegmentOwner, "segmentOwner"));
  exports.Set("cudaDevices", Napi::Function::New(env, CudaDevices, "cudaDevices"));
  return exports;
}

}  // namespace

NODE_API_MODULE(waitprep, Init)
