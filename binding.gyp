{
  "targets": [
    {
      "target_name": "waitprep",
      "sources": ["native/src/addon.cc", "native/src/table.c", "native/src/cuda.c"],
      "libraries": ["-ldl", "-lpthread"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/include"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fno-exceptions"],
      "cflags_c": ["-std=c11"]
    }
  ]
}
