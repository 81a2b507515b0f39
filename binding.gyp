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
    },
    # libwaitprep.so, the plain C ABI for model runtimes, in build/Release beside the addon:
    # nativeLibraryPath() finds it there, and prebuildify copies it into prebuilds/<platform>-<arch>/.
    {
      "target_name": "libwaitprep",
      "type": "shared_library",
      "product_prefix": "lib",
      "product_name": "waitprep",
      "product_dir": "<(PRODUCT_DIR)",
      "sources": ["native/src/table.c", "native/src/cuda.c"],
      "include_dirs": ["native/include"],
      "libraries": ["-ldl", "-lpthread"],
      "cflags_c": ["-std=c11"]
    }
  ]
}
