#include "tessera/overlap/codec_host.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

namespace tessera::overlap {

size_t topk_k(double ratio, size_t count) {
  return std::clamp<size_t>(size_t(std::ceil(ratio * double(count))), 1, count);
}

void TopKSelector::encode(float* acc, size_t count, size_t k, bool zero_sent, int32_t* pairs) {
  // The k first in the order (|acc| descending, index ascending): a unique set on every run.
  auto before = [acc](uint32_t a, uint32_t b) {
    const float x = std::fabs(acc[a]), y = std::fabs(acc[b]);
    return x > y || (x == y && a < b);
  };
  if (!select_candidates(acc, count, k)) {
    order_.resize(count);
    std::iota(order_.begin(), order_.end(), uint32_t(0));
  }
  std::nth_element(order_.begin(), order_.begin() + ptrdiff_t(k - 1), order_.end(), before);
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = order_[j];
    float v = acc[i];
    pairs[j] = int32_t(i);
    std::memcpy(&pairs[k + j], &v, 4);
  }
  if (zero_sent) {
    for (size_t j = 0; j < k; ++j) acc[order_[j]] = 0.0f;
  }
}

// Large buckets: a threshold from a strided sample keeps about 2k candidates, and the exact top k
// are chosen among them (all of the top k are candidates whenever at least k are, since the k-th
// largest is then at or above the threshold). One pass instead of a selection over the whole
// bucket. False: too few candidates, select over everything.
bool TopKSelector::select_candidates(const float* acc, size_t count, size_t k) {
  constexpr size_t kSample = 1 << 14;
  if (count < 16 * kSample || k * 8 > count) return false;
  const size_t stride = count / kSample;
  sample_.resize(kSample);
  for (size_t j = 0; j < kSample; ++j) sample_[j] = std::fabs(acc[j * stride]);
  const size_t rank = std::min(kSample - 1, 2 * k * kSample / count + 1);
  std::nth_element(sample_.begin(), sample_.begin() + ptrdiff_t(rank), sample_.end(),
                   std::greater<float>());
  const float threshold = sample_[rank];
  order_.clear();
  for (size_t i = 0; i < count; ++i) {
    if (std::fabs(acc[i]) >= threshold) order_.push_back(uint32_t(i));
  }
  return order_.size() >= k;
}

bool topk_decode(const int32_t* pairs, int world, size_t k, size_t count, bool average,
                 float* out) {
  bool in_range = true;
  std::fill(out, out + count, 0.0f);
  for (int r = 0; r < world; ++r) {
    const int32_t* block = pairs + size_t(r) * 2 * k;
    for (size_t j = 0; j < k; ++j) {
      float v;
      std::memcpy(&v, &block[k + j], 4);
      const uint32_t i = uint32_t(block[j]);
      if (i >= count) {
        in_range = false;
        continue;
      }
      out[i] += v;
    }
  }
  if (average) {
    for (size_t i = 0; i < count; ++i) out[i] /= float(world);
  }
  return in_range;
}

PowerSgdShape powersgd_shape(size_t count, int rank) {
  const size_t cols = std::max<size_t>(1, size_t(std::ceil(std::sqrt(double(count)))));
  const size_t rows = (count + cols - 1) / cols;
  return {rows, cols, std::min({size_t(std::max(rank, 1)), rows, cols})};
}

bool powersgd_compresses(size_t count, int rank) {
  const PowerSgdShape s = powersgd_shape(count, rank);
  return (s.rows + s.cols) * s.rank < count;
}

void powersgd_initial_q(uint64_t seed, int bucket, size_t elements, float* q) {
  std::mt19937_64 rng(seed * 1000003u + uint64_t(bucket));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < elements; ++i) q[i] = normal(rng);
}

void powersgd_orthonormalise(float* p, size_t rows, size_t r) {
  for (size_t j = 0; j < r; ++j) {
    for (size_t prev = 0; prev < j; ++prev) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i) dot += double(p[i * r + j]) * p[i * r + prev];
      for (size_t i = 0; i < rows; ++i) p[i * r + j] -= float(dot) * p[i * r + prev];
    }
    double norm = 0;
    for (size_t i = 0; i < rows; ++i) norm += double(p[i * r + j]) * p[i * r + j];
    norm = std::sqrt(norm);
    const float inv = norm > 1e-30 ? float(1.0 / norm) : 0.0f;
    for (size_t i = 0; i < rows; ++i) p[i * r + j] *= inv;
  }
}

}  // namespace tessera::overlap
