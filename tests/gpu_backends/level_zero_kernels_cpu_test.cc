// The Level Zero kernels' OpenCL C (backends/level_zero/kernels) compiled as C++ with a small shim
// and run on the CPU, one work item at a time, against the host backend's conversions
// (backends/host/half.h) and the reduction rules of backend_abi.h. This checks the arithmetic the
// kernels spell out, not a GPU compiler or driver: that is the CTS's job on an Intel GPU.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "../../backends/host/half.h"

namespace cl_shim {
// The OpenCL C built-ins and types the kernels use, for one work item (id 0 of 1).
using uint = uint32_t;
using ushort = uint16_t;
using ulong = uint64_t;
using uchar = uint8_t;
inline ulong get_global_id(int) {
  return 0;
}
inline ulong get_global_size(int) {
  return 1;
}
inline uint as_uint(float f) {
  uint u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float as_float(uint u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline int clz(ulong x) {
  return __builtin_clzll(x);
}
using std::fabs;
}  // namespace cl_shim

#define kernel
#define global
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
namespace fp64 {
using namespace cl_shim;
#define TSR_FP64 1
#include "cast.cl"
#include "reduce.cl"
}  // namespace fp64
#undef TSR_FP64
#undef TESSERA_ZE_KERNELS_COMMON_H_
namespace core {
using namespace cl_shim;
#define TSR_FP64 0
#include "cast.cl"
#include "reduce.cl"
}  // namespace core
#pragma GCC diagnostic pop

namespace {

using namespace tessera::host;

template <typename To, typename From>
To cast1(void (*k)(To*, const From*, uint64_t), From x) {
  To out{};
  k(&out, &x, 1);
  return out;
}

template <typename Sources, typename T>
Sources sources_of(std::initializer_list<const T*> pointers) {
  Sources s{};
  int k = 0;
  for (const T* p : pointers) s.address[k++] = uint64_t(reinterpret_cast<uintptr_t>(p));
  return s;
}

TEST(LevelZeroKernelsOnCpu, WidenEveryF16AndBf16LikeTheHostBackend) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = cast1(core::cast_f16_f32, uint16_t(h)), b = f16_to_f32(uint16_t(h));
    ASSERT_EQ(f32_bits(a), f32_bits(b)) << "f16 0x" << std::hex << h;
    ASSERT_EQ(f32_bits(cast1(core::cast_bf16_f32, uint16_t(h))), f32_bits(bf16_to_f32(h)));
  }
}

TEST(LevelZeroKernelsOnCpu, NarrowToF16AndBf16LikeTheHostBackend) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int i = 0; i < 200000; ++i) {
    const float f = f32_from_bits(uint32_t(rng()));
    ASSERT_EQ(cast1(core::cast_f32_f16, f), f32_to_f16(f)) << f;
    ASSERT_EQ(cast1(core::cast_f32_bf16, f), f32_to_bf16(f)) << f;
    const int64_t v = int64_t(rng()) >> (rng() % 64);
    ASSERT_EQ(cast1(core::cast_i64_f16, v), f32_to_f16(i64_to_f32_round_odd(v))) << v;
    ASSERT_EQ(cast1(core::cast_i64_bf16, v), f32_to_bf16(i64_to_f32_round_odd(v))) << v;
    const int32_t w = int32_t(v);
    ASSERT_EQ(cast1(core::cast_i32_bf16, w), f32_to_bf16(f64_to_f32_round_odd(double(w)))) << w;
    double d;
    const uint64_t bits = rng();
    std::memcpy(&d, &bits, sizeof d);
    if (i & 1) d = double(f) * (1 + 1e-9 * (i % 7));  // near f32 values: the rounding cases
    ASSERT_EQ(cast1(fp64::cast_f64_f16, d), f32_to_f16(f64_to_f32_round_odd(d))) << d;
    ASSERT_EQ(cast1(fp64::cast_f64_bf16, d), f32_to_bf16(f64_to_f32_round_odd(d))) << d;
  }
}

