// The Node-API binding: flat functions over the C core. Argument checking
// lives in TypeScript (lib/); this file trusts its (checked) arguments.
#include <napi.h>

#include "waitprep.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, wp_abi_version()));
  return exports;
}

}  // namespace

NODE_API_MODULE(waitprep, Init)
