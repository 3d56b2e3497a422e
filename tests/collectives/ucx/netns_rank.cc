// One rank of the two-emulated-hosts test (netns_test.sh), started in a network namespace with the
// torchrun-style environment and TESSERA_HOST_ID. Two modes:
//   netns_rank transport      the UCX transport alone: worker addresses through the bootstrap, then
//                             a direct allreduce (each rank receive-reduces every other rank's
//                             vector), so a failure here is the transport's, not an algorithm's;
//   netns_rank communicator   the world communicator: checks that it sees two hosts of two ranks
//                             and that allreduce runs hierarchically, then allreduces a few sizes
//                             (f32 sum out of place, i32 max in place).
// Every element is compared exactly. Exit 0 or 1.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"

namespace {

using tessera::coll::Bootstrap;
using tessera::coll::Communicator;
using tessera::coll::DType;
using tessera::coll::OpKind;
using tessera::coll::ReduceOp;

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "netns rank %d: FAILED: %s\n", rank, what.c_str());
  return 1;
}

// Small integers, so that the f32 sum is exact in any order.
float f32_input(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 61) - 20);
}
int32_t i32_input(int rank, size_t i) {
  return static_cast<int32_t>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) % 100003u);
}

constexpr size_t kCounts[] = {1, 7, 1000, (size_t{1} << 20) + 3};

// Starts `ops` and drives them to completion, failure, or the timeout.
tessera::Status drive(tessera::coll::Transport& transport, std::vector<tessera::coll::P2P>& ops) {
  for (auto& op : ops) TSR_RETURN_IF_ERROR(transport.start(op));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    transport.poll();
    bool done = true;
    for (auto& op : ops) {
      tessera::Status status = transport.progress(op);
      if (!status.ok()) {
        for (auto& other : ops) transport.cancel(other);
        return status;
      }
      done = done && op.done;
    }
    if (done) return tessera::Status();
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& op : ops) transport.cancel(op);
      return tessera::deadline_exceeded("operations did not complete within 30 s");
    }
  }
}

int run_transport(const std::shared_ptr<Bootstrap>& bootstrap) {
  using tessera::coll::P2P;
  const int rank = bootstrap->info().rank;
  const int size = bootstrap->info().size;
  tessera::coll::UcxTransportConfig config;
  config.rank = rank;
  config.size = size;
  config.comm_id = 1;
  config.allgather = [&](std::string_view mine) {
    return bootstrap->allgather("netns-ucx-addresses", mine);
  };
  auto transport = tessera::coll::create_ucx_transport(config);
  if (!transport.ok()) return fail(rank, "ucx transport: " + transport.status().to_string());
  uint64_t seq = 0;
  for (size_t count : kCounts) {
    std::vector<float> mine(count);
    std::vector<float> sum(count);
    for (size_t i = 0; i < count; ++i) sum[i] = mine[i] = f32_input(rank, i);
    // Step k: send to rank + k, reduce what rank - k sent into the running sum.
    for (int k = 1; k < size; ++k) {
      ++seq;
      std::vector<P2P> ops(2);
      ops[0].kind = P2P::Kind::kSend;
      ops[0].peer = (rank + k) % size;
      ops[0].src = mine.data();
      ops[1].kind = P2P::Kind::kRecvReduce;
      ops[1].peer = (rank + size - k) % size;
      ops[1].src = sum.data();
      ops[1].dst = sum.data();
      ops[1].dtype = DType::kF32;
      ops[1].op = ReduceOp::kSum;
      for (auto& op : ops) {
        op.bytes = count * sizeof(float);
        op.header.seq = seq;
        op.header.count = count;
        op.header.dtype = static_cast<uint32_t>(DType::kF32);
      }
      ops[0].header.sender = static_cast<uint32_t>(rank);
      if (auto status = drive(**transport, ops); !status.ok()) {
        return fail(rank, "transport allreduce of " + std::to_string(count) + ", step " +
                              std::to_string(k) + ": " + status.to_string());
      }
    }
    for (size_t i = 0; i < count; ++i) {
      // Received in another order than the communicator's, but small integers sum exactly.
      float expected = 0.0f;
      for (int r = 0; r < size; ++r) expected += f32_input(r, i);
      if (std::memcmp(&sum[i], &expected, sizeof(float)) != 0) {
        return fail(rank, "transport allreduce of " + std::to_string(count) + ": element " +
                              std::to_string(i) + " is " + std::to_string(sum[i]) + ", expected " +
                              std::to_string(expected));
      }
    }
  }
  // Nobody closes its endpoints while a peer still receives.
  if (auto status = bootstrap->barrier("netns-ucx-done"); !status.ok()) {
    return fail(rank, "barrier: " + status.to_string());
  }
  std::printf("netns rank %d: UCX transport allreduce across the namespaces ok\n", rank);
  return 0;
}

