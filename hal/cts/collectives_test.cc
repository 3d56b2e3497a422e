// The native collectives sub-table (tsr_collectives_api_v1), for backends that have one: ranks
// are devices of this process, one thread each (comm_init_rank blocks until every rank joins).
// Results are checked on inputs whose reductions are exact in every order. A backend without the
// sub-table, or whose device 0 does not advertise TSR_CAP_NATIVE_COLLECTIVES, skips the group
// (the host backend advertises it with TESSERA_HOST_CCL=1: ctest cts.host.collectives).
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Collectives : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    table_ = api().collectives;
    if (table_ == nullptr) GTEST_SKIP() << "the backend has no collectives sub-table";
    tsr_device_properties props{};
    props.struct_size = sizeof props;
    CTS_ASSERT_OK(api().device_properties(0, &props));
    if ((props.capabilities & TSR_CAP_NATIVE_COLLECTIVES) == 0) {
      GTEST_SKIP() << "device 0 does not advertise TSR_CAP_NATIVE_COLLECTIVES (" << table_->library
                   << "; the host backend needs TESSERA_HOST_CCL=1)";
    }
  }

  // The number of ranks the multi-rank tests use: up to 3 devices.
  static int ranks_available() { return std::min(context().device_count, 3); }

  // Runs body(rank) on one thread per rank and returns every failure message, "" when none.
  static std::string on_ranks(int n, const std::function<std::string(int)>& body) {
    std::mutex mutex;
    std::string failures;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        std::string failure = body(r);
        if (failure.empty()) return;
        std::lock_guard lock(mutex);
        failures += "rank " + std::to_string(r) + ": " + failure + "\n";
      });
    }
    for (auto& t : threads) t.join();
    return failures;
  }

  static std::string error_of(const char* call) {
    return std::string(call) + " failed: " + api().last_error();
  }

  // Forms `n` ranks on devices 0..n-1; comms[r] is rank r's communicator.
  std::string form(int n, std::vector<tsr_comm>* comms) {
    tsr_comm_unique_id id{};
    if (table_->get_unique_id(&id) != TSR_OK) return error_of("get_unique_id");
    comms->assign(size_t(n), nullptr);
    return on_ranks(n, [&](int r) -> std::string {
      if (table_->comm_init_rank(r, n, &id, r, &(*comms)[size_t(r)]) != TSR_OK) {
        return error_of("comm_init_rank");
      }
      return "";
    });
  }

  void destroy(const std::vector<tsr_comm>& comms) {
    for (tsr_comm c : comms) {
      if (c != nullptr) {
        CTS_EXPECT_OK(table_->comm_destroy(c));
      }
    }
  }

  // One rank's part of a test: device buffers in, an operation, the result back on the host.
  // `issue` enqueues the operation on the stream; `input` is copied to a device buffer first,
  // `output_bytes` come back into *output.
  static std::string run_rank(int r, const std::vector<uint8_t>& input, size_t output_bytes,
                              const std::function<tsr_status(void*, void*, tsr_stream)>& issue,
                              std::vector<uint8_t>* output) {
    OwnedStream stream;
    if (OwnedStream::create(r, &stream) != TSR_OK) return error_of("stream_create");
    DeviceMemory send, recv;
    if (DeviceMemory::allocate(r, std::max<size_t>(input.size(), 1), &send) != TSR_OK ||
        DeviceMemory::allocate(r, std::max<size_t>(output_bytes, 1), &recv) != TSR_OK) {
      return error_of("device_malloc");
    }
    if (!copy_and_wait(send.get(), input.data(), input.size(), stream)) return "copy in failed";
    if (issue(send.get(), recv.get(), stream.get()) != TSR_OK) return error_of("the operation");
    if (stream.synchronize() != TSR_OK) return error_of("stream_synchronize");
    output->resize(output_bytes);
    if (!copy_and_wait(output->data(), recv.get(), output_bytes, stream)) return "copy out failed";
    return "";
  }

  const tsr_collectives_api_v1* table_ = nullptr;
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

#define NEED_RANKS(n)                                                                          \
  if (ranks_available() < (n)) {                                                               \
    GTEST_SKIP() << "needs " << (n) << " devices, the backend has " << context().device_count; \
  }

TEST_F(Collectives, MakesADifferentUniqueIdEachTime) {
  tsr_comm_unique_id a{}, b{};
  CTS_ASSERT_OK(table_->get_unique_id(&a));
  CTS_ASSERT_OK(table_->get_unique_id(&b));
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, sizeof a.bytes), 0);
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, table_->get_unique_id(nullptr));
}

