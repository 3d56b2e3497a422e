// The emulator behind images_test.cc: the GPU images' kernels run on the CPU. The source the CUDA
// fatbin/PTX and the SPIR-V compile (examples/trainer/gpt/kernels/gpu/*.inc) under a third prelude
// that runs each block as real threads sharing one scratch array and a std::barrier, blocks one
// after another. Every kernel is compared, on random inputs and in f32, bf16 and f16, with the host
// image's kernel of the same name (examples/trainer/gpt/kernels/host, which
// tessera_gpt_kernels_test checks against double references), at several geometries: one thread;
// blocks smaller than a row, a head_dim or a chunk of keys; full 256-thread blocks. A second run at
// one geometry must repeat bitwise. What this cannot see: the CUDA and OpenCL preludes themselves,
// compiler differences, races between blocks on a real GPU, and speed (gpt.kernel_images checks the
// images' entry points). Included by images_test.cc alone (it defines the kernels).
#pragma once

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host_kernels.h"
#include "kernel_support.h"

// ---- the emulator prelude (see gpu/gpt_common.inc for what each word means) -------------------
namespace tessera::gpt::emulator {
struct Lane {
  uint64_t id = 0, size = 1, group = 0, groups = 1;
  float* scratch = nullptr;
  std::barrier<>* sync = nullptr;
};
inline thread_local Lane t_lane;  // this thread's lane
}  // namespace tessera::gpt::emulator

#define TSR_KERNEL void
#define TSR_DEVICE static inline
#define TSR_GLOBAL
#define TSR_SHARED
#define TSR_SCRATCH(name) float* const name = ::tessera::gpt::emulator::t_lane.scratch
#define TSR_LOCAL_ID (::tessera::gpt::emulator::t_lane.id)
#define TSR_LOCAL_SIZE (::tessera::gpt::emulator::t_lane.size)
#define TSR_GROUP_ID (::tessera::gpt::emulator::t_lane.group)
#define TSR_GROUP_COUNT (::tessera::gpt::emulator::t_lane.groups)
#define TSR_BARRIER() ::tessera::gpt::emulator::t_lane.sync->arrive_and_wait()
#define TSR_EXP(x) std::exp(x)
#define TSR_LOG(x) std::log(x)
#define TSR_SQRT(x) std::sqrt(x)
#define TSR_TANH(x) std::tanh(x)
#define TSR_POW(x, y) std::pow(x, y)
#define TSR_SIN(x) std::sin(x)
#define TSR_COS(x) std::cos(x)
#define TSR_FMAX(x, y) std::fmax(x, y)
#define TSR_NEG_INF (-std::numeric_limits<float>::infinity())

namespace tessera::gpt::gpu {
// bf16 as the OpenCL prelude converts it (round to nearest even; NaN stays NaN).
inline float tsr_bf16_to_f32(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}
inline uint16_t tsr_f32_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
// f16 as vload_half / vstore_half_rte and cuda_fp16's __float2half_rn convert it (exact widening,
// round to nearest even): the host image's conversion, which follows IEEE the same way.
inline float tsr_f16_to_f32(uint16_t bits) {
  const host::F16 h{bits};
  return host::load(&h);
}
inline uint16_t tsr_f32_to_f16(float v) {
  host::F16 h{0};
  host::store(&h, v);
  return h.bits;
}

#include "gpt_attention.inc"  // each kernel file includes gpt_common.inc
#include "gpt_layers.inc"
#include "gpt_loss_moe_optim.inc"
}  // namespace tessera::gpt::gpu

