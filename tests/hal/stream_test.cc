#include "tessera/hal/stream.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tessera/hal/platform.h"

namespace tessera::hal {
namespace {

// The host backend with two devices; `options` are added to its init options.
class StreamTest : public ::testing::Test {
 protected:
  virtual std::string extra_options() const { return ""; }
  void SetUp() override {
    PlatformOptions options;
    options.registry.selection = "host";
    options.registry.init_options["host"] = "devices=2" + extra_options();
    auto platform = Platform::create(options);
    ASSERT_TRUE(platform.ok()) << platform.status().to_string();
    platform_ = *platform;
    ASSERT_EQ(platform_->devices().size(), 2u);
  }
  const Device& device(int i) { return platform_->devices()[i]; }
  const std::shared_ptr<Backend>& backend() { return device(0).backend(); }
  std::shared_ptr<Platform> platform_;
};

// Every host callback of the process on one shared thread (callback_threads=1).
class OneCallbackThreadTest : public StreamTest {
 protected:
  std::string extra_options() const override { return ";callback_threads=1"; }
};

// The calling thread's name ("tsr-host-cb" on the host backend's shared callback thread).
std::string thread_name() {
  char name[16] = {0};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

// Polls until `event` is done. The limit is a safety net against a hang, not a timing assertion.
bool becomes_done(const Event& event) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!*event.done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

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

// Stream::create_event: the event belongs to the stream's device, so another device's stream
// can wait on it, and a timed one measures like Device::create_event's.
TEST_F(StreamTest, AnEventMadeFromAStreamMarksItsWorkForAnotherDevice) {
  auto producer = device(1).create_stream();
  auto consumer = device(0).create_stream();
  ASSERT_TRUE(producer.ok() && consumer.ok());
  auto start = producer->create_event(/*timing=*/true);
  auto ready = producer->create_event(/*timing=*/false);
  ASSERT_TRUE(start.ok() && ready.ok()) << start.status().to_string();
  auto buffer = std::move(device(1).allocate(1 << 16)).value();
  std::vector<uint8_t> host(buffer.size(), 0);
  ASSERT_TRUE(start->record(*producer).ok());
  ASSERT_TRUE(producer->memset(buffer.data(), 9, buffer.size()).ok());
  ASSERT_TRUE(ready->record(*producer).ok());
  ASSERT_TRUE(consumer->wait(*ready).ok());
  ASSERT_TRUE(consumer->copy(host.data(), buffer.data(), host.size()).ok());
  ASSERT_TRUE(consumer->synchronize().ok());
  EXPECT_TRUE(*ready->done());
  EXPECT_EQ(host.front(), 9);
  EXPECT_EQ(host.back(), 9);
  auto ms = Event::elapsed_ms(*start, *ready);
  EXPECT_EQ(ms.status().code(), StatusCode::kFailedPrecondition) << "ready was made without timing";
}

TEST_F(StreamTest, AnEmptyStreamMakesNoEvent) {
  Stream empty;
  auto event = empty.create_event();
  ASSERT_FALSE(event.ok());
  EXPECT_EQ(event.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(event.status().message().find("create_event"), std::string::npos)
      << event.status().message();
}

// ---- host signals and callbacks with a message (ABI minor 2) --------------------------------

TEST_F(StreamTest, AHostSignalHoldsTheWorkAfterAWaitUntilRaised) {
  auto stream = device(0).create_stream();
  auto after = device(0).create_event(false);
  ASSERT_TRUE(stream.ok() && after.ok());
  ASSERT_TRUE(HostSignal::supported(*backend()));
  auto signal = HostSignal::create(backend(), 0);
  ASSERT_TRUE(signal.ok()) << signal.status().to_string();
  EXPECT_EQ(signal->device(), 0);
  EXPECT_EQ(*signal->value(), 0u);
  auto buffer = std::move(device(0).allocate(256)).value();
  ASSERT_TRUE(stream->wait(*signal, 2).ok());
  ASSERT_TRUE(stream->memset(buffer.data(), 7, buffer.size()).ok());
  ASSERT_TRUE(after->record(*stream).ok());
  ASSERT_TRUE(signal->raise(1).ok());
  EXPECT_EQ(*signal->value(), 1u);
  EXPECT_FALSE(*after->done()) << "a wait for 2 was released by a raise to 1";
  ASSERT_TRUE(signal->raise(2).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_TRUE(*after->done());
  std::vector<uint8_t> out(buffer.size());
  ASSERT_TRUE(stream->copy(out.data(), buffer.data(), out.size()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(out, std::vector<uint8_t>(out.size(), 7));
}

// The host backend fails the wait of a destroyed signal as CANCELLED, with a message naming the
// signal, and add_callback hands that message on (not only "stream work failed").
TEST_F(StreamTest, AddCallbackPassesTheMessageOfTheFailure) {
  auto stream = device(0).create_stream();
  ASSERT_TRUE(stream.ok());
  auto signal = HostSignal::create(backend(), 0);
  ASSERT_TRUE(signal.ok());
  char name[32];
  std::snprintf(name, sizeof name, "%p", static_cast<void*>(signal->handle()));
  std::promise<Status> seen;
  ASSERT_TRUE(stream->wait(*signal, 1).ok());
  ASSERT_TRUE(stream->add_callback([&](Status status) { seen.set_value(status); }).ok());
  *signal = HostSignal();  // destroys it while the stream waits
  Status status = seen.get_future().get();
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status.to_string();
  EXPECT_NE(status.message().find("host signal " + std::string(name)), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("destroyed"), std::string::npos) << status.message();
  Status sync = stream->synchronize();
  EXPECT_EQ(sync.code(), StatusCode::kCancelled);
  EXPECT_NE(sync.message().find(name), std::string::npos) << sync.message();
}

TEST_F(StreamTest, AWaitOnASignalOfAnotherDeviceIsRefused) {
  auto stream = device(0).create_stream();
  auto signal = HostSignal::create(backend(), 1);
  ASSERT_TRUE(stream.ok() && signal.ok());
  Status status = stream->wait(*signal, 1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("device 1"), std::string::npos) << status.message();
  EXPECT_TRUE(stream->synchronize().ok()) << "a refused wait must not reach the stream";
}

TEST_F(StreamTest, AnEmptyHostSignalIsRefused) {
  auto stream = device(0).create_stream();
  ASSERT_TRUE(stream.ok());
  HostSignal empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.raise(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(empty.value().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(stream->wait(empty, 1).code(), StatusCode::kInvalidArgument);
  auto moved_from = HostSignal::create(backend(), 0);
  ASSERT_TRUE(moved_from.ok());
  HostSignal owner = std::move(*moved_from);
  EXPECT_EQ(moved_from->raise(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(owner.raise(1).ok());
}

TEST_F(StreamTest, ASignalOfAnotherBackendObjectIsRefused) {
  auto other = Backend::open("host", {TESSERA_BUILD_BACKEND_DIR});
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  ASSERT_TRUE((*other)->init().ok());
  auto signal = HostSignal::create(*other, 0);
  auto stream = device(0).create_stream();
  ASSERT_TRUE(signal.ok() && stream.ok());
  Status status = stream->wait(*signal, 1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("belongs to backend"), std::string::npos) << status.message();
}

TEST_F(StreamTest, HostSignalsAreUnimplementedOnABackendWithoutThem) {
  auto skeleton = Backend::open("skeleton", {TESSERA_BUILD_BACKEND_DIR});
  if (!skeleton.ok()) GTEST_SKIP() << "no skeleton backend: " << skeleton.status().to_string();
  if (HostSignal::supported(**skeleton)) GTEST_SKIP() << "the skeleton has host signals now";
  auto signal = HostSignal::create(*skeleton, 0);
  EXPECT_EQ(signal.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(signal.status().message().find("host signals"), std::string::npos)
      << signal.status().to_string();
}

// A stream destroyed while it waits on a signal nobody raises does not hang: the wait fails as
// cancelled (saying so to the callbacks after it) and the work after it is skipped.
TEST_F(StreamTest, DestroyingAStreamCancelsItsUnsatisfiedWait) {
  auto signal = HostSignal::create(backend(), 0);
  ASSERT_TRUE(signal.ok());
  auto buffer = std::move(device(0).allocate(256)).value();
  std::promise<Status> seen;
  {
    auto stream = device(0).create_stream();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(stream->memset(buffer.data(), 1, buffer.size()).ok());
    ASSERT_TRUE(stream->wait(*signal, 1).ok());
    ASSERT_TRUE(stream->memset(buffer.data(), 2, buffer.size()).ok());
    ASSERT_TRUE(stream->add_callback([&](Status status) { seen.set_value(status); }).ok());
  }  // destroyed here
  Status status = seen.get_future().get();
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status.to_string();
  EXPECT_NE(status.message().find("the stream was destroyed while it waited"), std::string::npos)
      << status.message();
  auto reader = device(0).create_stream();
  std::vector<uint8_t> out(buffer.size());
  ASSERT_TRUE(reader->copy(out.data(), buffer.data(), out.size()).ok());
  ASSERT_TRUE(reader->synchronize().ok());
  EXPECT_EQ(out, std::vector<uint8_t>(out.size(), 1)) << "work after the cancelled wait ran";
  EXPECT_EQ(*signal->value(), 0u);
}

// Default mode: each stream runs its callbacks on its own worker (the contrast to the next tests).
TEST_F(StreamTest, EachStreamRunsItsCallbacksOnItsOwnThread) {
  auto first = device(0).create_stream();
  auto second = device(0).create_stream();
  ASSERT_TRUE(first.ok() && second.ok());
  std::thread::id a, b;
  ASSERT_TRUE(first->add_callback([&](Status) { a = std::this_thread::get_id(); }).ok());
  ASSERT_TRUE(second->add_callback([&](Status) { b = std::this_thread::get_id(); }).ok());
  ASSERT_TRUE(first->synchronize().ok());
  ASSERT_TRUE(second->synchronize().ok());
  EXPECT_NE(a, b);
}

TEST_F(OneCallbackThreadTest, RunsEveryStreamsCallbacksOnOneThread) {
  auto first = device(0).create_stream();
  auto second = device(0).create_stream();
  auto other_device = device(1).create_stream();
  ASSERT_TRUE(first.ok() && second.ok() && other_device.ok());
  std::mutex mutex;
  std::vector<std::thread::id> ids;
  std::vector<std::string> names;
  auto record = [&](Status) {
    std::lock_guard lock(mutex);
    ids.push_back(std::this_thread::get_id());
    names.push_back(thread_name());
  };
  for (int i = 0; i < 3; ++i) {
    for (const Stream* stream : {&*first, &*second, &*other_device}) {
      ASSERT_TRUE(stream->add_callback(record).ok());
    }
  }
  for (const Stream* stream : {&*first, &*second, &*other_device}) {
    ASSERT_TRUE(stream->synchronize().ok());
  }
  std::lock_guard lock(mutex);
  ASSERT_EQ(ids.size(), 9u);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i], ids[0]) << "callback " << i << " ran on another thread";
    EXPECT_EQ(names[i], "tsr-host-cb") << "callback " << i;
  }
  EXPECT_NE(ids[0], std::this_thread::get_id());
}

// A callback that blocks holds its own stream and every other stream's callbacks: stream 2's
// callback, enqueued while stream 1's is running, runs only after it returns.
TEST_F(OneCallbackThreadTest, ABlockingCallbackDelaysAnotherStreamsCallback) {
  auto first = device(0).create_stream();
  auto second = device(1).create_stream();
  auto first_after = device(0).create_event(false);
  ASSERT_TRUE(first.ok() && second.ok() && first_after.ok());
  std::promise<void> started, gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::mutex mutex;
  std::vector<std::string> order;
  auto log = [&](const char* what) {
    std::lock_guard lock(mutex);
    order.push_back(what);
  };
  auto buffer = std::move(device(0).allocate(256)).value();
  ASSERT_TRUE(first
                  ->add_callback([&](Status) {
                    started.set_value();
                    opened.wait();
                    log("first");
                  })
                  .ok());
  ASSERT_TRUE(first->memset(buffer.data(), 3, buffer.size()).ok());
  ASSERT_TRUE(first_after->record(*first).ok());
  started.get_future().wait();  // stream 1's callback holds the callback thread now
  std::promise<void> second_ran;
  ASSERT_TRUE(second
                  ->add_callback([&](Status) {
                    log("second");
                    second_ran.set_value();
                  })
                  .ok());
  // Time for a per-stream implementation to run stream 2's callback early, which this test would
  // then catch; the correct behaviour passes whatever the wait (nothing asserts a duration).
  auto second_done = second_ran.get_future();
  const bool ran_while_held =
      second_done.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready;
  EXPECT_FALSE(ran_while_held) << "stream 2's callback ran while stream 1's held the thread";
  EXPECT_FALSE(*first_after->done()) << "stream 1 ran past its blocked callback";
  gate.set_value();
  ASSERT_TRUE(first->synchronize().ok());
  ASSERT_TRUE(second->synchronize().ok());
  std::lock_guard lock(mutex);
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
}

// A host-signal wait occupies its stream's worker, not the callback thread: a callback of
// another stream can still run and raise the signal.
TEST_F(OneCallbackThreadTest, ACallbackRaisesASignalThatAnotherStreamWaitsOn) {
  auto waiter = device(0).create_stream();
  auto raiser = device(0).create_stream();
  auto released = device(0).create_event(false);
  auto signal = HostSignal::create(backend(), 0);
  ASSERT_TRUE(waiter.ok() && raiser.ok() && released.ok() && signal.ok());
  ASSERT_TRUE(waiter->wait(*signal, 1).ok());
  std::atomic<bool> waiter_callback{false};
  ASSERT_TRUE(waiter->add_callback([&](Status) { waiter_callback = true; }).ok());
  ASSERT_TRUE(released->record(*waiter).ok());
  Status raised(StatusCode::kUnknown, "not run");
  ASSERT_TRUE(raiser->add_callback([&](Status) { raised = signal->raise(1); }).ok());
  ASSERT_TRUE(raiser->synchronize().ok());
  EXPECT_TRUE(raised.ok()) << raised.to_string();
  if (!becomes_done(*released)) {
    ASSERT_TRUE(signal->raise(1).ok());  // release it, then fail
    FAIL() << "the raise from a callback did not release the waiting stream";
  }
  ASSERT_TRUE(waiter->synchronize().ok());
  EXPECT_TRUE(waiter_callback);
}

// From the shared callback thread, waiting for a stream that still has a callback queued can
// never end (that callback needs the thread): synchronize and destroy refuse instead of hanging.
TEST_F(OneCallbackThreadTest, RefusesToWaitFromACallbackForAStreamWithACallbackQueued) {
  auto held = device(0).create_stream();
  auto caller = device(0).create_stream();
  auto signal = HostSignal::create(backend(), 0);
  ASSERT_TRUE(held.ok() && caller.ok() && signal.ok());
  ASSERT_TRUE(held->wait(*signal, 1).ok());
  ASSERT_TRUE(held->add_callback([](Status) {}).ok());
  Status synchronized(StatusCode::kUnknown, "not run");
  tsr_status destroyed = TSR_UNKNOWN;
  std::string destroy_message;
  const tsr_backend_api_v1& api = backend()->api();
  ASSERT_TRUE(caller
                  ->add_callback([&](Status) {
                    synchronized = held->synchronize();
                    destroyed = api.stream_destroy(held->handle());
                    destroy_message = api.last_error();
                  })
                  .ok());
  ASSERT_TRUE(caller->synchronize().ok());
  EXPECT_EQ(synchronized.code(), StatusCode::kFailedPrecondition) << synchronized.to_string();
  EXPECT_NE(synchronized.message().find("TESSERA_HOST_CALLBACK_THREADS=1"), std::string::npos)
      << synchronized.message();
  EXPECT_EQ(destroyed, TSR_FAILED_PRECONDITION) << destroy_message;
  EXPECT_NE(destroy_message.find("stream_destroy"), std::string::npos) << destroy_message;
  ASSERT_TRUE(signal->raise(1).ok());
  EXPECT_TRUE(held->synchronize().ok());
}

}  // namespace
}  // namespace tessera::hal
