// Every GptKernels kernel against a plain double-precision reference written here from the
// contract (examples/trainer/gpt/kernels.h), for f32, bf16 and f16 activations, at odd sizes.
// Inputs are rounded to the activation type before the reference sees them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels_test_support.h"

namespace tessera::gpt::testing {
namespace {

void expect_ok(const Status& status) {
  EXPECT_TRUE(status.ok()) << status.to_string();
}

std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}
double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST_P(DtypeTest, AddSumsElementwiseAndMayWriteOverAnInput) {
  const size_t n = 1001;
  auto x = round_all(dtype(), random_values(n, 1)), y = round_all(dtype(), random_values(n, 2));
  void* dx = a().act(x, dtype());
  void* dy = a().act(y, dtype());
  void* out = a().act_zeros(n, dtype());
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = double(x[i]) + y[i];
  expect_ok(k().add(s(), dx, dy, out, n, dtype()));
  EXPECT_TRUE(close("add", a().read_act(out, n, dtype()), want, rtol(), atol()));
  expect_ok(k().add(s(), dx, dy, dx, n, dtype()));
  EXPECT_TRUE(close("add into a", a().read_act(dx, n, dtype()), want, rtol(), atol()));
}

TEST_P(DtypeTest, BiasAddAndBiasGradFollowTheReference) {
  const size_t rows = 7, cols = 13;
  auto y = round_all(dtype(), random_values(rows * cols, 3));
  auto bias = round_all(dtype(), random_values(cols, 4));
  auto dbias0 = random_values(cols, 5);
  void* dy = a().act(y, dtype());
  float* dbias = a().f32(dbias0);
  std::vector<double> want(rows * cols), want_grad(to_double(dbias0));
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      want[r * cols + c] = double(y[r * cols + c]) + bias[c];
      want_grad[c] += y[r * cols + c];
    }
  }
  expect_ok(k().bias_grad(s(), dy, dbias, rows, cols, dtype()));
  EXPECT_TRUE(close("bias_grad", a().read_f32(dbias, cols), want_grad, 1e-5, 1e-5));
  expect_ok(k().bias_add(s(), dy, a().act(bias, dtype()), rows, cols, dtype()));
  EXPECT_TRUE(close("bias_add", a().read_act(dy, rows * cols, dtype()), want, rtol(), atol()));
}

TEST_P(DtypeTest, EmbeddingsLookUpLocalRowsAndAccumulateTheirGradients) {
  const size_t seq = 5, batch = 2, tokens_count = seq * batch, hidden = 7;
  const int64_t vocab_begin = 3, vocab_count = 6;
  const std::vector<int32_t> tokens = {0, 3, 8, 11, 4, 4, 2, 9, 5, 7};  // 0, 2, 9, 11: not local
  auto wte = round_all(dtype(), random_values(vocab_count * hidden, 6));
  auto wpe = round_all(dtype(), random_values(seq * hidden, 7));
  auto dout = round_all(dtype(), random_values(tokens_count * hidden, 8));
  auto dwte0 = random_values(vocab_count * hidden, 9), dwpe0 = random_values(seq * hidden, 10);
  std::vector<double> want(tokens_count * hidden), want_no_wpe(want.size());
  std::vector<double> want_dwte(to_double(dwte0)), want_dwpe(to_double(dwpe0));
  for (size_t t = 0; t < tokens_count; ++t) {
    const int64_t row = tokens[t] - vocab_begin;
    const bool local = row >= 0 && row < vocab_count;
    for (size_t h = 0; h < hidden; ++h) {
      const double te = local ? wte[row * hidden + h] : 0.0;
      want_no_wpe[t * hidden + h] = te;
      want[t * hidden + h] = te + wpe[(t % seq) * hidden + h];
      if (local) want_dwte[row * hidden + h] += dout[t * hidden + h];
      want_dwpe[(t % seq) * hidden + h] += dout[t * hidden + h];
    }
  }
  const int32_t* dtokens = a().i32(tokens);
  void* dwte_act = a().act(wte, dtype());
  void* out = a().act_zeros(tokens_count * hidden, dtype());
  expect_ok(k().embed_forward(s(), dtokens, dwte_act, a().act(wpe, dtype()), out, tokens_count,
                              hidden, seq, vocab_begin, vocab_count, dtype()));
  EXPECT_TRUE(
      close("embed_forward", a().read_act(out, want.size(), dtype()), want, rtol(), atol()));
  expect_ok(k().embed_forward(s(), dtokens, dwte_act, nullptr, out, tokens_count, hidden, seq,
                              vocab_begin, vocab_count, dtype()));
  EXPECT_TRUE(close("embed_forward without wpe", a().read_act(out, want.size(), dtype()),
                    want_no_wpe, rtol(), atol()));
  float* dwte = a().f32(dwte0);
  float* dwpe = a().f32(dwpe0);
  expect_ok(k().embed_backward(s(), dtokens, a().act(dout, dtype()), dwte, dwpe, tokens_count,
                               hidden, seq, vocab_begin, vocab_count, dtype()));
  EXPECT_TRUE(close("dwte", a().read_f32(dwte, dwte0.size()), want_dwte, 1e-5, 1e-5));
  EXPECT_TRUE(close("dwpe", a().read_f32(dwpe, dwpe0.size()), want_dwpe, 1e-5, 1e-5));
}

