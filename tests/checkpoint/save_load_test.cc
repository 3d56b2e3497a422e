// Single-rank behaviour of the checkpointer: round trips, device tensors through the HAL, the
// busy policies, incremental saves, garbage collection and memory use over many saves.
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <numeric>
#include <sstream>
#include <thread>

#include "support/model_state.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"

// gcc defines __SANITIZE_ADDRESS__ under AddressSanitizer; clang answers __has_feature instead.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TSR_CLANG_ASAN 1
#endif
#endif
#ifndef TSR_CLANG_ASAN
#define TSR_CLANG_ASAN 0
#endif

namespace tessera::ckpt {
namespace {

using testing::Layout;
using testing::ModelState;
using testing::ScratchDir;

std::unique_ptr<Checkpointer> make(CheckpointOptions options) {
  auto ck = Checkpointer::create(std::move(options), std::make_shared<SingleRankGroup>());
  EXPECT_TRUE(ck.ok()) << ck.status().to_string();
  return ck.ok() ? std::move(ck).value() : nullptr;
}

LoadOptions at_step(int64_t step) {
  LoadOptions o;
  o.step = step;
  return o;
}

CheckpointOptions small_options(const std::string& dir) {
  CheckpointOptions o;
  o.dir = dir;
  o.chunk_bytes = 1024;
  o.fsync = false;
  // Tests run in parallel: a nice persist thread would wait for the other tests' CPU.
  o.persist_priority = PersistPriority::kNormal;
  return o;
}

// The default persist priority lowers the checkpointer's own thread, and only that one.
TEST(SaveLoad, ThePersistThreadRunsAtNice19AndTheCallerDoesNot) {
  ScratchDir dir("nice");
  CheckpointOptions o = small_options(dir.path());
  o.persist_priority = PersistPriority::kNice;
  const int caller_nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  auto ck = make(o);
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 1).ok());
  ASSERT_TRUE(ck->save_async(1).ok());
  ASSERT_TRUE(ck->wait()->status.ok());
  // Field 19 of /proc/self/task/TID/stat is the nice value; count the threads at 19.
  int at_19 = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream stat(task.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
    }
    if (field == "19") ++at_19;
  }
  if (caller_nice == 19) GTEST_SKIP() << "the test itself runs at nice 19";
  EXPECT_EQ(at_19, 1) << "exactly the persist thread at nice 19";
  EXPECT_EQ(::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())), caller_nice);
}

TEST(SaveLoad, RoundTripsTensorsAndBlobsBitwise) {
  ScratchDir dir("roundtrip");
  {
    auto ck = make(small_options(dir.path()));
    ModelState state;
    ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 5).ok());
    auto start = ck->save_async(5);
    ASSERT_TRUE(start.ok()) << start.status().to_string();
    EXPECT_FALSE(start->skipped);
    EXPECT_GT(start->snapshot_bytes, 0u);
    auto result = ck->wait();
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(result->status.ok()) << result->status.to_string();
    EXPECT_FALSE(result->delta);
    EXPECT_GT(result->bytes_written, 0u);
  }
  EXPECT_EQ(read_latest(dir.path()).value(), 5);
  EXPECT_TRUE(std::filesystem::exists(dir / "step-5/manifest.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "step-5.tmp"));

  auto ck = make(small_options(dir.path()));
  ModelState loaded;
  ASSERT_TRUE(loaded.register_in(ck->registry(), Layout{1, 1}, 0, -1).ok());
  auto result = ck->load();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->step, 5);
  EXPECT_TRUE(result->refused.empty());
  EXPECT_EQ(loaded.check(Layout{1, 1}, 0, 5, 0), "");
}

// Every field of a placement reaches the manifest (the ranks send them to rank 0 as a list).
TEST(SaveLoad, TheManifestRecordsEveryPlacementField) {
  ScratchDir dir("placement");
  auto ck = make(small_options(dir.path()));
  std::vector<float> experts(8 * 6, 1.0f);
  ASSERT_TRUE(
      ck->registry()
          .add_host_tensor("experts", hal::DType::kF32, {8, 6}, full_slice({8, 6}), experts.data())
          .ok());
  const Placement placement{1, 0, 2, 3, 0};
  ASSERT_TRUE(ck->registry().set_placement("experts", placement).ok());
  ASSERT_TRUE(ck->save_async(1).ok());
  auto result = ck->wait();
  ASSERT_TRUE(result.ok() && result->status.ok());
  const Manifest m = read_manifest(dir.path(), 1).value();
  ASSERT_TRUE(m.find_tensor("experts")->placement.has_value());
  EXPECT_EQ(*m.find_tensor("experts")->placement, placement);
}

