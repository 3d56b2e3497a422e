// The host steps of the gradient codecs (src/codec.cc, src/powersgd.cc) as plain functions on
// host memory: top-k selection with error feedback and its decoding, PowerSGD's matrix shape,
// initial Q and orthonormalisation. The engine runs them in stream callbacks on pinned staging
// buffers; the PyTorch communication hooks (python/tessera/torch/hooks.py) run the same functions
// on CPU tensors, so a hook compresses exactly as the engine's codec does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::overlap {

// The k of top-k for a bucket of `count` elements: ceil(ratio * count), in [1, count].
size_t topk_k(double ratio, size_t count);

// Top-k selection, reusing its scratch between calls (one per bucket; not thread-safe).
class TopKSelector {
 public:
  // The k largest |acc[i]| (ties: lower index first, so every run picks the same set) written to
  // `pairs` as k int32 indices followed by k f32 bit patterns. With `zero_sent`, the selected
  // entries of acc become 0: acc is then the new error-feedback residual.
  void encode(float* acc, size_t count, size_t k, bool zero_sent, int32_t* pairs);

 private:
  bool select_candidates(const float* acc, size_t count, size_t k);
  std::vector<uint32_t> order_;  // candidate indices
  std::vector<float> sample_;
};

// The dense gradient of `count` elements from the pairs of `world` ranks (world blocks of 2k
// int32, as encode writes them), summed in rank order so that every rank gets the same bits;
// divided by world when `average`. Indices outside [0, count) are ignored (false returned).
bool topk_decode(const int32_t* pairs, int world, size_t k, size_t count, bool average, float* out);

// PowerSGD views a bucket of `count` elements as a rows x cols row-major matrix (zero-padded) and
// approximates it with rank r factors P (rows x r) and Q (cols x r).
struct PowerSgdShape {
  size_t rows = 0, cols = 0, rank = 0;
};
PowerSgdShape powersgd_shape(size_t count, int rank);
// Whether PowerSGD of rank r compresses a bucket of `count` elements at all.
bool powersgd_compresses(size_t count, int rank);
// The initial Q (cols x r, row-major), the same on every rank: normal(0, 1) from `seed` and the
// bucket's index.
void powersgd_initial_q(uint64_t seed, int bucket, size_t elements, float* q);
// Modified Gram-Schmidt on the columns of p (rows x r, row-major); a vanishing column becomes 0.
void powersgd_orthonormalise(float* p, size_t rows, size_t rank);

}  // namespace tessera::overlap
