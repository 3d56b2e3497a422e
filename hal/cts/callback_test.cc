// Host callbacks with a message (ABI minor 2, stream_add_callback_with_message): the function
// receives the stream's status and its failure message, "" while the stream is OK, and runs in
// order with plain callbacks. A backend without the entry lists `unsupported Callback.*`.
//
// The CTS has one portable way to fail a stream's work: a wait on a host signal that is destroyed
// before it is raised, so the failure test also needs host signals.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Callback : public DeviceTest {};

// What the callbacks saw, in the order they ran.
struct Log {
  std::mutex mutex;
  struct Call {
    int index;
    tsr_status status;
    bool message_is_null;
    std::string message;
  };
  std::vector<Call> calls;
};

struct Tag {
  Log* log;
  int index;
};

void record_with_message(void* user, tsr_status status, const char* message) {
  auto* tag = static_cast<Tag*>(user);
  std::lock_guard<std::mutex> lock(tag->log->mutex);
  tag->log->calls.push_back({tag->index, status, message == nullptr, message ? message : ""});
}

void record_plain(void* user, tsr_status status) {
  auto* tag = static_cast<Tag*>(user);
  std::lock_guard<std::mutex> lock(tag->log->mutex);
  tag->log->calls.push_back({tag->index, status, false, ""});
}

CTS_TEST(Callback, ReceivesAnEmptyMessageInOrderWhileTheStreamIsOk,
         "stream_add_callback_with_message", "stream_add_callback") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  Log log;
  constexpr int kCalls = 40;
  std::vector<Tag> tags(kCalls);
  // Alternating with plain callbacks: one queue, one order.
  for (int i = 0; i < kCalls; ++i) {
    tags[i] = {&log, i};
    CTS_ASSERT_OK(api().memset_async(block.get(), i, block.size(), stream.get()));
    if (i % 2 == 0) {
      CTS_ASSERT_OK(
          api().stream_add_callback_with_message(stream.get(), &record_with_message, &tags[i]));
    } else {
      CTS_ASSERT_OK(api().stream_add_callback(stream.get(), &record_plain, &tags[i]));
    }
  }
  CTS_ASSERT_OK(stream.synchronize());
  std::lock_guard<std::mutex> lock(log.mutex);
  ASSERT_EQ(log.calls.size(), size_t(kCalls)) << "synchronize returned before every callback ran";
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(log.calls[i].index, i) << "callback " << i << " ran out of order";
    EXPECT_EQ(log.calls[i].status, TSR_OK) << "callback " << i;
    EXPECT_FALSE(log.calls[i].message_is_null) << "callback " << i << ": message is NULL, not \"\"";
    EXPECT_EQ(log.calls[i].message, "") << "callback " << i;
  }
}

CTS_TEST(Callback, ReceivesTheMessageOfTheStreamsFailure, "stream_add_callback_with_message",
         "stream_add_callback", "host_signal_create", "host_signal_destroy", "host_signal_raise",
         "host_signal_query", "stream_wait_host_signal") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  tsr_host_signal signal = nullptr;
  CTS_ASSERT_OK(api().host_signal_create(0, &signal));
  Log log;
  Tag before{&log, 0}, after{&log, 1}, plain{&log, 2};
  CTS_ASSERT_OK(
      api().stream_add_callback_with_message(stream.get(), &record_with_message, &before));
  CTS_ASSERT_OK(api().stream_wait_host_signal(stream.get(), signal, 1));
  CTS_ASSERT_OK(api().stream_add_callback_with_message(stream.get(), &record_with_message, &after));
  CTS_ASSERT_OK(api().stream_add_callback(stream.get(), &record_plain, &plain));
  CTS_ASSERT_OK(api().host_signal_destroy(signal));  // fails the pending wait
  const tsr_status failure = api().stream_synchronize(stream.get());
  ASSERT_NE(failure, TSR_OK) << "the wait on a destroyed signal did not fail the stream";
  std::lock_guard<std::mutex> lock(log.mutex);
  ASSERT_EQ(log.calls.size(), 3u) << "callbacks must run after a failure too";
  EXPECT_EQ(log.calls[0].status, TSR_OK) << "the callback before the failure";
  EXPECT_EQ(log.calls[0].message, "");
  EXPECT_EQ(log.calls[1].status, failure) << "the callback after the failure";
  EXPECT_FALSE(log.calls[1].message_is_null);
  EXPECT_FALSE(log.calls[1].message.empty()) << "a failed stream must say what failed";
  EXPECT_EQ(log.calls[2].status, failure) << "the plain callback after the failure";
}

CTS_TEST(Callback, RefusesANullFunctionOrStream, "stream_add_callback_with_message") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  Log log;
  Tag tag{&log, 0};
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().stream_add_callback_with_message(stream.get(), nullptr, &tag));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().stream_add_callback_with_message(nullptr, &record_with_message, &tag))
      << "there is no default stream";
  CTS_ASSERT_OK(stream.synchronize());
  std::lock_guard<std::mutex> lock(log.mutex);
  EXPECT_TRUE(log.calls.empty()) << "a refused callback ran";
}

}  // namespace
}  // namespace tessera::cts