// The host backend alone, with one device.
Result<std::shared_ptr<hal::Platform>> host_platform() {
  hal::PlatformOptions popts;
  popts.registry.selection = "host";
  popts.registry.init_options["host"] = "devices=1";
  return hal::Platform::create(popts);
}

TEST(SaveLoad, SnapshotsDeviceTensorsThroughTheHalIntoPinnedMemory) {
  auto platform = host_platform();
  ASSERT_TRUE(platform.ok()) << platform.status().to_string();
  ASSERT_FALSE((*platform)->devices().empty());
  const hal::Device& device = (*platform)->devices()[0];
  auto stream = device.create_stream().value();
  std::vector<float> values(5000);
  std::iota(values.begin(), values.end(), 0.25f);
  auto buffer = device.allocate(values.size() * sizeof(float)).value();
  ASSERT_TRUE(stream.copy(buffer.data(), values.data(), buffer.size()).ok());
  ASSERT_TRUE(stream.synchronize().ok());

  ScratchDir dir("device");
  CheckpointOptions options = small_options(dir.path());
  options.device = device;
  auto ck = make(options);
  ASSERT_TRUE(ck->registry()
                  .add_device_tensor("w", hal::DType::kF32, {5000}, full_slice({5000}), buffer)
                  .ok());
  ASSERT_TRUE(ck->save_async(1).ok());
  ASSERT_TRUE(ck->wait()->status.ok());
  ASSERT_TRUE(stream.memset(buffer.data(), 0, buffer.size()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  auto loaded = ck->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  std::vector<float> out(values.size());
  ASSERT_TRUE(stream.copy(out.data(), buffer.data(), buffer.size()).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  EXPECT_EQ(std::memcmp(out.data(), values.data(), buffer.size()), 0);
}

// create() fails after the Checkpointer exists but before its worker thread starts (here: a
// device index the backend does not have, so no stream): an error, not std::terminate.
TEST(SaveLoad, ACreateThatFailsBeforeTheWorkerStartsReturnsAnError) {
  auto platform = host_platform();
  ASSERT_TRUE(platform.ok()) << platform.status().to_string();
  ASSERT_FALSE((*platform)->devices().empty());
  const hal::Device& real = (*platform)->devices()[0];
  ScratchDir dir("nostream");
  CheckpointOptions options = small_options(dir.path());
  options.device = hal::Device(real.backend(), 99, real.properties());
  auto ck = Checkpointer::create(options, std::make_shared<SingleRankGroup>());
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("device 99"), std::string::npos) << ck.status().message();
}

TEST(SaveLoad, ADeviceTensorWithoutADeviceIsRefusedNamingIt) {
  ScratchDir dir("nodevice");
  auto ck = make(small_options(dir.path()));
  hal::DeviceBuffer fake;  // empty: the registry refuses it on size first
  Status s = ck->registry().add_device_tensor("w", hal::DType::kF32, {4}, full_slice({4}), fake);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
}

// Holds the first save in flight: its fault hook blocks at the first chunk until open() (or the
// destructor, declared after the checkpointer so it runs first). No timing involved.
class InFlightGate {
 public:
  std::function<Status(FaultPoint)> hook() {
    return [this](FaultPoint at) {
      if (at == FaultPoint::kMidShard && !entered_once_.exchange(true)) {
        entered_.set_value();
        released_.wait();
      }
      return Status();
    };
  }
  void wait_entered() { entered_.get_future().wait(); }
  void open() {
    if (!opened_.exchange(true)) release_.set_value();
  }
  ~InFlightGate() { open(); }

 private:
  std::atomic<bool> entered_once_{false}, opened_{false};
  std::promise<void> entered_, release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

CheckpointOptions gated_options(const std::string& dir, BusyPolicy policy, InFlightGate& gate) {
  CheckpointOptions o = small_options(dir);
  o.busy_policy = policy;
  o.fault_hook = gate.hook();
  return o;
}

// The scheduling state of thread `tid` of this process ('R', 'S', ...; /proc/self/task/TID/stat).
char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
}

TEST(SaveLoad, ASaveWhileOneIsInFlightIsSkippedUnderTheSkipPolicy) {
  ScratchDir dir("skip");
  std::unique_ptr<Checkpointer> ck;
  InFlightGate gate;  // destroyed first: never leaves the checkpointer's destructor waiting
  ck = make(gated_options(dir.path(), BusyPolicy::kSkip, gate));
  std::vector<std::byte> data =
      testing::pattern({"x", hal::DType::kF32, {16384}}, full_slice({16384}), 1);
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("x", hal::DType::kF32, {16384}, full_slice({16384}), data.data())
                  .ok());
  ASSERT_FALSE(ck->save_async(1)->skipped);
  gate.wait_entered();
  EXPECT_TRUE(ck->busy());
  auto second = ck->save_async(2);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->skipped);
  gate.open();
  auto result = ck->wait();
  ASSERT_TRUE(result->status.ok()) << result->status.to_string();
  EXPECT_EQ(result->step, 1);
  EXPECT_EQ(read_latest(dir.path()).value(), 1);
}

