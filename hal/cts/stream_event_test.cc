// Streams and events: FIFO order, cross-stream waits under concurrent enqueue, query states,
// callbacks, elapsed time, use after destroy. Pending states are made deterministic with a
// callback that blocks on a gate the test opens, never with sleeps; nothing asserts a duration.
#include <chrono>
#include <cmath>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Stream : public DeviceTest {};
class Event : public DeviceTest {};

// Holds a stream's progress until opened. Declare it after the streams it blocks so that it is
// destroyed (and opened) first: a failed assertion then never leaves a stream waiting forever.
class Gate {
 public:
  Gate() : opened_(promise_.get_future().share()) {}
  ~Gate() { open(); }
  void open() {
    std::call_once(once_, [this] { promise_.set_value(); });
  }
  // Enqueues a callback that blocks `stream` until open(). Returns the enqueue status.
  tsr_status block(tsr_stream stream) { return api().stream_add_callback(stream, &wait, this); }

 private:
  static void wait(void* self, tsr_status) {
    // The timeout is only a safety net against a broken test; it is not a timing assertion.
    static_cast<Gate*>(self)->opened_.wait_for(std::chrono::minutes(2));
  }
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  std::once_flag once_;
};

constexpr size_t kBlock = 1 << 20;

TEST_F(Stream, RunsWorkInEnqueueOrder) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  constexpr int kSteps = 32;
  DeviceMemory work;
  DeviceMemory snapshots;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBlock, &work));
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBlock * kSteps, &snapshots));
  // memset then copy, 32 times: each snapshot must hold the value set just before it.
  for (int k = 0; k < kSteps; ++k) {
    CTS_ASSERT_OK(api().memset_async(work.get(), k + 1, kBlock, stream.get()));
    CTS_ASSERT_OK(
        api().memcpy_async(snapshots.get() + k * kBlock, work.get(), kBlock, stream.get()));
  }
  CTS_ASSERT_OK(stream.synchronize());
  std::vector<uint8_t> seen(kBlock * kSteps);
  ASSERT_TRUE(copy_and_wait(seen.data(), snapshots.get(), seen.size(), stream));
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_TRUE(all_bytes_are(seen.data() + k * kBlock, kBlock, static_cast<uint8_t>(k + 1)))
        << "snapshot " << k;
  }
}

TEST_F(Stream, KeepsEachStreamInOrderWhileThreadsEnqueueConcurrently) {
  constexpr int kThreads = 4;
  constexpr int kSteps = 24;
  constexpr size_t kSmall = 64 << 10;
  std::vector<OwnedStream> streams(kThreads);
  std::vector<DeviceMemory> work(kThreads);
  std::vector<DeviceMemory> snapshots(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    const int32_t device = t % context().device_count;
    CTS_ASSERT_OK(OwnedStream::create(device, &streams[t]));
    CTS_ASSERT_OK(DeviceMemory::allocate(device, kSmall, &work[t]));
    CTS_ASSERT_OK(DeviceMemory::allocate(device, kSmall * kSteps, &snapshots[t]));
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kSteps; ++k) {
        const int value = (t * kSteps + k) % 250 + 1;
        if (api().memset_async(work[t].get(), value, kSmall, streams[t].get()) != TSR_OK ||
            api().memcpy_async(snapshots[t].get() + k * kSmall, work[t].get(), kSmall,
                               streams[t].get()) != TSR_OK) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t << ": enqueue failed";
    CTS_ASSERT_OK(streams[t].synchronize());
    std::vector<uint8_t> seen(kSmall * kSteps);
    ASSERT_TRUE(copy_and_wait(seen.data(), snapshots[t].get(), seen.size(), streams[t]));
    for (int k = 0; k < kSteps; ++k) {
      const auto value = static_cast<uint8_t>((t * kSteps + k) % 250 + 1);
      EXPECT_TRUE(all_bytes_are(seen.data() + k * kSmall, kSmall, value))
          << "stream " << t << ", snapshot " << k;
    }
  }
}