// Double-precision norm statistics of one row: {mean (0 for RMSNorm), rstd}.
std::pair<double, double> norm_stats(const float* x, size_t cols, NormKind kind, double eps) {
  double mean = 0.0, sq = 0.0;
  if (kind == NormKind::kLayerNorm) {
    for (size_t c = 0; c < cols; ++c) mean += x[c];
    mean /= double(cols);
  }
  for (size_t c = 0; c < cols; ++c) sq += (x[c] - mean) * (x[c] - mean);
  return {mean, 1.0 / std::sqrt(sq / double(cols) + eps)};
}

TEST_P(DtypeTest, NormsAndTheirGradientsFollowTheReference) {
  const size_t rows = 5, cols = 37;
  const float eps = 1e-5f;
  auto x = round_all(dtype(), random_values(rows * cols, 11, -1.0f, 2.0f));
  auto w = round_all(dtype(), random_values(cols, 12, 0.5f, 1.5f));
  auto b = round_all(dtype(), random_values(cols, 13));
  auto dy = round_all(dtype(), random_values(rows * cols, 14));
  auto dx0 = round_all(dtype(), random_values(rows * cols, 15));
  auto dw0 = random_values(cols, 16), db0 = random_values(cols, 17);
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    SCOPED_TRACE(kind == NormKind::kLayerNorm ? "LayerNorm" : "RMSNorm");
    const bool ln = kind == NormKind::kLayerNorm;
    std::vector<double> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols),
        dx_acc(rows * cols), dw(to_double(dw0)), db(to_double(db0));
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = &x[r * cols];
      std::tie(mean[r], rstd[r]) = norm_stats(xr, cols, kind, eps);
      double mean_g = 0.0, mean_gx = 0.0;
      for (size_t c = 0; c < cols; ++c) {
        const double xhat = (xr[c] - mean[r]) * rstd[r];
        y[r * cols + c] = xhat * w[c] + (ln ? b[c] : 0.0);
        const double g = double(dy[r * cols + c]) * w[c];
        mean_g += g / double(cols);
        mean_gx += g * xhat / double(cols);
        dw[c] += dy[r * cols + c] * xhat;
        if (ln) db[c] += dy[r * cols + c];
      }
      for (size_t c = 0; c < cols; ++c) {
        const double xhat = (xr[c] - mean[r]) * rstd[r];
        const double g = double(dy[r * cols + c]) * w[c];
        dx[r * cols + c] = rstd[r] * (g - (ln ? mean_g : 0.0) - xhat * mean_gx);
        dx_acc[r * cols + c] = dx[r * cols + c] + dx0[r * cols + c];
      }
    }
    void* dxin = a().act(x, dtype());
    void* dwt = a().act(w, dtype());
    void* dyo = a().act_zeros(rows * cols, dtype());
    float* dmean = static_cast<float*>(a().zeros(rows, 4));
    float* drstd = static_cast<float*>(a().zeros(rows, 4));
    const uint32_t k_kind = uint32_t(kind);
    expect_ok(k().norm_forward(s(), dxin, dwt, a().act(b, dtype()), dyo, dmean, drstd, rows, cols,
                               eps, k_kind, dtype()));
    EXPECT_TRUE(close("y", a().read_act(dyo, rows * cols, dtype()), y, rtol(), atol()));
    EXPECT_TRUE(close("rstd", a().read_f32(drstd, rows), rstd, 1e-5, 0));
    if (ln) {
      EXPECT_TRUE(close("mean", a().read_f32(dmean, rows), mean, 1e-5, 1e-6));
    }

    void* ddy = a().act(dy, dtype());
    void* ddx = a().act(dx0, dtype());
    expect_ok(k().norm_backward_input(s(), ddy, dxin, dwt, dmean, drstd, ddx, rows, cols, k_kind, 0,
                                      dtype()));
    EXPECT_TRUE(close("dx", a().read_act(ddx, rows * cols, dtype()), dx, rtol(), atol()));
    ddx = a().act(dx0, dtype());
    expect_ok(k().norm_backward_input(s(), ddy, dxin, dwt, dmean, drstd, ddx, rows, cols, k_kind, 1,
                                      dtype()));
    EXPECT_TRUE(
        close("dx accumulated", a().read_act(ddx, rows * cols, dtype()), dx_acc, rtol(), atol()));
    float* ddw = a().f32(dw0);
    float* ddb = a().f32(db0);
    expect_ok(k().norm_backward_params(s(), ddy, dxin, dmean, drstd, ddw, ddb, rows, cols, k_kind,
                                       dtype()));
    EXPECT_TRUE(close("dweight", a().read_f32(ddw, cols), dw, 1e-4, 1e-4));
    EXPECT_TRUE(close("dbias", a().read_f32(ddb, cols), ln ? db : to_double(db0), 1e-5, 1e-5));
  }
}

