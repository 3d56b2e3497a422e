// The f32-only kernels (router forward/backward, sum of squares) against plain double-precision
// references written here from the contract (examples/trainer/gpt/kernels.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels_test_support.h"

namespace tessera::gpt::testing {
namespace {

void expect_ok(const Status& status) {
  EXPECT_TRUE(status.ok()) << status.to_string();
}

// ---- f32-only kernels (router, sum of squares) ---------------------------------------------

class GptKernelsF32 : public KernelsTest {};

TEST_F(GptKernelsF32, RouterPicksTheTopExpertsLowerFirstOnTiesAndNormalizes) {
  const size_t tokens = 9, experts = 6, top_k = 2;
  auto logits = random_values(tokens * experts, 70, -2.0f, 2.0f);
  for (size_t e = 0; e < experts; ++e) logits[4 * experts + e] = e == 1 || e == 3 ? 1.5f : 0.0f;
  for (uint32_t normalize : {0u, 1u}) {
    SCOPED_TRACE("normalize " + std::to_string(normalize));
    std::vector<double> probs(tokens * experts), weights(tokens * top_k);
    std::vector<int32_t> index(tokens * top_k);
    for (size_t t = 0; t < tokens; ++t) {
      const float* z = &logits[t * experts];
      double m = *std::max_element(z, z + experts), sum = 0.0, chosen = 0.0;
      for (size_t e = 0; e < experts; ++e) sum += std::exp(z[e] - m);
      for (size_t e = 0; e < experts; ++e) probs[t * experts + e] = std::exp(z[e] - m) / sum;
      std::vector<int> order(experts);
      for (size_t e = 0; e < experts; ++e) order[e] = int(e);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
        return probs[t * experts + x] > probs[t * experts + y];
      });
      for (size_t j = 0; j < top_k; ++j) chosen += probs[t * experts + order[j]];
      for (size_t j = 0; j < top_k; ++j) {
        index[t * top_k + j] = order[j];
        weights[t * top_k + j] = probs[t * experts + order[j]] / (normalize ? chosen : 1.0);
      }
    }
    float* dprobs = static_cast<float*>(a().zeros(tokens * experts, 4));
    int32_t* dindex = static_cast<int32_t*>(a().zeros(tokens * top_k, 4));
    float* dweight = static_cast<float*>(a().zeros(tokens * top_k, 4));
    expect_ok(k().router_forward(s(), a().f32(logits), dprobs, dindex, dweight, tokens, experts,
                                 top_k, normalize));
    EXPECT_TRUE(close("probs", a().read_f32(dprobs, probs.size()), probs, 1e-5, 1e-7));
    EXPECT_EQ(a().read_i32(dindex, index.size()), index);
    EXPECT_TRUE(close("top_weight", a().read_f32(dweight, weights.size()), weights, 1e-5, 1e-7));
  }
}

TEST_F(GptKernelsF32, RouterBackwardFollowsTheAnalyticGradientWithAuxLoss) {
  const size_t tokens = 5, experts = 4, top_k = 2;
  const float aux_coef = 0.01f;
  auto logits = random_values(tokens * experts, 71, -2.0f, 2.0f);
  auto dtop = random_values(tokens * top_k, 72);
  const std::vector<float> fraction = {0.4f, 0.1f, 0.3f, 0.2f};
  for (uint32_t normalize : {0u, 1u}) {
    SCOPED_TRACE("normalize " + std::to_string(normalize));
    float* probs = static_cast<float*>(a().zeros(tokens * experts, 4));
    int32_t* index = static_cast<int32_t*>(a().zeros(tokens * top_k, 4));
    float* weight = static_cast<float*>(a().zeros(tokens * top_k, 4));
    expect_ok(k().router_forward(s(), a().f32(logits), probs, index, weight, tokens, experts, top_k,
                                 normalize));
    const auto p = a().read_f32(probs, tokens * experts);
    const auto idx = a().read_i32(index, tokens * top_k);
    std::vector<double> want(tokens * experts);
    for (size_t t = 0; t < tokens; ++t) {
      std::vector<double> dp(experts);
      for (size_t e = 0; e < experts; ++e) {
        dp[e] = double(aux_coef) * experts * fraction[e] / double(tokens);
      }
      double chosen = 0.0, dw_p = 0.0;
      for (size_t j = 0; j < top_k; ++j) {
        chosen += p[t * experts + idx[t * top_k + j]];
        dw_p += double(dtop[t * top_k + j]) * p[t * experts + idx[t * top_k + j]];
      }
      for (size_t j = 0; j < top_k; ++j) {
        dp[idx[t * top_k + j]] += normalize
                                      ? dtop[t * top_k + j] / chosen - dw_p / (chosen * chosen)
                                      : dtop[t * top_k + j];
      }
      double p_dp = 0.0;
      for (size_t e = 0; e < experts; ++e) p_dp += p[t * experts + e] * dp[e];
      for (size_t e = 0; e < experts; ++e) {
        want[t * experts + e] = p[t * experts + e] * (dp[e] - p_dp);
      }
    }
    float* dlogits = static_cast<float*>(a().zeros(tokens * experts, 4));
    expect_ok(k().router_backward(s(), probs, index, a().f32(dtop), a().f32(fraction), dlogits,
                                  tokens, experts, top_k, normalize, aux_coef));
    EXPECT_TRUE(close("dlogits", a().read_f32(dlogits, want.size()), want, 1e-5, 1e-6));
  }
}

TEST_F(GptKernelsF32, SumSquaresWritesOneValue) {
  for (size_t n : {0u, 1u, 7u, 1003u}) {
    auto x = random_values(n, 80);
    double want = 0.0;
    for (float v : x) want += double(v) * v;
    float* out = a().f32({-1.0f, 42.0f});
    expect_ok(k().sum_squares(s(), a().f32(x), out, n));
    EXPECT_TRUE(
        close("sum_sq n=" + std::to_string(n), a().read_f32(out, 2), {want, 42.0}, 1e-5, 1e-7));
  }
}

}  // namespace
}  // namespace tessera::gpt::testing
