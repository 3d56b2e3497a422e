// The CUDA backend's NCCL adapter (backends/cuda/collectives.cc) over the fake NCCL
// (fakenccl.cc): the library's name and version as the adapter reads them, NCCL result codes
// mapped to tsr_status with the library's messages (failures injected with FAKENCCL_FAIL and
// FAKENCCL_ASYNC_ERROR), and an aborted communicator reported as such. The collectives' results
// over two fake devices are the CTS's (ctest cts.fakert.two_devices, Collectives.*).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "tessera/hal/registry.h"

namespace tessera::hal {
namespace {

class FakeNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    RegistryOptions options;
    options.selection = "fakert";
    options.search_dirs = {TESSERA_SHIM_BACKEND_DIR};
    auto registry = Registry::create(options);
    ASSERT_TRUE(registry.ok()) << registry.status().to_string();
    registry_ = std::move(*registry);
    const BackendRecord* record = registry_->find("fakert");
    ASSERT_NE(record, nullptr);
    ASSERT_EQ(record->state, BackendState::kEnabled) << record->reason;
    api_ = &record->backend->api();
    ccl_ = api_->collectives;
    ASSERT_NE(ccl_, nullptr) << "the fakert build must load libfakenccl.so";
    ASSERT_EQ(api_->stream_create(0, 0, &stream_), TSR_OK) << api_->last_error();
    ASSERT_EQ(api_->device_malloc(0, 4096, &buffer_), TSR_OK) << api_->last_error();
    tsr_comm_unique_id id{};
    ASSERT_EQ(ccl_->get_unique_id(&id), TSR_OK) << api_->last_error();
    ASSERT_EQ(ccl_->comm_init_rank(0, 1, &id, 0, &comm_), TSR_OK) << api_->last_error();
  }

  void TearDown() override {
    unsetenv("FAKENCCL_FAIL");
    unsetenv("FAKENCCL_ASYNC_ERROR");
    if (comm_ != nullptr) {
      EXPECT_EQ(ccl_->comm_destroy(comm_), TSR_OK) << api_->last_error();
    }
    if (stream_ != nullptr) api_->stream_destroy(stream_);
    if (buffer_ != nullptr) api_->device_free(0, buffer_);
  }

  tsr_status allreduce() {
    return ccl_->allreduce(buffer_, buffer_, 16, TSR_DTYPE_F32, TSR_REDUCE_SUM, comm_, stream_);
  }

  std::unique_ptr<Registry> registry_;
  const tsr_backend_api_v1* api_ = nullptr;
  const tsr_collectives_api_v1* ccl_ = nullptr;
  tsr_stream stream_ = nullptr;
  void* buffer_ = nullptr;
  tsr_comm comm_ = nullptr;
};

TEST_F(FakeNccl, IsNamedWithItsPrefixAndVersionAndAdvertisedOnEveryDevice) {
  EXPECT_STREQ(ccl_->library, "FAKENCCL 2.21.5");
  tsr_device_properties props{};
  props.struct_size = sizeof props;
  ASSERT_EQ(api_->device_properties(0, &props), TSR_OK) << api_->last_error();
  EXPECT_NE(props.capabilities & TSR_CAP_NATIVE_COLLECTIVES, 0u);
}

TEST_F(FakeNccl, RunsAnAllreduceOnTheCallersStream) {
  const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  float out[16] = {};
  ASSERT_EQ(api_->memcpy_async(buffer_, ones, sizeof ones, stream_), TSR_OK);
  ASSERT_EQ(allreduce(), TSR_OK) << api_->last_error();
  ASSERT_EQ(api_->memcpy_async(out, buffer_, sizeof out, stream_), TSR_OK);
  ASSERT_EQ(api_->stream_synchronize(stream_), TSR_OK) << api_->last_error();
  EXPECT_EQ(out[15], 1.0f);  // one rank: the sum is the input
  EXPECT_EQ(ccl_->comm_get_async_error(comm_), TSR_OK) << api_->last_error();
}

struct Mapping {
  const char* code;
  tsr_status status;
  const char* text;  // the fake's fakencclGetErrorString for the code
};

TEST_F(FakeNccl, MapsEachResultCodeToAStatusWithTheLibrarysMessage) {
  const Mapping mappings[] = {
      {"1", TSR_INTERNAL, "unhandled cuda error"},
      {"2", TSR_UNAVAILABLE, "unhandled system error"},
      {"3", TSR_INTERNAL, "internal error"},
      {"4", TSR_INVALID_ARGUMENT, "invalid argument"},
      {"5", TSR_FAILED_PRECONDITION, "invalid usage"},
      {"6", TSR_UNAVAILABLE, "remote process exited"},
  };
  for (const Mapping& m : mappings) {
    SCOPED_TRACE(std::string("NCCL result ") + m.code);
    setenv("FAKENCCL_FAIL", (std::string("AllReduce:") + m.code).c_str(), 1);
    EXPECT_EQ(allreduce(), m.status);
    const std::string message = api_->last_error();
    EXPECT_NE(message.find("allreduce: FAKENCCL 2.21.5: "), std::string::npos) << message;
    EXPECT_NE(message.find(m.text), std::string::npos) << message;
    // The library's own detail, through the optional fakencclGetLastError.
    EXPECT_NE(message.find("failure injected into AllReduce"), std::string::npos) << message;
  }
  unsetenv("FAKENCCL_FAIL");
  EXPECT_EQ(allreduce(), TSR_OK) << api_->last_error();
  EXPECT_EQ(api_->stream_synchronize(stream_), TSR_OK) << api_->last_error();
}

TEST_F(FakeNccl, ReportsAnAsynchronousFailureWithItsMeaning) {
  setenv("FAKENCCL_ASYNC_ERROR", "6", 1);
  EXPECT_EQ(ccl_->comm_get_async_error(comm_), TSR_UNAVAILABLE);
  const std::string message = api_->last_error();
  EXPECT_NE(message.find("asynchronous failure"), std::string::npos) << message;
  EXPECT_NE(message.find("remote process exited"), std::string::npos) << message;
}

TEST_F(FakeNccl, RefusesUnknownDtypesBeforeCallingTheLibrary) {
  setenv("FAKENCCL_FAIL", "AllReduce:3", 1);  // would be INTERNAL if the library were reached
  EXPECT_EQ(ccl_->allreduce(buffer_, buffer_, 16, static_cast<tsr_dtype>(42), TSR_REDUCE_SUM, comm_,
                            stream_),
            TSR_INVALID_ARGUMENT);
}

TEST_F(FakeNccl, ReportsAnAbortedCommunicatorWithoutAskingTheLibraryAgain) {
  ASSERT_EQ(ccl_->comm_abort(comm_), TSR_OK) << api_->last_error();
  EXPECT_EQ(ccl_->comm_get_async_error(comm_), TSR_ABORTED);
  EXPECT_NE(std::string(api_->last_error()).find("aborted"), std::string::npos);
}

}  // namespace
}  // namespace tessera::hal