TEST_P(DtypeTest, RopeRotatesPairsByPositionAndItsInverseUndoesIt) {
  const size_t seq = 5, batch = 2, rows = seq * batch, heads = 3, head_dim = 8, half = 4;
  const float theta = 10000.0f;
  auto x = round_all(dtype(), random_values(rows * heads * head_dim, 18));
  std::vector<double> want(x.size());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t h = 0; h < heads; ++h) {
      const size_t base = (r * heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const double angle = double(r % seq) * std::pow(double(theta), -2.0 * i / head_dim);
        const double x1 = x[base + i], x2 = x[base + i + half];
        want[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        want[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
    }
  }
  void* dx = a().act(x, dtype());
  expect_ok(k().rope(s(), dx, rows, heads, head_dim, seq, theta, 1, dtype()));
  EXPECT_TRUE(close("rope", a().read_act(dx, x.size(), dtype()), want, rtol(), atol()));
  expect_ok(k().rope(s(), dx, rows, heads, head_dim, seq, theta, -1, dtype()));
  EXPECT_TRUE(close("rope then inverse", a().read_act(dx, x.size(), dtype()), to_double(x),
                    2 * rtol(), 2 * atol()));
}

// The exact causal attention and its gradients in double.
struct AttentionReference {
  AttentionReference(size_t b, size_t s, size_t h, size_t kvh, size_t hd, double sc)
      : batch(b), seq(s), heads(h), kv_heads(kvh), head_dim(hd), scale(sc) {}

  size_t batch, seq, heads, kv_heads, head_dim;
  double scale;
  std::vector<double> out, lse, dq, dk, dv;

  size_t qi(size_t b, size_t i, size_t h) const { return ((b * seq + i) * heads + h) * head_dim; }
  size_t ki(size_t b, size_t j, size_t g) const {
    return ((b * seq + j) * kv_heads + g) * head_dim;
  }

  void run(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
           const std::vector<float>& dout) {
    out.assign(q.size(), 0.0);
    dq.assign(q.size(), 0.0);
    dk.assign(k.size(), 0.0);
    dv.assign(v.size(), 0.0);
    lse.assign(batch * heads * seq, 0.0);
    for (size_t b = 0; b < batch; ++b) {
      for (size_t h = 0; h < heads; ++h) {
        const size_t g = h / (heads / kv_heads);
        for (size_t i = 0; i < seq; ++i) {
          std::vector<double> p(i + 1), dp(i + 1);
          double m = -INFINITY, sum = 0.0, delta = 0.0;
          for (size_t j = 0; j <= i; ++j) {
            double dotp = 0.0, dotv = 0.0;
            for (size_t d = 0; d < head_dim; ++d) {
              dotp += double(q[qi(b, i, h) + d]) * k[ki(b, j, g) + d];
              dotv += double(dout[qi(b, i, h) + d]) * v[ki(b, j, g) + d];
            }
            p[j] = scale * dotp;
            dp[j] = dotv;
            m = std::max(m, p[j]);
          }
          for (size_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
          for (size_t j = 0; j <= i; ++j) {
            p[j] /= sum;
            delta += p[j] * dp[j];
          }
          lse[(b * heads + h) * seq + i] = m + std::log(sum);
          for (size_t j = 0; j <= i; ++j) {
            const double ds = p[j] * (dp[j] - delta);
            for (size_t d = 0; d < head_dim; ++d) {
              out[qi(b, i, h) + d] += p[j] * v[ki(b, j, g) + d];
              dq[qi(b, i, h) + d] += scale * ds * k[ki(b, j, g) + d];
              dk[ki(b, j, g) + d] += scale * ds * q[qi(b, i, h) + d];
              dv[ki(b, j, g) + d] += p[j] * dout[qi(b, i, h) + d];
            }
          }
        }
      }
    }
  }
};

TEST_P(DtypeTest, AttentionMatchesTheExactReferenceForMhaAndGqa) {
  for (size_t kv_heads : {4u, 2u, 1u}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    AttentionReference ref(2, 7, 4, kv_heads, 8, 1.0 / std::sqrt(8.0));
    const size_t q_size = ref.batch * ref.seq * ref.heads * ref.head_dim;
    const size_t kv_size = ref.batch * ref.seq * kv_heads * ref.head_dim;
    auto q = round_all(dtype(), random_values(q_size, 20, -2.0f, 2.0f));
    auto kk = round_all(dtype(), random_values(kv_size, 21, -2.0f, 2.0f));
    auto v = round_all(dtype(), random_values(kv_size, 22));
    auto dout = round_all(dtype(), random_values(q_size, 23));
    ref.run(q, kk, v, dout);
    void* dq_in = a().act(q, dtype());
    void* dk_in = a().act(kk, dtype());
    void* dv_in = a().act(v, dtype());
    void* out = a().act_zeros(q_size, dtype());
    float* lse = static_cast<float*>(a().zeros(ref.lse.size(), 4));
    float* delta = static_cast<float*>(a().zeros(ref.lse.size(), 4));
    void* dq = a().act_zeros(q_size, dtype());
    void* dk = a().act_zeros(kv_size, dtype());
    void* dv = a().act_zeros(kv_size, dtype());
    const float scale = float(ref.scale);
    expect_ok(k().attention_forward(s(), dq_in, dk_in, dv_in, out, lse, ref.batch, ref.seq,
                                    ref.heads, kv_heads, ref.head_dim, scale, dtype()));
    EXPECT_TRUE(close("out", a().read_act(out, q_size, dtype()), ref.out, rtol(), atol()));
    EXPECT_TRUE(close("lse", a().read_f32(lse, ref.lse.size()), ref.lse, 1e-5, 1e-5));
    expect_ok(k().attention_backward(s(), dq_in, dk_in, dv_in, out, a().act(dout, dtype()), lse,
                                     delta, dq, dk, dv, ref.batch, ref.seq, ref.heads, kv_heads,
                                     ref.head_dim, scale, dtype()));
    // bf16 (f16): delta = dout . out reads the rounded out, hence the looser bound.
    const double tol = dtype() == kBf16 ? 1.0 / 32 : dtype() == kF16 ? 1.0 / 256 : 1e-4;
    EXPECT_TRUE(close("dq", a().read_act(dq, q_size, dtype()), ref.dq, tol, tol));
    EXPECT_TRUE(close("dk", a().read_act(dk, kv_size, dtype()), ref.dk, tol, tol));
    EXPECT_TRUE(close("dv", a().read_act(dv, kv_size, dtype()), ref.dv, tol, tol));
  }
}

TEST_P(DtypeTest, ActivationsAndTheirGradientsFollowTheReference) {
  const size_t n = 777;
  auto x = round_all(dtype(), random_values(n, 30, -4.0f, 4.0f));
  auto up = round_all(dtype(), random_values(n, 31));
  auto dy = round_all(dtype(), random_values(n, 32));
  std::vector<double> gelu_y(n), gelu_dx(n), swiglu_y(n), dgate(n), dup(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = x[i], sg = sigmoid(g);
    gelu_y[i] = gelu(g);
    gelu_dx[i] = dy[i] * gelu_grad(g);
    swiglu_y[i] = g * sg * up[i];
    dgate[i] = dy[i] * up[i] * sg * (1.0 + g * (1.0 - sg));
    dup[i] = dy[i] * g * sg;
  }
  void* dx = a().act(x, dtype());
  void* dupin = a().act(up, dtype());
  void* ddy = a().act(dy, dtype());
  void* o1 = a().act_zeros(n, dtype());
  void* o2 = a().act_zeros(n, dtype());
  expect_ok(k().gelu_forward(s(), dx, o1, n, dtype()));
  EXPECT_TRUE(close("gelu", a().read_act(o1, n, dtype()), gelu_y, rtol(), atol()));
  expect_ok(k().gelu_backward(s(), dx, ddy, o1, n, dtype()));
  EXPECT_TRUE(close("gelu dx", a().read_act(o1, n, dtype()), gelu_dx, rtol(), atol()));
  expect_ok(k().swiglu_forward(s(), dx, dupin, o1, n, dtype()));
  EXPECT_TRUE(close("swiglu", a().read_act(o1, n, dtype()), swiglu_y, rtol(), atol()));
  expect_ok(k().swiglu_backward(s(), dx, dupin, ddy, o1, o2, n, dtype()));
  EXPECT_TRUE(close("swiglu dgate", a().read_act(o1, n, dtype()), dgate, rtol(), atol()));
  EXPECT_TRUE(close("swiglu dup", a().read_act(o2, n, dtype()), dup, rtol(), atol()));
}

TEST_P(DtypeTest, CrossEntropyOverAVocabularySliceFollowsTheReference) {
  const size_t rows = 6, vocab = 11;
  const int64_t vocab_begin = 5;
  const std::vector<int32_t> targets = {5, 15, 9, 2, 16, 10};  // 2 and 16 are not local
  auto logits = random_values(rows * vocab, 40, -3.0f, 3.0f);
  const float scale = 0.25f;
  std::vector<double> max(rows), sum(rows), target(rows), loss(rows), dlogits(rows * vocab);
  for (size_t r = 0; r < rows; ++r) {
    max[r] = *std::max_element(&logits[r * vocab], &logits[r * vocab] + vocab);
    for (size_t c = 0; c < vocab; ++c) sum[r] += std::exp(logits[r * vocab + c] - max[r]);
    const int64_t t = targets[r] - vocab_begin;
    target[r] = t >= 0 && t < int64_t(vocab) ? logits[r * vocab + t] : 0.0;
    loss[r] = std::log(sum[r]) + max[r] - target[r];
    for (size_t c = 0; c < vocab; ++c) {
      dlogits[r * vocab + c] = scale * (std::exp(logits[r * vocab + c] - max[r]) / sum[r] -
                                        (int64_t(c) == t ? 1.0 : 0.0));
    }
  }
  const float* dl = a().f32(logits);
  const int32_t* dt = a().i32(targets);
  float* dmax = static_cast<float*>(a().zeros(rows, 4));
  float* dsum = static_cast<float*>(a().zeros(rows, 4));
  float* dtarget = static_cast<float*>(a().zeros(rows, 4));
  float* dloss = static_cast<float*>(a().zeros(rows, 4));
  void* dgrad = a().act_zeros(rows * vocab, dtype());
  expect_ok(k().xent_max(s(), dl, dmax, rows, vocab));
  expect_ok(k().xent_sum_exp(s(), dl, dmax, dsum, rows, vocab));
  expect_ok(k().xent_target(s(), dl, dt, dtarget, rows, vocab_begin, vocab));
  expect_ok(k().xent_loss(s(), dmax, dsum, dtarget, dloss, rows));
  expect_ok(
      k().xent_backward(s(), dl, dt, dmax, dsum, dgrad, rows, vocab_begin, vocab, scale, dtype()));
  EXPECT_TRUE(close("row_max", a().read_f32(dmax, rows), max, 0, 0));
  EXPECT_TRUE(close("sum_exp", a().read_f32(dsum, rows), sum, 1e-5, 0));
  EXPECT_TRUE(close("target_logit", a().read_f32(dtarget, rows), target, 0, 0));
  EXPECT_TRUE(close("loss", a().read_f32(dloss, rows), loss, 1e-5, 1e-6));
  EXPECT_TRUE(
      close("dlogits", a().read_act(dgrad, rows * vocab, dtype()), dlogits, rtol(), atol()));
}

TEST_P(DtypeTest, GatherAndCombineMoveRowsBetweenTokensAndExperts) {
  const size_t src_rows = 8, cols = 5, tokens = 4, top_k = 2;
  auto src = round_all(dtype(), random_values(src_rows * cols, 50));
  const std::vector<int32_t> index = {3, -1, 0, 7, 3, -1};
  const std::vector<int32_t> slot = {0, 5, -1, 2, 7, -1, 1, 6};
  const std::vector<float> weight = {0.7f, 0.3f, 0.9f, 0.1f, 0.5f, 0.5f, 0.25f, 0.75f};
  auto dout = round_all(dtype(), random_values(tokens * cols, 51));
  std::vector<double> gathered(index.size() * cols), combined(tokens * cols), summed(tokens * cols),
      dexpert(src_rows * cols, 0.0), dweight(tokens * top_k, 0.0);
  for (size_t r = 0; r < index.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      gathered[r * cols + c] = index[r] >= 0 ? src[index[r] * cols + c] : 0.0;
    }
  }
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t j = 0; j < top_k; ++j) {
      const int32_t sl = slot[t * top_k + j];
      if (sl < 0) continue;
      for (size_t c = 0; c < cols; ++c) {
        combined[t * cols + c] += weight[t * top_k + j] * src[sl * cols + c];
        summed[t * cols + c] += src[sl * cols + c];
        dexpert[sl * cols + c] = weight[t * top_k + j] * dout[t * cols + c];
        dweight[t * top_k + j] += double(dout[t * cols + c]) * src[sl * cols + c];
      }
    }
  }
  void* dsrc = a().act(src, dtype());
  const int32_t* dslot = a().i32(slot);
  const float* dw = a().f32(weight);
  void* out = a().act_zeros(std::max(index.size(), tokens) * cols, dtype());
  expect_ok(k().gather_rows(s(), dsrc, a().i32(index), out, index.size(), cols, dtype()));
  EXPECT_TRUE(close("gather", a().read_act(out, gathered.size(), dtype()), gathered, 0, 0));
  expect_ok(k().combine_rows(s(), dsrc, dslot, dw, out, tokens, top_k, cols, dtype()));
  EXPECT_TRUE(
      close("combine", a().read_act(out, combined.size(), dtype()), combined, rtol(), atol()));
  expect_ok(k().combine_rows(s(), dsrc, dslot, nullptr, out, tokens, top_k, cols, dtype()));
  EXPECT_TRUE(close("combine unweighted", a().read_act(out, summed.size(), dtype()), summed, rtol(),
                    atol()));
  void* dexp = a().act_zeros(src_rows * cols, dtype());
  float* ddw = static_cast<float*>(a().zeros(tokens * top_k, 4));
  expect_ok(k().combine_backward(s(), a().act(dout, dtype()), dsrc, dslot, dw, dexp, ddw, tokens,
                                 top_k, cols, dtype()));
  EXPECT_TRUE(
      close("dexpert_out", a().read_act(dexp, dexpert.size(), dtype()), dexpert, rtol(), atol()));
  EXPECT_TRUE(close("dweight", a().read_f32(ddw, dweight.size()), dweight, 1e-5, 1e-5));
}

