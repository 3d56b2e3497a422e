// coll_correctness_rank: one rank of the correctness test, started N times by
// correctness_test.cc (multi_rank.h). Scenarios (--scenario):
//   all              every combination of all_cases(); prints the first failures with context
//   mismatch_count   rank 0 allreduces 1000 floats, the others 999
//   mismatch_dtype   rank 0 allreduces f32, the others i32
//   null_buffer      allreduce with a null send buffer, then a null receive buffer; the stream
//                    allreduce, reduce (null recv at the root) and broadcast (null send at the
//                    root)
//   foreign_stream   an allreduce queued on a stream of host:1 on a communicator of host:0
//   after_abort      abort(), then allreduce and barrier
// The bad-input scenarios write the status each call returned to --out FILE (one line per call)
// + the rank number, for the parent to judge; exit status 0 unless the rank itself could not run.
//
// The backend is the host backend unless TESSERA_TEST_BACKEND names another (bench/gpu_check.sh
// runs scenario `all` on cuda this way). The host backend's ranks use host:0 (the tests set
// TESSERA_HOST_DEVICES); another backend's rank R uses device R mod the device count.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cases.h"
#include "multi_rank.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/platform.h"

namespace tessera::coll::testing {
namespace {

constexpr int kMaxFailedCases = 8;

struct Context {
  std::shared_ptr<hal::Platform> platform;
  std::shared_ptr<Communicator> comm;
  std::optional<hal::Device> device;
  std::optional<hal::Stream> stream;
};

// The backend the ranks run on: TESSERA_TEST_BACKEND, else the host backend.
std::string test_backend() {
  const char* name = std::getenv("TESSERA_TEST_BACKEND");
  return name != nullptr && *name != '\0' ? name : "host";
}

Result<Context> setup(const RankArgs& args) {
  Context ctx;
  hal::PlatformOptions options;
  const std::string backend = test_backend();
  options.registry.selection = backend;
  TSR_ASSIGN_OR_RETURN(ctx.platform, hal::Platform::create(options));
  const auto count = static_cast<int>(ctx.platform->devices(backend).size());
  const int index = backend == "host" || count == 0 ? 0 : args.rank % count;
  TSR_ASSIGN_OR_RETURN(hal::Device device, ctx.platform->device(backend, index));
  TSR_ASSIGN_OR_RETURN(auto bootstrap, connect_rank(args));
  CommOptions comm_options;
  comm_options.stage_chunk_bytes = kStageChunkBytes;
  TSR_ASSIGN_OR_RETURN(ctx.comm, Communicator::create(bootstrap, device, comm_options));
  ctx.device.emplace(device);
  TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
  ctx.stream.emplace(std::move(stream));
  return ctx;
}

int run_all(Context& ctx) {
  Communicator& comm = *ctx.comm;
  const int rank = comm.rank();
  const int n = comm.size();
  const std::vector<Case> cases = all_cases(n);
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  size_t run = 0;
  double op_seconds = 0;
  for (const Case& c : cases) {
    Outcome out = run_case(comm, &*ctx.device, &*ctx.stream, c);
    ++run;
    op_seconds += out.op_seconds;
    if (!out.status.ok()) {
      std::fprintf(stderr,
                   "FAIL rank %d: %s: %s (case %zu of %zu; stopping, the communicator "
                   "may be unusable)\n%s",
                   rank, describe(c, n).c_str(), out.status.to_string().c_str(), run, cases.size(),
                   comm.flight_record().c_str());
      return 1;
    }
    if (out.wrong > 0) {
      if (++failed <= kMaxFailedCases) {
        std::fprintf(stderr, "FAIL rank %d: %s: %lld wrong\n%s", rank, describe(c, n).c_str(),
                     static_cast<long long>(out.wrong), out.detail.c_str());
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A final barrier: a rank must not exit while a peer may still be reading what it sent.
  if (Status s = comm.barrier(); !s.ok()) {
    std::fprintf(stderr, "FAIL rank %d: final barrier: %s\n", rank, s.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "rank %d: %zu cases in %.1f s (%.1f s in operations), %d with wrong results\n", rank,
               run, seconds, op_seconds, failed);
  return failed == 0 ? 0 : 1;
}

// Bad input: records each status; the parent judges.
int run_bad_input(Context& ctx, const std::string& scenario, const std::string& out_path) {
  Communicator& comm = *ctx.comm;
  const int rank = comm.rank();
  std::vector<float> send(1000, 1.0f), recv(1000, 0.0f);
  std::vector<std::string> lines;
  auto record = [&](const Status& s) { lines.push_back(s.ok() ? "OK" : s.to_string()); };
  if (scenario == "mismatch_count") {
    record(comm.allreduce(send.data(), recv.data(), rank == 0 ? 1000 : 999, DType::kF32,
                          ReduceOp::kSum));
  } else if (scenario == "mismatch_dtype") {
    record(comm.allreduce(send.data(), recv.data(), 1000, rank == 0 ? DType::kF32 : DType::kI32,
                          ReduceOp::kSum));
  } else if (scenario == "null_buffer") {
    // On a communicator of this rank alone: with peers, the first refused call would abort the
    // communicator (scenario one_rank_refuses) and the later ones return ABORTED.
    auto alone_or = comm.split(rank, 0);
    if (!alone_or.ok() || !ctx.stream) {
      std::fprintf(stderr, "rank %d: no split or no stream\n", rank);
      return 2;
    }
    Communicator& alone = **alone_or;
    record(alone.allreduce(nullptr, recv.data(), 1000, DType::kF32, ReduceOp::kSum));
    record(alone.allreduce(send.data(), nullptr, 1000, DType::kF32, ReduceOp::kSum));
    record(alone.allreduce(send.data(), recv.data(), SIZE_MAX, DType::kF32, ReduceOp::kSum));
    // The stream forms refuse the same calls.
    auto queued = [&](const Result<Work>& w) { record(w.ok() ? Status() : w.status()); };
    queued(alone.allreduce(nullptr, recv.data(), 1000, DType::kF32, ReduceOp::kSum, *ctx.stream));
    queued(alone.reduce(send.data(), nullptr, 1000, DType::kF32, ReduceOp::kSum, 0, *ctx.stream));
    queued(alone.broadcast(nullptr, recv.data(), 1000, DType::kF32, 0, *ctx.stream));
  } else if (scenario == "one_rank_refuses") {
    // Rank 0's call is refused; rank 1 has entered the allreduce and must not wait for it.
    record(comm.allreduce(rank == 0 ? nullptr : send.data(), recv.data(), 1000, DType::kF32,
                          ReduceOp::kSum));
  } else if (scenario == "foreign_stream") {
    auto other = ctx.platform->device("host", 1);
    if (!other.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, other.status().to_string().c_str());
      return 2;
    }
    auto stream = other->create_stream();
    if (!stream.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, stream.status().to_string().c_str());
      return 2;
    }
    auto work =
        comm.allreduce(send.data(), recv.data(), 1000, DType::kF32, ReduceOp::kSum, *stream);
    record(work.ok() ? work->wait(std::chrono::milliseconds(30000)) : work.status());
  } else if (scenario == "after_abort") {
    comm.abort("aborted by the test");
    record(comm.allreduce(send.data(), recv.data(), 1000, DType::kF32, ReduceOp::kSum));
    record(comm.barrier());
    lines.push_back(comm.aborted() ? "aborted() true" : "aborted() false");
  } else {
    std::fprintf(stderr, "rank %d: unknown --scenario '%s'\n", rank, scenario.c_str());
    return 2;
  }
  std::ofstream file(out_path + std::to_string(rank));
  for (const auto& line : lines) file << line << "\n";
  return file ? 0 : 2;
}

int rank_main(int argc, char** argv) {
  auto args = parse_rank_args(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n", args.status().message().c_str());
    return 2;
  }
  std::string scenario = "all";
  std::string out_path;
  for (size_t i = 0; i + 1 < args->rest.size(); i += 2) {
    if (args->rest[i] == "--scenario") scenario = args->rest[i + 1];
    if (args->rest[i] == "--out") out_path = args->rest[i + 1];
  }
  auto ctx = setup(*args);
  if (!ctx.ok()) {
    std::fprintf(stderr, "rank %d: setup: %s\n", args->rank, ctx.status().to_string().c_str());
    return 2;
  }
  if (scenario == "all") return run_all(*ctx);
  return run_bad_input(*ctx, scenario, out_path);
}

}  // namespace
}  // namespace tessera::coll::testing

int main(int argc, char** argv) {
  return tessera::coll::testing::rank_main(argc, argv);
}