TEST(SaveLoad, ASaveWhileOneIsInFlightWaitsUnderTheWaitPolicy) {
  ScratchDir dir("wait");
  std::unique_ptr<Checkpointer> ck;
  InFlightGate gate;
  ck = make(gated_options(dir.path(), BusyPolicy::kWait, gate));
  std::vector<std::byte> data =
      testing::pattern({"x", hal::DType::kF32, {16384}}, full_slice({16384}), 1);
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("x", hal::DType::kF32, {16384}, full_slice({16384}), data.data())
                  .ok());
  ASSERT_FALSE(ck->save_async(1)->waited);
  gate.wait_entered();
  // The second save runs on another thread; the gate opens only once that thread sleeps, which on
  // this path is the wait for the first save (nothing else in save_async blocks).
  std::atomic<pid_t> tid{0};
  Result<SaveStart> second = internal_error("not run");
  std::thread caller([&] {
    tid = ::gettid();
    second = ck->save_async(2);
  });
  while (tid.load() == 0 || thread_state(tid.load()) != 'S') std::this_thread::yield();
  gate.open();
  caller.join();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_TRUE(second->waited);
  EXPECT_FALSE(second->skipped);
  auto result = ck->wait();
  ASSERT_TRUE(result->status.ok()) << result->status.to_string();
  EXPECT_EQ(result->step, 2);
  EXPECT_EQ(read_latest(dir.path()).value(), 2);
}

// Names and text that go into JSON must be UTF-8 (nlohmann's dump throws otherwise): refused where
// they enter, naming the field, instead of failing (or aborting) every save.
TEST(SaveLoad, NonUtf8NamesAndMetadataAreRefusedNamingTheField) {
  ScratchDir dir("utf8");
  auto ck = make(small_options(dir.path()));
  std::string rng;
  Status blob = ck->registry().add_blob(std::string("rng\xff"), &rng);
  EXPECT_EQ(blob.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(blob.message().find("UTF-8"), std::string::npos) << blob.message();
  float x = 0;
  Status tensor =
      ck->registry().add_host_tensor("w\xc3", hal::DType::kF32, {1}, full_slice({1}), &x);
  EXPECT_EQ(tensor.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ck->registry().add_blob("r\xc3\xa9ng", &rng).ok()) << "valid UTF-8 (e-acute)";

  CheckpointOptions o = small_options(dir.path());
  o.metadata["run"] = "bad\x80";
  auto refused = Checkpointer::create(o, std::make_shared<SingleRankGroup>());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'metadata' entry 'run'"), std::string::npos)
      << refused.status().message();
  o = small_options(dir.path());
  o.layout = "tp=2\xfe";
  refused = Checkpointer::create(o, std::make_shared<SingleRankGroup>());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'layout'"), std::string::npos)
      << refused.status().message();
}

TEST(SaveLoad, ChunksAboveTheLimitAreRefusedAtCreate) {
  ScratchDir dir("bigchunk");
  CheckpointOptions o = small_options(dir.path());
  o.chunk_bytes = static_cast<size_t>(kMaxChunkBytes) + 1;
  auto refused = Checkpointer::create(o, std::make_shared<SingleRankGroup>());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("chunk_bytes"), std::string::npos)
      << refused.status().message();
}