int run_communicator(const std::shared_ptr<Bootstrap>& bootstrap) {
  const int world_rank = bootstrap->info().rank;
  auto created = Communicator::create(bootstrap);
  if (!created.ok()) return fail(world_rank, "communicator: " + created.status().to_string());
  Communicator& comm = **created;
  const int rank = comm.rank();
  const int size = comm.size();
  if (size != 4 || comm.num_hosts() != 2 || comm.local_size() != 2) {
    return fail(rank, "expected 4 ranks on 2 hosts of 2, got " + std::to_string(size) +
                          " ranks on " + std::to_string(comm.num_hosts()) + " hosts, local size " +
                          std::to_string(comm.local_size()));
  }

  for (size_t count : kCounts) {
    const std::string_view algorithm = comm.algorithm_for(OpKind::kAllReduce, count * 4);
    if (algorithm != "hierarchical") {
      return fail(rank, "allreduce of " + std::to_string(count * 4) + " bytes would run '" +
                            std::string(algorithm) + "', not 'hierarchical'");
    }

    std::vector<float> send(count);
    std::vector<float> recv(count, -1.0f);
    for (size_t i = 0; i < count; ++i) send[i] = f32_input(rank, i);
    auto status = comm.allreduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    if (!status.ok())
      return fail(rank, "f32 sum of " + std::to_string(count) + ": " + status.to_string());
    for (size_t i = 0; i < count; ++i) {
      float expected = 0.0f;
      for (int r = 0; r < size; ++r) expected += f32_input(r, i);
      if (std::memcmp(&recv[i], &expected, sizeof(float)) != 0) {
        return fail(rank, "f32 sum of " + std::to_string(count) + ": element " + std::to_string(i) +
                              " is " + std::to_string(recv[i]) + ", expected " +
                              std::to_string(expected));
      }
    }

    std::vector<int32_t> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = i32_input(rank, i);
    status = comm.allreduce(data.data(), data.data(), count, DType::kI32, ReduceOp::kMax);
    if (!status.ok())
      return fail(rank, "i32 max of " + std::to_string(count) + " in place: " + status.to_string());
    for (size_t i = 0; i < count; ++i) {
      int32_t expected = i32_input(0, i);
      for (int r = 1; r < size; ++r) expected = std::max(expected, i32_input(r, i));
      if (data[i] != expected) {
        return fail(rank, "i32 max of " + std::to_string(count) + ": element " + std::to_string(i) +
                              " is " + std::to_string(data[i]) + ", expected " +
                              std::to_string(expected));
      }
    }
  }
  if (auto status = comm.barrier(); !status.ok())
    return fail(rank, "barrier: " + status.to_string());
  std::printf("netns rank %d (host %d of %d, local rank %d): hierarchical allreduce ok\n", rank,
              rank / comm.local_size(), comm.num_hosts(), comm.local_rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode != "transport" && mode != "communicator") {
    std::fprintf(stderr, "usage: %s transport|communicator\n", argv[0]);
    return 2;
  }
  auto bootstrap = Bootstrap::from_environment();
  if (!bootstrap.ok()) return fail(-1, "bootstrap: " + bootstrap.status().to_string());
  return mode == "transport" ? run_transport(*bootstrap) : run_communicator(*bootstrap);
}
