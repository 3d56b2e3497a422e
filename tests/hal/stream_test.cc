#include "tessera/hal/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <numeric>
#include <vector>

#include "tessera/hal/platform.h"

namespace tessera::hal {
namespace {

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PlatformOptions options;
    options.registry.selection = "host";
    options.registry.init_options["host"] = "devices=2";
    auto platform = Platform::create(options);
    ASSERT_TRUE(platform.ok()) << platform.status().to_string();
    platform_ = *platform;
    ASSERT_EQ(platform_->devices().size(), 2u);
  }
  const Device& device(int i) { return platform_->devices()[i]; }
  std::shared_ptr<Platform> platform_;
};

TEST_F(StreamTest, RoundTripsDataHostToDeviceToHost) {
  auto stream = device(0).create_stream();
  ASSERT_TRUE(stream.ok());
  std::vector<int32_t> in(1000), out(1000, 0);
  std::iota(in.begin(), in.end(), -500);
  auto buffer = device(0).allocate(in.size() * sizeof(int32_t));
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(stream->copy(buffer->data(), in.data(), buffer->size()).ok());
  ASSERT_TRUE(stream->copy(out.data(), buffer->data(), buffer->size()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(in, out);
}

TEST_F(StreamTest, ReducesTwoDeviceBuffersThroughTheCppApi) {
  auto stream = device(0).create_stream();
  ASSERT_TRUE(stream.ok());
  std::vector<float> a(4097, 1.5f), b(4097, 2.25f), out(4097, 0.f);
  auto da = std::move(device(0).allocate(a.size() * 4)).value();
  auto db = std::move(device(0).allocate(b.size() * 4)).value();
  ASSERT_TRUE(stream->copy(da.data(), a.data(), da.size()).ok());
  ASSERT_TRUE(stream->copy(db.data(), b.data(), db.size()).ok());
  const void* srcs[] = {da.data(), db.data()};
  ASSERT_TRUE(stream->reduce(da.data(), srcs, a.size(), DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(stream->copy(out.data(), da.data(), da.size()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  for (float v : out) ASSERT_EQ(v, 3.75f);
}

TEST_F(StreamTest, ACopyWithANullPointerIsRefusedAtOnce) {
  auto stream = device(0).create_stream();
  ASSERT_TRUE(stream.ok());
  std::vector<char> host(16);
  Status status = stream->copy(nullptr, host.data(), host.size());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("memcpy_async"), std::string::npos) << status.message();
  EXPECT_TRUE(stream->copy(nullptr, nullptr, 0).ok()) << "zero bytes is a no-op";
  EXPECT_TRUE(stream->synchronize().ok());
}

TEST_F(StreamTest, AStreamOnOneDeviceWaitsForAnEventOfAnother) {
  auto producer = device(0).create_stream();
  auto consumer = device(1).create_stream();
  auto ready = device(0).create_event();
  ASSERT_TRUE(producer.ok() && consumer.ok() && ready.ok());
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<int> order{0};
  int producer_done_at = -1, consumer_ran_at = -1;
  ASSERT_TRUE(producer
                  ->add_callback([&](Status) {
                    opened.wait();
                    producer_done_at = order++;
                  })
                  .ok());
  ASSERT_TRUE(ready->record(*producer).ok());
  ASSERT_TRUE(consumer->wait(*ready).ok());
  ASSERT_TRUE(consumer->add_callback([&](Status) { consumer_ran_at = order++; }).ok());
  EXPECT_FALSE(*ready->done()) << "the producer is blocked on the gate";
  gate.set_value();
  ASSERT_TRUE(consumer->synchronize().ok());
  ASSERT_TRUE(producer->synchronize().ok());
  EXPECT_EQ(producer_done_at, 0);
  EXPECT_EQ(consumer_ran_at, 1);
  EXPECT_TRUE(*ready->done());
}

TEST_F(StreamTest, TimedEventsMeasureANonNegativeInterval) {
  auto stream = device(0).create_stream();
  auto start = device(0).create_event(true);
  auto stop = device(0).create_event(true);
  ASSERT_TRUE(stream.ok() && start.ok() && stop.ok());
  auto buffer = std::move(device(0).allocate(1 << 20)).value();
  ASSERT_TRUE(start->record(*stream).ok());
  ASSERT_TRUE(stream->memset(buffer.data(), 7, buffer.size()).ok());
  ASSERT_TRUE(stop->record(*stream).ok());
  ASSERT_TRUE(stop->synchronize().ok());
  auto ms = Event::elapsed_ms(*start, *stop);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  EXPECT_GE(*ms, 0.0f);
  auto untimed = device(0).create_event(false);
  ASSERT_TRUE(untimed->record(*stream).ok());
  ASSERT_TRUE(untimed->synchronize().ok());
  EXPECT_EQ(Event::elapsed_ms(*start, *untimed).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::hal