TEST(SaveLoad, APlacementOutsideTheTensorIsRefusedNamingTheField) {
  ScratchDir dir("badplacement");
  auto ck = make(small_options(dir.path()));
  std::vector<float> w(8 * 6);
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("w", hal::DType::kF32, {8, 6}, full_slice({8, 6}), w.data())
                  .ok());
  Status expert = ck->registry().set_placement("w", Placement{.expert_dim = 2});
  EXPECT_EQ(expert.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(expert.message().find("expert_dim=2"), std::string::npos) << expert.message();
  Status layer = ck->registry().set_placement("w", Placement{.layer = -2});
  EXPECT_EQ(layer.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(layer.message().find("layer=-2"), std::string::npos) << layer.message();
  EXPECT_TRUE(ck->registry().set_placement("w", Placement{.layer = 3, .expert_dim = 1}).ok());
}

TEST(SaveLoad, LoadingIntoAnotherShapeNamesBothShapesAndTheStep) {
  ScratchDir dir("shape");
  std::vector<float> w(8 * 6, 1.0f);
  {
    auto ck = make(small_options(dir.path()));
    ASSERT_TRUE(ck->registry()
                    .add_host_tensor("w", hal::DType::kF32, {8, 6}, full_slice({8, 6}), w.data())
                    .ok());
    ASSERT_TRUE(ck->save_async(4).ok());
    ASSERT_TRUE(ck->wait()->status.ok());
  }
  auto ck = make(small_options(dir.path()));
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("w", hal::DType::kF32, {6, 8}, full_slice({6, 8}), w.data())
                  .ok());
  auto loaded = ck->load();
  ASSERT_FALSE(loaded.ok());
  const std::string& m = loaded.status().message();
  EXPECT_NE(m.find("step 4"), std::string::npos) << m;
  EXPECT_NE(m.find("[8, 6]"), std::string::npos) << m;
  EXPECT_NE(m.find("[6, 8]"), std::string::npos) << m;
}

// 1 Mi floats of incompressible content in 64 chunks; deltas against the full save.
class DeltaTest : public ::testing::Test {
 protected:
  static constexpr int64_t kCount = 1 << 18;
  void SetUp() override {
    CheckpointOptions o = small_options(dir_.path());
    o.chunk_bytes = 16 << 10;
    o.full_every = 5;
    o.keep_last = 10;
    ck_ = make(o);
    data_ = testing::pattern(spec_, full_slice(spec_.shape), 1);
    ASSERT_TRUE(ck_->registry()
                    .add_host_tensor("p", hal::DType::kF32, spec_.shape, full_slice(spec_.shape),
                                     data_.data())
                    .ok());
  }
  SaveResult save(int64_t step) {
    EXPECT_TRUE(ck_->save_async(step).ok());
    auto r = ck_->wait();
    EXPECT_TRUE(r.ok() && r->status.ok()) << r->status.to_string();
    std::printf("step %lld: %s, %zu of %zu bytes (%.1f%%), %zu/%zu chunks changed\n",
                static_cast<long long>(step), r->delta ? "delta" : "full", r->bytes_written,
                r->bytes_full, 100.0 * r->bytes_written / r->bytes_full, r->chunks_changed,
                r->chunks);
    return *r;
  }
  // Overwrites [from, to) of the raw bytes with the pattern of `step`.
  void change(size_t from, size_t to, int64_t step) {
    auto fresh = testing::pattern(spec_, full_slice(spec_.shape), step);
    std::memcpy(data_.data() + from, fresh.data() + from, to - from);
  }
  ScratchDir dir_{"delta"};
  testing::TensorSpec spec_{"p", hal::DType::kF32, {kCount}};
  std::unique_ptr<Checkpointer> ck_;
  std::vector<std::byte> data_;
};

TEST_F(DeltaTest, WritesTheFractionThatChangedAndLoadsBackBitwise) {
  const size_t bytes = data_.size();
  SaveResult full = save(1);
  EXPECT_FALSE(full.delta);

  SaveResult frozen = save(2);  // frozen parameters: nothing changed since the full save
  EXPECT_TRUE(frozen.delta);
  EXPECT_EQ(frozen.base_step, 1);
  EXPECT_EQ(frozen.chunks_changed, 0u);
  EXPECT_LT(double(frozen.bytes_written) / frozen.bytes_full, 0.01);

  change(0, bytes / 10, 3);  // 10% of the parameters (a few layers fine-tuned)
  SaveResult tenth = save(3);
  EXPECT_TRUE(tenth.delta);
  const double tenth_ratio = double(tenth.bytes_written) / tenth.bytes_full;
  EXPECT_GT(tenth_ratio, 0.05);
  EXPECT_LT(tenth_ratio, 0.2);
  const std::vector<std::byte> at3 = data_;

  change(0, bytes, 4);  // dense Adam: every value changes
  SaveResult dense = save(4);
  EXPECT_TRUE(dense.delta);
  EXPECT_GT(double(dense.bytes_written) / dense.bytes_full, 0.9);
  const std::vector<std::byte> at4 = data_;

  change(0, bytes, 5);
  EXPECT_TRUE(save(5).delta);
  EXPECT_FALSE(save(6).delta) << "full_every=5: the sixth save is full again";

  std::fill(data_.begin(), data_.end(), std::byte{0});
  auto loaded = ck_->load(at_step(3));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(data_ == at3);
  loaded = ck_->load(at_step(4));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(data_ == at4);
  auto m = read_manifest(dir_.path(), 2).value();
  EXPECT_TRUE(m.delta);
  EXPECT_EQ(m.base_step, 1);
}

