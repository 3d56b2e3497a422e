// gemm_async through the vendor BLAS (cuBLAS's cublasGemmEx), loaded with dlopen on first use so
// that a machine without it still loads the backend: gemm_async then fails with UNAVAILABLE and
// the loader's message, and devices do not advertise TSR_CAP_GEMM. The BLAS library names and
// symbol prefix come from CMake (TESSERA_CUDA_BLAS_LIBRARIES, TESSERA_CUDA_BLAS_PREFIX); built
// with no BLAS library name the entry is NULL. No BLAS header is needed: the few enum values
// used are part of cuBLAS's stable ABI and are spelled out below.
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "api.h"
#include "errors.h"
#include "state.h"

#ifndef TESSERA_CUDA_BLAS_LIBRARIES
#define TESSERA_CUDA_BLAS_LIBRARIES ""
#endif
#ifndef TESSERA_CUDA_BLAS_PREFIX
#define TESSERA_CUDA_BLAS_PREFIX "cublas"
#endif

namespace tessera::cuda {
namespace {

using BlasHandle = void*;
// cublasOperation_t, cudaDataType_t, cublasComputeType_t, cublasGemmAlgo_t values.
// A BLAS with the same GemmEx shape but other enum values (hipBLAS) defines TSR_BLAS_ENUMS as
// {OpN, OpT, R32F, R64F, R16F, R16BF, Compute32F, Compute64F, AlgoDefault} in its runtime header.
#ifndef TSR_BLAS_ENUMS
#define TSR_BLAS_ENUMS \
  { 0, 1, 0, 1, 2, 14, 68, 70, -1 }
#endif
constexpr int kBlasEnums[9] = TSR_BLAS_ENUMS;
constexpr int kOpN = kBlasEnums[0], kOpT = kBlasEnums[1];
constexpr int kR32F = kBlasEnums[2], kR64F = kBlasEnums[3], kR16F = kBlasEnums[4],
              kR16BF = kBlasEnums[5];
constexpr int kCompute32F = kBlasEnums[6], kCompute64F = kBlasEnums[7];
constexpr int kAlgoDefault = kBlasEnums[8];

struct Blas {
  std::once_flag once;
  void* library = nullptr;
  std::string error;  // why it is unavailable
  int (*create)(BlasHandle*) = nullptr;
  int (*destroy)(BlasHandle) = nullptr;
  int (*set_stream)(BlasHandle, rtStream_t) = nullptr;
  int (*gemm_ex)(BlasHandle, int, int, int, int, int, const void*, const void*, int, int,
                 const void*, int, int, const void*, void*, int, int, int, int) = nullptr;
  const char* (*status_string)(int) = nullptr;
  std::mutex mutex;                 // guards handles and every set_stream + gemm_ex pair
  std::vector<BlasHandle> handles;  // per device, created on first use
};

Blas& blas() {
  static Blas* instance = new Blas;  // never destroyed: the library stays loaded
  return *instance;
}

void* symbol(Blas& b, const char* suffix) {
  std::string name = std::string(TESSERA_CUDA_BLAS_PREFIX) + suffix;
  void* address = dlsym(b.library, name.c_str());
  if (address == nullptr && b.error.empty()) b.error = "symbol " + name + " not found";
  return address;
}

void load(Blas& b) {
  std::string list = TESSERA_CUDA_BLAS_LIBRARIES;
  size_t start = 0;
  while (b.library == nullptr && start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    b.library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (b.library == nullptr) {
      const char* why = dlerror();
      b.error += (b.error.empty() ? "" : "; ") + std::string(why ? why : name.c_str());
    }
  }
  if (b.library == nullptr) return;
  b.error.clear();
  b.create = reinterpret_cast<decltype(b.create)>(symbol(b, "Create_v2"));
  b.destroy = reinterpret_cast<decltype(b.destroy)>(symbol(b, "Destroy_v2"));
  b.set_stream = reinterpret_cast<decltype(b.set_stream)>(symbol(b, "SetStream_v2"));
  b.gemm_ex = reinterpret_cast<decltype(b.gemm_ex)>(symbol(b, "GemmEx"));
  b.status_string = reinterpret_cast<decltype(b.status_string)>(
      dlsym(b.library, (std::string(TESSERA_CUDA_BLAS_PREFIX) + "GetStatusString").c_str()));
  if (!b.error.empty()) b.create = nullptr;
}

bool loaded() {
  Blas& b = blas();
  std::call_once(b.once, [&] { load(b); });
  return b.create != nullptr;
}

tsr_status blas_status(int status) {
  switch (status) {
    case 3: return TSR_RESOURCE_EXHAUSTED;  // ALLOC_FAILED
    case 7: return TSR_INVALID_ARGUMENT;    // INVALID_VALUE
    case 8: return TSR_UNIMPLEMENTED;       // ARCH_MISMATCH
    case 15: return TSR_UNIMPLEMENTED;      // NOT_SUPPORTED
    case 1: return TSR_UNAVAILABLE;         // NOT_INITIALIZED
    default: return TSR_INTERNAL;
  }
}

tsr_status fail_blas(int status, const char* call) {
  Blas& b = blas();
  return fail(blas_status(status), "gemm_async: %s%s failed: %s (status %d)",
              TESSERA_CUDA_BLAS_PREFIX, call, b.status_string ? b.status_string(status) : "?",
              status);
}

// The data types and compute type for one dtype pair, or false when the BLAS has no such GEMM.
bool types_for(int32_t ab, int32_t c, int* ab_type, int* c_type, int* compute) {
  auto type_of = [](int32_t dtype) {
    switch (dtype) {
      case TSR_DTYPE_F32: return kR32F;
      case TSR_DTYPE_F64: return kR64F;
      case TSR_DTYPE_F16: return kR16F;
      case TSR_DTYPE_BF16: return kR16BF;
      default: return -1;
    }
  };
  *ab_type = type_of(ab);
  *c_type = type_of(c);
  if (*ab_type < 0 || *c_type < 0) return false;
  if (ab == TSR_DTYPE_F64 || c == TSR_DTYPE_F64) {
    *compute = kCompute64F;
    return ab == c;
  }
  *compute = kCompute32F;  // f32 accumulation; TF32 is not allowed in
  return ab == c || c == TSR_DTYPE_F32;
}

tsr_status gemm(const tsr_gemm_desc* desc_in, tsr_stream stream_handle) {
  static constexpr const char* kOp = "gemm_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (desc_in == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: desc is NULL", kOp);
    constexpr size_t kNeeded = offsetof(tsr_gemm_desc, dtype_c) + sizeof(int32_t);
    if (desc_in->struct_size < kNeeded) {
      return fail(TSR_INVALID_ARGUMENT, "%s: desc->struct_size is %zu, expected at least %zu", kOp,
                  desc_in->struct_size, kNeeded);
    }
    // Only the caller's struct_size is readable; fields it lacks read as zero.
    tsr_gemm_desc d{};
    std::memcpy(&d, desc_in, std::min(desc_in->struct_size, sizeof d));
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    int ab_type, c_type, compute;
    if (!types_for(d.dtype_ab, d.dtype_c, &ab_type, &c_type, &compute)) {
      return fail(TSR_UNIMPLEMENTED, "%s: no GEMM for A/B dtype %d with C dtype %d", kOp,
                  d.dtype_ab, d.dtype_c);
    }
    for (int64_t v : {d.m, d.n, d.k, d.lda, d.ldb, d.ldc}) {
      if (v < 0 || v > INT_MAX) {
        return fail(TSR_INVALID_ARGUMENT,
                    "%s: dimension or leading dimension %lld is outside "
                    "[0, INT_MAX]",
                    kOp, (long long)v);
      }
    }
    if (d.m == 0 || d.n == 0) return TSR_OK;
    if (d.c == nullptr || (d.k > 0 && (d.a == nullptr || d.b == nullptr))) {
      return fail(TSR_INVALID_ARGUMENT, "%s: a matrix pointer is NULL", kOp);
    }
    if (!loaded()) {
      return fail(TSR_UNAVAILABLE, "%s: %s is not available: %s", kOp, TESSERA_CUDA_BLAS_PREFIX,
                  blas().error.c_str());
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    Blas& b = blas();
    std::lock_guard lock(b.mutex);
    if (b.handles.size() < backend->devices.size()) b.handles.resize(backend->devices.size());
    BlasHandle& handle = b.handles[size_t(stream->device)];
    if (handle == nullptr) {
      if (int s = b.create(&handle); s != 0) {
        handle = nullptr;
        return fail_blas(s, "Create");
      }
    }
    if (int s = b.set_stream(handle, stream->raw); s != 0) return fail_blas(s, "SetStream");
    const float alpha32 = float(d.alpha), beta32 = float(d.beta);
    const void* alpha = compute == kCompute64F ? static_cast<const void*>(&d.alpha) : &alpha32;
    const void* beta = compute == kCompute64F ? static_cast<const void*>(&d.beta) : &beta32;
    const int k = int(d.k);
    // With k == 0 A and B are not read, but the BLAS still wants leading dimensions >= 1.
    const int lda = std::max(int(d.lda), 1), ldb = std::max(int(d.ldb), 1);
    int s = b.gemm_ex(handle, d.trans_a ? kOpT : kOpN, d.trans_b ? kOpT : kOpN, int(d.m), int(d.n),
                      k, alpha, d.a, ab_type, lda, d.b, ab_type, ldb, beta, d.c, c_type, int(d.ldc),
                      compute, kAlgoDefault);
    if (s != 0) return fail_blas(s, "GemmEx");
    return TSR_OK;
  });
}

}  // namespace

bool gemm_available() {
  return std::strlen(TESSERA_CUDA_BLAS_LIBRARIES) > 0 && loaded();
}

void gemm_shutdown() {
  if (std::strlen(TESSERA_CUDA_BLAS_LIBRARIES) == 0) return;
  Blas& b = blas();
  std::lock_guard lock(b.mutex);
  for (size_t device = 0; device < b.handles.size(); ++device) {
    if (b.handles[device] == nullptr) continue;
    DeviceGuard guard;
    if (guard.enter("finalize", int32_t(device)) == TSR_OK) b.destroy(b.handles[device]);
    b.handles[device] = nullptr;
  }
}

namespace api {
tsr_status (*const gemm_async)(const tsr_gemm_desc*,
                               tsr_stream) = sizeof(TESSERA_CUDA_BLAS_LIBRARIES) > 1 ? &gemm
                                                                                     : nullptr;
}  // namespace api
}  // namespace tessera::cuda
