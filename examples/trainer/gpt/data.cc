#include "data.h"

#include <cmath>
#include <map>

namespace tessera::gpt {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from the next state of `state`.
double uniform(uint64_t& state) {
  state = mix(state);
  return double(state >> 11) * 0x1.0p-53;
}

}  // namespace

MarkovCorpus::MarkovCorpus(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {
  next_.resize(size_t(vocab) * kSuccessors);
  for (int64_t v = 0; v < vocab; ++v) {
    for (int j = 0; j < kSuccessors; ++j) {
      next_[size_t(v) * kSuccessors + size_t(j)] =
          int32_t(mix(seed ^ mix(uint64_t(v) * kSuccessors + uint64_t(j))) % uint64_t(vocab));
    }
  }
}

Batch MarkovCorpus::batch(uint64_t first, int64_t batch, int64_t seq) const {
  Batch out;
  out.tokens.reserve(size_t(batch * seq));
  out.targets.reserve(size_t(batch * seq));
  for (int64_t b = 0; b < batch; ++b) {
    uint64_t state = mix(seed_ ^ mix(0x5eed0000ull + first + uint64_t(b)));
    state = mix(state);
    int32_t token = int32_t(state % uint64_t(vocab_));
    for (int64_t s = 0; s < seq; ++s) {
      out.tokens.push_back(token);
      const double u = uniform(state);
      int j = 0;
      double acc = kSuccessorProbs[0];
      while (j + 1 < kSuccessors && u >= acc) acc += kSuccessorProbs[size_t(++j)];
      token = successor(token, j);
      out.targets.push_back(token);
    }
  }
  return out;
}

double MarkovCorpus::entropy_floor() const {
  double total = 0;
  for (int64_t v = 0; v < vocab_; ++v) {
    std::map<int32_t, double> p;
    for (int j = 0; j < kSuccessors; ++j) p[successor(int32_t(v), j)] += kSuccessorProbs[size_t(j)];
    for (const auto& [token, q] : p) total -= q * std::log(q);
  }
  return total / double(vocab_);
}

}  // namespace tessera::gpt
