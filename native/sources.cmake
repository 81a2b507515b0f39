# The lease table's C core, relative to native/: one list for every build of libwaitprep.so
# (the root CMakeLists.txt for the Node addon, the tests and the benches; python/CMakeLists.txt
# for the wheel). binding.gyp, which cannot read CMake, names the same two files.
set(WAITPREP_CORE_FILES src/table.c src/cuda.c)
