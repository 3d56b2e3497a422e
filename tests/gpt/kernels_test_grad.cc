// The gradient kernels against central finite differences of the kernels' own f32 forward (with a
// negative control: a wrong gradient must fail the same check), repeat runs bitwise equal, and
// the refusals: a bad dtype names the kernel, unloaded kernels say so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "kernels_test_support.h"

namespace tessera::gpt::testing {
namespace {

void expect_ok(const Status& status) {
  EXPECT_TRUE(status.ok()) << status.to_string();
}

using Loss = std::function<double(const std::vector<float>&)>;

double weighted_sum(const std::vector<float>& values, const std::vector<float>& weights) {
  double sum = 0.0;
  for (size_t i = 0; i < values.size(); ++i) sum += double(values[i]) * weights[i];
  return sum;
}

// Compares `analytic` (d loss / d x) with central differences of `loss` at up to 16 indices of
// `x` spread over it: |analytic - fd| <= tol * max |analytic| at each.
::testing::AssertionResult matches_differences(const std::string& what,
                                               const std::vector<float>& analytic,
                                               const std::vector<float>& x, const Loss& loss,
                                               double tol = 5e-3, float h = 1e-2f) {
  if (analytic.size() != x.size()) {
    return ::testing::AssertionFailure()
           << what << ": gradient size " << analytic.size() << " for " << x.size() << " inputs";
  }
  double scale = 1e-6;
  for (float g : analytic) scale = std::max(scale, std::abs(double(g)));
  const size_t checks = std::min<size_t>(x.size(), 16);
  std::vector<float> probe = x;
  for (size_t c = 0; c < checks; ++c) {
    const size_t i = checks == 1 ? 0 : c * (x.size() - 1) / (checks - 1);
    probe[i] = x[i] + h;
    const double plus = loss(probe);
    const double step_up = double(probe[i]) - x[i];
    probe[i] = x[i] - h;
    const double minus = loss(probe);
    const double step_down = double(x[i]) - probe[i];
    probe[i] = x[i];
    const double fd = (plus - minus) / (step_up + step_down);
    if (!(std::abs(fd - analytic[i]) <= tol * scale)) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "]: analytic " << analytic[i] << ", finite difference " << fd
             << " (limit " << tol * scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

class GptGradients : public KernelsTest {
 protected:
  // Fresh device arrays for one forward evaluation (freed when it returns).
  Arrays scratch() { return Arrays(*d_); }
};

TEST_F(GptGradients, NormGradientsMatchFiniteDifferences) {
  const size_t rows = 3, cols = 9;
  const float eps = 1e-5f;
  auto x = random_values(rows * cols, 100, -1.0f, 2.0f);
  auto w = random_values(cols, 101, 0.5f, 1.5f), b = random_values(cols, 102);
  auto dy = random_values(rows * cols, 103);
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    SCOPED_TRACE(kind == NormKind::kLayerNorm ? "LayerNorm" : "RMSNorm");
    auto forward = [&](const std::vector<float>& xs, const std::vector<float>& ws,
                       const std::vector<float>& bs) {
      Arrays t = scratch();
      void* y = t.act_zeros(rows * cols, kF32);
      float* mean = static_cast<float*>(t.zeros(rows, 4));
      float* rstd = static_cast<float*>(t.zeros(rows, 4));
      expect_ok(k().norm_forward(s(), t.f32(xs), t.f32(ws), t.f32(bs), y, mean, rstd, rows, cols,
                                 eps, uint32_t(kind), kF32));
      return weighted_sum(t.read_f32(y, rows * cols), dy);
    };
    float* mean = static_cast<float*>(a().zeros(rows, 4));
    float* rstd = static_cast<float*>(a().zeros(rows, 4));
    float* dx = a().f32(x);
    float* dw = a().f32(w);
    expect_ok(k().norm_forward(s(), dx, dw, a().f32(b), a().act_zeros(rows * cols, kF32), mean,
                               rstd, rows, cols, eps, uint32_t(kind), kF32));
    float* gx = static_cast<float*>(a().zeros(rows * cols, 4));
    float* gw = static_cast<float*>(a().zeros(cols, 4));
    float* gb = static_cast<float*>(a().zeros(cols, 4));
    float* ddy = a().f32(dy);
    expect_ok(k().norm_backward_input(s(), ddy, dx, dw, mean, rstd, gx, rows, cols, uint32_t(kind),
                                      0, kF32));
    expect_ok(k().norm_backward_params(s(), ddy, dx, mean, rstd, gw, gb, rows, cols, uint32_t(kind),
                                       kF32));
    EXPECT_TRUE(matches_differences("dx", a().read_f32(gx, rows * cols), x,
                                    [&](const auto& v) { return forward(v, w, b); }));
    EXPECT_TRUE(matches_differences("dweight", a().read_f32(gw, cols), w,
                                    [&](const auto& v) { return forward(x, v, b); }));
    if (kind == NormKind::kLayerNorm) {
      EXPECT_TRUE(matches_differences("dbias", a().read_f32(gb, cols), b,
                                      [&](const auto& v) { return forward(x, w, v); }));
    }
  }
}

TEST_F(GptGradients, AttentionGradientsMatchFiniteDifferencesForMhaAndGqa) {
  const size_t batch = 2, seq = 4, head_dim = 4;
  for (auto shape : {std::pair<size_t, size_t>{2, 2}, {4, 2}}) {
    // Named copies, not structured bindings: the lambdas below capture them (clang 14 cannot).
    const size_t heads = shape.first, kv_heads = shape.second;
    SCOPED_TRACE("heads " + std::to_string(heads) + " kv_heads " + std::to_string(kv_heads));
    const size_t q_size = batch * seq * heads * head_dim,
                 kv_size = batch * seq * kv_heads * head_dim;
    const float scale = 0.5f;
    auto q = random_values(q_size, 110, -1.5f, 1.5f), kk = random_values(kv_size, 111, -1.5f, 1.5f);
    auto v = random_values(kv_size, 112), dout = random_values(q_size, 113);
    auto forward = [&](const std::vector<float>& qs, const std::vector<float>& ks,
                       const std::vector<float>& vs) {
      Arrays t = scratch();
      void* out = t.act_zeros(q_size, kF32);
      float* lse = static_cast<float*>(t.zeros(batch * heads * seq, 4));
      expect_ok(k().attention_forward(s(), t.f32(qs), t.f32(ks), t.f32(vs), out, lse, batch, seq,
                                      heads, kv_heads, head_dim, scale, kF32));
      return weighted_sum(t.read_f32(out, q_size), dout);
    };
    float* dq_in = a().f32(q);
    float* dk_in = a().f32(kk);
    float* dv_in = a().f32(v);
    void* out = a().act_zeros(q_size, kF32);
    float* lse = static_cast<float*>(a().zeros(batch * heads * seq, 4));
    float* delta = static_cast<float*>(a().zeros(batch * heads * seq, 4));
    void* dq = a().act_zeros(q_size, kF32);
    void* dk = a().act_zeros(kv_size, kF32);
    void* dv = a().act_zeros(kv_size, kF32);
    expect_ok(k().attention_forward(s(), dq_in, dk_in, dv_in, out, lse, batch, seq, heads, kv_heads,
                                    head_dim, scale, kF32));
    expect_ok(k().attention_backward(s(), dq_in, dk_in, dv_in, out, a().f32(dout), lse, delta, dq,
                                     dk, dv, batch, seq, heads, kv_heads, head_dim, scale, kF32));
    EXPECT_TRUE(matches_differences("dq", a().read_f32(dq, q_size), q,
                                    [&](const auto& x) { return forward(x, kk, v); }));
    EXPECT_TRUE(matches_differences("dk", a().read_f32(dk, kv_size), kk,
                                    [&](const auto& x) { return forward(q, x, v); }));
    EXPECT_TRUE(matches_differences("dv", a().read_f32(dv, kv_size), v,
                                    [&](const auto& x) { return forward(q, kk, x); }));
  }
}

TEST_F(GptGradients, GeluGradientMatchesFiniteDifferencesAndAWrongOneDoesNot) {
  const size_t n = 23;
  auto x = random_values(n, 120, -3.0f, 3.0f), dy = random_values(n, 121);
  auto forward = [&](const std::vector<float>& xs) {
    Arrays t = scratch();
    void* y = t.act_zeros(n, kF32);
    expect_ok(k().gelu_forward(s(), t.f32(xs), y, n, kF32));
    return weighted_sum(t.read_f32(y, n), dy);
  };
  void* dx = a().act_zeros(n, kF32);
  expect_ok(k().gelu_backward(s(), a().f32(x), a().f32(dy), dx, n, kF32));
  const std::vector<float> analytic = a().read_f32(dx, n);
  EXPECT_TRUE(matches_differences("gelu dx", analytic, x, forward));
  // Negative control: 3% of the largest gradient off at one probed element (index 0 always is)
  // must be caught by the same check.
  std::vector<float> wrong = analytic;
  float largest = 0.0f;
  for (float g : analytic) largest = std::max(largest, std::abs(g));
  wrong[0] += 0.03f * largest;
  EXPECT_FALSE(matches_differences("gelu dx, perturbed", wrong, x, forward));
}

TEST_F(GptGradients, SwigluGradientsMatchFiniteDifferences) {
  const size_t n = 19;
  auto gate = random_values(n, 130, -3.0f, 3.0f), up = random_values(n, 131),
       dy = random_values(n, 132);
  auto forward = [&](const std::vector<float>& g, const std::vector<float>& u) {
    Arrays t = scratch();
    void* y = t.act_zeros(n, kF32);
    expect_ok(k().swiglu_forward(s(), t.f32(g), t.f32(u), y, n, kF32));
    return weighted_sum(t.read_f32(y, n), dy);
  };
  void* dgate = a().act_zeros(n, kF32);
  void* dup = a().act_zeros(n, kF32);
  expect_ok(k().swiglu_backward(s(), a().f32(gate), a().f32(up), a().f32(dy), dgate, dup, n, kF32));
  EXPECT_TRUE(matches_differences("dgate", a().read_f32(dgate, n), gate,
                                  [&](const auto& x) { return forward(x, up); }));
  EXPECT_TRUE(matches_differences("dup", a().read_f32(dup, n), up,
                                  [&](const auto& x) { return forward(gate, x); }));
}

TEST_F(GptGradients, CrossEntropyGradientMatchesFiniteDifferences) {
  const size_t rows = 4, vocab = 7;
  const float scale = 0.25f;  // the mean over rows
  const std::vector<int32_t> targets = {3, 0, 6, 2};
  auto logits = random_values(rows * vocab, 140, -2.0f, 2.0f);
  // loss = scale * sum_r loss_r, through the four forward kernels.
  auto forward = [&](const std::vector<float>& z) {
    Arrays t = scratch();
    const float* dz = t.f32(z);
    const int32_t* dt = t.i32(targets);
    float* m = static_cast<float*>(t.zeros(rows, 4));
    float* se = static_cast<float*>(t.zeros(rows, 4));
    float* tl = static_cast<float*>(t.zeros(rows, 4));
    float* loss = static_cast<float*>(t.zeros(rows, 4));
    expect_ok(k().xent_max(s(), dz, m, rows, vocab));
    expect_ok(k().xent_sum_exp(s(), dz, m, se, rows, vocab));
    expect_ok(k().xent_target(s(), dz, dt, tl, rows, 0, vocab));
    expect_ok(k().xent_loss(s(), m, se, tl, loss, rows));
    return scale * weighted_sum(t.read_f32(loss, rows), std::vector<float>(rows, 1.0f));
  };
  const float* dz = a().f32(logits);
  float* m = static_cast<float*>(a().zeros(rows, 4));
  float* se = static_cast<float*>(a().zeros(rows, 4));
  void* grad = a().act_zeros(rows * vocab, kF32);
  expect_ok(k().xent_max(s(), dz, m, rows, vocab));
  expect_ok(k().xent_sum_exp(s(), dz, m, se, rows, vocab));
  expect_ok(k().xent_backward(s(), dz, a().i32(targets), m, se, grad, rows, 0, vocab, scale, kF32));
  EXPECT_TRUE(matches_differences("dlogits", a().read_f32(grad, rows * vocab), logits, forward));
}

TEST_F(GptGradients, RouterGradientWithAuxLossMatchesFiniteDifferences) {
  const size_t tokens = 4, experts = 5, top_k = 2;
  const float aux_coef = 0.5f;  // large enough that a wrong aux term shows
  const std::vector<float> fraction = {0.3f, 0.1f, 0.25f, 0.15f, 0.2f};
  // Well separated logits (gaps 0.6 >> the step), so no perturbation changes the top-k choice.
  std::vector<float> logits(tokens * experts);
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t e = 0; e < experts; ++e) logits[t * experts + e] = 0.6f * float((e * 3 + t) % 5);
  }
  auto dtop = random_values(tokens * top_k, 150);
  for (uint32_t normalize : {0u, 1u}) {
    SCOPED_TRACE("normalize " + std::to_string(normalize));
    // sum dtop . top_weight + aux_coef * experts * sum_e fraction[e] * mean_t probs[t, e]
    auto forward = [&](const std::vector<float>& z) {
      Arrays t = scratch();
      float* probs = static_cast<float*>(t.zeros(tokens * experts, 4));
      int32_t* index = static_cast<int32_t*>(t.zeros(tokens * top_k, 4));
      float* weight = static_cast<float*>(t.zeros(tokens * top_k, 4));
      expect_ok(k().router_forward(s(), t.f32(z), probs, index, weight, tokens, experts, top_k,
                                   normalize));
      const auto p = t.read_f32(probs, tokens * experts);
      double aux = 0.0;
      for (size_t i = 0; i < p.size(); ++i) aux += fraction[i % experts] * double(p[i]);
      aux *= double(aux_coef) * experts / double(tokens);
      return weighted_sum(t.read_f32(weight, tokens * top_k), dtop) + aux;
    };
    float* probs = static_cast<float*>(a().zeros(tokens * experts, 4));
    int32_t* index = static_cast<int32_t*>(a().zeros(tokens * top_k, 4));
    float* weight = static_cast<float*>(a().zeros(tokens * top_k, 4));
    float* dlogits = static_cast<float*>(a().zeros(tokens * experts, 4));
    expect_ok(k().router_forward(s(), a().f32(logits), probs, index, weight, tokens, experts, top_k,
                                 normalize));
    expect_ok(k().router_backward(s(), probs, index, a().f32(dtop), a().f32(fraction), dlogits,
                                  tokens, experts, top_k, normalize, aux_coef));
    EXPECT_TRUE(
        matches_differences("dlogits", a().read_f32(dlogits, tokens * experts), logits, forward));
  }
}

TEST_F(GptGradients, CombineGradientsMatchFiniteDifferences) {
  const size_t rows = 6, cols = 5, tokens = 3, top_k = 2;
  const std::vector<int32_t> slot = {0, 4, 5, -1, 2, 1};
  auto expert_out = random_values(rows * cols, 160), weight = random_values(tokens * top_k, 161);
  auto dout = random_values(tokens * cols, 162);
  auto forward = [&](const std::vector<float>& e, const std::vector<float>& w) {
    Arrays t = scratch();
    void* out = t.act_zeros(tokens * cols, kF32);
    expect_ok(
        k().combine_rows(s(), t.f32(e), t.i32(slot), t.f32(w), out, tokens, top_k, cols, kF32));
    return weighted_sum(t.read_f32(out, tokens * cols), dout);
  };
  void* dexpert = a().act_zeros(rows * cols, kF32);  // row 3 is no slot's: stays 0
  float* dweight = static_cast<float*>(a().zeros(tokens * top_k, 4));
  expect_ok(k().combine_backward(s(), a().f32(dout), a().f32(expert_out), a().i32(slot),
                                 a().f32(weight), dexpert, dweight, tokens, top_k, cols, kF32));
  EXPECT_TRUE(matches_differences("dexpert_out", a().read_f32(dexpert, rows * cols), expert_out,
                                  [&](const auto& x) { return forward(x, weight); }));
  EXPECT_TRUE(matches_differences("dweight", a().read_f32(dweight, tokens * top_k), weight,
                                  [&](const auto& x) { return forward(expert_out, x); }));
}

// ---- determinism and refusals ----------------------------------------------------------------

class GptKernelsRuns : public KernelsTest {};

TEST_F(GptKernelsRuns, RepeatRunsAreBitwiseEqual) {
  for (uint32_t dtype : {kF32, kBf16, kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t batch = 2, seq = 9, heads = 4, kv_heads = 2, head_dim = 16;
    const size_t q_size = batch * seq * heads * head_dim, kv_size = q_size / 2;
    auto q = random_values(q_size, 170), kk = random_values(kv_size, 171);
    auto v = random_values(kv_size, 172), dout = random_values(q_size, 173);
    auto run = [&] {
      Arrays t(*d_);
      void* dq_in = t.act(q, dtype);
      void* dk_in = t.act(kk, dtype);
      void* dv_in = t.act(v, dtype);
      void* out = t.act_zeros(q_size, dtype);
      float* lse = static_cast<float*>(t.zeros(batch * heads * seq, 4));
      float* delta = static_cast<float*>(t.zeros(batch * heads * seq, 4));
      void* dq = t.act_zeros(q_size, dtype);
      void* dk = t.act_zeros(kv_size, dtype);
      void* dv = t.act_zeros(kv_size, dtype);
      float* sum_sq = static_cast<float*>(t.zeros(1, 4));
      expect_ok(k().attention_forward(s(), dq_in, dk_in, dv_in, out, lse, batch, seq, heads,
                                      kv_heads, head_dim, 0.25f, dtype));
      expect_ok(k().attention_backward(s(), dq_in, dk_in, dv_in, out, t.act(dout, dtype), lse,
                                       delta, dq, dk, dv, batch, seq, heads, kv_heads, head_dim,
                                       0.25f, dtype));
      expect_ok(k().sum_squares(s(), lse, sum_sq, batch * heads * seq));
      std::vector<float> all = t.read_act(out, q_size, dtype);
      for (auto part : {t.read_f32(lse, batch * heads * seq), t.read_act(dq, q_size, dtype),
                        t.read_act(dk, kv_size, dtype), t.read_act(dv, kv_size, dtype),
                        t.read_f32(sum_sq, 1)}) {
        all.insert(all.end(), part.begin(), part.end());
      }
      return all;
    };
    const auto first = run(), second = run();
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
  }
}

TEST_F(GptKernelsRuns, F16StoresRoundToNearestEvenAndOverflowToInfinity) {
  // Every input is an exact f16; each sum is what the store must round: two ties to even, the
  // largest finite f16 kept, and the first values past it (65520 ties up) becoming infinities.
  const float u = std::ldexp(1.0f, -11), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, 1.0f + 2 * u, 65504.0f, 65504.0f, 60000.0f, -60000.0f, 3.0f};
  const std::vector<float> y = {u, u, 8.0f, 16.0f, 10000.0f, -10000.0f, 0.25f};
  const std::vector<float> want = {1.0f, 1.0f + 4 * u, 65504.0f, inf, inf, -inf, 3.25f};
  void* out = a().act_zeros(x.size(), kF16);
  expect_ok(k().add(s(), a().act(x, kF16), a().act(y, kF16), out, x.size(), kF16));
  const std::vector<float> got = a().read_act(out, x.size(), kF16);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "sum " << i;
  EXPECT_EQ(a().read_act(a().act(x, kF16), x.size(), kF16), x);  // the inputs are exact

  // Every finite f16 plus zero comes back as itself; random sums spanning subnormals to overflow
  // round exactly as the reference conversion (to_f16, written from the definition) does.
  std::vector<float> every, zeros;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    if ((bits & 0x7c00u) != 0x7c00u) every.push_back(from_f16(uint16_t(bits)));
  }
  zeros.assign(every.size(), 0.0f);
  void* same = a().act_zeros(every.size(), kF16);
  expect_ok(k().add(s(), a().act(every, kF16), a().act(zeros, kF16), same, every.size(), kF16));
  const std::vector<float> back = a().read_act(same, every.size(), kF16);
  size_t changed = 0;
  for (size_t i = 0; i < every.size(); ++i) changed += back[i] != every[i] ? 1 : 0;
  EXPECT_EQ(changed, 0u) << "f16 values not kept by a round trip through the kernel";
  std::mt19937_64 rng(160);
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::vector<float> p, q;
  for (int i = 0; i < 20000; ++i) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    const float u1 = random_values(1, rng())[0], u2 = random_values(1, rng())[0];
    p.push_back(from_f16(to_f16(u1 * scale)));
    q.push_back(from_f16(to_f16(u2 * scale)));
  }
  void* sums = a().act_zeros(p.size(), kF16);
  expect_ok(k().add(s(), a().act(p, kF16), a().act(q, kF16), sums, p.size(), kF16));
  const std::vector<float> got_sums = a().read_act(sums, p.size(), kF16);
  int bad = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const float want_sum = from_f16(to_f16(p[i] + q[i]));
    const bool both_nan = std::isnan(got_sums[i]) && std::isnan(want_sum);  // inf - inf
    if (!both_nan && std::memcmp(&got_sums[i], &want_sum, sizeof(float)) != 0 && ++bad <= 5) {
      ADD_FAILURE() << p[i] << " + " << q[i] << " stored " << got_sums[i] << ", want " << want_sum;
    }
  }
}