TEST_F(Collectives, RefusesRanksOutsideTheCommunicatorAndMissingIds) {
  tsr_comm_unique_id id{};
  CTS_ASSERT_OK(table_->get_unique_id(&id));
  tsr_comm comm = nullptr;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, table_->comm_init_rank(0, 2, &id, 2, &comm));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, table_->comm_init_rank(0, 2, &id, -1, &comm));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, table_->comm_init_rank(0, 1, nullptr, 0, &comm));
  EXPECT_EQ(comm, nullptr);
}

TEST_F(Collectives, RefusesUnknownDtypesAndOperatorsOnAOneRankCommunicator) {
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(1, &comms), "");
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory buffer;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 64, &buffer));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    table_->allreduce(buffer.get(), buffer.get(), 4, static_cast<tsr_dtype>(99),
                                      TSR_REDUCE_SUM, comms[0], stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    table_->allreduce(buffer.get(), buffer.get(), 4, TSR_DTYPE_F32,
                                      static_cast<tsr_reduce_op>(99), comms[0], stream.get()));
  CTS_EXPECT_OK(stream.synchronize());
  CTS_EXPECT_OK(table_->comm_get_async_error(comms[0]));
  destroy(comms);
}

TEST_F(Collectives, AllreduceSumsF32AcrossRanksInChunks) {
  NEED_RANKS(2);
  const int n = ranks_available();
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kCount = (size_t(1) << 21) + 3;  // more than one chunk of any sane library
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       std::vector<float> in(kCount);
                       for (size_t i = 0; i < kCount; ++i) in[i] = float(i % 97) + 0.5f * r;
                       return run_rank(
                           r, bytes_of(in), kCount * 4,
                           [&](void* s, void* d, tsr_stream st) {
                             return table_->allreduce(s, d, kCount, TSR_DTYPE_F32, TSR_REDUCE_SUM,
                                                      comms[size_t(r)], st);
                           },
                           &results[size_t(r)]);
                     }),
            "");
  const float offsets = 0.5f * float(n * (n - 1) / 2);
  for (int r = 0; r < n; ++r) {
    std::vector<float> out(kCount);
    std::memcpy(out.data(), results[size_t(r)].data(), kCount * 4);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(out[i], float(n) * float(i % 97) + offsets) << "rank " << r << " element " << i;
    }
  }
  destroy(comms);
}

TEST_F(Collectives, AllreduceTakesTheMaximumOfI32InPlace) {
  NEED_RANKS(2);
  const int n = ranks_available();
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kCount = 4099;
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       std::vector<int32_t> in(kCount);
                       for (size_t i = 0; i < kCount; ++i)
                         in[i] = int32_t((i * 7 + r * 13) % 101) - 50;
                       return run_rank(
                           r, bytes_of(in), kCount * 4,
                           [&](void* s, void* d, tsr_stream st) {
                             // In place: the result lands in the send buffer, copied out after.
                             tsr_status status = table_->allreduce(
                                 s, s, kCount, TSR_DTYPE_I32, TSR_REDUCE_MAX, comms[size_t(r)], st);
                             if (status != TSR_OK) return status;
                             return api().memcpy_async(d, s, kCount * 4, st);
                           },
                           &results[size_t(r)]);
                     }),
            "");
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> out(kCount);
    std::memcpy(out.data(), results[size_t(r)].data(), kCount * 4);
    for (size_t i = 0; i < kCount; ++i) {
      int32_t expected = INT32_MIN;
      for (int q = 0; q < n; ++q)
        expected = std::max(expected, int32_t((i * 7 + q * 13) % 101) - 50);
      ASSERT_EQ(out[i], expected) << "rank " << r << " element " << i;
    }
  }
  destroy(comms);
}

TEST_F(Collectives, AllgatherConcatenatesEveryRanksBlockInRankOrder) {
  NEED_RANKS(2);
  const int n = ranks_available();
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kCount = 1001;
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       return run_rank(
                           r, make_pattern(kCount, uint32_t(r)), kCount * size_t(n),
                           [&](void* s, void* d, tsr_stream st) {
                             return table_->allgather(s, d, kCount, TSR_DTYPE_U8, comms[size_t(r)],
                                                      st);
                           },
                           &results[size_t(r)]);
                     }),
            "");
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < n; ++q) {
      const auto expected = make_pattern(kCount, uint32_t(q));
      EXPECT_TRUE(
          same_bytes(expected.data(), results[size_t(r)].data() + size_t(q) * kCount, kCount))
          << "rank " << r << ", block of rank " << q;
    }
  }
  destroy(comms);
}

