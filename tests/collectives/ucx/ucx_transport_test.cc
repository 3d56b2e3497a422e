// UcxTransport between forked ranks over UCX's TCP transport on the loopback device: bit-exact
// messages of awkward sizes, receive-and-reduce, header mismatches and a peer killed by SIGKILL.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "forked_ranks.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"

namespace tessera::coll {
namespace {

using testing::Allgather;
using testing::describe;
using testing::RankExit;
using testing::run_forked_ranks;

constexpr size_t kSizes[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

// Sandboxes have no RDMA device and may forbid shared memory: TCP over loopback works anywhere.
void use_tcp_loopback() {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
}

Result<std::unique_ptr<Transport>> make_transport(int rank, int size, Allgather& allgather) {
  use_tcp_loopback();
  UcxTransportConfig config;
  config.rank = rank;
  config.size = size;
  config.comm_id = 7;
  config.allgather = allgather;
  config.timeout = std::chrono::milliseconds(20000);
  return create_ucx_transport(config);
}

// Drives `ops` to completion the way the Engine does: start all, then poll + progress each until
// done, a failure, or `limit` (a hang guard, not a performance check).
Status drive(Transport& transport, std::vector<P2P>& ops,
             std::chrono::seconds limit = std::chrono::seconds(30)) {
  for (auto& op : ops) TSR_RETURN_IF_ERROR(transport.start(op));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    transport.poll();
    bool all_done = true;
    for (auto& op : ops) {
      Status status = transport.progress(op);
      if (!status.ok()) {
        for (auto& other : ops) transport.cancel(other);
        return status;
      }
      all_done = all_done && op.done;
    }
    if (all_done) return Status();
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& op : ops) transport.cancel(op);
      return deadline_exceeded("test: operations did not complete");
    }
  }
}

WireHeader header_for(uint64_t seq, uint64_t count, hal::DType dtype, int sender) {
  WireHeader header;
  header.seq = seq;
  header.count = count;
  header.op = 0;
  header.dtype = static_cast<uint32_t>(dtype);
  header.sender = static_cast<uint32_t>(sender);
  return header;
}

// Bytes rank `from` sends rank `to` in round `seq`: reproducible on both sides from the seed.
std::vector<uint8_t> payload(uint32_t seed, int from, int to, uint64_t seq, size_t bytes) {
  std::mt19937 rng(seed ^ static_cast<uint32_t>(from * 7919 + to * 104729 + seq * 31));
  std::vector<uint8_t> data(bytes);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  return data;
}

uint32_t test_seed() {
  static const uint32_t seed = [] {
    const uint32_t value = std::random_device{}();
    std::printf("seed %u\n", value);
    return value;
  }();
  return seed;
}

// Every rank sends to and receives from every other rank at once, for each size in turn.
int exchange_all_sizes(int rank, int size, Allgather& allgather, uint32_t seed) {
  auto transport = make_transport(rank, size, allgather);
  RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
  uint64_t seq = 0;
  for (size_t bytes : kSizes) {
    ++seq;
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(size));
    std::vector<std::vector<uint8_t>> in(static_cast<size_t>(size));
    std::vector<P2P> ops;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      out[static_cast<size_t>(peer)] = payload(seed, rank, peer, seq, bytes);
      in[static_cast<size_t>(peer)].assign(bytes, 0xee);
      P2P send;
      send.kind = P2P::Kind::kSend;
      send.peer = peer;
      send.src = bytes == 0 ? nullptr : out[static_cast<size_t>(peer)].data();
      send.bytes = bytes;
      send.header = header_for(seq, bytes, hal::DType::kU8, rank);
      ops.push_back(send);
      P2P recv;
      recv.kind = P2P::Kind::kRecv;
      recv.peer = peer;
      recv.dst = bytes == 0 ? nullptr : in[static_cast<size_t>(peer)].data();
      recv.bytes = bytes;
      recv.header = header_for(seq, bytes, hal::DType::kU8, peer);
      ops.push_back(recv);
    }
    Status status = drive(**transport, ops);
    RANK_CHECK(status.ok(), "rank %d, %zu bytes: %s", rank, bytes, status.to_string().c_str());
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      RANK_CHECK(in[static_cast<size_t>(peer)] == payload(seed, peer, rank, seq, bytes),
                 "rank %d received wrong bytes from rank %d (%zu bytes)", rank, peer, bytes);
    }
  }
  // Nobody closes its endpoints while a peer still receives.
  RANK_CHECK(allgather("done").ok(), "final allgather");
  return 0;
}

