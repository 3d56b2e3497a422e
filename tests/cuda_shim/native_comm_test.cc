// The communicator's native route through the CUDA backend's NCCL adapter, over the fake runtime
// and the fake NCCL (fakenccl.cc): two ranks as two threads of this process (the fake NCCL's
// ranks are threads), each on its own fakert device, over a TCP store hosted here. Shows that the
// communicator creates the NCCL communicator itself (rank 0's unique id through the bootstrap),
// that blocking and stream operations on device memory go through it, and that an abort on one
// rank fails the other's pending operation.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/hal.h"

namespace tessera::coll {
namespace {

class FakeNcclCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FAKERT_DEVICES", "2", 1);
    hal::PlatformOptions options;
    options.registry.selection = "fakert";
    options.registry.search_dirs = {TESSERA_SHIM_BACKEND_DIR};
    auto platform = hal::Platform::create(options);
    ASSERT_TRUE(platform.ok()) << platform.status().to_string();
    platform_ = *platform;
    ASSERT_EQ(platform_->devices("fakert").size(), 2u) << "FAKERT_DEVICES=2";
    auto server = start_tcp_store_server("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(*server);
  }

  // Runs `body(rank, comm, device, stream)` on two threads, one rank each; returns each rank's
  // status.
  std::vector<Status> run_two(const std::function<Status(int, Communicator&, const hal::Device&,
                                                         const hal::Stream&)>& body) {
    std::vector<Status> results(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        results[size_t(rank)] = [&]() -> Status {
          LaunchInfo info;
          info.rank = info.local_rank = rank;
          info.size = info.local_size = 2;
          TSR_ASSIGN_OR_RETURN(auto store, connect_tcp_store("127.0.0.1", server_->port(),
                                                             std::chrono::milliseconds(10000)));
          auto bootstrap = Bootstrap::from_parts(info, std::move(store));
          TSR_ASSIGN_OR_RETURN(hal::Device device, platform_->device("fakert", rank));
          CommOptions options;
          options.device_path = "native";
          options.timeout = std::chrono::milliseconds(60000);
          TSR_ASSIGN_OR_RETURN(auto comm, Communicator::create(bootstrap, device, options));
          TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
          return body(rank, *comm, device, stream);
        }();
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  std::shared_ptr<hal::Platform> platform_;
  std::unique_ptr<TcpStoreServer> server_;
};

// Copies through one pinned buffer the rank keeps for the whole test: freeing pinned memory
// synchronizes every stream of the process in fakert (as cudaFreeHost does a device), and with
// ranks as threads of one process that would wait for the other rank's pending collectives.
Status upload(const hal::Stream& stream, hal::HostBuffer& pinned, void* dst,
              const std::vector<float>& values) {
  std::memcpy(pinned.data(), values.data(), values.size() * 4);
  TSR_RETURN_IF_ERROR(stream.copy(dst, pinned.data(), values.size() * 4));
  return stream.synchronize();
}

Result<std::vector<float>> download(const hal::Stream& stream, hal::HostBuffer& pinned,
                                    const void* src, size_t count) {
  TSR_RETURN_IF_ERROR(stream.copy(pinned.data(), src, count * 4));
  TSR_RETURN_IF_ERROR(stream.synchronize());
  std::vector<float> out(count);
  std::memcpy(out.data(), pinned.data(), count * 4);
  return out;
}

Status expect_all(const std::vector<float>& got, float want, const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want) {
      return internal_error(std::string(what) + ": element " + std::to_string(i) + " is " +
                            std::to_string(got[i]) + ", expected " + std::to_string(want));
    }
  }
  return Status();
}

TEST_F(FakeNcclCommunicator, BlockingAndStreamOperationsGoThroughTheAdapter) {
  const auto results = run_two([](int rank, Communicator& comm, const hal::Device& device,
                                  const hal::Stream& stream) -> Status {
    if (comm.route_for(OpKind::kAllReduce, true) != "native") {
      return internal_error("allreduce takes the " +
                            std::string(comm.route_for(OpKind::kAllReduce, true)) + " route");
    }
    const size_t count = 1000;
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer a, device.allocate(count * 4));
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device.allocate(2 * count * 4));
    TSR_ASSIGN_OR_RETURN(hal::HostBuffer pinned, device.allocate_host(2 * count * 4));
    TSR_RETURN_IF_ERROR(upload(stream, pinned, a.data(), std::vector<float>(count, rank + 1.0f)));
    TSR_RETURN_IF_ERROR(comm.allreduce(a.data(), a.data(), count, DType::kF32, ReduceOp::kSum));
    TSR_ASSIGN_OR_RETURN(auto got, download(stream, pinned, a.data(), count));
    TSR_RETURN_IF_ERROR(expect_all(got, 3.0f, "blocking allreduce"));
    // reduce (composed) and allgather on the stream.
    TSR_ASSIGN_OR_RETURN(
        Work w1, comm.reduce(a.data(), a.data(), count, DType::kF32, ReduceOp::kSum, 1, stream));
    TSR_ASSIGN_OR_RETURN(Work w2, comm.allgather(a.data(), b.data(), count, DType::kF32, stream));
    TSR_RETURN_IF_ERROR(w1.wait(std::chrono::milliseconds(60000)));
    TSR_RETURN_IF_ERROR(w2.wait(std::chrono::milliseconds(60000)));
    TSR_ASSIGN_OR_RETURN(got, download(stream, pinned, b.data(), 2 * count));
    // Rank 1 (the root) holds 6, rank 0 kept 3.
    TSR_RETURN_IF_ERROR(expect_all({got.begin(), got.begin() + count}, 3.0f, "allgather block 0"));
    TSR_RETURN_IF_ERROR(expect_all({got.begin() + count, got.end()}, 6.0f, "allgather block 1"));
    const std::string record = comm.flight_record();
    if (record.find("route native") == std::string::npos) {
      return internal_error("no native operation in the flight record:\n" + record);
    }
    return Status();
  });
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].to_string();
  }
}

TEST_F(FakeNcclCommunicator, AnAbortOnOneRankFailsTheOthersPendingOperation) {
  const auto results = run_two([](int rank, Communicator& comm, const hal::Device& device,
                                  const hal::Stream& stream) -> Status {
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer a, device.allocate(4096));
    if (rank == 0) {
      comm.abort("rank 0 gives up (test)");
      return Status();
    }
    TSR_ASSIGN_OR_RETURN(
        Work w, comm.allreduce(a.data(), a.data(), 1024, DType::kF32, ReduceOp::kSum, stream));
    const Status s = w.wait(std::chrono::milliseconds(60000));
    if (s.ok() || s.code() == StatusCode::kDeadlineExceeded) {
      return internal_error("rank 1's allreduce ended with " + s.to_string());
    }
    return Status();
  });
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].to_string();
  }
}

}  // namespace
}  // namespace tessera::coll