TEST_F(Collectives, ReduceScatterLeavesEachRankTheSumOfItsBlock) {
  NEED_RANKS(2);
  const int n = ranks_available();
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kRecv = 70001;
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       std::vector<double> in(kRecv * size_t(n));
                       for (int j = 0; j < n; ++j) {
                         for (size_t i = 0; i < kRecv; ++i)
                           in[size_t(j) * kRecv + i] = r + 10 * j + double(i % 13);
                       }
                       return run_rank(
                           r, bytes_of(in), kRecv * 8,
                           [&](void* s, void* d, tsr_stream st) {
                             return table_->reduce_scatter(s, d, kRecv, TSR_DTYPE_F64,
                                                           TSR_REDUCE_SUM, comms[size_t(r)], st);
                           },
                           &results[size_t(r)]);
                     }),
            "");
  for (int r = 0; r < n; ++r) {
    std::vector<double> out(kRecv);
    std::memcpy(out.data(), results[size_t(r)].data(), kRecv * 8);
    for (size_t i = 0; i < kRecv; ++i) {
      const double expected = n * (n - 1) / 2 + n * (10.0 * r + double(i % 13));
      ASSERT_EQ(out[i], expected) << "rank " << r << " element " << i;
    }
  }
  destroy(comms);
}

TEST_F(Collectives, BroadcastCopiesTheRootsBufferToEveryRank) {
  NEED_RANKS(2);
  const int n = ranks_available();
  const int root = n - 1;
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kBytes = (size_t(9) << 20) + 5;
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       return run_rank(
                           r, make_pattern(kBytes, uint32_t(100 + r)), kBytes,
                           [&](void* s, void* d, tsr_stream st) {
                             return table_->broadcast(s, d, kBytes, TSR_DTYPE_U8, root,
                                                      comms[size_t(r)], st);
                           },
                           &results[size_t(r)]);
                     }),
            "");
  const auto expected = make_pattern(kBytes, uint32_t(100 + root));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(same_bytes(expected.data(), results[size_t(r)].data(), kBytes)) << "rank " << r;
  }
  destroy(comms);
}

TEST_F(Collectives, GroupedSendsAndReceivesPassAMessageAroundTheRing) {
  NEED_RANKS(2);
  const int n = ranks_available();
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(n, &comms), "");
  constexpr size_t kBytes = (size_t(3) << 20) + 1;  // several chunks of a channel
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(n));
  EXPECT_EQ(on_ranks(n,
                     [&](int r) {
                       return run_rank(
                           r, make_pattern(kBytes, uint32_t(200 + r)), kBytes,
                           [&](void* s, void* d, tsr_stream st) {
                             // Every rank sends first: only the group keeps this from deadlocking.
                             tsr_status g = table_->group_start();
                             if (g != TSR_OK) return g;
                             tsr_status a = table_->send(s, kBytes, TSR_DTYPE_U8, (r + 1) % n,
                                                         comms[size_t(r)], st);
                             tsr_status b = table_->recv(d, kBytes, TSR_DTYPE_U8, (r + n - 1) % n,
                                                         comms[size_t(r)], st);
                             tsr_status e = table_->group_end();
                             return a != TSR_OK ? a : b != TSR_OK ? b : e;
                           },
                           &results[size_t(r)]);
                     }),
            "");
  for (int r = 0; r < n; ++r) {
    const auto expected = make_pattern(kBytes, uint32_t(200 + (r + n - 1) % n));
    EXPECT_TRUE(same_bytes(expected.data(), results[size_t(r)].data(), kBytes)) << "rank " << r;
  }
  destroy(comms);
}

TEST_F(Collectives, AbortUnblocksARankWaitingForAMissingPeerAndIsReportedAsAnAsyncError) {
  NEED_RANKS(2);
  std::vector<tsr_comm> comms;
  ASSERT_EQ(form(2, &comms), "");
  CTS_EXPECT_OK(table_->comm_get_async_error(comms[0]));
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory buffer;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &buffer));
  // Rank 1 never joins this allreduce: rank 0's stream waits until the abort.
  CTS_ASSERT_OK(table_->allreduce(buffer.get(), buffer.get(), 1024, TSR_DTYPE_F32, TSR_REDUCE_SUM,
                                  comms[0], stream.get()));
  CTS_ASSERT_OK(table_->comm_abort(comms[0]));
  // Returning at all is the point: whether the stream then carries an error is the library's
  // choice (the host CCL fails it; NCCL's kernels just stop), the asynchronous error is not.
  (void)stream.synchronize();
  const tsr_status async = table_->comm_get_async_error(comms[0]);
  EXPECT_NE(async, TSR_OK);
  EXPECT_STRNE(api().last_error(), "") << "the asynchronous error carries no message";
  destroy(comms);
}

}  // namespace
}  // namespace tessera::cts
