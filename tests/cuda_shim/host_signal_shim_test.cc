// Host signals and callbacks with a message in the CUDA backend's own terms, on the fakert build
// (backends/cuda/host_signal.cc): what the generic CTS cannot say because it is specific to a
// stream memory wait on a mapped word (the 2^63 - 1 limit of the device's comparison, slots
// reused after destroy, a device without stream memory operations), and the real CUDA build's
// table on a machine without a driver. No test depends on timing: a stream that waits on a signal
// nobody raised cannot be idle, whatever the scheduling.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/hal/backend.h"

namespace tessera::hal {
namespace {

class FakertHostSignal : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened =
        Backend::open(std::string(TESSERA_SHIM_BACKEND_DIR) + "/libtessera-backend-fakert.so", {});
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    backend_ = std::move(*opened);
    ASSERT_TRUE(backend_->init().ok());
    ASSERT_EQ(api().stream_create(0, 0, &stream_), TSR_OK) << api().last_error();
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(api().stream_destroy(stream_), TSR_OK);
    }
  }
  const tsr_backend_api_v1& api() const { return backend_->api(); }
  tsr_host_signal make_signal() {
    tsr_host_signal signal = nullptr;
    EXPECT_EQ(api().host_signal_create(0, &signal), TSR_OK) << api().last_error();
    return signal;
  }
  uint64_t value_of(tsr_host_signal signal) {
    uint64_t value = 0;
    EXPECT_EQ(api().host_signal_query(signal, &value), TSR_OK) << api().last_error();
    return value;
  }

  std::shared_ptr<Backend> backend_;
  tsr_stream stream_ = nullptr;
};

TEST_F(FakertHostSignal, ProvidesAllFiveEntriesAndTheCallbackWithAMessage) {
  EXPECT_NE(api().stream_add_callback_with_message, nullptr);
  EXPECT_NE(api().host_signal_create, nullptr) << "fakecuStreamWaitValue64_v2 is in libfakert";
  EXPECT_NE(api().host_signal_destroy, nullptr);
  EXPECT_NE(api().host_signal_raise, nullptr);
  EXPECT_NE(api().host_signal_query, nullptr);
  EXPECT_NE(api().stream_wait_host_signal, nullptr);
}

TEST_F(FakertHostSignal, TheStreamWaitsForTheRaiseThenRunsTheCallbackWithAnEmptyMessage) {
  tsr_host_signal signal = make_signal();
  ASSERT_EQ(api().stream_wait_host_signal(stream_, signal, 3), TSR_OK) << api().last_error();
  struct Seen {
    std::atomic<int> calls{0};
    tsr_status status = TSR_INTERNAL;
    std::string message = "unset";
  } seen;
  auto callback = [](void* user, tsr_status status, const char* message) {
    auto* s = static_cast<Seen*>(user);
    s->status = status;
    s->message = message ? message : "(null)";
    s->calls.fetch_add(1);
  };
  ASSERT_EQ(api().stream_add_callback_with_message(stream_, callback, &seen), TSR_OK);
  ASSERT_EQ(api().host_signal_raise(signal, 2), TSR_OK);  // not enough
  EXPECT_EQ(api().stream_query(stream_), TSR_NOT_READY);
  EXPECT_EQ(seen.calls.load(), 0);
  ASSERT_EQ(api().host_signal_raise(signal, 3), TSR_OK);
  ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
  EXPECT_EQ(seen.calls.load(), 1);
  EXPECT_EQ(seen.status, TSR_OK);
  EXPECT_EQ(seen.message, "");
  EXPECT_EQ(api().host_signal_destroy(signal), TSR_OK);
}

// The device compares (int64_t)(word - value) >= 0: a wait above 2^63 - 1 cannot be exact.
TEST_F(FakertHostSignal, RefusesAWaitAboveTwoToTheSixtyThreeMinusOne) {
  tsr_host_signal signal = make_signal();
  EXPECT_EQ(api().stream_wait_host_signal(stream_, signal, uint64_t(INT64_MAX) + 1),
            TSR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api().last_error()).find("2^63-1"), std::string::npos)
      << api().last_error();
  EXPECT_EQ(api().stream_wait_host_signal(stream_, signal, UINT64_MAX), TSR_INVALID_ARGUMENT);
  EXPECT_EQ(api().host_signal_destroy(signal), TSR_OK);
}