// Consumers on their own streams (and devices, when there are several) wait for an event
// recorded on a producer stream that is held by a gate; while held, every consumer must be
// pending; once opened, each must see the producer's data.
CTS_TEST(Stream, WaitsForAnEventRecordedOnAnotherStreamFromSeveralThreads, "stream_add_callback") {
  constexpr int kConsumers = 4;
  const int32_t count = context().device_count;
  OwnedStream producer;
  CTS_ASSERT_OK(OwnedStream::create(0, &producer));
  DeviceMemory data;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBlock, &data));
  std::vector<OwnedStream> consumers(kConsumers);
  std::vector<DeviceMemory> outputs(kConsumers);
  for (int c = 0; c < kConsumers; ++c) {
    CTS_ASSERT_OK(OwnedStream::create(c % count, &consumers[c]));
    CTS_ASSERT_OK(DeviceMemory::allocate(c % count, kBlock, &outputs[c]));
  }
  OwnedEvent ready;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &ready));
  CTS_ASSERT_OK(api().memset_async(data.get(), 0x11, kBlock, producer.get()));
  CTS_ASSERT_OK(producer.synchronize());
  Gate gate;
  CTS_ASSERT_OK(gate.block(producer.get()));
  CTS_ASSERT_OK(api().memset_async(data.get(), 0x77, kBlock, producer.get()));
  CTS_ASSERT_OK(api().event_record(ready.get(), producer.get()));

  std::vector<tsr_status> wait_status(kConsumers, TSR_UNKNOWN);
  std::vector<tsr_status> copy_status(kConsumers, TSR_UNKNOWN);
  std::vector<std::thread> threads;
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      wait_status[c] = api().stream_wait_event(consumers[c].get(), ready.get());
      copy_status[c] = api().memcpy_async(outputs[c].get(), data.get(), kBlock, consumers[c].get());
    });
  }
  for (auto& thread : threads) thread.join();
  for (int c = 0; c < kConsumers; ++c) {
    EXPECT_EQ(wait_status[c], TSR_OK) << "stream_wait_event on consumer " << c;
    EXPECT_EQ(copy_status[c], TSR_OK) << "memcpy_async on consumer " << c;
    CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(consumers[c].get()))
        << "consumer " << c << " ran ahead of the event it waits for";
  }
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().event_query(ready.get()));
  gate.open();
  for (int c = 0; c < kConsumers; ++c) {
    CTS_ASSERT_OK(consumers[c].synchronize());
    std::vector<uint8_t> seen(kBlock);
    ASSERT_TRUE(copy_and_wait(seen.data(), outputs[c].get(), kBlock, consumers[c]));
    EXPECT_TRUE(all_bytes_are(seen.data(), kBlock, 0x77)) << "consumer " << c;
  }
}

CTS_TEST(Stream, ReportsNotReadyWhileWorkIsPendingAndOkOnceDone, "stream_add_callback") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  OwnedEvent after;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &after));
  CTS_EXPECT_OK(api().stream_query(stream.get())) << "a new stream is idle";
  Gate gate;
  CTS_ASSERT_OK(gate.block(stream.get()));
  CTS_ASSERT_OK(api().event_record(after.get(), stream.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(stream.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().event_query(after.get()));
  gate.open();
  CTS_ASSERT_OK(api().event_synchronize(after.get()));
  CTS_EXPECT_OK(api().event_query(after.get()));
  CTS_ASSERT_OK(stream.synchronize());
  CTS_EXPECT_OK(api().stream_query(stream.get()));
}

CTS_TEST(Stream, RunsCallbacksInOrderWithStatusOk, "stream_add_callback") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  struct Log {
    std::mutex mutex;
    std::vector<std::pair<int, tsr_status>> calls;
  } log;
  struct Call {
    Log* log;
    int index;
  };
  constexpr int kCalls = 200;
  std::vector<Call> calls(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls[i] = {&log, i};
    CTS_ASSERT_OK(api().memset_async(block.get(), i, 4096, stream.get()));
    CTS_ASSERT_OK(api().stream_add_callback(
        stream.get(),
        [](void* user, tsr_status status) {
          auto* call = static_cast<Call*>(user);
          std::lock_guard<std::mutex> lock(call->log->mutex);
          call->log->calls.emplace_back(call->index, status);
        },
        &calls[i]));
  }
  CTS_ASSERT_OK(stream.synchronize());
  std::lock_guard<std::mutex> lock(log.mutex);
  ASSERT_EQ(log.calls.size(), static_cast<size_t>(kCalls)) << "synchronize returned early";
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(log.calls[i].first, i) << "callback " << i << " ran out of order";
    EXPECT_EQ(log.calls[i].second, TSR_OK) << "callback " << i;
  }
}