TEST(UcxTransport, WithoutUcxCreationFailsSayingSo) {
  if (ucx_available()) GTEST_SKIP() << "built with UCX";
  Allgather allgather = [](std::string_view mine) {
    return Result<std::vector<std::string>>(std::vector<std::string>{std::string(mine)});
  };
  auto transport = make_transport(0, 1, allgather);
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(transport.status().message().find("built without UCX"), std::string::npos);
}

TEST(UcxTransport, RefusesItselfOrARankOutsideAsPeer) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  // In a rank process, so that the test process never starts UCX's threads before a fork.
  auto exits = run_forked_ranks(1, [](int rank, Allgather& allgather) {
    auto transport = make_transport(rank, 1, allgather);
    RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
    P2P to_self;
    to_self.kind = P2P::Kind::kSend;
    to_self.peer = 0;
    Status status = (*transport)->start(to_self);
    RANK_CHECK(status.code() == StatusCode::kInvalidArgument, "%s", status.to_string().c_str());
    P2P outside;
    outside.kind = P2P::Kind::kRecv;
    outside.peer = 1;
    outside.bytes = 8;
    status = (*transport)->start(outside);
    RANK_CHECK(status.code() == StatusCode::kInvalidArgument, "%s", status.to_string().c_str());
    RANK_CHECK((*transport)->progress(outside).code() == StatusCode::kFailedPrecondition,
               "progress on an operation that never started");
    return 0;
  });
  EXPECT_EQ(exits[0].code, 0) << describe(exits);
}

