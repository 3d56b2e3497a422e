// hal_bench: copy and reduction bandwidth of the host backend, next to plain memcpy on the same
// buffers (the measured limit of this machine's memory system for one thread).
//
// Bandwidth counts bytes touched in memory, per call:
//   memcpy and backend copies of S bytes: 2*S (read S, write S);
//   a reduction of N sources of S bytes each: (N+1)*S (read N*S, write S).
// Timings are wall-clock (UseRealTime): the backend's work runs on its stream worker thread, so
// the calling thread's CPU time would mean nothing. Each backend iteration includes the
// enqueue and a stream_synchronize, i.e. the dispatch overhead a caller really pays.
//
// The backend library is dlopen'ed as the HAL loader does: $TESSERA_BACKEND_PATH (a .so file, or
// a colon-separated list of folders holding libtessera-backend-host.so), else the build tree.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/hal/backend_abi.h"

namespace {

constexpr const char* kLibraryName = "libtessera-backend-host.so";
constexpr size_t kMiB = size_t(1) << 20;

const tsr_backend_api_v1* g_api = nullptr;
tsr_stream g_stream = nullptr;

bool file_exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string find_backend() {
  if (const char* env = std::getenv("TESSERA_BACKEND_PATH"); env != nullptr && env[0] != '\0') {
    std::string value = env;
    if (value.size() > 3 && value.compare(value.size() - 3, 3, ".so") == 0) return value;
    size_t start = 0;
    while (start <= value.size()) {
      size_t end = value.find(':', start);
      if (end == std::string::npos) end = value.size();
      std::string candidate = value.substr(start, end - start) + "/" + kLibraryName;
      if (end > start && file_exists(candidate)) return candidate;
      start = end + 1;
    }
  }
  return std::string(TESSERA_BUILD_BACKEND_DIR) + "/" + kLibraryName;
}

[[noreturn]] void die(const char* what, tsr_status status) {
  std::fprintf(stderr, "hal_bench: %s failed (status %d): %s\n", what, int(status),
               g_api ? g_api->last_error() : "");
  std::exit(1);
}

void check(tsr_status status, const char* what) {
  if (status != TSR_OK) die(what, status);
}

void load_backend() {
  std::string path = find_backend();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "hal_bench: cannot load %s: %s\n", path.c_str(), dlerror());
    std::exit(1);
  }
  auto entry = reinterpret_cast<tsr_get_api_v1_fn>(dlsym(library, TSR_BACKEND_ENTRY_POINT));
  if (entry == nullptr) {
    std::fprintf(stderr, "hal_bench: %s has no %s\n", path.c_str(), TSR_BACKEND_ENTRY_POINT);
    std::exit(1);
  }
  tsr_host_info host{};
  host.struct_size = sizeof host;
  host.abi_major = TSR_BACKEND_ABI_MAJOR;
  host.abi_minor = TSR_BACKEND_ABI_MINOR;
  host.log_level = TSR_LOG_ERROR;
  g_api = entry(&host);
  if (g_api == nullptr || g_api->abi_major != TSR_BACKEND_ABI_MAJOR) {
    std::fprintf(stderr, "hal_bench: %s: no usable ABI v1 table\n", path.c_str());
    std::exit(1);
  }
  check(g_api->init(nullptr), "init");
  check(g_api->stream_create(0, 0, &g_stream), "stream_create");
  benchmark::AddCustomContext("backend", path + " (" + g_api->version + ")");
}