TEST(LevelZeroKernelsOnCpu, SaturateFloatToIntegerAndWrapIntegerToInteger) {
  EXPECT_EQ(cast1(core::cast_f32_i32, NAN), 0);
  EXPECT_EQ(cast1(core::cast_f32_i32, 3e9f), INT_MAX);
  EXPECT_EQ(cast1(core::cast_f32_i32, -3e9f), INT_MIN);
  EXPECT_EQ(cast1(core::cast_f32_i32, -2.9f), -2);
  EXPECT_EQ(cast1(core::cast_f32_u8, 300.f), 255);
  EXPECT_EQ(cast1(core::cast_f32_u8, -1.f), 0);
  EXPECT_EQ(cast1(fp64::cast_f64_i64, 1e30), LLONG_MAX);
  EXPECT_EQ(cast1(fp64::cast_f64_i64, -1e30), LLONG_MIN);
  EXPECT_EQ(cast1(fp64::cast_f64_u8, double(NAN)), 0);
  EXPECT_EQ(cast1(core::cast_i32_u8, 257), 1);
  EXPECT_EQ(cast1(core::cast_i64_i32, int64_t(1) << 32 | 5), 5);
}

TEST(LevelZeroKernelsOnCpu, ReduceWithTheAbiSemantics) {
  // f16 SUM accumulates in f32 and rounds once.
  const uint16_t h0 = f32_to_f16(1.f), h1 = f32_to_f16(0.00048828125f), h2 = h1;
  uint16_t h = 0;
  core::reduce_f16(&h, sources_of<core::TsrSources, uint16_t>({&h0, &h1, &h2}), 3, TSR_SUM, 1);
  EXPECT_EQ(h, f32_to_f16(f16_to_f32(h0) + f16_to_f32(h1) + f16_to_f32(h2)));
  // MIN/MAX propagate NaN from any position.
  const float f0 = 1, f1 = NAN;
  float f = 0;
  core::reduce_f32(&f, sources_of<core::TsrSources, float>({&f0, &f1}), 2, TSR_MIN, 1);
  EXPECT_TRUE(std::isnan(f));
  core::reduce_f32(&f, sources_of<core::TsrSources, float>({&f1, &f0}), 2, TSR_MAX, 1);
  EXPECT_TRUE(std::isnan(f));
  // Integers wrap; AVG accumulates wide (i32) or in 64 bits (i64) and truncates toward zero.
  const int32_t i0 = -7, i1 = 2, big = INT_MAX;
  int32_t i = 0;
  core::reduce_i32(&i, sources_of<core::TsrSources, int32_t>({&i0, &i1}), 2, TSR_AVG, 1);
  EXPECT_EQ(i, -2);
  core::reduce_i32(&i, sources_of<core::TsrSources, int32_t>({&big, &big}), 2, TSR_AVG, 1);
  EXPECT_EQ(i, INT_MAX);
  core::reduce_i32(&i, sources_of<core::TsrSources, int32_t>({&big, &big}), 2, TSR_SUM, 1);
  EXPECT_EQ(i, -2);
  const uint8_t u0 = 200, u1 = 100;
  uint8_t u = 0;
  core::reduce_u8(&u, sources_of<core::TsrSources, uint8_t>({&u0, &u1}), 2, TSR_SUM, 1);
  EXPECT_EQ(u, 44);
  core::reduce_u8(&u, sources_of<core::TsrSources, uint8_t>({&u0, &u1}), 2, TSR_AVG, 1);
  EXPECT_EQ(u, 150);
  const int64_t l0 = LLONG_MAX, l1 = 1;
  int64_t l = 0;
  core::reduce_i64(&l, sources_of<core::TsrSources, int64_t>({&l0, &l1}), 2, TSR_AVG, 1);
  EXPECT_EQ(l, LLONG_MIN / 2);
  const double d0 = 1, d1 = 2, d2 = 4;
  double d = 0;
  fp64::reduce_f64(&d, sources_of<fp64::TsrSources, double>({&d0, &d1, &d2}), 3, TSR_AVG, 1);
  EXPECT_EQ(d, 7.0 / 3);
  fp64::reduce_f64(&d, sources_of<fp64::TsrSources, double>({&d0, &d1, &d2}), 3, TSR_PROD, 1);
  EXPECT_EQ(d, 8.0);
}

}  // namespace
