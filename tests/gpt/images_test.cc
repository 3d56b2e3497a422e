// The GPU images' kernel source, run on the CPU (images_test.h), against the host image's kernels:
// every kernel of kernels.h, f32, bf16 and f16, at several launch geometries.
#include "images_test.h"

namespace tessera::gpt::testing {
namespace {

constexpr uint64_t kRows = 6, kCols = 37;

TEST(GpuKernelSource, ElementwiseKernelsMatchTheHostImage) {
  const uint64_t n = 300;
  for_each_dtype("add", [&](uint32_t dt) -> Case {
    return [=](const Target& t) {
      Act a(random_values(n, 1), dt), b(random_values(n, 2), dt), out(std::vector<float>(n), dt);
      RUN_KERNEL(t, add, a.data(), b.data(), out.data(), n, dt);
      return out.values();
    };
  });
  for_each_dtype("bias_add, bias_grad", [&](uint32_t dt) -> Case {
    return [=](const Target& t) {
      Act y(random_values(kRows * kCols, 3), dt), bias(random_values(kCols, 4), dt);
      std::vector<float> dbias = random_values(kCols, 5);
      RUN_KERNEL(t, bias_add, y.data(), bias.data(), kRows, kCols, dt);
      RUN_KERNEL(t, bias_grad, y.data(), dbias.data(), kRows, kCols, dt);
      std::vector<float> out = y.values();
      append(out, dbias);
      return out;
    };
  });
  for_each_dtype("gelu, swiglu", [&](uint32_t dt) -> Case {
    return [=](const Target& t) {
      Act x(random_values(n, 6, -4, 4), dt), up(random_values(n, 7), dt);
      Act dy(random_values(n, 8), dt), y(std::vector<float>(n), dt);
      Act dx(std::vector<float>(n), dt), dgate(std::vector<float>(n), dt);
      Act dup(std::vector<float>(n), dt), sw(std::vector<float>(n), dt);
      RUN_KERNEL(t, gelu_forward, x.data(), y.data(), n, dt);
      RUN_KERNEL(t, gelu_backward, x.data(), dy.data(), dx.data(), n, dt);
      RUN_KERNEL(t, swiglu_forward, x.data(), up.data(), sw.data(), n, dt);
      RUN_KERNEL(t, swiglu_backward, x.data(), up.data(), dy.data(), dgate.data(), dup.data(), n,
                 dt);
      std::vector<float> out = y.values();
      for (const Act* a : {&dx, &sw, &dgate, &dup}) append(out, a->values());
      return out;
    };
  });
}

TEST(GpuKernelSource, EmbeddingsMatchTheHostImage) {
  const uint64_t tokens = 10, hidden = 13, seq = 4;
  const int64_t vocab_begin = 5, vocab_count = 10;
  const std::vector<int32_t> ids = {0, 5, 14, 15, 7, 9, 3, 12, 19, 6};  // some not local
  for (bool with_wpe : {true, false}) {
    for_each_dtype(with_wpe ? "embeddings" : "embeddings without wpe", [&](uint32_t dt) -> Case {
      return [=](const Target& t) {
        Act wte(random_values(vocab_count * hidden, 9), dt),
            wpe(random_values(seq * hidden, 10), dt);
        Act out(std::vector<float>(tokens * hidden), dt),
            dout(random_values(tokens * hidden, 11), dt);
        std::vector<float> dwte = random_values(vocab_count * hidden, 12);
        std::vector<float> dwpe = random_values(seq * hidden, 13);
        void* wpe_or_null = with_wpe ? wpe.data() : nullptr;
        float* dwpe_or_null = with_wpe ? dwpe.data() : nullptr;
        RUN_KERNEL(t, embed_forward, ids.data(), wte.data(), wpe_or_null, out.data(), tokens,
                   hidden, seq, vocab_begin, vocab_count, dt);
        RUN_KERNEL(t, embed_backward, ids.data(), dout.data(), dwte.data(), dwpe_or_null, tokens,
                   hidden, seq, vocab_begin, vocab_count, dt);
        std::vector<float> result = out.values();
        append(result, dwte);
        append(result, dwpe);
        return result;
      };
    });
  }
}

TEST(GpuKernelSource, NormsMatchTheHostImage) {
  for (uint32_t kind : {0u, 1u}) {
    for (uint32_t accumulate : {0u, 1u}) {
      const std::string what = std::string(kind == 0 ? "layer" : "rms") + " norm, accumulate " +
                               std::to_string(accumulate);
      for_each_dtype(what, [&](uint32_t dt) -> Case {
        return [=](const Target& t) {
          Act x(random_values(kRows * kCols, 14, -2, 3), dt), w(random_values(kCols, 15), dt);
          Act b(random_values(kCols, 16), dt), y(std::vector<float>(kRows * kCols), dt);
          Act dy(random_values(kRows * kCols, 17), dt), dx(random_values(kRows * kCols, 18), dt);
          std::vector<float> mean(kRows), rstd(kRows);
          std::vector<float> dw = random_values(kCols, 19), db = random_values(kCols, 20);
          void* bias = kind == 0 ? b.data() : nullptr;
          float* dbias = kind == 0 ? db.data() : nullptr;
          RUN_KERNEL(t, norm_forward, x.data(), w.data(), bias, y.data(), mean.data(), rstd.data(),
                     kRows, kCols, 1e-5f, kind, dt);
          RUN_KERNEL(t, norm_backward_input, dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), dx.data(), kRows, kCols, kind, accumulate, dt);
          RUN_KERNEL(t, norm_backward_params, dy.data(), x.data(), mean.data(), rstd.data(),
                     dw.data(), dbias, kRows, kCols, kind, dt);
          std::vector<float> out = y.values();
          append(out, kind == 0 ? mean : std::vector<float>());
          append(out, rstd);
          append(out, dx.values());
          append(out, dw);
          append(out, db);
          return out;
        };
      });
    }
  }
}

TEST(GpuKernelSource, RopeMatchesTheHostImage) {
  const uint64_t rows = 8, heads = 3, head_dim = 8, seq = 5;
  for (int32_t direction : {1, -1}) {
    for_each_dtype("rope " + std::to_string(direction), [&](uint32_t dt) -> Case {
      return [=](const Target& t) {
        Act x(random_values(rows * heads * head_dim, 21), dt);
        RUN_KERNEL(t, rope, x.data(), rows, heads, head_dim, seq, 10000.0f, direction, dt);
        return x.values();
      };
    });
  }
}

// Query rows of 7 keys and head_dim 12: blocks of 5 take several chunks and column tiles.
TEST(GpuKernelSource, AttentionMatchesTheHostImage) {
  const uint64_t batch = 2, seq = 7, heads = 4, kv_heads = 2, head_dim = 12;
  const uint64_t q_size = batch * seq * heads * head_dim,
                 kv_size = batch * seq * kv_heads * head_dim;
  const uint64_t rows = batch * heads * seq;
  const float scale = 1.0f / std::sqrt(float(head_dim));
  for_each_dtype("attention", [&](uint32_t dt) -> Case {
    return [=](const Target& t) {
      Act q(random_values(q_size, 22, -2, 2), dt), k(random_values(kv_size, 23, -2, 2), dt);
      Act v(random_values(kv_size, 24), dt), out(std::vector<float>(q_size), dt);
      Act dout(random_values(q_size, 25), dt), dq(std::vector<float>(q_size), dt);
      Act dk(std::vector<float>(kv_size), dt), dv(std::vector<float>(kv_size), dt);
      std::vector<float> lse(rows), delta(rows);
      RUN_KERNEL(t, attention_forward, q.data(), k.data(), v.data(), out.data(), lse.data(), batch,
                 seq, heads, kv_heads, head_dim, scale, dt);
      RUN_KERNEL(t, attention_backward_delta, q.data(), k.data(), v.data(), out.data(), dout.data(),
                 lse.data(), delta.data(), dq.data(), dk.data(), dv.data(), batch, seq, heads,
                 kv_heads, head_dim, scale, dt);
      RUN_KERNEL(t, attention_backward_dq, q.data(), k.data(), v.data(), out.data(), dout.data(),
                 lse.data(), delta.data(), dq.data(), dk.data(), dv.data(), batch, seq, heads,
                 kv_heads, head_dim, scale, dt);
      RUN_KERNEL(t, attention_backward_dkv, q.data(), k.data(), v.data(), out.data(), dout.data(),
                 lse.data(), delta.data(), dq.data(), dk.data(), dv.data(), batch, seq, heads,
                 kv_heads, head_dim, scale, dt);
      std::vector<float> result = out.values();
      append(result, lse);
      append(result, delta);
      for (const Act* a : {&dq, &dk, &dv}) append(result, a->values());
      return result;
    };
  });
}

TEST(GpuKernelSource, CrossEntropyMatchesTheHostImage) {
  const uint64_t vocab = 50;
  const int64_t vocab_begin = 100;
  const std::vector<int32_t> targets = {100, 149, 120, 99, 150, 131};  // two not local
  for_each_dtype("cross-entropy", [&](uint32_t dt) -> Case {
    return [=](const Target& t) {
      std::vector<float> logits = random_values(kRows * vocab, 26, -5, 5);
      std::vector<float> row_max(kRows), sum_exp(kRows), target(kRows), loss(kRows);
      Act dlogits(std::vector<float>(kRows * vocab), dt);
      RUN_KERNEL(t, xent_max, logits.data(), row_max.data(), kRows, vocab);
      RUN_KERNEL(t, xent_sum_exp, logits.data(), row_max.data(), sum_exp.data(), kRows, vocab);
      RUN_KERNEL(t, xent_target, logits.data(), targets.data(), target.data(), kRows, vocab_begin,
                 vocab);
      RUN_KERNEL(t, xent_loss, row_max.data(), sum_exp.data(), target.data(), loss.data(), kRows);
      RUN_KERNEL(t, xent_backward, logits.data(), targets.data(), row_max.data(), sum_exp.data(),
                 dlogits.data(), kRows, vocab_begin, vocab, 0.5f, dt);
      std::vector<float> out = row_max;
      for (const auto* v : {&sum_exp, &target, &loss}) append(out, *v);
      append(out, dlogits.values());
      return out;
    };
  });
}

TEST(GpuKernelSource, RouterMatchesTheHostImage) {
  const uint64_t tokens = 9, experts = 6, top_k = 2;
  for (uint32_t normalize : {0u, 1u}) {
    // The router kernels take f32 only: the dtype loop just runs the case twice.
    for_each_dtype("router, normalize " + std::to_string(normalize), [&](uint32_t) -> Case {
      return [=](const Target& t) {
        std::vector<float> logits = random_values(tokens * experts, 27, -3, 3);
        std::vector<float> probs(tokens * experts), weight(tokens * top_k);
        std::vector<int32_t> index(tokens * top_k);
        std::vector<float> dweight = random_values(tokens * top_k, 28);
        std::vector<float> fraction = random_values(experts, 29, 0, 0.5f);
        std::vector<float> dlogits(tokens * experts);
        RUN_KERNEL(t, router_forward, logits.data(), probs.data(), index.data(), weight.data(),
                   tokens, experts, top_k, normalize);
        RUN_KERNEL(t, router_backward, probs.data(), index.data(), dweight.data(), fraction.data(),
                   dlogits.data(), tokens, experts, top_k, normalize, 0.01f);
        std::vector<float> out = probs;
        append(out, index);
        append(out, weight);
        append(out, dlogits);
        return out;
      };
    });
  }
}

TEST(GpuKernelSource, ExpertRowMovesMatchTheHostImage) {
  const uint64_t tokens = 5, top_k = 2, slots = 12;
  const std::vector<int32_t> index = {3, -1, 0, 7, 7, 11};               // rows of src, -1: none
  const std::vector<int32_t> slot = {4, 0, -1, 9, 2, 11, 5, -1, 1, 10};  // distinct, -1: unused
  for (bool weighted : {true, false}) {
    for_each_dtype(
        weighted ? "gather/combine" : "gather/combine without weights", [&](uint32_t dt) -> Case {
          return [=](const Target& t) {
            Act src(random_values(slots * kCols, 30), dt),
                gathered(std::vector<float>(6 * kCols), dt);
            Act combined(std::vector<float>(tokens * kCols), dt);
            Act dout(random_values(tokens * kCols, 31), dt);
            Act dexpert(std::vector<float>(slots * kCols), dt);
            std::vector<float> w = random_values(tokens * top_k, 32), dw(tokens * top_k, 7.0f);
            const float* weight = weighted ? w.data() : nullptr;
            RUN_KERNEL(t, gather_rows, src.data(), index.data(), gathered.data(), 6, kCols, dt);
            RUN_KERNEL(t, combine_rows, src.data(), slot.data(), weight, combined.data(), tokens,
                       top_k, kCols, dt);
            RUN_KERNEL(t, combine_backward, dout.data(), src.data(), slot.data(), weight,
                       dexpert.data(), dw.data(), tokens, top_k, kCols, dt);
            std::vector<float> out = gathered.values();
            append(out, combined.values());
            append(out, dexpert.values());
            append(out, dw);
            return out;
          };
        });
  }
}

TEST(GpuKernelSource, OptimizerKernelsMatchTheHostImage) {
  const uint64_t n = 1000;
  for (bool with_copy : {true, false}) {
    for_each_dtype(with_copy ? "sum_squares, adamw" : "adamw without copy",
                   [&](uint32_t dt) -> Case {
                     return [=](const Target& t) {
                       std::vector<float> param = random_values(n, 33), grad = random_values(n, 34);
                       std::vector<float> m = random_values(n, 35, -0.1f, 0.1f);
                       std::vector<float> v = random_values(n, 36, 0.0f, 0.01f);
                       std::vector<float> sum(1);
                       Act copy(std::vector<float>(n), dt);
                       RUN_KERNEL(t, sum_squares, grad.data(), sum.data(), n);
                       RUN_KERNEL(t, adamw, param.data(), grad.data(), m.data(), v.data(),
                                  with_copy ? copy.data() : nullptr, n, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                  0.1f, 0.271f, 0.003f, 0.5f, dt);
                       std::vector<float> out = sum;
                       for (const auto* x : {&param, &m, &v}) append(out, *x);
                       append(out, copy.values());
                       return out;
                     };
                   });
  }
}

}  // namespace
}  // namespace tessera::gpt::testing
