// The vendor driver library (libcuda, or the prefixed driver of a CUDA-shaped stack), opened once
// for the entries the runtime API lacks (host signals' wait-value, kernel modules). Internal to
// the backend.
#ifndef TESSERA_BACKENDS_CUDA_DRIVER_LIBRARY_H_
#define TESSERA_BACKENDS_CUDA_DRIVER_LIBRARY_H_

#include <dlfcn.h>

#include <cstddef>
#include <cstdio>

// CMake sets both per stack (cuda_like_backend.cmake); these are CUDA's.
#ifndef TESSERA_CUDA_DRIVER_LIBRARY
#define TESSERA_CUDA_DRIVER_LIBRARY "libcuda.so.1"
#endif
#ifndef TESSERA_CUDA_DRIVER_PREFIX
#define TESSERA_CUDA_DRIVER_PREFIX "cu"
#endif

namespace tessera::cuda {

// Opens TESSERA_CUDA_DRIVER_LIBRARY; NULL with `why` saying so when the backend was built without
// one (`lacking` names what is then missing) or the dynamic loader refuses it.
inline void* open_driver_library(const char* lacking, char* why, size_t why_size) {
  const char* name = TESSERA_CUDA_DRIVER_LIBRARY;
  if (name[0] == '\0') {
    std::snprintf(why, why_size, "built without a driver library (DRIVER_LIBRARY \"\"), and %s",
                  lacking);
    return nullptr;
  }
  void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    std::snprintf(why, why_size, "the driver cannot be loaded: %s", reason ? reason : name);
  }
  return library;
}

// *out = the driver's `<prefix><name>` (NULL when it has none).
template <typename Fn>
void resolve_driver_symbol(void* library, const char* name, Fn* out) {
  char symbol[96];
  std::snprintf(symbol, sizeof symbol, "%s%s", TESSERA_CUDA_DRIVER_PREFIX, name);
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
}

}  // namespace tessera::cuda

#endif  // TESSERA_BACKENDS_CUDA_DRIVER_LIBRARY_H_
