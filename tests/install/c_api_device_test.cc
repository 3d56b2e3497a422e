// The C API on device memory of the context's device: tessera_device_alloc/free/memcpy, and
// collectives and checkpoint tensors given device pointers, which the library tells from host
// memory itself. Registered under TESSERA_DEVICE_TEST_ENV (a discrete host device: a CPU access
// to device memory kills the test), so these tests fill and read device memory only through
// tessera_memcpy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "c_api_support.h"
#include "support/multiprocess.h"
#include "tessera.h"

namespace {

using tessera::coll::testing::RankResult;
using tessera::coll::testing::run_ranks;
using tessera_c_api_testing::clear_launcher_env;
using tessera_c_api_testing::expect_error;
using tessera_c_api_testing::join;

#define RANK_OK(call) CHILD_CHECK((call) == TESSERA_OK, "%s: %s", #call, tessera_last_error())

class CApiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_launcher_env();
    ASSERT_EQ(tessera_init_from_env(nullptr, &ctx_), TESSERA_OK) << tessera_last_error();
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_c_api_device_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    EXPECT_EQ(tessera_context_destroy(ctx_), TESSERA_OK) << tessera_last_error();
    std::filesystem::remove_all(dir_);
  }
  // `bytes` of device memory holding `init`.
  void* device_copy_of(const void* init, size_t bytes) {
    const auto* first = static_cast<const uint8_t*>(init);
    return tessera_c_api_testing::device_copy_of(ctx_, std::vector<uint8_t>(first, first + bytes));
  }
  template <typename T>
  std::vector<T> read(const void* device, size_t count) {
    return tessera_c_api_testing::read_device<T>(ctx_, device, count);
  }
  tessera_context* ctx_ = nullptr;
  std::filesystem::path dir_;
};