TEST_F(GptKernelsRuns, ABadDtypeOrKindFailsTheStreamNamingTheKernel) {
  struct Case {
    const char* kernel;
    const char* detail;
    std::function<Status(const hal::Stream&, void*)> launch;
  };
  const std::vector<Case> cases = {
      {"tsr_gpt_gelu_forward", "dtype 7",
       [&](const hal::Stream& st, void* p) { return k().gelu_forward(st, p, p, 4, 7); }},
      {"tsr_gpt_norm_forward", "kind 5",
       [&](const hal::Stream& st, void* p) {
         return k().norm_forward(st, p, p, nullptr, p, static_cast<float*>(p),
                                 static_cast<float*>(p), 1, 4, 1e-5f, 5, kF32);
       }},
      {"tsr_gpt_adamw", "copy_dtype 3",
       [&](const hal::Stream& st, void* p) {
         float* f = static_cast<float*>(p);
         return k().adamw(st, f, f, f, f, p, 4, 0.1f, 0.9f, 0.9f, 1e-8f, 0.0f, 1.0f, 1.0f, 1.0f, 3);
       }},
  };
  for (const Case& c : cases) {
    auto stream = d_->device->create_stream();  // a failure is sticky: one stream per case
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    void* p = a().zeros(16, 4);
    expect_ok(c.launch(stream.value(), p));
    const Status status = stream.value().synchronize();
    EXPECT_FALSE(status.ok()) << c.kernel;
    EXPECT_NE(status.message().find(c.kernel), std::string::npos) << status.to_string();
    EXPECT_NE(status.message().find(c.detail), std::string::npos) << status.to_string();
  }
}

TEST_F(GptKernelsRuns, LoadsTheDevicesImageAndUnloadedKernelsRefuse) {
  // The host backend takes only the host image; a GPU (TESSERA_TEST_BACKEND=cuda) its own.
  const char* backend = std::getenv("TESSERA_TEST_BACKEND");
  if (backend == nullptr || *backend == '\0' || std::string_view(backend) == "host") {
    EXPECT_STREQ(k().format_name(), "host-elf");
  } else {
    EXPECT_STRNE(k().format_name(), "host-elf");
  }
  GptKernels unloaded;
  EXPECT_STREQ(unloaded.format_name(), "none");
  const Status status = unloaded.add(s(), nullptr, nullptr, nullptr, 0, kF32);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("tsr_gpt_add"), std::string::npos) << status.to_string();
}

}  // namespace
}  // namespace tessera::gpt::testing
