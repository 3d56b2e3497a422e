// Host signals (ABI minor 2): a counter the host raises and streams wait on. Checks that a wait
// holds only the work after it, in order; that a satisfied wait does not block; that the counter
// never goes down; that a host callback of another stream may raise it; that one signal releases
// every stream waiting on it; and that destroying a signal (or a stream) while a wait is pending
// fails or ends the wait instead of hanging. A backend provides the five entries or none; one
// without them lists `unsupported HostSignal.*` in its expectations file.
//
// Pending states are made deterministic by signals nobody has raised yet, never by sleeps. Where
// a broken backend could hang the run, the test polls with a two-minute safety net and then
// releases what it can, so the run fails instead of hanging; nothing asserts a duration.
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

#define CTS_HOST_SIGNAL_ENTRIES                                                          \
  "host_signal_create", "host_signal_destroy", "host_signal_raise", "host_signal_query", \
      "stream_wait_host_signal"

class HostSignal : public DeviceTest {};

constexpr auto kSafetyNet = std::chrono::minutes(2);

// Owns one host signal; destroys it on destruction.
class OwnedSignal {
 public:
  OwnedSignal() = default;
  ~OwnedSignal() { reset(); }
  OwnedSignal(const OwnedSignal&) = delete;
  OwnedSignal& operator=(const OwnedSignal&) = delete;

  static tsr_status create(int32_t device, OwnedSignal* out) {
    out->reset();
    return api().host_signal_create(device, &out->signal_);
  }
  void reset() {
    if (signal_ != nullptr) {
      EXPECT_EQ(api().host_signal_destroy(signal_), TSR_OK);
    }
    signal_ = nullptr;
  }
  tsr_host_signal release() { return std::exchange(signal_, nullptr); }
  tsr_host_signal get() const { return signal_; }
  uint64_t value() const {
    uint64_t out = 0;
    EXPECT_TRUE(status_is(TSR_OK, api().host_signal_query(signal_, &out), "host_signal_query"));
    return out;
  }

 private:
  tsr_host_signal signal_ = nullptr;
};

// Success once `stream` has no pending work (its query is no longer NOT_READY). The limit is a
// safety net against a backend that never releases the stream, not a timing assertion.
::testing::AssertionResult becomes_idle(tsr_stream stream) {
  const auto deadline = std::chrono::steady_clock::now() + kSafetyNet;
  while (api().stream_query(stream) == TSR_NOT_READY) {
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure() << "the stream still had pending work after 2 minutes";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ::testing::AssertionSuccess();
}

// The bytes of `memory` as seen through a copy on `stream`.
std::vector<uint8_t> read_back(const DeviceMemory& memory, const OwnedStream& stream) {
  std::vector<uint8_t> out(memory.size());
  EXPECT_TRUE(copy_and_wait(out.data(), memory.get(), out.size(), stream));
  return out;
}

constexpr size_t kBytes = 4096;

CTS_TEST(HostSignal, StartsAtZeroAndOnlyGrows, CTS_HOST_SIGNAL_ENTRIES) {
  for (int32_t device = 0; device < context().device_count; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    OwnedSignal signal;
    CTS_ASSERT_OK(OwnedSignal::create(device, &signal));
    EXPECT_EQ(signal.value(), 0u);
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 5));
    EXPECT_EQ(signal.value(), 5u);
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 3)) << "a lower value is a no-op";
    EXPECT_EQ(signal.value(), 5u) << "the counter went down";
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 5));
    EXPECT_EQ(signal.value(), 5u);
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), std::numeric_limits<uint64_t>::max()));
    EXPECT_EQ(signal.value(), std::numeric_limits<uint64_t>::max());
  }
}

CTS_TEST(HostSignal, RefusesBadArguments, CTS_HOST_SIGNAL_ENTRIES) {
  tsr_host_signal untouched = reinterpret_cast<tsr_host_signal>(uintptr_t(0x1234));
  tsr_host_signal out = untouched;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_create(-1, &out));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_create(context().device_count, &out));
  EXPECT_EQ(out, untouched) << "outputs are written only on TSR_OK";
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_create(0, nullptr));
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  uint64_t value = 77;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_query(signal.get(), nullptr));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_query(nullptr, &value));
  EXPECT_EQ(value, 77u) << "outputs are written only on TSR_OK";
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_raise(nullptr, 1));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_destroy(nullptr));
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_wait_host_signal(nullptr, signal.get(), 1))
      << "there is no default stream";
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_wait_host_signal(stream.get(), nullptr, 1));
  CTS_EXPECT_OK(stream.synchronize()) << "a refused wait must not reach the stream";
}