// Raising past 2^63 - 1 keeps the full value for query, and the device's word saturates so every
// accepted wait, the largest included, is released (a wrapped word would hang it).
TEST_F(FakertHostSignal, ARaiseToTheTopReleasesTheLargestWaitAndQueryKeepsTheFullValue) {
  tsr_host_signal signal = make_signal();
  ASSERT_EQ(api().stream_wait_host_signal(stream_, signal, uint64_t(INT64_MAX)), TSR_OK)
      << api().last_error();
  EXPECT_EQ(api().stream_query(stream_), TSR_NOT_READY);
  ASSERT_EQ(api().host_signal_raise(signal, UINT64_MAX), TSR_OK);
  ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
  EXPECT_EQ(value_of(signal), UINT64_MAX);
  ASSERT_EQ(api().host_signal_raise(signal, 5), TSR_OK);  // never lowers
  EXPECT_EQ(value_of(signal), UINT64_MAX);
  EXPECT_EQ(api().host_signal_destroy(signal), TSR_OK);
}

// Destroy releases a waiting stream instead of leaving it hung, and the slot a later signal gets
// starts from 0 again (reused only once the stream is past the wait).
TEST_F(FakertHostSignal, DestroyReleasesAWaitingStreamAndALaterSignalStartsAtZero) {
  tsr_host_signal signal = make_signal();
  ASSERT_EQ(api().stream_wait_host_signal(stream_, signal, 7), TSR_OK) << api().last_error();
  EXPECT_EQ(api().stream_query(stream_), TSR_NOT_READY);
  ASSERT_EQ(api().host_signal_destroy(signal), TSR_OK) << api().last_error();
  ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
  EXPECT_EQ(api().host_signal_raise(signal, 1), TSR_INVALID_ARGUMENT) << "destroyed handle";

  for (int i = 0; i < 3; ++i) {  // the first one may reuse the destroyed signal's slot
    tsr_host_signal next = make_signal();
    EXPECT_EQ(value_of(next), 0u);
    ASSERT_EQ(api().stream_wait_host_signal(stream_, next, 1), TSR_OK) << api().last_error();
    EXPECT_EQ(api().stream_query(stream_), TSR_NOT_READY) << "a reused slot must start at 0";
    ASSERT_EQ(api().host_signal_raise(next, 1), TSR_OK);
    ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK);
    EXPECT_EQ(api().host_signal_destroy(next), TSR_OK);
  }
}

TEST_F(FakertHostSignal, ADeviceWithoutStreamMemoryOperationsRefusesCreateAndSaysWhy) {
  setenv("FAKERT_NO_STREAM_MEM_OPS", "1", 1);
  tsr_host_signal signal = nullptr;
  const tsr_status status = api().host_signal_create(0, &signal);
  const std::string error = api().last_error();
  unsetenv("FAKERT_NO_STREAM_MEM_OPS");
  EXPECT_EQ(status, TSR_UNIMPLEMENTED);
  EXPECT_EQ(signal, nullptr);
  EXPECT_NE(error.find("device 0"), std::string::npos) << error;
  EXPECT_NE(error.find("attribute 122"), std::string::npos) << error;
}

// The real CUDA build: without a driver it cannot resolve cuStreamWaitValue64_v2, so the five
// entries are NULL (the loader then reports no host signals) while the callback with a message,
// which needs only the runtime, is there.
TEST(CudaBackendHostSignals, AreNullWithoutADriverAndTheCallbackWithAMessageIsThere) {
  if (!TESSERA_HAVE_CUDA_BACKEND) GTEST_SKIP() << "the CUDA backend is not built here";
  auto opened =
      Backend::open(std::string(TESSERA_BUILD_BACKEND_DIR) + "/libtessera-backend-cuda.so", {});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const tsr_backend_api_v1& api = (*opened)->api();
  EXPECT_NE(api.stream_add_callback_with_message, nullptr);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    const bool has_wait = dlsym(driver, "cuStreamWaitValue64_v2") != nullptr;
    dlclose(driver);
    EXPECT_EQ(api.host_signal_create != nullptr, has_wait);
    return;
  }
  EXPECT_EQ(api.host_signal_create, nullptr);
  EXPECT_EQ(api.host_signal_destroy, nullptr);
  EXPECT_EQ(api.host_signal_raise, nullptr);
  EXPECT_EQ(api.host_signal_query, nullptr);
  EXPECT_EQ(api.stream_wait_host_signal, nullptr);
}

}  // namespace
}  // namespace tessera::hal