namespace tessera::gpt::testing {

constexpr uint32_t kF32 = TSR_DTYPE_F32, kBf16 = TSR_DTYPE_BF16, kF16 = TSR_DTYPE_F16;

struct Geometry {
  uint32_t grid, block;
};
// One thread; odd blocks smaller than the rows, head_dim (12) and key chunks (seq 7); a warp; a
// full block.
constexpr Geometry kGeometries[] = {{1, 1}, {3, 5}, {2, 32}, {1, 256}};

// Runs `kernel` as grid x block threads: one thread per lane of a block, all of a block's lanes at
// once (they meet at barriers), the blocks one after another. The scratch starts each block as
// NaN, so reading what no lane wrote shows.
inline void emulate(Geometry g, const std::function<void()>& kernel) {
  std::vector<float> scratch(TSR_GPT_MAX_BLOCK, std::numeric_limits<float>::quiet_NaN());
  std::barrier<> sync(g.block);
  std::vector<std::thread> lanes;
  for (uint32_t id = 0; id < g.block; ++id) {
    lanes.emplace_back([&, id] {
      for (uint32_t group = 0; group < g.grid; ++group) {
        emulator::t_lane = {id, g.block, group, g.grid, scratch.data(), &sync};
        kernel();
        sync.arrive_and_wait();  // the block is done
        if (id == 0) std::fill(scratch.begin(), scratch.end(), std::nanf(""));
        sync.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : lanes) t.join();
}

// Where a case runs: the host image's kernel (one block of one thread, as GptKernels launches it)
// or the GPU source at a geometry.
struct Target {
  const Geometry* gpu = nullptr;  // null: the host kernel

  void run(const std::function<const char*()>& host_kernel,
           const std::function<void()>& gpu_kernel) const {
    if (gpu != nullptr) return emulate(*gpu, gpu_kernel);
    tsr_host_kernel_call call{};
    call.struct_size = sizeof call;
    call.grid = call.block = {1, 1, 1};
    call.block_index = {0, 0, 0};
    host::set_current_call(&call);
    const char* why = host_kernel();
    host::set_current_call(nullptr);
    ASSERT_EQ(why, nullptr) << why;
  }
};
#define RUN_KERNEL(target, name, ...) \
  (target).run([&] { return host::name(__VA_ARGS__); }, [&] { gpu::tsr_gpt_##name(__VA_ARGS__); })

// ---- buffers -----------------------------------------------------------------------------------

inline std::vector<float> random_values(size_t n, uint64_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Activations in f32, bf16 or f16 bytes.
struct Act {
  std::vector<unsigned char> bytes;
  uint32_t dtype;
  Act(const std::vector<float>& values, uint32_t type) : dtype(type) {
    const size_t each = dtype == kF32 ? 4 : 2;
    bytes.resize(values.size() * each);
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype != kF32) {
        const uint16_t b =
            dtype == kBf16 ? gpu::tsr_f32_to_bf16(values[i]) : gpu::tsr_f32_to_f16(values[i]);
        std::memcpy(&bytes[i * 2], &b, 2);
      } else {
        std::memcpy(&bytes[i * 4], &values[i], 4);
      }
    }
  }
  void* data() { return bytes.data(); }
  std::vector<float> values() const {
    std::vector<float> out(bytes.size() / (dtype == kF32 ? 4 : 2));
    for (size_t i = 0; i < out.size(); ++i) {
      if (dtype != kF32) {
        uint16_t b;
        std::memcpy(&b, &bytes[i * 2], 2);
        out[i] = dtype == kBf16 ? gpu::tsr_bf16_to_f32(b) : gpu::tsr_f16_to_f32(b);
      } else {
        std::memcpy(&out[i], &bytes[i * 4], 4);
      }
    }
    return out;
  }
};

inline void append(std::vector<float>& out, const std::vector<float>& more) {
  out.insert(out.end(), more.begin(), more.end());
}
inline void append(std::vector<float>& out, const std::vector<int32_t>& more) {
  for (int32_t v : more) out.push_back(float(v));
}

// ---- the comparison ----------------------------------------------------------------------------

// A case builds its inputs from fixed seeds, runs its kernels on the target and returns every
// output, concatenated.
using Case = std::function<std::vector<float>(const Target&)>;

inline void expect_gpu_matches_host(const std::string& what, uint32_t dtype, const Case& run_case) {
  SCOPED_TRACE(what + (dtype == kBf16 ? " (bf16)" : dtype == kF16 ? " (f16)" : " (f32)"));
  const std::vector<float> want = run_case(Target{});
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::abs(double(w)));
  // bf16 (f16) outputs may differ by one bf16 (f16) step where the f32 sums (taken in another
  // order) round differently: 2^-8 (2^-11) relative.
  const double rtol = dtype == kBf16 ? 8e-3 : dtype == kF16 ? 1e-3 : 1e-4;
  const double atol = (dtype == kBf16 ? 8e-3 : dtype == kF16 ? 1e-3 : 1e-5) * scale;
  for (const Geometry& g : kGeometries) {
    const std::vector<float> got = run_case(Target{&g});
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::abs(double(got[i]) - want[i]) <= atol + rtol * std::abs(double(want[i])))) {
        if (++bad <= 5) {
          ADD_FAILURE() << "grid " << g.grid << " x block " << g.block << ": output [" << i << "] "
                        << got[i] << ", the host kernel " << want[i];
        }
      }
    }
    if (g.block == 32) {  // once: every lane a thread makes runs slow on few cores
      const std::vector<float> again = run_case(Target{&g});
      EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0)
          << "grid " << g.grid << " x block " << g.block << ": a second run differs";
    }
  }
}

inline void for_each_dtype(const std::string& what, const std::function<Case(uint32_t)>& make) {
  for (uint32_t dtype : {kF32, kBf16, kF16}) expect_gpu_matches_host(what, dtype, make(dtype));
}

}  // namespace tessera::gpt::testing
