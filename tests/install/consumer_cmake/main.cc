// The C++ side of the out-of-tree consumer: joins the job, sums across ranks, plans. Prints
// "rank R: cxx checks passed" when every result is right (tests/install/install_test.cmake).
#include <cstdio>
#include <vector>

#include "tessera/coll/communicator.h"
#include "tessera/hal/hal.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/search.h"

namespace {

int fail(const char* what, const tessera::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.to_string().c_str());
  return 1;
}

}  // namespace

int main() {
  using namespace tessera;
  auto bootstrap = coll::Bootstrap::from_environment();
  if (!bootstrap.ok()) return fail("bootstrap", bootstrap.status());
  auto platform = hal::Platform::create();
  if (!platform.ok()) return fail("platform", platform.status());
  auto device = platform.value()->device("host:0");
  if (!device.ok()) return fail("device", device.status());
  auto comm = coll::Communicator::create(bootstrap.value(), device.value());
  if (!comm.ok()) return fail("communicator", comm.status());
  const int rank = comm.value()->rank(), size = comm.value()->size();
  // Where the host backend came from: the install test checks it is the installed one.
  const hal::BackendRecord* host = platform.value()->registry().find("host");
  std::printf("rank %d: cxx backend %s\n", rank, host != nullptr ? host->path.c_str() : "(none)");

  std::vector<double> values(1024, rank + 1.0);
  Status s = comm.value()->allreduce(values.data(), values.data(), values.size(), hal::DType::kF64,
                                     hal::ReduceOp::kSum);
  if (!s.ok()) return fail("allreduce", s);
  const double expected = size * (size + 1) / 2.0;
  if (values.back() != expected) {
    std::fprintf(stderr, "rank %d: allreduce gave %g, expected %g\n", rank, values.back(),
                 expected);
    return 1;
  }
  std::printf("rank %d: cxx allreduce %g\n", rank, values.back());

  auto model = ir::model_preset("llama2-7b");
  auto cluster = plan::cluster_preset("dgx-a100-80gb");
  if (!model.ok() || !cluster.ok())
    return fail("presets", model.ok() ? cluster.status() : model.status());
  auto plans =
      plan::search_plans(model.value(), cluster.value(), {512, 4096, plan::Dtype::kBf16}, {}, {});
  if (!plans.ok()) return fail("search_plans", plans.status());
  std::printf("rank %d: cxx plan %s\n", rank,
              plan::plan_summary(plans->plans.front().plan).c_str());

  if (Status b = comm.value()->barrier(); !b.ok()) return fail("barrier", b);
  std::printf("rank %d: cxx checks passed\n", rank);
  return 0;
}