TEST_F(Stream, FinishesPendingWorkWhenDestroyed) {
  constexpr size_t kBig = 16 << 20;
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBig, &block));
  OwnedStream doomed;
  CTS_ASSERT_OK(OwnedStream::create(0, &doomed));
  CTS_ASSERT_OK(api().memset_async(block.get(), 0x5a, kBig, doomed.get()));
  CTS_ASSERT_OK(api().stream_destroy(doomed.release()));
  OwnedStream reader;
  CTS_ASSERT_OK(OwnedStream::create(0, &reader));
  std::vector<uint8_t> seen(kBig);
  ASSERT_TRUE(copy_and_wait(seen.data(), block.get(), kBig, reader));
  EXPECT_TRUE(all_bytes_are(seen.data(), kBig, 0x5a));
}

TEST_F(Stream, ClampsUnsupportedPriorities) {
  for (int32_t priority : {-1000, -1, 0, 1, 1000}) {
    OwnedStream stream;
    CTS_ASSERT_OK(OwnedStream::create(0, &stream, priority)) << "priority " << priority;
    DeviceMemory block;
    CTS_ASSERT_OK(DeviceMemory::allocate(0, 256, &block));
    CTS_ASSERT_OK(api().memset_async(block.get(), 1, 256, stream.get()));
    CTS_EXPECT_OK(stream.synchronize()) << "priority " << priority;
  }
}

// stream_busy_wait (ABI minor 1) is a test aid for modelling compute; like every optional entry,
// a backend without it (NULL, or a table from an older minor) lists this test as unsupported.
// The lower bound on the elapsed time is a correctness property (the stream must be occupied at
// least that long), which a slow machine cannot break; no upper bound is asserted.
CTS_TEST(Stream, IsOccupiedByABusyWaitInOrderWithItsOtherWork, "stream_busy_wait") {
  constexpr uint64_t kMicroseconds = 30000;
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  const auto start = std::chrono::steady_clock::now();
  CTS_ASSERT_OK(api().memset_async(block.get(), 1, 4096, stream.get()));
  CTS_ASSERT_OK(api().stream_busy_wait(stream.get(), kMicroseconds));
  CTS_ASSERT_OK(api().memset_async(block.get(), 2, 4096, stream.get()));
  CTS_ASSERT_OK(api().stream_busy_wait(stream.get(), 0));  // a no-op
  CTS_ASSERT_OK(stream.synchronize());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(std::chrono::duration_cast<std::chrono::microseconds>(took).count(),
            int64_t(kMicroseconds))
      << "the stream was idle before the busy wait could have ended";
  std::vector<uint8_t> seen(4096);
  ASSERT_TRUE(copy_and_wait(seen.data(), block.get(), seen.size(), stream));
  EXPECT_TRUE(all_bytes_are(seen.data(), seen.size(), 2)) << "work after the busy wait is lost";
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_busy_wait(nullptr, 10));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_busy_wait(stream.get(), 60'000'001));
}

TEST_F(Stream, RejectsUseAfterDestroy) {
  // The ABI leaves this undefined in general; a backend that cannot detect it lists this test
  // as unsupported. The host backend detects it.
  tsr_stream stream = nullptr;
  CTS_ASSERT_OK(api().stream_create(0, 0, &stream));
  CTS_ASSERT_OK(api().stream_destroy(stream));
  OwnedEvent event;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &event));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_query(stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_synchronize(stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().event_record(event.get(), stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_destroy(stream));
}

TEST_F(Event, IsCompleteBeforeItIsEverRecorded) {
  OwnedEvent event;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &event));
  CTS_EXPECT_OK(api().event_query(event.get()));
  CTS_EXPECT_OK(api().event_synchronize(event.get()));
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 256, &block));
  CTS_ASSERT_OK(api().stream_wait_event(stream.get(), event.get()));
  CTS_ASSERT_OK(api().memset_async(block.get(), 9, 256, stream.get()));
  CTS_EXPECT_OK(stream.synchronize()) << "waiting on a never-recorded event must not block";
}