// Chunks zstd cannot shrink are stored as they are (no decode cost); compressible chunks are
// still compressed; both load back bitwise. (16 KiB chunks: below the probe size, tried whole.)
TEST(SaveLoad, IncompressibleChunksAreStoredAsTheyAreAndCompressibleOnesCompressed) {
  ScratchDir dir("rawchunks");
  CheckpointOptions o = small_options(dir.path());
  o.chunk_bytes = 16 << 10;
  testing::TensorSpec noise_spec{"noise", hal::DType::kF32, {1 << 16}};  // 16 chunks
  std::vector<std::byte> noise = testing::pattern(noise_spec, full_slice(noise_spec.shape), 1);
  std::vector<float> zeros(1 << 14, 0.0f);  // 4 chunks
  {
    auto ck = make(o);
    ASSERT_TRUE(ck->registry()
                    .add_host_tensor("noise", hal::DType::kF32, noise_spec.shape,
                                     full_slice(noise_spec.shape), noise.data())
                    .ok());
    ASSERT_TRUE(ck->registry()
                    .add_host_tensor("zeros", hal::DType::kF32, {1 << 14}, full_slice({1 << 14}),
                                     zeros.data())
                    .ok());
    ASSERT_TRUE(ck->save_async(1).ok());
    auto r = ck->wait();
    ASSERT_TRUE(r.ok() && r->status.ok());
  }
  auto m = read_manifest(dir.path(), 1).value();
  ASSERT_EQ(m.tensors.size(), 2u);
  for (const TensorRecord& t : m.tensors) {
    for (const ChunkRecord& c : t.shards.at(0).chunks) {
      if (t.name == "noise") {
        EXPECT_FALSE(c.data.compressed) << "noise chunk at " << c.data.offset;
        EXPECT_EQ(c.data.stored, c.raw);
      } else {
        EXPECT_TRUE(c.data.compressed) << "zeros chunk at " << c.data.offset;
        EXPECT_LT(c.data.stored, c.raw / 10);
      }
    }
  }
  auto ck = make(o);
  std::vector<std::byte> noise_back(noise.size());
  std::vector<float> zeros_back(zeros.size(), 1.0f);
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("noise", hal::DType::kF32, noise_spec.shape,
                                   full_slice(noise_spec.shape), noise_back.data())
                  .ok());
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("zeros", hal::DType::kF32, {1 << 14}, full_slice({1 << 14}),
                                   zeros_back.data())
                  .ok());
  auto loaded = ck->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(noise_back == noise);
  EXPECT_TRUE(zeros_back == zeros);
}