TEST_P(DtypeTest, AdamwUpdatesMasterWeightsAndWritesTheWorkingCopy) {
  const size_t n = 257;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  const float bias1 = 1.0f - b1 * b1 * b1, bias2 = 1.0f - b2 * b2 * b2;
  auto p = random_values(n, 60), g = random_values(n, 61), m = random_values(n, 62);
  auto v = random_values(n, 63, 0.0f, 1.0f);
  std::vector<double> wp(n), wm(n), wv(n);
  for (size_t i = 0; i < n; ++i) {
    const double gi = double(g[i]) * gs;
    wm[i] = b1 * double(m[i]) + (1.0 - b1) * gi;
    wv[i] = b2 * double(v[i]) + (1.0 - b2) * gi * gi;
    wp[i] = p[i] - lr * (wm[i] / bias1 / (std::sqrt(wv[i] / bias2) + eps) + wd * double(p[i]));
  }
  float* dp = a().f32(p);
  float* dm = a().f32(m);
  float* dv = a().f32(v);
  void* copy = a().act_zeros(n, dtype());
  expect_ok(k().adamw(s(), dp, a().f32(g), dm, dv, copy, n, lr, b1, b2, eps, wd, bias1, bias2, gs,
                      dtype()));
  EXPECT_TRUE(close("param", a().read_f32(dp, n), wp, 1e-5, 1e-6));
  EXPECT_TRUE(close("m", a().read_f32(dm, n), wm, 1e-5, 1e-6));
  EXPECT_TRUE(close("v", a().read_f32(dv, n), wv, 1e-5, 1e-6));
  std::vector<double> copied(n);
  const auto params = a().read_f32(dp, n);
  for (size_t i = 0; i < n; ++i) copied[i] = round_to(dtype(), params[i]);
  EXPECT_TRUE(close("copy", a().read_act(copy, n, dtype()), copied, 0, 0));
  expect_ok(k().adamw(s(), dp, a().f32(g), dm, dv, nullptr, n, lr, b1, b2, eps, wd, bias1, bias2,
                      gs, 99));  // no copy: copy_dtype is not read
  expect_ok(s().synchronize());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DtypeTest, ::testing::Values(kF32, kBf16, kF16), dtype_param_name);

}  // namespace
}  // namespace tessera::gpt::testing