CTS_TEST(Event, MeasuresANonNegativeElapsedTime, "event_elapsed_time") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  OwnedEvent start;
  OwnedEvent end;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &start));
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &end));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 16 << 20, &block));
  CTS_ASSERT_OK(api().event_record(start.get(), stream.get()));
  CTS_ASSERT_OK(api().memset_async(block.get(), 3, block.size(), stream.get()));
  CTS_ASSERT_OK(api().event_record(end.get(), stream.get()));
  CTS_ASSERT_OK(api().event_synchronize(end.get()));
  float ms = -1;
  CTS_ASSERT_OK(api().event_elapsed_time(start.get(), end.get(), &ms));
  EXPECT_TRUE(std::isfinite(ms)) << ms;
  EXPECT_GE(ms, 0.0f);
}

CTS_TEST(Event, ReportsNotReadyElapsedTimeWhileAnEventIsPending, "event_elapsed_time",
         "stream_add_callback") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  OwnedEvent start;
  OwnedEvent end;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &start));
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &end));
  CTS_ASSERT_OK(api().event_record(start.get(), stream.get()));
  CTS_ASSERT_OK(api().event_synchronize(start.get()));
  Gate gate;
  CTS_ASSERT_OK(gate.block(stream.get()));
  CTS_ASSERT_OK(api().event_record(end.get(), stream.get()));
  float ms = -1;
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().event_elapsed_time(start.get(), end.get(), &ms));
  EXPECT_EQ(ms, -1) << "outputs are written only on TSR_OK";
  gate.open();
  CTS_ASSERT_OK(stream.synchronize());
  CTS_EXPECT_OK(api().event_elapsed_time(start.get(), end.get(), &ms));
}

CTS_TEST(Event, RefusesElapsedTimeForAnEventWithoutTiming, "event_elapsed_time") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  OwnedEvent timed;
  OwnedEvent untimed;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &timed));
  CTS_ASSERT_OK(OwnedEvent::create(0, TSR_EVENT_DISABLE_TIMING, &untimed));
  CTS_ASSERT_OK(api().event_record(timed.get(), stream.get()));
  CTS_ASSERT_OK(api().event_record(untimed.get(), stream.get()));
  CTS_ASSERT_OK(stream.synchronize());
  float ms = -1;
  CTS_EXPECT_STATUS(TSR_FAILED_PRECONDITION,
                    api().event_elapsed_time(untimed.get(), timed.get(), &ms));
  CTS_EXPECT_STATUS(TSR_FAILED_PRECONDITION,
                    api().event_elapsed_time(timed.get(), untimed.get(), &ms));
  EXPECT_EQ(ms, -1) << "outputs are written only on TSR_OK";
}

CTS_TEST(Event, ReplacesItsCaptureWhenRecordedAgain, "stream_add_callback") {
  OwnedStream idle;
  OwnedStream held;
  CTS_ASSERT_OK(OwnedStream::create(0, &idle));
  CTS_ASSERT_OK(OwnedStream::create(0, &held));
  OwnedEvent event;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &event));
  Gate gate;
  CTS_ASSERT_OK(gate.block(held.get()));
  CTS_ASSERT_OK(api().event_record(event.get(), held.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().event_query(event.get()));
  CTS_ASSERT_OK(api().event_record(event.get(), idle.get()));  // now captures idle work only
  CTS_EXPECT_OK(api().event_synchronize(event.get()));
  CTS_EXPECT_OK(api().event_query(event.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(held.get()));
  gate.open();
  CTS_EXPECT_OK(held.synchronize());
}

CTS_TEST(Event, MayBeDestroyedWhilePending, "stream_add_callback") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  Gate gate;
  CTS_ASSERT_OK(gate.block(stream.get()));
  tsr_event event = nullptr;
  CTS_ASSERT_OK(api().event_create(0, 0, &event));
  CTS_ASSERT_OK(api().event_record(event, stream.get()));
  CTS_EXPECT_OK(api().event_destroy(event));
  gate.open();
  CTS_EXPECT_OK(stream.synchronize());
}

TEST_F(Event, RejectsUseAfterDestroy) {
  // Undefined in general (see Stream.RejectsUseAfterDestroy); the host backend detects it.
  tsr_event event = nullptr;
  CTS_ASSERT_OK(api().event_create(0, 0, &event));
  CTS_ASSERT_OK(api().event_destroy(event));
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().event_query(event));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().event_synchronize(event));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().event_record(event, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_wait_event(stream.get(), event));
}

}  // namespace
}  // namespace tessera::cts
