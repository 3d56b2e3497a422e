// One rank of the tests/multinode cases (launch_test.sh), started by `tessera launch` on an
// emulated host. Modes:
//   multinode_rank loop     allreduces 1 MiB in a loop (at most 60 s) until it fails; prints
//                           "multinode rank R: pid P looping" once the loop runs (so the test knows
//                           whom to kill) and, on the failure, "multinode rank R: FAILED at
//                           <unix ms>: <error>" (the test measures how long the news took);
//   multinode_rank tuner    prints the algorithm the tuner chooses for allreduce at a few sizes,
//                           "multinode rank R: allreduce B bytes -> ALGO" (no TESSERA_COLL_ALGO),
//                           then runs one allreduce of each size and checks it.
// Exit 0 (tuner done), 1 (a failure, or loop mode's expected one), 2 (usage, or no failure came).
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"

namespace {

using tessera::coll::Bootstrap;
using tessera::coll::Communicator;
using tessera::coll::DType;
using tessera::coll::OpKind;
using tessera::coll::ReduceOp;

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "multinode rank %d: FAILED at %lld: %s\n", rank, unix_ms(), what.c_str());
  return 1;
}

int run_loop(Communicator& comm) {
  std::vector<float> data(size_t{1} << 18, 1.0f);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (long step = 0; std::chrono::steady_clock::now() < until; ++step) {
    auto status =
        comm.allreduce(data.data(), data.data(), data.size(), DType::kF32, ReduceOp::kMax);
    if (!status.ok())
      return fail(comm.rank(), "step " + std::to_string(step) + ": " + status.to_string());
    if (step == 3) {
      std::printf("multinode rank %d: pid %d looping\n", comm.rank(), int(::getpid()));
      std::fflush(stdout);
    }
  }
  std::fprintf(stderr, "multinode rank %d: no failure within 60 s\n", comm.rank());
  return 2;
}

int run_tuner(Communicator& comm) {
  for (size_t bytes : {size_t{4} << 10, size_t{256} << 10, size_t{4} << 20}) {
    std::printf("multinode rank %d: allreduce %zu bytes -> %s\n", comm.rank(), bytes,
                std::string(comm.algorithm_for(OpKind::kAllReduce, bytes)).c_str());
    std::vector<float> data(bytes / sizeof(float), float(comm.rank() + 1));
    auto status =
        comm.allreduce(data.data(), data.data(), data.size(), DType::kF32, ReduceOp::kSum);
    if (!status.ok()) return fail(comm.rank(), "allreduce: " + status.to_string());
    const float expected = float(comm.size() * (comm.size() + 1) / 2);
    for (float v : data) {
      if (v != expected) {
        return fail(comm.rank(), "allreduce of " + std::to_string(bytes) + " bytes gave " +
                                     std::to_string(v) + ", expected " + std::to_string(expected));
      }
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode != "loop" && mode != "tuner") {
    std::fprintf(stderr, "usage: %s loop|tuner\n", argv[0]);
    return 2;
  }
  auto bootstrap = Bootstrap::from_environment();
  if (!bootstrap.ok()) return fail(-1, "bootstrap: " + bootstrap.status().to_string());
  auto created = Communicator::create(*bootstrap);
  if (!created.ok()) return fail(-1, "communicator: " + created.status().to_string());
  return mode == "loop" ? run_loop(**created) : run_tuner(**created);
}
