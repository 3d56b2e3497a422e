// Shared by the GptKernels tests: one host device, stream and loaded kernels for the whole binary;
// per-test device arrays uploaded and downloaded through the HAL (the test never touches device
// memory: the suites run on a discrete host device); bf16 and f16 rounding as the kernels store
// them; and
// the tolerance check every comparison uses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels.h"
#include "tessera/hal/hal.h"

namespace tessera::gpt::testing {

constexpr uint32_t kF32 = TSR_DTYPE_F32;
constexpr uint32_t kBf16 = TSR_DTYPE_BF16;
constexpr uint32_t kF16 = TSR_DTYPE_F16;

inline const char* dtype_name(uint32_t dtype) {
  return dtype == kBf16 ? "bf16" : dtype == kF16 ? "f16" : "f32";
}

// float -> bf16 bits, round to nearest even (what the kernels do when they store bf16).
inline uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
inline float from_bf16(uint16_t value) {
  const uint32_t bits = uint32_t(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}
// float -> IEEE f16 bits, round to nearest even, overflow (>= 65520) to infinity, NaN to 0x7e00:
// written from the definition in double arithmetic (nearbyint rounds to even), independently of
// the kernels' bit manipulation.
inline uint16_t to_f16(float value) {
  if (std::isnan(value)) return 0x7e00u;
  const uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  const double a = std::fabs(double(value));
  if (a >= 65520.0) return uint16_t(sign | 0x7c00u);
  if (a < std::ldexp(1.0, -14)) {  // subnormal steps of 2^-24 (1024 steps is the first normal)
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int exponent = e - 1;
  double mantissa = std::nearbyint(std::ldexp(a, 10 - exponent));  // [1024, 2048]
  if (mantissa == 2048.0) {
    mantissa = 1024.0;
    ++exponent;
  }
  return uint16_t(sign | uint16_t((exponent + 15) << 10) | uint16_t(mantissa - 1024.0));
}
inline float from_f16(uint16_t value) {
  const int exponent = (value >> 10) & 0x1f;
  const int mantissa = value & 0x3ff;
  double magnitude = exponent == 0 ? std::ldexp(double(mantissa), -24)
                                   : std::ldexp(double(1024 + mantissa), exponent - 25);
  if (exponent == 31) {
    magnitude = mantissa == 0 ? double(INFINITY) : double(NAN);
  }
  return float((value & 0x8000u) ? -magnitude : magnitude);
}
// The value an activation of `dtype` holds after storing `value`.
inline float round_to(uint32_t dtype, float value) {
  if (dtype == kF16) return from_f16(to_f16(value));
  return dtype == kBf16 ? from_bf16(to_bf16(value)) : value;
}
inline std::vector<float> round_all(uint32_t dtype, std::vector<float> values) {
  for (float& v : values) v = round_to(dtype, v);
  return values;
}

inline std::vector<float> random_values(size_t n, uint64_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// |got - want| <= atol * max|want| + rtol * |want| for every element, the first failures named.
inline ::testing::AssertionResult close(const std::string& what, const std::vector<float>& got,
                                        const std::vector<double>& want, double rtol, double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values, expected " << want.size();
  }
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  int bad = 0;
  std::string report;
  for (size_t i = 0; i < got.size(); ++i) {
    const double limit = atol * scale + rtol * std::abs(want[i]);
    if (!(std::abs(double(got[i]) - want[i]) <= limit)) {
      if (++bad <= 5) {
        char line[200];
        std::snprintf(line, sizeof line, "\n  [%zu] got %.8g want %.8g (limit %.3g)", i,
                      double(got[i]), want[i], limit);
        report += line;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " values off (max |want| " << scale << ")" << report;
}

// The device every test uses (the first host device), its stream and the kernels loaded on it.
struct Device {
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  std::optional<hal::Stream> stream;
  GptKernels kernels;
};

// nullptr (after printing why) when the host backend or the kernels cannot be had.
Device* shared_device();

// A test's device arrays: freed when the test ends.
class Arrays {
 public:
  explicit Arrays(Device& d) : d_(d) {}

  // `count` elements of `bytes_each`, zeroed.
  void* zeros(size_t count, size_t bytes_each) {
    auto buffer = d_.device->allocate(std::max<size_t>(count * bytes_each, 16));
    EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
    if (!buffer.ok()) return nullptr;
    void* ptr = buffer.value().data();
    check(d_.stream->memset(ptr, 0, count * bytes_each));
    buffers_.push_back(std::move(buffer.value()));
    return ptr;
  }
  // Activations of `dtype` (f32, bf16 or f16, rounded to nearest even).
  void* act(const std::vector<float>& values, uint32_t dtype) {
    if (dtype == kF32) return f32(values);
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i] = dtype == kF16 ? to_f16(values[i]) : to_bf16(values[i]);
    }
    return upload(bits.data(), bits.size() * 2);
  }
  float* f32(const std::vector<float>& values) {
    return static_cast<float*>(upload(values.data(), values.size() * 4));
  }
  int32_t* i32(const std::vector<int32_t>& values) {
    return static_cast<int32_t*>(upload(values.data(), values.size() * 4));
  }
  void* act_zeros(size_t count, uint32_t dtype) { return zeros(count, dtype == kF32 ? 4 : 2); }

  // Waits for the stream, then reads `count` activations of `dtype` back as floats.
  std::vector<float> read_act(const void* ptr, size_t count, uint32_t dtype) {
    if (dtype == kF32) return read_f32(ptr, count);
    std::vector<uint16_t> bits(count);
    download(bits.data(), ptr, count * 2);
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
      out[i] = dtype == kF16 ? from_f16(bits[i]) : from_bf16(bits[i]);
    }
    return out;
  }
  std::vector<float> read_f32(const void* ptr, size_t count) {
    std::vector<float> out(count);
    download(out.data(), ptr, count * 4);
    return out;
  }
  std::vector<int32_t> read_i32(const void* ptr, size_t count) {
    std::vector<int32_t> out(count);
    download(out.data(), ptr, count * 4);
    return out;
  }

  // Records a failed enqueue or synchronize as a test failure.
  static void check(const Status& status) { EXPECT_TRUE(status.ok()) << status.to_string(); }

 private:
  void* upload(const void* data, size_t bytes) {
    void* ptr = zeros(bytes, 1);
    if (ptr != nullptr && bytes > 0) check(d_.stream->copy(ptr, data, bytes));
    check(d_.stream->synchronize());  // the copy may read `data` later; callers pass temporaries
    return ptr;
  }
  void download(void* out, const void* ptr, size_t bytes) {
    if (bytes > 0) check(d_.stream->copy(out, ptr, bytes));
    check(d_.stream->synchronize());
  }

  Device& d_;
  std::vector<hal::DeviceBuffer> buffers_;
};

// The base of every kernels test: skips when no device; `k` the kernels, `s` the stream.
class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = shared_device();
    if (d_ == nullptr) GTEST_SKIP() << "no host device with the GPT kernels";
    arrays_.emplace(*d_);
  }
  const GptKernels& k() const { return d_->kernels; }
  const hal::Stream& s() const { return *d_->stream; }
  Arrays& a() { return *arrays_; }

  Device* d_ = nullptr;
  std::optional<Arrays> arrays_;
};

// Tests that run for f32, bf16 and f16 activations.
class DtypeTest : public KernelsTest, public ::testing::WithParamInterface<uint32_t> {
 protected:
  uint32_t dtype() const { return GetParam(); }
  // bf16 (f16): inputs are rounded on upload (the references use the rounded values), and each
  // output is one bf16 (f16) rounding, 2^-8 (2^-11) relative, away plus f32 work on 16-bit
  // intermediates: four steps of the type.
  double rtol() const { return dtype() == kBf16 ? 1.0 / 64 : dtype() == kF16 ? 1.0 / 512 : 2e-5; }
  double atol() const { return rtol(); }
};

std::string dtype_param_name(const ::testing::TestParamInfo<uint32_t>& info);

}  // namespace tessera::gpt::testing