TEST_F(CApiDevice, AllocCopyAndFreeRoundTripAndRefuseMisuse) {
  void* ptr = nullptr;
  expect_error(tessera_device_alloc(ctx_, 0, &ptr), TESSERA_INVALID_ARGUMENT,
               "tessera_device_alloc", "bytes is 0");
  expect_error(tessera_device_alloc(ctx_, 64, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_device_alloc", "out_ptr is NULL");
  expect_error(tessera_device_alloc(nullptr, 64, &ptr), TESSERA_INVALID_ARGUMENT,
               "tessera_device_alloc", "ctx is NULL");
  std::vector<float> values = {1.5f, -2.f, 3.25f, 4.f};
  void* device = device_copy_of(values.data(), 16);
  EXPECT_EQ(read<float>(device, 4), values);
  // A copy past the end of the allocation is refused by the backend before it touches memory.
  std::vector<float> big(8);
  EXPECT_EQ(tessera_memcpy(ctx_, big.data(), device, 32), TESSERA_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("tessera_memcpy: "), std::string::npos);
  expect_error(tessera_memcpy(ctx_, nullptr, device, 4), TESSERA_INVALID_ARGUMENT, "tessera_memcpy",
               "dst is NULL");
  expect_error(tessera_device_free(ctx_, values.data()), TESSERA_INVALID_ARGUMENT,
               "tessera_device_free", "not returned by tessera_device_alloc");
  EXPECT_EQ(tessera_device_free(ctx_, nullptr), TESSERA_OK);
  EXPECT_EQ(tessera_device_free(ctx_, device), TESSERA_OK) << tessera_last_error();
  expect_error(tessera_device_free(ctx_, device), TESSERA_INVALID_ARGUMENT, "tessera_device_free",
               "already freed");
}

// A device tensor and a host tensor in one checkpoint: saved, clobbered, loaded back.
TEST_F(CApiDevice, CheckpointTensorsInDeviceMemorySaveAndLoad) {
  tessera_checkpoint_options options{};
  options.struct_size = sizeof options;
  options.dir = dir_.c_str();
  options.no_fsync = 1;
  options.full_every = 2;
  tessera_checkpoint* ckpt = nullptr;
  ASSERT_EQ(tessera_checkpoint_create(ctx_, &options, &ckpt), TESSERA_OK) << tessera_last_error();
  std::vector<double> weights(3000);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.25 * double(i);
  void* device = device_copy_of(weights.data(), weights.size() * sizeof(double));
  std::vector<int64_t> host = {7, 8, 9};
  const int64_t wshape[2] = {1000, 3}, hshape[1] = {3};
  ASSERT_EQ(
      tessera_checkpoint_add_tensor(ckpt, "w", TESSERA_F64, wshape, 2, nullptr, nullptr, device, 0),
      TESSERA_OK)
      << tessera_last_error();
  ASSERT_EQ(tessera_checkpoint_add_tensor(ckpt, "h", TESSERA_I64, hshape, 1, nullptr, nullptr,
                                          host.data(), 0),
            TESSERA_OK)
      << tessera_last_error();
  for (int64_t step : {1, 2}) {  // a full save, then a delta of an unchanged state
    ASSERT_EQ(tessera_checkpoint_save_async(ckpt, step, nullptr), TESSERA_OK)
        << tessera_last_error();
    ASSERT_EQ(tessera_checkpoint_wait(ckpt, nullptr), TESSERA_OK) << tessera_last_error();
  }
  std::vector<double> zeros(weights.size());
  ASSERT_EQ(tessera_memcpy(ctx_, device, zeros.data(), zeros.size() * sizeof(double)), TESSERA_OK);
  host.assign(3, 0);
  int64_t loaded = -1;
  ASSERT_EQ(tessera_checkpoint_load(ckpt, -1, 0, &loaded), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(loaded, 2);
  EXPECT_EQ(read<double>(device, weights.size()), weights);
  EXPECT_EQ(host, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(tessera_checkpoint_destroy(ckpt), TESSERA_OK);
  EXPECT_EQ(tessera_device_free(ctx_, device), TESSERA_OK);
}

TEST_F(CApiDevice, ADeviceTensorPastTheEndOfItsAllocationIsRefusedNamingItAndTheDevice) {
  tessera_checkpoint_options options{};
  options.struct_size = sizeof options;
  options.dir = dir_.c_str();
  tessera_checkpoint* ckpt = nullptr;
  ASSERT_EQ(tessera_checkpoint_create(ctx_, &options, &ckpt), TESSERA_OK) << tessera_last_error();
  void* device = nullptr;
  ASSERT_EQ(tessera_device_alloc(ctx_, 64, &device), TESSERA_OK) << tessera_last_error();
  const int64_t shape[1] = {16};  // 64 bytes of f32, from byte 32 of a 64-byte allocation
  expect_error(tessera_checkpoint_add_tensor(ckpt, "tail", TESSERA_F32, shape, 1, nullptr, nullptr,
                                             static_cast<char*>(device) + 32, 0),
               TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor",
               "64-byte allocation on host:0");
  EXPECT_EQ(tessera_checkpoint_destroy(ckpt), TESSERA_OK);
  EXPECT_EQ(tessera_device_free(ctx_, device), TESSERA_OK);
}

// The communicator tells device memory from host memory itself (on one rank: a copy).
TEST_F(CApiDevice, CollectivesOnOneRankTakeDeviceMemory) {
  std::vector<float> values = {1.f, 2.f, 3.f, 4.f};
  void* send = device_copy_of(values.data(), 16);
  void* recv = nullptr;
  ASSERT_EQ(tessera_device_alloc(ctx_, 16, &recv), TESSERA_OK);
  ASSERT_EQ(tessera_allreduce(ctx_, send, recv, 4, TESSERA_F32, TESSERA_SUM), TESSERA_OK)
      << tessera_last_error();
  EXPECT_EQ(read<float>(recv, 4), values);
  ASSERT_EQ(tessera_broadcast(ctx_, send, recv, 4, TESSERA_F32, 0), TESSERA_OK)
      << tessera_last_error();
  EXPECT_EQ(read<float>(recv, 4), values);
  EXPECT_EQ(tessera_device_free(ctx_, send), TESSERA_OK);
  EXPECT_EQ(tessera_device_free(ctx_, recv), TESSERA_OK);
}

// Two ranks: an allreduce of device buffers, and a sharded device tensor restored from the buddy's
// memory after rank 1 loses it, then loaded from storage.
TEST(CApiDeviceTwoRanks, AllreduceAndCheckpointOnDeviceMemory) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("tessera_c_api_device_2r_" + std::to_string(getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  const auto results = run_ranks(2, [&](int rank, int size) {
    tessera_context* ctx = nullptr;
    RANK_OK(join(rank, size, &ctx));
    std::vector<float> mine(1000, float(rank + 1)), out(1000);
    void* grads = nullptr;
    RANK_OK(tessera_device_alloc(ctx, mine.size() * sizeof(float), &grads));
    RANK_OK(tessera_memcpy(ctx, grads, mine.data(), mine.size() * sizeof(float)));
    RANK_OK(tessera_allreduce(ctx, grads, grads, mine.size(), TESSERA_F32, TESSERA_SUM));
    RANK_OK(tessera_memcpy(ctx, out.data(), grads, out.size() * sizeof(float)));
    CHILD_CHECK(out[0] == 3.f && out[999] == 3.f, "allreduce gave %g, %g", out[0], out[999]);

    tessera_checkpoint_options options{};
    options.struct_size = sizeof options;
    options.dir = dir.c_str();
    options.peer_replica = 1;
    options.no_fsync = 1;
    tessera_checkpoint* ckpt = nullptr;
    RANK_OK(tessera_checkpoint_create(ctx, &options, &ckpt));
    float row[4];
    for (int i = 0; i < 4; ++i) row[i] = float(rank * 10 + i);
    void* device_row = nullptr;
    RANK_OK(tessera_device_alloc(ctx, sizeof row, &device_row));
    RANK_OK(tessera_memcpy(ctx, device_row, row, sizeof row));
    const int64_t shape[2] = {2, 4}, offset[2] = {rank, 0}, len[2] = {1, 4};
    RANK_OK(tessera_checkpoint_add_tensor(ckpt, "w", TESSERA_F32, shape, 2, offset, len, device_row,
                                          0));
    RANK_OK(tessera_checkpoint_save_async(ckpt, 3, nullptr));
    RANK_OK(tessera_checkpoint_wait(ckpt, nullptr));
    if (rank == 1) {
      const float lost[4] = {-1.f, -1.f, -1.f, -1.f};
      RANK_OK(tessera_memcpy(ctx, device_row, lost, sizeof lost));
    }
    int64_t step = -1;
    int from_peer = -1;
    RANK_OK(tessera_checkpoint_restore(ckpt, &step, &from_peer));
    float back[4] = {};
    RANK_OK(tessera_memcpy(ctx, back, device_row, sizeof back));
    CHILD_CHECK(step == 3 && from_peer == 1 && std::memcmp(back, row, sizeof row) == 0,
                "restored step %lld from_peer %d, row[2] %g", (long long)step, from_peer, back[2]);
    const float zeros[4] = {};
    RANK_OK(tessera_memcpy(ctx, device_row, zeros, sizeof zeros));
    RANK_OK(tessera_checkpoint_load(ckpt, -1, 0, &step));
    RANK_OK(tessera_memcpy(ctx, back, device_row, sizeof back));
    CHILD_CHECK(std::memcmp(back, row, sizeof row) == 0, "loaded row[0] %g", back[0]);
    RANK_OK(tessera_checkpoint_destroy(ckpt));
    RANK_OK(tessera_device_free(ctx, grads));
    RANK_OK(tessera_device_free(ctx, device_row));
    RANK_OK(tessera_context_destroy(ctx));
    return 0;
  });
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
