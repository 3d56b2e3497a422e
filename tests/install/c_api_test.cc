// The C API on one rank (no launcher in the environment): argument checks on every entry point,
// the last-error contract, and each operation's result.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "c_api_support.h"
#include "tessera.h"
#include "tessera/checkpoint/layout.h"

namespace {

using tessera_c_api_testing::clear_launcher_env;
using tessera_c_api_testing::device_copy_of;
using tessera_c_api_testing::expect_error;
using tessera_c_api_testing::host_devices_are_discrete;
using tessera_c_api_testing::read_device;

// A single-rank context and a scratch folder.
class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_launcher_env();
    ASSERT_EQ(tessera_init_from_env(nullptr, &ctx_), TESSERA_OK) << tessera_last_error();
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_c_api_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    EXPECT_EQ(tessera_context_destroy(ctx_), TESSERA_OK) << tessera_last_error();
    std::filesystem::remove_all(dir_);
  }
  tessera_context* ctx_ = nullptr;
  std::filesystem::path dir_;
};

TEST(CApiBasics, StatusNamesVersionAndDtypeSizes) {
  EXPECT_STREQ(tessera_status_name(TESSERA_OK), "OK");
  EXPECT_STREQ(tessera_status_name(TESSERA_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(tessera_status_name(TESSERA_NO_DEVICE), "NO_DEVICE");
  EXPECT_STREQ(tessera_status_name(static_cast<tessera_status>(42)), "UNKNOWN");
  EXPECT_STRNE(tessera_version(), "");
  EXPECT_EQ(tessera_dtype_size(TESSERA_F32), 4u);
  EXPECT_EQ(tessera_dtype_size(TESSERA_BF16), 2u);
  EXPECT_EQ(tessera_dtype_size(TESSERA_I64), 8u);
  EXPECT_EQ(tessera_dtype_size(static_cast<tessera_dtype>(7)), 0u);
  tessera_free(nullptr);
}

TEST(CApiBasics, NullHandlesAreRefusedByEveryEntryPoint) {
  int value = 0;
  float buffer[2] = {};
  expect_error(tessera_init_from_env(nullptr, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_init_from_env", "out_ctx is NULL");
  expect_error(tessera_rank(nullptr, &value), TESSERA_INVALID_ARGUMENT, "tessera_rank",
               "ctx is NULL");
  expect_error(tessera_size(nullptr, &value), TESSERA_INVALID_ARGUMENT, "tessera_size", "ctx");
  expect_error(tessera_local_rank(nullptr, &value), TESSERA_INVALID_ARGUMENT, "tessera_local_rank",
               "ctx");
  expect_error(tessera_local_size(nullptr, &value), TESSERA_INVALID_ARGUMENT, "tessera_local_size",
               "ctx");
  const char* name = nullptr;
  expect_error(tessera_device_name(nullptr, &name), TESSERA_INVALID_ARGUMENT, "tessera_device_name",
               "ctx");
  expect_error(tessera_allreduce(nullptr, buffer, buffer, 2, TESSERA_F32, TESSERA_SUM),
               TESSERA_INVALID_ARGUMENT, "tessera_allreduce", "ctx is NULL");
  expect_error(tessera_allgather(nullptr, buffer, buffer, 1, TESSERA_F32), TESSERA_INVALID_ARGUMENT,
               "tessera_allgather", "ctx");
  expect_error(tessera_reduce_scatter(nullptr, buffer, buffer, 1, TESSERA_F32, TESSERA_SUM),
               TESSERA_INVALID_ARGUMENT, "tessera_reduce_scatter", "ctx");
  expect_error(tessera_broadcast(nullptr, buffer, buffer, 2, TESSERA_F32, 0),
               TESSERA_INVALID_ARGUMENT, "tessera_broadcast", "ctx");
  expect_error(tessera_barrier(nullptr), TESSERA_INVALID_ARGUMENT, "tessera_barrier", "ctx");
  tessera_grad_sync* sync = nullptr;
  expect_error(tessera_grad_sync_create(nullptr, nullptr, &sync), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_create", "ctx");
  expect_error(
      tessera_grad_sync_add_parameter(nullptr, "w", buffer, buffer, 2, TESSERA_F32, nullptr),
      TESSERA_INVALID_ARGUMENT, "tessera_grad_sync_add_parameter", "sync is NULL");
  expect_error(tessera_grad_sync_mark_ready(nullptr, 0), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_mark_ready", "sync");
  expect_error(tessera_grad_sync_mark_unused(nullptr, 0), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_mark_unused", "sync");
  expect_error(tessera_grad_sync_finish(nullptr, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_finish", "sync");
  tessera_checkpoint* ckpt = nullptr;
  expect_error(tessera_checkpoint_create(nullptr, nullptr, &ckpt), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_create", "options is NULL");
  const int64_t shape[1] = {2};
  expect_error(tessera_checkpoint_add_tensor(nullptr, "w", TESSERA_F32, shape, 1, nullptr, nullptr,
                                             buffer, 0),
               TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "ckpt is NULL");
  expect_error(tessera_checkpoint_save_async(nullptr, 1, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_save_async", "ckpt");
  expect_error(tessera_checkpoint_wait(nullptr, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_wait", "ckpt");
  expect_error(tessera_checkpoint_load(nullptr, -1, 0, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_load", "ckpt");
  expect_error(tessera_checkpoint_restore(nullptr, nullptr, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_restore", "ckpt");
  expect_error(tessera_plan(nullptr, nullptr), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "request is NULL");
  // Destroying NULL is a no-op, as free(NULL) is.
  EXPECT_EQ(tessera_context_destroy(nullptr), TESSERA_OK);
  EXPECT_EQ(tessera_grad_sync_destroy(nullptr), TESSERA_OK);
  EXPECT_EQ(tessera_checkpoint_destroy(nullptr), TESSERA_OK);
}

TEST(CApiBasics, LastErrorIsPerThreadAndClearedBySuccess) {
  EXPECT_NE(tessera_barrier(nullptr), TESSERA_OK);
  std::string other;
  std::thread([&] { other = tessera_last_error(); }).join();
  EXPECT_EQ(other, "");  // another thread's failure is not this thread's
  EXPECT_NE(std::string(tessera_last_error()), "");
  EXPECT_EQ(tessera_dtype_size(TESSERA_F32), 4u);  // not an entry point returning a status
  int rank = -1;
  tessera_context* ctx = nullptr;
  clear_launcher_env();
  ASSERT_EQ(tessera_init_from_env(nullptr, &ctx), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(tessera_rank(ctx, &rank), TESSERA_OK);
  EXPECT_STREQ(tessera_last_error(), "");
  EXPECT_EQ(tessera_context_destroy(ctx), TESSERA_OK);
}

TEST(CApiBasics, InitRefusesBadOptionsAndUnknownDevices) {
  clear_launcher_env();
  tessera_context* ctx = nullptr;
  tessera_init_options options{};
  options.struct_size = 4;
  expect_error(tessera_init_from_env(&options, &ctx), TESSERA_INVALID_ARGUMENT,
               "tessera_init_from_env", "options->struct_size 4");
  options.struct_size = sizeof options;
  options.timeout_ms = -1;
  expect_error(tessera_init_from_env(&options, &ctx), TESSERA_INVALID_ARGUMENT,
               "tessera_init_from_env", "timeout_ms");
  options.timeout_ms = 0;
  options.device = "host:99";
  EXPECT_EQ(tessera_init_from_env(&options, &ctx), TESSERA_NOT_FOUND) << tessera_last_error();
  EXPECT_NE(std::string(tessera_last_error()).find("99"), std::string::npos);
  options.device = "nosuchbackend";
  expect_error(tessera_init_from_env(&options, &ctx), TESSERA_NOT_FOUND, "tessera_init_from_env",
               "nosuchbackend");
  EXPECT_EQ(ctx, nullptr);  // out_* untouched on failure
  setenv("RANK", "x", 1);
  setenv("WORLD_SIZE", "2", 1);
  expect_error(tessera_init_from_env(nullptr, &ctx), TESSERA_INVALID_ARGUMENT,
               "tessera_init_from_env", "RANK");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

TEST_F(CApi, ReportsOneRankOnTheHostDevice) {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  const char* device = nullptr;
  ASSERT_EQ(tessera_rank(ctx_, &rank), TESSERA_OK);
  ASSERT_EQ(tessera_size(ctx_, &size), TESSERA_OK);
  ASSERT_EQ(tessera_local_rank(ctx_, &local_rank), TESSERA_OK);
  ASSERT_EQ(tessera_local_size(ctx_, &local_size), TESSERA_OK);
  ASSERT_EQ(tessera_device_name(ctx_, &device), TESSERA_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(local_rank, 0);
  EXPECT_EQ(local_size, 1);
  EXPECT_STREQ(device, "host:0");
  expect_error(tessera_rank(ctx_, nullptr), TESSERA_INVALID_ARGUMENT, "tessera_rank",
               "out is NULL");
}

TEST_F(CApi, CollectivesOnOneRankCopyAndRefuseBadArguments) {
  std::vector<int32_t> send = {1, 2, 3, 4}, recv(4, 0);
  ASSERT_EQ(tessera_allreduce(ctx_, send.data(), recv.data(), 4, TESSERA_I32, TESSERA_MAX),
            TESSERA_OK)
      << tessera_last_error();
  EXPECT_EQ(recv, send);
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_EQ(tessera_allgather(ctx_, send.data(), recv.data(), 4, TESSERA_I32), TESSERA_OK);
  EXPECT_EQ(recv, send);
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_EQ(tessera_reduce_scatter(ctx_, send.data(), recv.data(), 4, TESSERA_I32, TESSERA_SUM),
            TESSERA_OK);
  EXPECT_EQ(recv, send);
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_EQ(tessera_broadcast(ctx_, send.data(), recv.data(), 4, TESSERA_I32, 0), TESSERA_OK);
  EXPECT_EQ(recv, send);
  ASSERT_EQ(tessera_barrier(ctx_), TESSERA_OK);
  // A zero count needs no buffers.
  EXPECT_EQ(tessera_allreduce(ctx_, nullptr, nullptr, 0, TESSERA_F32, TESSERA_SUM), TESSERA_OK)
      << tessera_last_error();

  expect_error(tessera_allreduce(ctx_, send.data(), recv.data(), 4, static_cast<tessera_dtype>(7),
                                 TESSERA_SUM),
               TESSERA_INVALID_ARGUMENT, "tessera_allreduce", "dtype 7 is not a tessera_dtype");
  expect_error(tessera_allreduce(ctx_, send.data(), recv.data(), 4, TESSERA_I32,
                                 static_cast<tessera_reduce_op>(5)),
               TESSERA_INVALID_ARGUMENT, "tessera_allreduce", "op 5 is not a tessera_reduce_op");
  expect_error(tessera_allreduce(ctx_, nullptr, recv.data(), 4, TESSERA_I32, TESSERA_SUM),
               TESSERA_INVALID_ARGUMENT, "tessera_allreduce", "send is NULL");
  expect_error(tessera_allgather(ctx_, send.data(), nullptr, 4, TESSERA_I32),
               TESSERA_INVALID_ARGUMENT, "tessera_allgather", "recv is NULL");
  expect_error(tessera_reduce_scatter(ctx_, send.data(), recv.data(), 4,
                                      static_cast<tessera_dtype>(7), TESSERA_SUM),
               TESSERA_INVALID_ARGUMENT, "tessera_reduce_scatter", "dtype 7");
  expect_error(tessera_broadcast(ctx_, send.data(), recv.data(), 4, TESSERA_I32, 1),
               TESSERA_INVALID_ARGUMENT, "tessera_broadcast", "root 1 is not a rank");
  expect_error(tessera_broadcast(ctx_, send.data(), recv.data(), 4, TESSERA_I32, -1),
               TESSERA_INVALID_ARGUMENT, "tessera_broadcast", "root -1");
}

// A valid request: the preset model on the preset cluster.
tessera_plan_request llama2_7b_on_a_dgx() {
  tessera_plan_request request{};
  request.struct_size = sizeof request;
  request.model = "llama2-7b";
  request.cluster = "dgx-a100-80gb";
  request.global_batch = 512;
  request.seq_len = 4096;
  return request;
}

TEST(CApiPlan, PresetsAndInlineConfigsGiveTheBestPlanAsJson) {
  tessera_plan_request request = llama2_7b_on_a_dgx();
  char* json = nullptr;
  ASSERT_EQ(tessera_plan(&request, &json), TESSERA_OK) << tessera_last_error();
  const std::string text = json;
  tessera_free(json);
  for (const char* key :
       {"\"summary\"", "\"plans\"", "\"search\"", "\"tp\"", "\"step_time_s\"", "\"llama2-7b\""})
    EXPECT_NE(text.find(key), std::string::npos) << key << " in " << text;
  // One plan, in the document `tessera plan --json` prints (the layout readers take it).
  auto layout = tessera::ckpt::parse_layout_json(text, "tessera_plan output");
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();

  // A Hugging Face config.json passed as text, with a fixed value.
  request.model =
      R"({"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
          "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 2048})";
  request.fix = "tp=2";
  request.global_batch = 64;
  request.seq_len = 2048;
  ASSERT_EQ(tessera_plan(&request, &json), TESSERA_OK) << tessera_last_error();
  EXPECT_NE(std::string(json).find("\"tp\": 2"), std::string::npos) << json;
  tessera_free(json);
}

TEST(CApiPlan, BadRequestsNameTheField) {
  tessera_plan_request request = llama2_7b_on_a_dgx();
  char* json = nullptr;
  request.global_batch = 0;
  expect_error(tessera_plan(&request, &json), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "request->global_batch 0");
  request.global_batch = 512;
  request.dtype = "fp8";
  expect_error(tessera_plan(&request, &json), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "request->dtype 'fp8'");
  request.dtype = nullptr;
  request.model = "{not json";
  expect_error(tessera_plan(&request, &json), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "malformed JSON");
  request.model = "/nonexistent/config.json";
  EXPECT_NE(tessera_plan(&request, &json), TESSERA_OK);
  EXPECT_NE(std::string(tessera_last_error()).find("/nonexistent/config.json"), std::string::npos)
      << tessera_last_error();
  request.model = "llama2-7b";
  request.fix = "tp=banana";
  expect_error(tessera_plan(&request, &json), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "request->fix");
  request.fix = nullptr;
  request.struct_size = 8;
  expect_error(tessera_plan(&request, &json), TESSERA_INVALID_ARGUMENT, "tessera_plan",
               "request->struct_size 8");
  EXPECT_EQ(json, nullptr);
}

// Gradients and parameters in device memory (the overlap engine hands them to the device's stream
// operations only; on the discrete test device host memory is refused, see the next test).
TEST_F(CApi, GradSyncAveragesAndRefusesMisuse) {
  void* w = device_copy_of(ctx_, std::vector<float>(64, 0.f));
  void* g = device_copy_of(ctx_, std::vector<float>(64, 3.f));
  void* h = device_copy_of(ctx_, std::vector<float>(8, 5.f));
  void* late = device_copy_of(ctx_, std::vector<float>(8, 0.f));
  ASSERT_TRUE(w != nullptr && g != nullptr && h != nullptr && late != nullptr);
  tessera_grad_sync_options options{};
  options.struct_size = sizeof options;
  options.reduce = TESSERA_MAX;
  tessera_grad_sync* sync = nullptr;
  expect_error(tessera_grad_sync_create(ctx_, &options, &sync), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_create", "options->reduce");
  ASSERT_EQ(tessera_grad_sync_create(ctx_, nullptr, &sync), TESSERA_OK) << tessera_last_error();
  int iw = -1, ih = -1;
  ASSERT_EQ(tessera_grad_sync_add_parameter(sync, "w", w, g, 64, TESSERA_F32, &iw), TESSERA_OK)
      << tessera_last_error();
  ASSERT_EQ(tessera_grad_sync_add_parameter(sync, "h", nullptr, h, 8, TESSERA_F32, &ih), TESSERA_OK)
      << tessera_last_error();
  EXPECT_EQ(iw, 0);
  EXPECT_EQ(ih, 1);
  expect_error(
      tessera_grad_sync_add_parameter(sync, "x", nullptr, nullptr, 8, TESSERA_F32, nullptr),
      TESSERA_INVALID_ARGUMENT, "tessera_grad_sync_add_parameter", "grad is NULL");
  expect_error(tessera_grad_sync_add_parameter(sync, "x", nullptr, h, 8,
                                               static_cast<tessera_dtype>(7), nullptr),
               TESSERA_INVALID_ARGUMENT, "tessera_grad_sync_add_parameter", "dtype 7");
  EXPECT_NE(tessera_grad_sync_add_parameter(sync, "w", nullptr, h, 8, TESSERA_F32, nullptr),
            TESSERA_OK);  // duplicate name (and overlapping buffer)
  EXPECT_NE(tessera_grad_sync_mark_ready(sync, 7), TESSERA_OK);  // no parameter 7
  EXPECT_NE(std::string(tessera_last_error()).find("tessera_grad_sync_mark_ready"),
            std::string::npos);
  ASSERT_EQ(tessera_grad_sync_mark_ready(sync, ih), TESSERA_OK) << tessera_last_error();
  ASSERT_EQ(tessera_grad_sync_mark_unused(sync, iw), TESSERA_OK) << tessera_last_error();
  tessera_step_stats stats{};
  stats.struct_size = 3;
  expect_error(tessera_grad_sync_finish(sync, &stats), TESSERA_INVALID_ARGUMENT,
               "tessera_grad_sync_finish", "out_stats->struct_size 3");
  stats.struct_size = sizeof stats;
  ASSERT_EQ(tessera_grad_sync_finish(sync, &stats), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(read_device<float>(ctx_, h, 8), std::vector<float>(8, 5.f));    // the average, 1 rank
  EXPECT_EQ(read_device<float>(ctx_, g, 64), std::vector<float>(64, 0.f));  // unused: zeros
  EXPECT_GE(stats.buckets, 1u);
  EXPECT_GE(stats.overlap_ratio, 0.0);
  EXPECT_LE(stats.overlap_ratio, 1.0);
  expect_error(
      tessera_grad_sync_add_parameter(sync, "late", nullptr, late, 8, TESSERA_F32, nullptr),
      TESSERA_FAILED_PRECONDITION, "tessera_grad_sync_add_parameter",
      "parameter 'late': registered after the first step began");
  EXPECT_EQ(tessera_grad_sync_destroy(sync), TESSERA_OK);
  for (void* buffer : {w, g, h, late}) {
    EXPECT_EQ(tessera_device_free(ctx_, buffer), TESSERA_OK) << tessera_last_error();
  }
}

// On a device the CPU cannot address, host memory as a gradient or as a parameter is refused at
// registration (the engine would hand it to device stream operations), naming the parameter, the
// buffer and the device. On an addressable device host memory is fine, so there is nothing to test.
TEST_F(CApi, GradSyncRefusesHostMemoryOnADiscreteDevice) {
  if (!host_devices_are_discrete()) GTEST_SKIP() << "needs TESSERA_HOST_DEVICES=N:discrete";
  void* device = device_copy_of(ctx_, std::vector<float>(8, 1.f));
  ASSERT_NE(device, nullptr);
  std::vector<float> host(8, 1.f);
  tessera_grad_sync* sync = nullptr;
  ASSERT_EQ(tessera_grad_sync_create(ctx_, nullptr, &sync), TESSERA_OK) << tessera_last_error();
  expect_error(
      tessera_grad_sync_add_parameter(sync, "hg", nullptr, host.data(), 8, TESSERA_F32, nullptr),
      TESSERA_INVALID_ARGUMENT, "tessera_grad_sync_add_parameter",
      "parameter 'hg': gradient buffer");
  EXPECT_NE(std::string(tessera_last_error()).find("host:0 is not host-accessible"),
            std::string::npos)
      << tessera_last_error();
  expect_error(
      tessera_grad_sync_add_parameter(sync, "hp", host.data(), device, 8, TESSERA_F32, nullptr),
      TESSERA_INVALID_ARGUMENT, "tessera_grad_sync_add_parameter",
      "parameter 'hp': parameter buffer");
  // Nothing was registered: the same device gradient is accepted under a name of its own, and
  // the step runs.
  int index = -1;
  ASSERT_EQ(tessera_grad_sync_add_parameter(sync, "dg", nullptr, device, 8, TESSERA_F32, &index),
            TESSERA_OK)
      << tessera_last_error();
  EXPECT_EQ(index, 0);
  ASSERT_EQ(tessera_grad_sync_mark_ready(sync, index), TESSERA_OK) << tessera_last_error();
  ASSERT_EQ(tessera_grad_sync_finish(sync, nullptr), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(read_device<float>(ctx_, device, 8), std::vector<float>(8, 1.f));
  EXPECT_EQ(tessera_grad_sync_destroy(sync), TESSERA_OK);
  EXPECT_EQ(tessera_device_free(ctx_, device), TESSERA_OK) << tessera_last_error();
}

struct Blob {
  std::string bytes;
  tessera_status set_result = TESSERA_OK;
};

void blob_get(void* user, const void** data, size_t* size) {
  auto* blob = static_cast<Blob*>(user);
  *data = blob->bytes.data();
  *size = blob->bytes.size();
}

tessera_status blob_set(void* user, const void* data, size_t size) {
  auto* blob = static_cast<Blob*>(user);
  if (blob->set_result != TESSERA_OK) return blob->set_result;
  blob->bytes.assign(static_cast<const char*>(data), size);
  return TESSERA_OK;
}

// Saves a 2-D tensor and a blob, clobbers them, loads them back; then the blob's set callback
// failing fails the load with its code and the blob's name.
void save_and_load(tessera_context* ctx, const std::filesystem::path& dir) {
  tessera_checkpoint_options options{};
  options.struct_size = sizeof options;
  options.dir = dir.c_str();
  options.no_fsync = 1;
  tessera_checkpoint* ckpt = nullptr;
  ASSERT_EQ(tessera_checkpoint_create(ctx, &options, &ckpt), TESSERA_OK) << tessera_last_error();
  std::vector<double> tensor(6);
  for (size_t i = 0; i < tensor.size(); ++i) tensor[i] = 0.5 * double(i);
  const int64_t shape[2] = {2, 3};
  ASSERT_EQ(tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F64, shape, 2, nullptr, nullptr,
                                          tensor.data(), 0),
            TESSERA_OK)
      << tessera_last_error();
  Blob blob{"cursor=17"};
  ASSERT_EQ(tessera_checkpoint_add_blob(ckpt, "b", blob_get, blob_set, &blob, 0), TESSERA_OK);
  expect_error(tessera_checkpoint_wait(ckpt, nullptr), TESSERA_FAILED_PRECONDITION,
               "tessera_checkpoint_wait", "");  // nothing saved yet
  double blocked = -1;
  ASSERT_EQ(tessera_checkpoint_save_async(ckpt, 5, &blocked), TESSERA_OK) << tessera_last_error();
  EXPECT_GE(blocked, 0.0);
  int64_t step = -1;
  ASSERT_EQ(tessera_checkpoint_wait(ckpt, &step), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(step, 5);
  const std::vector<double> saved = tensor;
  std::fill(tensor.begin(), tensor.end(), -1.0);
  blob.bytes = "garbage";
  step = -1;
  ASSERT_EQ(tessera_checkpoint_load(ckpt, -1, 0, &step), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(step, 5);
  EXPECT_EQ(tensor, saved);
  EXPECT_EQ(blob.bytes, "cursor=17");
  blob.set_result = TESSERA_DATA_LOSS;
  expect_error(tessera_checkpoint_load(ckpt, 5, 0, nullptr), TESSERA_DATA_LOSS,
               "tessera_checkpoint_load", "blob 'b'");
  EXPECT_NE(tessera_checkpoint_load(ckpt, 9, 0, nullptr), TESSERA_OK);  // there is no step 9
  EXPECT_NE(std::string(tessera_last_error()).find("tessera_checkpoint_load: "), std::string::npos);
  EXPECT_EQ(tessera_checkpoint_destroy(ckpt), TESSERA_OK);
}

TEST_F(CApi, CheckpointSavesAndLoadsThroughTheContext) {
  save_and_load(ctx_, dir_);
}

TEST_F(CApi, CheckpointWithoutContextIsSingleRank) {
  save_and_load(nullptr, dir_);
}

TEST_F(CApi, CheckpointRefusesBadRegistrations) {
  tessera_checkpoint_options options{};
  options.struct_size = sizeof options;
  tessera_checkpoint* ckpt = nullptr;
  expect_error(tessera_checkpoint_create(ctx_, &options, &ckpt), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_create", "options->dir is NULL");
  options.dir = dir_.c_str();
  options.keep_last = -2;
  expect_error(tessera_checkpoint_create(ctx_, &options, &ckpt), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_create", "keep_last");
  options.keep_last = 0;
  ASSERT_EQ(tessera_checkpoint_create(ctx_, &options, &ckpt), TESSERA_OK) << tessera_last_error();
  float data[4] = {};
  const int64_t shape[1] = {4}, offset[1] = {0}, len[1] = {4};
  expect_error(
      tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, nullptr, 1, nullptr, nullptr, data, 0),
      TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "shape is NULL");
  expect_error(
      tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, shape, -1, nullptr, nullptr, data, 0),
      TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "ndim -1");
  expect_error(
      tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, shape, 1, offset, nullptr, data, 0),
      TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "slice_offset");
  expect_error(tessera_checkpoint_add_tensor(ckpt, "t", static_cast<tessera_dtype>(7), shape, 1,
                                             nullptr, nullptr, data, 0),
               TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "dtype 7");
  expect_error(
      tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, shape, 1, offset, len, nullptr, 0),
      TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_tensor", "data is NULL");
  ASSERT_EQ(tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, shape, 1, offset, len, data, 0),
            TESSERA_OK)
      << tessera_last_error();
  EXPECT_NE(
      tessera_checkpoint_add_tensor(ckpt, "t", TESSERA_F32, shape, 1, nullptr, nullptr, data, 0),
      TESSERA_OK);  // the name is taken
  expect_error(tessera_checkpoint_add_blob(ckpt, "b", nullptr, blob_set, nullptr, 0),
               TESSERA_INVALID_ARGUMENT, "tessera_checkpoint_add_blob", "get is NULL");
  expect_error(tessera_checkpoint_save_async(ckpt, -3, nullptr), TESSERA_INVALID_ARGUMENT,
               "tessera_checkpoint_save_async", "step -3");
  EXPECT_NE(tessera_checkpoint_load(ckpt, -1, 0, nullptr), TESSERA_OK);  // nothing committed
  EXPECT_NE(std::string(tessera_last_error()), "");
  EXPECT_EQ(tessera_checkpoint_destroy(ckpt), TESSERA_OK);
}

}  // namespace
