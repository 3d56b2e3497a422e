// One fuzz target = one .cc in this folder that defines its entry with TESSERA_FUZZ_TARGET(name).
// Built two ways (tests/fuzz/CMakeLists.txt):
//   - with TESSERA_FUZZ (the `fuzz` preset, clang): the entry is libFuzzer's
//     LLVMFuzzerTestOneInput and each target is its own tessera-fuzz-<name> executable;
//   - otherwise (TESSERA_FUZZ_REPLAY): every target is linked into one tessera_fuzz_replay, which
//     runs a named target over its seed corpus and regression inputs (the ctest tests fuzz.<name>),
//     so the inputs found by fuzzing stay tested by compilers without libFuzzer.
// A target feeds the bytes to a parser and checks what the parser promises (no crash, errors
// rather than exceptions, round trips); FUZZ_CHECK aborts with a message when a promise is broken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tessera::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);
// Replay builds only: records `fn` under `name` (static initialisation of each target's file).
bool register_target(const char* name, TargetFn fn);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void check_failed(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace tessera::fuzz

#define FUZZ_CHECK(cond, what) \
  ((cond) ? (void)0 : ::tessera::fuzz::check_failed(__FILE__, __LINE__, what))

#ifdef TESSERA_FUZZ_REPLAY
#define TESSERA_FUZZ_TARGET(name)                                     \
  static int tessera_fuzz_##name(const uint8_t* data, size_t size);   \
  [[maybe_unused]] static const bool tessera_fuzz_registered_##name = \
      ::tessera::fuzz::register_target(#name, &tessera_fuzz_##name);  \
  static int tessera_fuzz_##name(const uint8_t* data, size_t size)
#else
#define TESSERA_FUZZ_TARGET(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif
