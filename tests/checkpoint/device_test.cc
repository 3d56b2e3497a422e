// The checkpointer on device memory the host cannot touch: tensors on discrete host devices
// (every CPU access to a device pointer faults) are saved, loaded, saved as deltas, restored from
// a buddy's memory and resharded in memory, read and written only through stream copies; and
// pointers that are not the checkpointer device's memory are refused at registration, naming the
// tensor and the device.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "support/device_model.h"
#include "support/rank_check.h"
#include "support/socket_rank_group.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"

namespace tessera::ckpt {
namespace {

using testing::DeviceModel;
using testing::discrete_platform;
using testing::Layout;
using testing::run_ranks;
using testing::ScratchDir;

CheckpointOptions device_options(const std::string& dir, const hal::Device& device) {
  CheckpointOptions o;
  o.dir = dir;
  o.chunk_bytes = 1024;
  o.keep_last = 4;
  o.fsync = false;
  o.device = device;
  // Tests run in parallel: a nice persist thread would wait for the other tests' CPU.
  o.persist_priority = PersistPriority::kNormal;
  return o;
}

void expect_mentions(const Status& s, std::initializer_list<const char*> words) {
  for (const char* w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.to_string();
}

class DeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = discrete_platform(2);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    platform_ = *p;
    ASSERT_EQ(platform_->devices().size(), 2u);
    ASSERT_FALSE(device(0).has(TSR_CAP_HOST_ACCESSIBLE)) << "the host backend is not discrete";
  }
  const hal::Device& device(int i) const { return platform_->devices()[static_cast<size_t>(i)]; }
  std::unique_ptr<Checkpointer> make(const std::string& dir) {
    auto ck =
        Checkpointer::create(device_options(dir, device(0)), std::make_shared<SingleRankGroup>());
    EXPECT_TRUE(ck.ok()) << ck.status().to_string();
    return ck.ok() ? std::move(ck).value() : nullptr;
  }
  std::shared_ptr<hal::Platform> platform_;
};

// Full save, a delta save of a partly changed state, loads of both into zeroed device memory.
// The checksums and the delta's XOR run on the pinned snapshot: a CPU read of the device tensors
// would kill the test.
TEST_F(DeviceMemory, SavesDeltasAndLoadsDeviceTensorsOnADiscreteDevice) {
  ScratchDir dir("dev_roundtrip");
  const Layout whole{1, 1};
  {
    CheckpointOptions o = device_options(dir.path(), device(0));
    o.full_every = 2;
    auto ck = Checkpointer::create(o, std::make_shared<SingleRankGroup>());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    auto model = DeviceModel::create(device(0)).value();
    ASSERT_TRUE(model->register_in((*ck)->registry(), whole, 0, 1).ok());
    auto start = (*ck)->save_async(1);
    ASSERT_TRUE(start.ok()) << start.status().to_string();
    EXPECT_EQ(start->snapshot_bytes, (*ck)->registry().total_tensor_bytes());
    auto full = (*ck)->wait();
    ASSERT_TRUE(full.ok() && full->status.ok()) << full->status.to_string();
    EXPECT_FALSE(full->delta);
    // Step 2 changes one tensor only (the bias): the delta stores the chunks that changed.
    std::vector<std::byte> bias = testing::pattern(
        testing::model_tensors()[3], full_slice(testing::model_tensors()[3].shape), 2);
    ASSERT_TRUE(model->stream.copy(model->buffers[3].data(), bias.data(), bias.size()).ok());
    ASSERT_TRUE(model->stream.synchronize().ok());
    ASSERT_TRUE((*ck)->save_async(2).ok());
    auto delta = (*ck)->wait();
    ASSERT_TRUE(delta.ok() && delta->status.ok()) << delta->status.to_string();
    EXPECT_TRUE(delta->delta);
    EXPECT_GE(delta->chunks_changed, 1u);
    EXPECT_LT(delta->chunks_changed, delta->chunks);
  }
  auto ck = make(dir.path());
  auto model = DeviceModel::create(device(0)).value();
  ASSERT_TRUE(model->register_in(ck->registry(), whole, 0, -1).ok());
  LoadOptions at1;
  at1.step = 1;
  auto loaded = ck->load(at1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(model->check(whole, 0, 1, 0), "");
  auto latest = ck->load();
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(latest->step, 2);
  std::vector<std::byte> bias(model->host.tensors[3].size());
  ASSERT_TRUE(model->stream.copy(bias.data(), model->buffers[3].data(), bias.size()).ok());
  ASSERT_TRUE(model->stream.synchronize().ok());
  EXPECT_EQ(bias, testing::pattern(testing::model_tensors()[3],
                                   full_slice(testing::model_tensors()[3].shape), 2));
}

TEST_F(DeviceMemory, ABufferOfAnotherDeviceIsRefusedNamingTheTensorAndBothDevices) {
  ScratchDir dir("dev_other");
  auto ck = make(dir.path());
  auto other = device(1).allocate(64).value();
  Status s = ck->registry().add_device_tensor("w", hal::DType::kF32, {16}, full_slice({16}), other);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'w'", "device 1", "host:0"});
  // The same pointer given raw: the backend says whose it is.
  s = ck->registry().add_device_tensor("w", hal::DType::kF32, {16}, full_slice({16}), other.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'w'", "device memory of host:1", "host:0"});
  EXPECT_TRUE(ck->registry().tensors().empty());
}

TEST_F(DeviceMemory, HostMemoryRegisteredAsADeviceTensorIsRefusedSayingWhatItIs) {
  ScratchDir dir("dev_host");
  auto ck = make(dir.path());
  std::vector<float> pageable(16);
  Status s = ck->registry().add_device_tensor("pageable", hal::DType::kF32, {16}, full_slice({16}),
                                              pageable.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'pageable'", "does not know", "host:0"});
  auto pinned = device(0).allocate_host(64).value();
  s = ck->registry().add_device_tensor("pinned", hal::DType::kF32, {16}, full_slice({16}),
                                       pinned.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'pinned'", "pinned host memory", "host:0"});
}

TEST_F(DeviceMemory, ADeviceTensorRunningPastItsAllocationIsRefused) {
  ScratchDir dir("dev_range");
  auto ck = make(dir.path());
  auto buffer = device(0).allocate(64).value();
  void* inside = static_cast<std::byte*>(buffer.data()) + 32;
  Status s =
      ck->registry().add_device_tensor("tail", hal::DType::kF32, {16}, full_slice({16}), inside);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'tail'", "64-byte allocation on host:0", "offset 32"});
  // The part that fits is accepted.
  EXPECT_TRUE(ck->registry()
                  .add_device_tensor("fits", hal::DType::kF32, {8}, full_slice({8}), inside)
                  .ok());
}

// Without the check the snapshot's memcpy would fault on the PROT_NONE mapping.
TEST_F(DeviceMemory, ADevicePointerRegisteredAsAHostTensorIsRefusedOnADiscreteDevice) {
  ScratchDir dir("dev_as_host");
  auto ck = make(dir.path());
  auto buffer = device(0).allocate(64).value();
  Status s =
      ck->registry().add_host_tensor("w", hal::DType::kF32, {16}, full_slice({16}), buffer.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'w'", "device memory of host:0", "discrete", "add_device_tensor"});
  // Another device of the backend is just as unreadable.
  auto other = device(1).allocate(64).value();
  s = ck->registry().add_host_tensor("w", hal::DType::kF32, {16}, full_slice({16}), other.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'w'", "device memory of host:1"});
  EXPECT_TRUE(ck->registry().tensors().empty());
}

TEST_F(DeviceMemory, ADeviceTensorWithoutACheckpointerDeviceIsRefusedAtRegistration) {
  ScratchDir dir("dev_nodevice");
  CheckpointOptions o = device_options(dir.path(), device(0));
  o.device.reset();
  auto ck = Checkpointer::create(o, std::make_shared<SingleRankGroup>()).value();
  auto buffer = device(0).allocate(64).value();
  Status s =
      ck->registry().add_device_tensor("w", hal::DType::kF32, {16}, full_slice({16}), buffer);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  expect_mentions(s, {"'w'", "CheckpointOptions::device"});
}

TEST_F(DeviceMemory, AddTensorTellsDeviceMemoryFromHostMemory) {
  ScratchDir dir("dev_detect");
  auto ck = make(dir.path());
  auto buffer = device(0).allocate(64).value();
  std::vector<float> pageable(16);
  ASSERT_TRUE(
      ck->registry().add_tensor("d", hal::DType::kF32, {16}, full_slice({16}), buffer.data()).ok());
  ASSERT_TRUE(ck->registry()
                  .add_tensor("h", hal::DType::kF32, {16}, full_slice({16}), pageable.data())
                  .ok());
  EXPECT_EQ(ck->registry().find_tensor("d")->memory, Memory::kDevice);
  EXPECT_EQ(ck->registry().find_tensor("h")->memory, Memory::kHost);
  // Another device's memory is detected as device memory and then refused, not read by the CPU.
  auto other = device(1).allocate(64).value();
  Status s = ck->registry().add_tensor("o", hal::DType::kF32, {16}, full_slice({16}), other.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expect_mentions(s, {"'o'", "host:1"});
}

// Ranks are forked processes; each opens its own platform (backend threads do not survive fork).
int with_device(int rank, const std::function<int(const hal::Device&)>& body) {
  auto platform = discrete_platform(1);
  RANK_OK(platform);
  return body((*platform)->devices()[0]);
}

TEST(DeviceMemoryRanks, ARestartedRankGetsItsDeviceStateFromItsBuddysMemory) {
  ScratchDir dir("dev_replica");
  const Layout layout{2, 1};
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    return with_device(rank, [&](const hal::Device& device) {
      CheckpointOptions o = device_options(dir.path(), device);
      o.peer_replica = true;
      auto ck = Checkpointer::create(o, group);
      RANK_OK(ck);
      std::unique_ptr<Checkpointer> checkpointer = std::move(ck).value();
      auto created = DeviceModel::create(device);
      RANK_OK(created);
      std::unique_ptr<DeviceModel> model = std::move(created).value();
      RANK_OK(model->register_in(checkpointer->registry(), layout, rank, 1));
      RANK_OK(checkpointer->save_async(1));
      RANK_OK(checkpointer->wait()->status);
      if (rank == 1) {  // restarts with empty device memory: its state is in rank 0's replica
        checkpointer.reset();
        auto fresh = Checkpointer::create(o, group);
        RANK_OK(fresh);
        checkpointer = std::move(fresh).value();
        auto empty = DeviceModel::create(device);
        RANK_OK(empty);
        model = std::move(empty).value();
        RANK_OK(model->register_in(checkpointer->registry(), layout, rank, -1));
      } else {
        RANK_OK(model->fill(layout, rank, 2));  // trained on
      }
      auto restored = checkpointer->restore();
      RANK_OK(restored);
      RANK_CHECK(restored->step == 1 && restored->from_peer, restored->detail);
      RANK_CHECK(rank != 1 || restored->detail == "memory of rank 0", restored->detail);
      const std::string diff = model->check(layout, rank, 1, rank);
      RANK_CHECK(diff.empty(), "after the peer restore: " + diff);
      return 0;
    });
  });
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_EQ(exits[r].code, 0) << "rank " << r << " (signal " << exits[r].signal << ")";
  }
}

TEST(DeviceMemoryRanks, DeviceTensorsReshardInMemoryFromTp2ToDp2Bitwise) {
  ScratchDir dir("dev_memreshard");
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    return with_device(rank, [&](const hal::Device& device) {
      auto ck = Checkpointer::create(device_options(dir.path(), device), group);
      RANK_OK(ck);
      auto model = DeviceModel::create(device);
      RANK_OK(model);
      RANK_OK((*model)->register_in((*ck)->registry(), Layout{2, 1}, rank, 10));
      RANK_OK((*ck)->save_async(10));
      RANK_OK((*ck)->wait()->status);
      (*ck)->registry().clear();
      auto next = DeviceModel::create(device);
      RANK_OK(next);
      RANK_OK((*next)->register_in((*ck)->registry(), Layout{1, 2}, rank, -1));
      auto moved = (*ck)->reshard_from_memory();
      RANK_OK(moved);
      RANK_CHECK(moved->step == 10 && moved->bytes_read == 0, "resharded through storage?");
      const std::string diff = (*next)->check(Layout{1, 2}, rank, 10, rank);
      RANK_CHECK(diff.empty(), "after the in-memory reshard: " + diff);
      return 0;
    });
  });
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_EQ(exits[r].code, 0) << "rank " << r << " (signal " << exits[r].signal << ")";
  }
}

}  // namespace
}  // namespace tessera::ckpt