// `count` device buffers of `bytes` each, filled (so pages are faulted in before timing) and
// freed when the benchmark ends.
class Buffers {
 public:
  Buffers(size_t count, size_t bytes) : bytes_(bytes) {
    for (size_t i = 0; i < count; ++i) {
      void* ptr = nullptr;
      check(g_api->device_malloc(0, bytes, &ptr), "device_malloc");
      std::memset(ptr, int(i + 1), bytes);
      pointers_.push_back(ptr);
    }
  }
  ~Buffers() {
    for (void* ptr : pointers_) g_api->device_free(0, ptr);
  }
  void* operator[](size_t i) const { return pointers_[i]; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::vector<void*> pointers_;
};

// Fills f32 or bf16 sources with small values so sums stay finite and denormal-free (the
// kernels' speed does not depend on values, but denormals would on some CPUs).
void fill_sources(const Buffers& buffers, size_t sources, tsr_dtype dtype) {
  for (size_t k = 0; k < sources; ++k) {
    if (dtype == TSR_DTYPE_F32) {
      auto* data = static_cast<float*>(buffers[k]);
      for (size_t i = 0; i < buffers.bytes() / 4; ++i) data[i] = float((i + k) % 64);
    } else {
      auto* data = static_cast<uint16_t*>(buffers[k]);
      for (size_t i = 0; i < buffers.bytes() / 2; ++i) data[i] = 0x3f80;  // 1.0
    }
  }
}

void BM_Memcpy(benchmark::State& state, size_t bytes) {
  Buffers buffers(2, bytes);
  for (auto _ : state) {
    std::memcpy(buffers[1], buffers[0], bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));
}

void BM_HostCopyD2D(benchmark::State& state, size_t bytes) {
  Buffers buffers(2, bytes);
  for (auto _ : state) {
    check(g_api->memcpy_async(buffers[1], buffers[0], bytes, g_stream), "memcpy_async");
    check(g_api->stream_synchronize(g_stream), "stream_synchronize");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));
}

// Reduction of `sources` arrays of `bytes` each into a separate destination.
void BM_HostReduce(benchmark::State& state, size_t bytes, size_t sources, tsr_dtype dtype) {
  Buffers buffers(sources + 1, bytes);
  fill_sources(buffers, sources, dtype);
  std::vector<const void*> srcs;
  for (size_t k = 0; k < sources; ++k) srcs.push_back(buffers[k]);
  const size_t count = bytes / (dtype == TSR_DTYPE_F32 ? 4 : 2);
  for (auto _ : state) {
    check(g_api->reduce_async(buffers[sources], srcs.data(), int32_t(sources), count, dtype,
                              TSR_REDUCE_SUM, g_stream),
          "reduce_async");
    check(g_api->stream_synchronize(g_stream), "stream_synchronize");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t((sources + 1) * bytes));
}

void register_all() {
  struct Size {
    const char* name;
    size_t bytes;
  };
  const Size sizes[] = {{"1MiB", 1 * kMiB}, {"8MiB", 8 * kMiB}, {"64MiB", 64 * kMiB}};
  auto configure = [](benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Unit(benchmark::kMillisecond);
  };
  for (const Size& size : sizes) {
    std::string suffix = std::string("/") + size.name;
    configure(benchmark::RegisterBenchmark(("BM_Memcpy" + suffix).c_str(), BM_Memcpy, size.bytes));
    configure(benchmark::RegisterBenchmark(("BM_HostCopyD2D" + suffix).c_str(), BM_HostCopyD2D,
                                           size.bytes));
    configure(benchmark::RegisterBenchmark(("BM_HostReduceF32Sum2" + suffix).c_str(), BM_HostReduce,
                                           size.bytes, size_t(2), TSR_DTYPE_F32));
  }
  configure(benchmark::RegisterBenchmark("BM_HostReduceBf16Sum2/64MiB", BM_HostReduce, 64 * kMiB,
                                         size_t(2), TSR_DTYPE_BF16));
  configure(benchmark::RegisterBenchmark("BM_HostReduceF32Sum8/64MiB", BM_HostReduce, 64 * kMiB,
                                         size_t(8), TSR_DTYPE_F32));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  load_backend();
  benchmark::AddCustomContext(
      "bytes_counted",
      "bytes touched per call: copy of S bytes = 2*S; reduce of N sources of S bytes = (N+1)*S");
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  check(g_api->stream_destroy(g_stream), "stream_destroy");
  g_api->finalize();
  return 0;
}