CTS_TEST(HostSignal, HoldsLaterWorkUntilRaisedInOrder, CTS_HOST_SIGNAL_ENTRIES) {
  OwnedStream stream;
  OwnedStream reader;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  CTS_ASSERT_OK(OwnedStream::create(0, &reader));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &block));
  OwnedEvent before_wait;
  OwnedEvent first_step;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &before_wait));
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &first_step));
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));

  // 1, [event], wait for 1, 2, [event], wait for 2, 3: each raise releases exactly one step.
  CTS_ASSERT_OK(api().memset_async(block.get(), 1, kBytes, stream.get()));
  CTS_ASSERT_OK(api().event_record(before_wait.get(), stream.get()));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 1));
  CTS_ASSERT_OK(api().memset_async(block.get(), 2, kBytes, stream.get()));
  CTS_ASSERT_OK(api().event_record(first_step.get(), stream.get()));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 2));
  CTS_ASSERT_OK(api().memset_async(block.get(), 3, kBytes, stream.get()));

  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(stream.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().event_query(first_step.get()));
  // The work before the wait runs; the work after it does not.
  CTS_ASSERT_OK(api().event_synchronize(before_wait.get()));
  std::vector<uint8_t> seen = read_back(block, reader);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 1)) << "before the first raise";

  CTS_ASSERT_OK(api().host_signal_raise(signal.get(), 1));
  CTS_ASSERT_OK(api().event_synchronize(first_step.get()));
  seen = read_back(block, reader);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 2)) << "after raising to 1";
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(stream.get()))
      << "the second wait (for 2) was released by a raise to 1";

  CTS_ASSERT_OK(api().host_signal_raise(signal.get(), 2));
  CTS_ASSERT_OK(stream.synchronize());
  seen = read_back(block, reader);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 3)) << "after raising to 2";
}

CTS_TEST(HostSignal, LetsAnAlreadySatisfiedWaitRunAtOnce, CTS_HOST_SIGNAL_ENTRIES) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &block));
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  CTS_ASSERT_OK(api().host_signal_raise(signal.get(), 3));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 0));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 2));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 3));
  CTS_ASSERT_OK(api().memset_async(block.get(), 9, kBytes, stream.get()));
  const bool idle = becomes_idle(stream.get());
  if (!idle) {
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 1000));  // release it, then fail
    ADD_FAILURE() << "a wait for a value the signal had already reached blocked the stream";
  }
  CTS_ASSERT_OK(stream.synchronize());
  std::vector<uint8_t> seen = read_back(block, stream);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 9));
}

CTS_TEST(HostSignal, IsRaisedFromAHostCallbackOfAnotherStream, CTS_HOST_SIGNAL_ENTRIES,
         "stream_add_callback") {
  OwnedStream producer;
  OwnedStream consumer;
  CTS_ASSERT_OK(OwnedStream::create(0, &producer));
  CTS_ASSERT_OK(OwnedStream::create(0, &consumer));
  DeviceMemory data;
  DeviceMemory copy;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &data));
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &copy));
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  OwnedSignal hold;  // holds the producer until the consumer is seen waiting
  CTS_ASSERT_OK(OwnedSignal::create(0, &hold));

  struct Raise {
    tsr_host_signal signal;
    tsr_status status = TSR_UNKNOWN;
  } raise{signal.get()};
  CTS_ASSERT_OK(api().stream_wait_host_signal(producer.get(), hold.get(), 1));
  CTS_ASSERT_OK(api().memset_async(data.get(), 0x3c, kBytes, producer.get()));
  CTS_ASSERT_OK(api().stream_add_callback(
      producer.get(),
      [](void* user, tsr_status status) {
        auto* r = static_cast<Raise*>(user);
        r->status = status == TSR_OK ? api().host_signal_raise(r->signal, 1) : status;
      },
      &raise));
  CTS_ASSERT_OK(api().stream_wait_host_signal(consumer.get(), signal.get(), 1));
  CTS_ASSERT_OK(api().memcpy_async(copy.get(), data.get(), kBytes, consumer.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(consumer.get()));
  EXPECT_EQ(signal.value(), 0u);

  CTS_ASSERT_OK(api().host_signal_raise(hold.get(), 1));
  CTS_ASSERT_OK(producer.synchronize());
  EXPECT_EQ(raise.status, TSR_OK) << "host_signal_raise from the callback";
  if (!becomes_idle(consumer.get())) {
    CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 1));
    ADD_FAILURE() << "a raise from a host callback did not release the waiting stream";
  }
  CTS_ASSERT_OK(consumer.synchronize());
  EXPECT_EQ(signal.value(), 1u);
  std::vector<uint8_t> seen = read_back(copy, consumer);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 0x3c)) << "the consumer ran before the producer";
}