// 1 MiB chunks are probed on four slices before zstd sees them whole: noise is stored as it is
// (its checksum is then its content hash, no second pass), zeros and a half-zero chunk are
// compressed; the checkpoint verifies and loads back bitwise.
TEST(SaveLoad, ProbedChunksAreCompressedOnlyWhenTheyShrink) {
  ScratchDir dir("probe");
  CheckpointOptions o = small_options(dir.path());
  o.chunk_bytes = 1 << 20;
  const int64_t per_chunk = (1 << 20) / 4;
  testing::TensorSpec spec{"mixed", hal::DType::kF32, {3 * per_chunk}};
  std::vector<std::byte> data = testing::pattern(spec, full_slice(spec.shape), 3);
  auto* f = reinterpret_cast<float*>(data.data());
  std::fill(f + per_chunk, f + 2 * per_chunk, 0.0f);                      // chunk 1: zeros
  std::fill(f + 2 * per_chunk + per_chunk / 2, f + 3 * per_chunk, 0.0f);  // chunk 2: half
  {
    auto ck = make(o);
    ASSERT_TRUE(ck->registry()
                    .add_host_tensor("mixed", hal::DType::kF32, spec.shape, full_slice(spec.shape),
                                     data.data())
                    .ok());
    ASSERT_TRUE(ck->save_async(1).ok());
    auto r = ck->wait();
    ASSERT_TRUE(r.ok() && r->status.ok());
  }
  const Manifest m = read_manifest(dir.path(), 1).value();
  const std::vector<ChunkRecord>& chunks = m.tensors.at(0).shards.at(0).chunks;
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_FALSE(chunks[0].data.compressed);
  EXPECT_EQ(chunks[0].data.stored, chunks[0].raw);
  EXPECT_EQ(chunks[0].data.checksum, chunks[0].hash);
  EXPECT_TRUE(chunks[1].data.compressed);
  EXPECT_LT(chunks[1].data.stored, chunks[1].raw / 100);
  EXPECT_TRUE(chunks[2].data.compressed);
  EXPECT_LT(chunks[2].data.stored, chunks[2].raw * 6 / 10);
  EXPECT_TRUE(verify_checkpoint(dir.path(), m).ok());

  auto ck = make(o);
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(ck->registry()
                  .add_host_tensor("mixed", hal::DType::kF32, spec.shape, full_slice(spec.shape),
                                   back.data())
                  .ok());
  auto loaded = ck->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(back == data);
}

TEST(Gc, KeepsTheNewestAndTheBasesOfKeptDeltas) {
  ScratchDir dir("gc");
  CheckpointOptions o = small_options(dir.path());
  o.keep_last = 2;
  o.full_every = 3;  // full at 1, 4, 7
  auto ck = make(o);
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 1).ok());
  auto steps_on_disk = [&] {
    std::vector<int64_t> out;
    const std::vector<StepInfo> steps = list_steps(dir.path()).value();
    for (const auto& s : steps) {
      EXPECT_TRUE(s.committed) << s.dir;
      out.push_back(s.step);
    }
    return out;
  };
  for (int64_t step = 1; step <= 6; ++step) {
    state.fill(Layout{1, 1}, 0, step);
    ASSERT_TRUE(ck->save_async(step).ok());
    ASSERT_TRUE(ck->wait()->status.ok());
  }
  EXPECT_EQ(steps_on_disk(), (std::vector<int64_t>{4, 5, 6}));
  state.fill(Layout{1, 1}, 0, 7);
  ASSERT_TRUE(ck->save_async(7).ok());
  ASSERT_TRUE(ck->wait()->status.ok());
  EXPECT_EQ(steps_on_disk(), (std::vector<int64_t>{4, 6, 7}));
  ASSERT_TRUE(ck->load(at_step(6)).ok());
  EXPECT_EQ(state.check(Layout{1, 1}, 0, 6, 0), "");
}

TEST(Memory, TwoHundredBackToBackSavesKeepRssFlat) {
  ScratchDir dir("rss");
  CheckpointOptions o = small_options(dir.path());
  o.chunk_bytes = 64 << 10;
  o.keep_last = 2;
  auto ck = make(o);
  std::vector<std::byte> data(1 << 20);
  ASSERT_TRUE(
      ck->registry()
          .add_host_tensor("x", hal::DType::kU8, {1 << 20}, full_slice({1 << 20}), data.data())
          .ok());
  size_t rss_after_warmup = 0;
  for (int step = 1; step <= 200; ++step) {
    data[static_cast<size_t>(step) * 4099 % data.size()] = std::byte(step);
    auto start = ck->save_async(step);
    ASSERT_TRUE(start.ok());
    if (step == 20) {
      ASSERT_TRUE(ck->wait()->status.ok());
      rss_after_warmup = testing::rss_bytes();
    }
  }
  auto last = ck->wait();
  ASSERT_TRUE(last->status.ok()) << last->status.to_string();
  EXPECT_EQ(last->step, 200);
  const size_t rss_end = testing::rss_bytes();
  std::printf("RSS after 20 saves %.1f MiB, after 200 saves %.1f MiB\n",
              rss_after_warmup / 1048576.0, rss_end / 1048576.0);
#if defined(__SANITIZE_ADDRESS__) || TSR_CLANG_ASAN
  std::printf("AddressSanitizer build: its quarantine holds freed memory; RSS not asserted\n");
#else
  EXPECT_LT(rss_end, rss_after_warmup + (4u << 20)) << "RSS grew over 180 saves";
#endif
  EXPECT_LE(list_steps(dir.path())->size(), 2u);
}

}  // namespace
}  // namespace tessera::ckpt
