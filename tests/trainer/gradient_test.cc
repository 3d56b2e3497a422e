// The trainer's backward pass is the derivative of its forward pass: central finite differences
// of the loss against the computed gradient, for the largest gradient entries of every kind of
// parameter (single rank, in process, no optimizer movement: lr = 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/coll/bootstrap.h"
#include "trainer.h"

namespace tessera::trainer {
namespace {

TEST(TrainerGradient, MatchesCentralFiniteDifferencesOfTheLoss) {
  auto boot = coll::Bootstrap::from_environment();
  ASSERT_TRUE(boot.ok()) << boot.status().to_string();
  TrainOptions o;
  o.model = ModelSpec{16, 2, 32, 6};
  o.global_batch = 8;
  o.adam.lr = 0;  // parameters stay where they are: every step sees the same function
  auto t = Trainer::create(o, *boot);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  Trainer& tr = **t;
  auto base = tr.train_step(0);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  int checked = 0;
  for (Param& p : tr.params()) {
    std::vector<float> grad(p.gradient(), p.gradient() + p.count());
    std::vector<int64_t> order(size_t(p.count()));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 3, order.end(), [&](int64_t a, int64_t b) {
      return std::fabs(grad[size_t(a)]) > std::fabs(grad[size_t(b)]);
    });
    for (int k = 0; k < 3; ++k) {
      const int64_t i = order[size_t(k)];
      const float saved = p.value()[i], eps = 1e-2f;
      p.value()[i] = saved + eps;
      auto plus = tr.train_step(0);
      p.value()[i] = saved - eps;
      auto minus = tr.train_step(0);
      p.value()[i] = saved;
      ASSERT_TRUE(plus.ok() && minus.ok());
      const double numeric = (plus->loss - minus->loss) / (2.0 * eps);
      const double analytic = grad[size_t(i)];
      EXPECT_NEAR(analytic, numeric, 0.02 * std::fabs(numeric) + 2e-4)
          << p.local.info.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * 10);  // 2 blocks x 4 parameters + the head's 2
}

}  // namespace
}  // namespace tessera::trainer
