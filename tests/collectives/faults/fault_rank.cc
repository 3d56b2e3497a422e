// coll_fault_rank: one rank of the fault test (fault_test.cc). Every rank allreduces 256 MiB of
// f32 in a loop; the victim rank (--victim) starts a thread after its first allreduce that
// SIGKILLs the whole process a moment later, so it dies in the middle of the next one. Survivors
// loop until an operation fails, then try one more small allreduce, and write both statuses to
// --out FILE<rank> for the parent to judge. Exit 0 when the rank recorded a failure, 1 when the
// loop ended without one.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "multi_rank.h"
#include "tessera/coll/communicator.h"

namespace tessera::coll::testing {
namespace {

// 64 MiB under AddressSanitizer (four ranks' buffers and their shadow on a small CI machine).
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kBytes = size_t(64) << 20;
#else
constexpr size_t kBytes = size_t(256) << 20;
#endif
constexpr int kMaxIterations = 200;

int fault_main(int argc, char** argv) {
  auto args = parse_rank_args(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n", args.status().message().c_str());
    return 2;
  }
  int victim = -1;
  std::string out_path;
  for (size_t i = 0; i + 1 < args->rest.size(); i += 2) {
    if (args->rest[i] == "--victim") victim = std::stoi(args->rest[i + 1]);
    if (args->rest[i] == "--out") out_path = args->rest[i + 1];
  }
  auto bootstrap = connect_rank(*args);
  if (!bootstrap.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", args->rank, bootstrap.status().to_string().c_str());
    return 2;
  }
  auto comm = Communicator::create(*bootstrap);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", args->rank, comm.status().to_string().c_str());
    return 2;
  }
  const int rank = (*comm)->rank();
  const size_t count = kBytes / sizeof(float);
  std::vector<float> send(count, 1.0f), recv(count, 0.0f);

  std::thread killer;
  std::vector<std::string> lines;
  for (int it = 0; it < kMaxIterations; ++it) {
    const auto start = std::chrono::steady_clock::now();
    Status s = (*comm)->allreduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: allreduce %d failed after %.0f ms: %s\n", rank, it, ms,
                   s.to_string().c_str());
      lines.push_back(s.to_string());
      break;
    }
    if (rank == victim && it == 0) {
      killer = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        raise(SIGKILL);
      });
    }
  }
  if (killer.joinable()) killer.join();  // only the victim has one; it never returns from it
  if (lines.empty()) {
    std::fprintf(stderr, "rank %d: %d allreduces and no failure\n", rank, kMaxIterations);
    return 1;
  }
  float one = 1.0f;
  Status next = (*comm)->allreduce(&one, &one, 1, DType::kF32, ReduceOp::kSum);
  lines.push_back(next.ok() ? "OK" : next.to_string());
  std::ofstream file(out_path + std::to_string(rank));
  for (const auto& line : lines) file << line << "\n";
  return file ? 0 : 2;
}

}  // namespace
}  // namespace tessera::coll::testing

int main(int argc, char** argv) {
  return tessera::coll::testing::fault_main(argc, argv);
}
