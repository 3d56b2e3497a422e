// tessera-cuda-bench: the CUDA backend against the CUDA runtime and cuBLAS called directly, in
// one process on one GPU. Plain C++ (no Google Benchmark: bench/gpu_check.sh runs it on machines
// that only have CUDA, CMake and Ninja). Prints a markdown table; --json FILE also writes JSON.
//
//   tessera-cuda-bench [--backend PATH] [--mib N] [--gemm N] [--reps N] [--json FILE]
//
// Measures, each as the median of --reps timed runs after a warm-up, timed with events:
//   - device-to-device copy (cudaMemcpyAsync), counting read + write traffic;
//   - reduce_async through the backend, f32 and bf16, 2 sources of --mib MiB each, counting
//     2 reads + 1 write, as a fraction of the device copy;
//   - pinned H2D and D2H through the backend against cudaMemcpyAsync on cudaMallocHost memory;
//   - bf16 GEMM --gemm^3 (f32 accumulation, bf16 output) through the backend against
//     cublasGemmEx with the same arguments.
// Exit status: 0 measured, 1 a call failed, 2 no CUDA device (the reason is printed).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tessera/hal/backend_abi.h"

namespace {

const tsr_backend_api_v1* g_api = nullptr;

[[noreturn]] void die(const char* what, const char* detail) {
  std::fprintf(stderr, "tessera-cuda-bench: %s: %s\n", what, detail);
  std::exit(1);
}

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) die(what, cudaGetErrorString(error));
}
void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(status));
}
void check_tsr(tsr_status status, const char* what) {
  if (status != TSR_OK) die(what, g_api->last_error());
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Milliseconds of `work` on a plain CUDA stream: median of `reps` after one warm-up.
double time_direct(cudaStream_t stream, int reps, const std::function<void()>& work) {
  cudaEvent_t start, end;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&end), "cudaEventCreate");
  work();
  check_cuda(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    work();
    check_cuda(cudaEventRecord(end, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end), "cudaEventSynchronize");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, start, end), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return median(ms);
}

// The same through the backend's own streams and events.
double time_backend(tsr_stream stream, int reps, const std::function<void()>& work) {
  tsr_event start, end;
  check_tsr(g_api->event_create(0, 0, &start), "event_create");
  check_tsr(g_api->event_create(0, 0, &end), "event_create");
  work();
  check_tsr(g_api->stream_synchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    check_tsr(g_api->event_record(start, stream), "event_record");
    work();
    check_tsr(g_api->event_record(end, stream), "event_record");
    check_tsr(g_api->event_synchronize(end), "event_synchronize");
    float t = 0;
    check_tsr(g_api->event_elapsed_time(start, end, &t), "event_elapsed_time");
    ms.push_back(t);
  }
  g_api->event_destroy(start);
  g_api->event_destroy(end);
  return median(ms);
}

struct Row {
  std::string what;
  double backend;  // GB/s or TFLOP/s
  double direct;
  std::string unit;
  std::string note;
};