CTS_TEST(HostSignal, ReleasesEveryStreamWaitingOnIt, CTS_HOST_SIGNAL_ENTRIES) {
  constexpr int kStreams = 3;
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  std::vector<OwnedStream> streams(kStreams);
  std::vector<DeviceMemory> blocks(kStreams);
  // Streams 0 and 1 wait for 1, stream 2 for 2.
  const uint64_t wants[kStreams] = {1, 1, 2};
  for (int s = 0; s < kStreams; ++s) {
    CTS_ASSERT_OK(OwnedStream::create(0, &streams[s]));
    CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &blocks[s]));
    CTS_ASSERT_OK(api().stream_wait_host_signal(streams[s].get(), signal.get(), wants[s]));
    CTS_ASSERT_OK(api().memset_async(blocks[s].get(), 0x40 + s, kBytes, streams[s].get()));
  }
  for (int s = 0; s < kStreams; ++s) {
    CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(streams[s].get())) << "stream " << s;
  }
  CTS_ASSERT_OK(api().host_signal_raise(signal.get(), 1));
  for (int s = 0; s < 2; ++s) {
    if (!becomes_idle(streams[s].get())) {
      CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 2));
      ADD_FAILURE() << "stream " << s << " was not released by the raise to 1";
    }
  }
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(streams[2].get()))
      << "stream 2 waits for 2 but ran after a raise to 1";
  CTS_ASSERT_OK(api().host_signal_raise(signal.get(), 2));
  for (int s = 0; s < kStreams; ++s) {
    CTS_ASSERT_OK(streams[s].synchronize()) << "stream " << s;
    std::vector<uint8_t> seen = read_back(blocks[s], streams[s]);
    EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, static_cast<uint8_t>(0x40 + s)))
        << "stream " << s;
  }
}

// The ABI: a stream still waiting on a destroyed signal fails its wait (sticky), so nothing hangs
// on a signal that can no longer be raised. Work after the wait is skipped as after any failure;
// event records still complete.
CTS_TEST(HostSignal, FailsTheStreamWhenItsSignalIsDestroyedDuringAWait, CTS_HOST_SIGNAL_ENTRIES) {
  OwnedStream stream;
  OwnedStream reader;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  CTS_ASSERT_OK(OwnedStream::create(0, &reader));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &block));
  OwnedEvent after;
  CTS_ASSERT_OK(OwnedEvent::create(0, 0, &after));
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  CTS_ASSERT_OK(api().memset_async(block.get(), 0x11, kBytes, stream.get()));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal.get(), 1));
  CTS_ASSERT_OK(api().memset_async(block.get(), 0x22, kBytes, stream.get()));
  CTS_ASSERT_OK(api().event_record(after.get(), stream.get()));
  CTS_EXPECT_STATUS(TSR_NOT_READY, api().stream_query(stream.get()));
  CTS_ASSERT_OK(api().host_signal_destroy(signal.release()));
  if (!becomes_idle(stream.get())) {
    stream.release();  // it can never finish: leak it rather than hang the run in its destroy
    FAIL() << "destroying the signal left the stream waiting";
  }
  const tsr_status status = api().stream_synchronize(stream.get());
  EXPECT_NE(status, TSR_OK) << "the wait on a destroyed signal did not fail the stream";
  EXPECT_NE(status, TSR_NOT_READY);
  EXPECT_EQ(api().stream_query(stream.get()), status) << "the failure is sticky";
  CTS_EXPECT_OK(api().event_synchronize(after.get())) << "event records run after a failure";
  std::vector<uint8_t> seen = read_back(block, reader);
  EXPECT_TRUE(all_bytes_are(seen.data(), kBytes, 0x11)) << "work after the failed wait ran";
}

// stream_destroy must return while a wait on the stream is unsatisfied: a backend either ends the
// wait (the host backend fails it as cancelled) or releases the stream once the work completes.
CTS_TEST(HostSignal, LetsAStreamBeDestroyedWhileItWaits, CTS_HOST_SIGNAL_ENTRIES) {
  OwnedSignal signal;
  CTS_ASSERT_OK(OwnedSignal::create(0, &signal));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kBytes, &block));
  tsr_stream stream = nullptr;
  CTS_ASSERT_OK(api().stream_create(0, 0, &stream));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream, signal.get(), 1));
  CTS_ASSERT_OK(api().memset_async(block.get(), 1, kBytes, stream));
  std::packaged_task<tsr_status()> destroy([stream] { return api().stream_destroy(stream); });
  std::future<tsr_status> destroyed = destroy.get_future();
  std::thread destroyer(std::move(destroy));
  const bool returned = destroyed.wait_for(kSafetyNet) == std::future_status::ready;
  // Raise in any case: a backend that finishes the queued work after destroy needs it, and one
  // that hung is released by it, so the run goes on.
  CTS_EXPECT_OK(api().host_signal_raise(signal.get(), 1));
  destroyer.join();
  EXPECT_TRUE(returned) << "stream_destroy blocked on a host-signal wait nobody had raised";
  CTS_EXPECT_OK(destroyed.get());
}

CTS_TEST(HostSignal, RejectsUseAfterDestroy, CTS_HOST_SIGNAL_ENTRIES) {
  // Undefined in general (see Stream.RejectsUseAfterDestroy); the host backend detects it.
  tsr_host_signal signal = nullptr;
  CTS_ASSERT_OK(api().host_signal_create(0, &signal));
  CTS_ASSERT_OK(api().host_signal_destroy(signal));
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  uint64_t value = 0;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_raise(signal, 1));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_query(signal, &value));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_wait_host_signal(stream.get(), signal, 1));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().host_signal_destroy(signal));
}

}  // namespace
}  // namespace tessera::cts