TEST(UcxTransport, ExchangesEveryMessageSizeBitExactBetweenTwoRanks) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  const uint32_t seed = test_seed();
  auto exits = run_forked_ranks(2, [&](int rank, Allgather& allgather) {
    return exchange_all_sizes(rank, 2, allgather, seed);
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

TEST(UcxTransport, ExchangesEveryMessageSizeBitExactAmongThreeRanks) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  const uint32_t seed = test_seed();
  auto exits = run_forked_ranks(3, [&](int rank, Allgather& allgather) {
    return exchange_all_sizes(rank, 3, allgather, seed);
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

// A ring step: rank r sends its vector to r+1 and reduces the one from r-1 into dst.
template <typename T>
int ring_reduce_step(int rank, int size, Allgather& allgather, hal::DType dtype,
                     hal::ReduceOp reduce, bool in_place) {
  auto transport = make_transport(rank, size, allgather);
  RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
  auto value = [](int r, size_t i) {
    return static_cast<T>(static_cast<int>((i * 13 + r * 5) % 97) - 40);
  };
  uint64_t seq = 0;
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
    ++seq;
    const int next = (rank + 1) % size;
    const int prev = (rank + size - 1) % size;
    std::vector<T> mine(count);
    std::vector<T> result(count, T(-1));
    for (size_t i = 0; i < count; ++i) mine[i] = value(rank, i);
    if (in_place) result = mine;
    std::vector<P2P> ops(2);
    ops[0].kind = P2P::Kind::kSend;
    ops[0].peer = next;
    ops[0].src = mine.data();
    ops[0].bytes = count * sizeof(T);
    ops[0].header = header_for(seq, count, dtype, rank);
    ops[1].kind = P2P::Kind::kRecvReduce;
    ops[1].peer = prev;
    ops[1].src = in_place ? result.data() : mine.data();
    ops[1].dst = result.data();
    ops[1].bytes = count * sizeof(T);
    ops[1].dtype = dtype;
    ops[1].op = reduce;
    ops[1].header = header_for(seq, count, dtype, prev);
    Status status = drive(**transport, ops);
    RANK_CHECK(status.ok(), "rank %d, %zu elements: %s", rank, count, status.to_string().c_str());
    for (size_t i = 0; i < count; ++i) {
      const T a = value(rank, i);
      const T b = value(prev, i);
      const T expected = reduce == hal::ReduceOp::kMax ? std::max(a, b) : static_cast<T>(a + b);
      RANK_CHECK(std::memcmp(&result[i], &expected, sizeof(T)) == 0,
                 "rank %d element %zu of %zu: got %g, expected %g", rank, i, count,
                 static_cast<double>(result[i]), static_cast<double>(expected));
    }
  }
  RANK_CHECK(allgather("done").ok(), "final allgather");
  return 0;
}

TEST(UcxTransport, RecvReduceSumsF32ChunkByChunkAroundARingOfThree) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(3, [](int rank, Allgather& allgather) {
    return ring_reduce_step<float>(rank, 3, allgather, hal::DType::kF32, hal::ReduceOp::kSum,
                                   /*in_place=*/false);
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

TEST(UcxTransport, RecvReduceTakesTheI32MaximumInPlaceBetweenTwoRanks) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(2, [](int rank, Allgather& allgather) {
    return ring_reduce_step<int32_t>(rank, 2, allgather, hal::DType::kI32, hal::ReduceOp::kMax,
                                     /*in_place=*/true);
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

TEST(UcxTransport, HeaderMismatchFailsTheReceiverNamingBothRanks) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(2, [](int rank, Allgather& allgather) {
    auto transport = make_transport(rank, 2, allgather);
    RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
    std::vector<float> data(1000, rank == 0 ? 1.0f : 2.0f);
    std::vector<P2P> ops(1);
    ops[0].peer = 1 - rank;
    ops[0].bytes = data.size() * sizeof(float);
    if (rank == 0) {
      ops[0].kind = P2P::Kind::kSend;
      ops[0].src = data.data();
      ops[0].header = header_for(/*seq=*/12, 1000, hal::DType::kF32, 0);
      Status status = drive(**transport, ops);
      RANK_CHECK(status.ok(), "sender: %s", status.to_string().c_str());
    } else {
      ops[0].kind = P2P::Kind::kRecv;
      ops[0].dst = data.data();
      ops[0].header = header_for(/*seq=*/13, 1000, hal::DType::kF32, 0);
      Status status = drive(**transport, ops);
      RANK_CHECK(!status.ok(), "a mismatched message was accepted");
      const std::string& message = status.message();
      RANK_CHECK(message.find("rank 0") != std::string::npos &&
                     message.find("rank 1") != std::string::npos,
                 "the error does not name both ranks: %s", message.c_str());
      RANK_CHECK(data[0] == 2.0f, "the mismatched payload reached the destination buffer");
    }
    RANK_CHECK(allgather("done").ok(), "final allgather");
    return 0;
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

TEST(UcxTransport, LargerCountFromTheSenderFailsTheReceiverNamingBothRanks) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(2, [](int rank, Allgather& allgather) {
    auto transport = make_transport(rank, 2, allgather);
    RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
    const size_t count = rank == 0 ? 100000 : 1000;  // rank 0 disagrees about the count
    std::vector<float> data(count, rank == 0 ? 1.0f : 2.0f);
    std::vector<P2P> ops(1);
    ops[0].peer = 1 - rank;
    ops[0].bytes = count * sizeof(float);
    ops[0].header = header_for(/*seq=*/3, count, hal::DType::kF32, 0);
    if (rank == 0) {
      ops[0].kind = P2P::Kind::kSend;
      ops[0].src = data.data();
      // The receiver drops the message: whether this send completes or is cancelled by the
      // deadline does not matter, only that nothing hangs.
      drive(**transport, ops, std::chrono::seconds(3)).ignore();
    } else {
      ops[0].kind = P2P::Kind::kRecv;
      ops[0].dst = data.data();
      Status status = drive(**transport, ops);
      RANK_CHECK(!status.ok(), "a message of another count was accepted");
      const std::string& message = status.message();
      RANK_CHECK(message.find("rank 0") != std::string::npos &&
                     message.find("rank 1") != std::string::npos,
                 "the error does not name both ranks: %s", message.c_str());
      RANK_CHECK(data[0] == 2.0f, "the mismatched payload reached the destination buffer");
      std::printf("rank 1 saw: %s\n", status.to_string().c_str());
    }
    RANK_CHECK(allgather("done").ok(), "final allgather");
    return 0;
  });
  for (const RankExit& exit : exits) EXPECT_EQ(exit.code, 0) << describe(exits);
}

TEST(UcxTransport, SigkillOfThePeerFailsProgressNamingIt) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(2, [](int rank, Allgather& allgather) {
    auto transport = make_transport(rank, 2, allgather);
    RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
    // One message each way first, so that the connection is up when rank 1 dies.
    std::vector<uint8_t> out(1000, 1), in(1000);
    std::vector<P2P> ops(2);
    ops[0].kind = P2P::Kind::kSend;
    ops[0].peer = 1 - rank;
    ops[0].src = out.data();
    ops[0].bytes = out.size();
    ops[0].header = header_for(1, out.size(), hal::DType::kU8, rank);
    ops[1].kind = P2P::Kind::kRecv;
    ops[1].peer = 1 - rank;
    ops[1].dst = in.data();
    ops[1].bytes = in.size();
    ops[1].header = header_for(1, in.size(), hal::DType::kU8, 1 - rank);
    Status status = drive(**transport, ops);
    RANK_CHECK(status.ok(), "%s", status.to_string().c_str());
    RANK_CHECK(allgather("connected").ok(), "allgather");
    if (rank == 1) raise(SIGKILL);

    // Rank 0 waits for a message rank 1 will never send: the receive must fail, naming rank 1.
    std::vector<uint8_t> big((size_t{1} << 20) * 3);
    std::vector<P2P> pending(2);
    pending[0].kind = P2P::Kind::kRecv;
    pending[0].peer = 1;
    pending[0].dst = big.data();
    pending[0].bytes = big.size();
    pending[0].header = header_for(2, big.size(), hal::DType::kU8, 1);
    pending[1].kind = P2P::Kind::kSend;
    pending[1].peer = 1;
    pending[1].src = big.data();
    pending[1].bytes = big.size();
    pending[1].header = header_for(2, big.size(), hal::DType::kU8, 0);
    status = drive(**transport, pending, std::chrono::seconds(40));
    RANK_CHECK(status.code() != StatusCode::kDeadlineExceeded, "no error after the peer died");
    RANK_CHECK(status.message().find("rank 1") != std::string::npos, "%s",
               status.to_string().c_str());
    auto failed = (*transport)->failed_peer();
    RANK_CHECK(failed.has_value() && failed->first == 1, "failed_peer() does not report rank 1");
    std::printf("rank 0 saw: %s\n", status.to_string().c_str());
    return 0;
  });
  EXPECT_EQ(exits[0].code, 0) << describe(exits);
  EXPECT_EQ(exits[1].signal, SIGKILL) << describe(exits);
}

TEST(UcxTransport, SigkillInTheMiddleOfALargeExchangeFailsTheSurvivorNamingIt) {
  if (!ucx_available()) GTEST_SKIP() << "built without UCX";
  auto exits = run_forked_ranks(2, [](int rank, Allgather& allgather) {
    auto transport = make_transport(rank, 2, allgather);
    RANK_CHECK(transport.ok(), "%s", transport.status().to_string().c_str());
    RANK_CHECK(allgather("connected").ok(), "allgather");
    const size_t bytes = size_t{64} << 20;
    std::vector<uint8_t> out(bytes, 3), in(bytes);
    std::vector<P2P> ops(2);
    ops[0].kind = P2P::Kind::kSend;
    ops[0].peer = 1 - rank;
    ops[0].src = out.data();
    ops[1].kind = P2P::Kind::kRecvReduce;
    ops[1].peer = 1 - rank;
    ops[1].src = in.data();
    ops[1].dst = in.data();
    ops[1].dtype = hal::DType::kU8;
    for (auto& op : ops) {
      op.bytes = bytes;
      op.header = header_for(1, bytes, hal::DType::kU8, rank);
    }
    ops[1].header.sender = static_cast<uint32_t>(1 - rank);
    if (rank == 1) {
      // Dies once a few chunks have arrived, with more of its own on the wire.
      for (auto& op : ops) RANK_CHECK((*transport)->start(op).ok(), "start");
      while (ops[1].moved < (size_t{4} << 20)) {
        (*transport)->poll();
        for (auto& op : ops) RANK_CHECK((*transport)->progress(op).ok(), "progress");
      }
      raise(SIGKILL);
    }
    Status status = drive(**transport, ops, std::chrono::seconds(40));
    RANK_CHECK(status.code() != StatusCode::kDeadlineExceeded && !status.ok(),
               "no error after the peer died: %s", status.to_string().c_str());
    RANK_CHECK(status.message().find("rank 1") != std::string::npos, "%s",
               status.to_string().c_str());
    std::printf("rank 0 saw: %s\n", status.to_string().c_str());
    return 0;
  });
  EXPECT_EQ(exits[0].code, 0) << describe(exits);
  EXPECT_EQ(exits[1].signal, SIGKILL) << describe(exits);
}

}  // namespace
}  // namespace tessera::coll