uint16_t random_bf16(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  float value = float(int32_t(*state >> 40) % 2001 - 1000) / 1000.0f;  // [-1, 1]
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return uint16_t(bits >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_path = std::string(TESSERA_BUILD_BACKEND_DIR) + "/libtessera-backend-cuda.so";
  size_t mib = 1024;
  int gemm_n = 8192;
  int reps = 10;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after", arg.c_str());
      return argv[++i];
    };
    if (arg == "--backend")
      backend_path = next();
    else if (arg == "--mib")
      mib = std::stoul(next());
    else if (arg == "--gemm")
      gemm_n = std::stoi(next());
    else if (arg == "--reps")
      reps = std::max(1, std::stoi(next()));
    else if (arg == "--json")
      json_path = next();
    else
      die("unknown argument", arg.c_str());
  }

  int devices = 0;
  cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "tessera-cuda-bench: no CUDA device: %s\n",
                 probe != cudaSuccess ? cudaGetErrorString(probe) : "the driver reports 0");
    return 2;
  }
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  check_cuda(cudaSetDevice(0), "cudaSetDevice");

  void* library = dlopen(backend_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) die("cannot load the backend", dlerror());
  auto entry = reinterpret_cast<tsr_get_api_v1_fn>(dlsym(library, TSR_BACKEND_ENTRY_POINT));
  if (entry == nullptr) die("not a Tessera backend", backend_path.c_str());
  tsr_host_info host{};
  host.struct_size = sizeof host;
  host.abi_major = TSR_BACKEND_ABI_MAJOR;
  host.abi_minor = TSR_BACKEND_ABI_MINOR;
  g_api = entry(&host);
  check_tsr(g_api->init(nullptr), "init");
  tsr_device_properties props{};
  props.struct_size = sizeof props;
  check_tsr(g_api->device_properties(0, &props), "device_properties");

  const size_t bytes = mib << 20;
  std::vector<Row> rows;
  cudaStream_t cs;
  check_cuda(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
  tsr_stream ts;
  check_tsr(g_api->stream_create(0, 0, &ts), "stream_create");

  // ---- device copy and reductions (3 buffers of `bytes`) -------------------------------------
  void *a, *b, *c;
  check_tsr(g_api->device_malloc(0, bytes, &a), "device_malloc");
  check_tsr(g_api->device_malloc(0, bytes, &b), "device_malloc");
  check_tsr(g_api->device_malloc(0, bytes, &c), "device_malloc");
  check_tsr(g_api->memset_async(a, 0x3c, bytes, ts), "memset_async");  // finite f32 and bf16
  check_tsr(g_api->memset_async(b, 0x3c, bytes, ts), "memset_async");
  check_tsr(g_api->stream_synchronize(ts), "stream_synchronize");
  const double copy_ms = time_direct(cs, reps, [&] {
    check_cuda(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, cs), "cudaMemcpyAsync");
  });
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;
  const double backend_copy_ms =
      time_backend(ts, reps, [&] { check_tsr(g_api->memcpy_async(c, a, bytes, ts), "memcpy"); });
  rows.push_back({"D2D copy (read+write)", 2.0 * bytes / backend_copy_ms / 1e6, copy_gbs, "GB/s",
                  "memory bandwidth " + std::to_string(int(props.memory_bandwidth / 1e9)) +
                      " GB/s (datasheet)"});
  for (tsr_dtype dtype : {TSR_DTYPE_F32, TSR_DTYPE_BF16}) {
    const size_t count = bytes / (dtype == TSR_DTYPE_F32 ? 4 : 2);
    const void* srcs[2] = {a, b};
    const double ms = time_backend(ts, reps, [&] {
      check_tsr(g_api->reduce_async(c, srcs, 2, count, dtype, TSR_REDUCE_SUM, ts), "reduce_async");
    });
    const double gbs = 3.0 * bytes / ms / 1e6;
    char note[96];
    std::snprintf(note, sizeof note, "%.0f%% of D2D copy (target >= 80%%)", 100.0 * gbs / copy_gbs);
    rows.push_back({std::string("reduce sum 2 x ") + std::to_string(mib) + " MiB " +
                        (dtype == TSR_DTYPE_F32 ? "f32" : "bf16") + " (2 reads+1 write)",
                    gbs, copy_gbs, "GB/s", note});
  }
  check_tsr(g_api->device_free(0, b), "device_free");
  check_tsr(g_api->device_free(0, c), "device_free");

  // ---- pinned host <-> device --------------------------------------------------------------
  void* pinned_backend;
  void* pinned_direct;
  check_tsr(g_api->host_malloc_pinned(bytes, &pinned_backend), "host_malloc_pinned");
  check_cuda(cudaMallocHost(&pinned_direct, bytes), "cudaMallocHost");
  std::memset(pinned_backend, 1, bytes);
  std::memset(pinned_direct, 1, bytes);
  for (bool to_device : {true, false}) {
    void* dst_b = to_device ? a : pinned_backend;
    const void* src_b = to_device ? pinned_backend : a;
    void* dst_d = to_device ? a : pinned_direct;
    const void* src_d = to_device ? pinned_direct : a;
    const double direct_ms = time_direct(cs, reps, [&] {
      check_cuda(cudaMemcpyAsync(dst_d, src_d, bytes, cudaMemcpyDefault, cs), "cudaMemcpyAsync");
    });
    const double backend_ms = time_backend(
        ts, reps, [&] { check_tsr(g_api->memcpy_async(dst_b, src_b, bytes, ts), "memcpy_async"); });
    const double direct = bytes / direct_ms / 1e6;
    const double through = bytes / backend_ms / 1e6;
    char note[96];
    std::snprintf(note, sizeof note, "%.0f%% of cudaMemcpyAsync (target >= 80%%)",
                  100.0 * through / direct);
    rows.push_back({to_device ? "pinned H2D" : "pinned D2H", through, direct, "GB/s", note});
  }
  check_tsr(g_api->host_free_pinned(pinned_backend), "host_free_pinned");
  cudaFreeHost(pinned_direct);
  check_tsr(g_api->device_free(0, a), "device_free");

  // ---- GEMM bf16 ------------------------------------------------------------------------------
  if (g_api->gemm_async != nullptr && gemm_n > 0) {
    const size_t n = size_t(gemm_n);
    const size_t matrix = n * n * 2;
    std::vector<uint16_t> values(n * n);
    uint64_t state = 42;
    void *ga, *gb, *gc;
    check_tsr(g_api->device_malloc(0, matrix, &ga), "device_malloc");
    check_tsr(g_api->device_malloc(0, matrix, &gb), "device_malloc");
    check_tsr(g_api->device_malloc(0, matrix, &gc), "device_malloc");
    for (void* m : {ga, gb}) {  // random data: GEMM power (and clocks) depend on it
      for (auto& v : values) v = random_bf16(&state);
      check_tsr(g_api->memcpy_async(m, values.data(), matrix, ts), "memcpy_async");
    }
    check_tsr(g_api->stream_synchronize(ts), "stream_synchronize");
    tsr_gemm_desc d{};
    d.struct_size = sizeof d;
    d.m = d.n = d.k = int64_t(n);
    d.alpha = 1.0;
    d.beta = 0.0;
    d.a = ga;
    d.b = gb;
    d.c = gc;
    d.lda = d.ldb = d.ldc = int64_t(n);
    d.dtype_ab = TSR_DTYPE_BF16;
    d.dtype_c = TSR_DTYPE_BF16;
    const double backend_ms =
        time_backend(ts, reps, [&] { check_tsr(g_api->gemm_async(&d, ts), "gemm_async"); });
    cublasHandle_t handle;
    check_blas(cublasCreate(&handle), "cublasCreate");
    check_blas(cublasSetStream(handle, cs), "cublasSetStream");
    const float one = 1.0f, zero = 0.0f;
    const double direct_ms = time_direct(cs, reps, [&] {
      check_blas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, ga,
                              CUDA_R_16BF, gemm_n, gb, CUDA_R_16BF, gemm_n, &zero, gc, CUDA_R_16BF,
                              gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    });
    cublasDestroy(handle);
    const double flop = 2.0 * double(n) * double(n) * double(n);
    char note[128];
    std::snprintf(note, sizeof note, "%.0f%% of cuBLAS; peak in properties %.0f TFLOP/s",
                  100.0 * direct_ms / backend_ms, props.peak_flops_bf16 / 1e12);
    rows.push_back({"GEMM bf16 " + std::to_string(n) + "^3", flop / backend_ms / 1e9,
                    flop / direct_ms / 1e9, "TFLOP/s", note});
    for (void* m : {ga, gb, gc}) check_tsr(g_api->device_free(0, m), "device_free");
  } else {
    rows.push_back({"GEMM bf16", 0, 0, "TFLOP/s", "skipped: gemm_async unavailable"});
  }
  // ---- native collectives: a one-rank allreduce through the sub-table (a smoke test) ------------
  if (const tsr_collectives_api_v1* coll = g_api->collectives) {
    const size_t count = 1 << 20;
    std::vector<float> ones(count, 1.0f), seen(count, 0.0f);
    void* buffer;
    check_tsr(g_api->device_malloc(0, count * sizeof(float), &buffer), "device_malloc");
    check_tsr(g_api->memcpy_async(buffer, ones.data(), count * sizeof(float), ts), "memcpy_async");
    tsr_comm_unique_id id{};
    tsr_comm comm = nullptr;
    check_tsr(coll->get_unique_id(&id), "collectives get_unique_id");
    check_tsr(coll->comm_init_rank(0, 1, &id, 0, &comm), "collectives comm_init_rank");
    const double ms = time_backend(ts, reps, [&] {
      check_tsr(coll->allreduce(buffer, buffer, count, TSR_DTYPE_F32, TSR_REDUCE_SUM, comm, ts),
                "collectives allreduce");
    });
    check_tsr(g_api->memcpy_async(seen.data(), buffer, count * sizeof(float), ts), "memcpy_async");
    check_tsr(g_api->stream_synchronize(ts), "stream_synchronize");
    check_tsr(coll->comm_destroy(comm), "collectives comm_destroy");
    check_tsr(g_api->device_free(0, buffer), "device_free");
    const bool ok = std::all_of(seen.begin(), seen.end(), [](float v) { return v == 1.0f; });
    rows.push_back({std::string("allreduce 4 MiB f32, 1 rank (") + coll->library + ")",
                    count * sizeof(float) / ms / 1e6, 0, "GB/s",
                    ok ? "result correct" : "WRONG RESULT"});
    if (!ok) std::fprintf(stderr, "tessera-cuda-bench: one-rank allreduce changed the data\n");
  } else {
    rows.push_back({"native collectives", 0, 0, "-", "skipped: no collective library loaded"});
  }

  check_tsr(g_api->stream_destroy(ts), "stream_destroy");
  g_api->finalize();

  std::printf("\n%s (%d SMs, %.0f GiB), backend %s\n\n", prop.name, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1ull << 30), g_api->version);
  std::printf("| measurement | tessera cuda backend | direct CUDA/cuBLAS | unit | note |\n");
  std::printf("|---|---:|---:|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.1f | %s | %s |\n", r.what.c_str(), r.backend, r.direct,
                r.unit.c_str(), r.note.c_str());
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) die("cannot write", json_path.c_str());
    std::fprintf(f, "{\"device\": \"%s\", \"rows\": [", prop.name);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::fprintf(f,
                   "%s\n  {\"what\": \"%s\", \"backend\": %.3f, \"direct\": %.3f, "
                   "\"unit\": \"%s\", \"note\": \"%s\"}",
                   i ? "," : "", rows[i].what.c_str(), rows[i].backend, rows[i].direct,
                   rows[i].unit.c_str(), rows[i].note.c_str());
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  return 0;
}
