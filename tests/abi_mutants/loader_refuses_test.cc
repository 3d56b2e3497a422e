// The loader against deliberately broken backends (mutant_backend.c): each is refused with a
// reason that names the library and what is wrong, or loaded with its absent entries NULL, and
// a refusal never stops a good backend from loading.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "tessera/hal/backend.h"

namespace tessera::hal {
namespace {

std::string mutant_path(const std::string& mutation) {
  return std::string(TESSERA_MUTANT_DIR) + "/" + backend_file_name("mutant-" + mutation);
}

::testing::AssertionResult mentions(const Status& status, const std::string& text) {
  if (status.message().find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "'" << status.to_string() << "' does not mention '" << text << "'";
}

// A full round trip through the required entries: the backend works, not just loads.
void expect_round_trip(const Backend& backend) {
  const tsr_backend_api_v1& api = backend.api();
  tsr_stream stream = nullptr;
  ASSERT_EQ(api.stream_create(0, 0, &stream), TSR_OK) << api.last_error();
  void* device = nullptr;
  ASSERT_EQ(api.device_malloc(0, 4096, &device), TSR_OK) << api.last_error();
  unsigned char host[4096] = {};
  EXPECT_EQ(api.memset_async(device, 0x42, sizeof host, stream), TSR_OK) << api.last_error();
  EXPECT_EQ(api.memcpy_async(host, device, sizeof host, stream), TSR_OK) << api.last_error();
  EXPECT_EQ(api.stream_synchronize(stream), TSR_OK) << api.last_error();
  EXPECT_EQ(host[0], 0x42);
  EXPECT_EQ(host[sizeof host - 1], 0x42);
  EXPECT_EQ(api.device_free(0, device), TSR_OK);
  EXPECT_EQ(api.stream_destroy(stream), TSR_OK);
}

TEST(LoaderAbi, RefusesAWrongMajorNamingTheLibraryAndTheMajor) {
  const std::string path = mutant_path("wrong_major");
  auto opened = Backend::open(path, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kVersionMismatch) << opened.status().to_string();
  EXPECT_TRUE(mentions(opened.status(), path));
  EXPECT_TRUE(mentions(opened.status(), "major"));
}

TEST(LoaderAbi, RefusesAMissingRequiredEntryNamingTheLibraryAndTheEntry) {
  const std::string path = mutant_path("missing_required");
  auto opened = Backend::open(path, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition) << opened.status().to_string();
  EXPECT_TRUE(mentions(opened.status(), path));
  EXPECT_TRUE(mentions(opened.status(), "memcpy_async"));
}

TEST(LoaderAbi, RefusesABackendThatExportsOnlyAnotherMajorsEntryPoint) {
  const std::string path = mutant_path("only_v2");
  auto opened = Backend::open(path, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kVersionMismatch) << opened.status().to_string();
  EXPECT_TRUE(mentions(opened.status(), path));
  EXPECT_TRUE(mentions(opened.status(), "tessera_backend_get_api_v2"));
}

TEST(LoaderAbi, LoadsAnOlderMinorWithItsLaterEntriesAbsent) {
  auto opened = Backend::open(mutant_path("old_minor"), {});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Backend& backend = *opened.value();
  constexpr size_t kOldSize = offsetof(tsr_backend_api_v1, event_elapsed_time);
  EXPECT_EQ(backend.reported_struct_size(), kOldSize);
  const tsr_backend_api_v1& api = backend.api();
  EXPECT_EQ(api.struct_size, sizeof(tsr_backend_api_v1)) << "the normalised table is full size";
  // The mutant left the host's pointers beyond its struct_size: the loader must not copy them.
  EXPECT_EQ(api.event_elapsed_time, nullptr);
  EXPECT_EQ(api.device_can_access_peer, nullptr);
  EXPECT_EQ(api.device_enable_peer_access, nullptr);
  EXPECT_EQ(api.ipc_get_handle, nullptr);
  EXPECT_EQ(api.ipc_open_handle, nullptr);
  EXPECT_EQ(api.ipc_close_handle, nullptr);
  EXPECT_EQ(api.reduce_async, nullptr);
  EXPECT_EQ(api.cast_async, nullptr);
  EXPECT_EQ(api.gemm_async, nullptr);
  EXPECT_EQ(api.collectives, nullptr);
  // Optional entries inside its struct_size are kept.
  EXPECT_NE(api.stream_add_callback, nullptr);
  ASSERT_TRUE(backend.init().ok());
  ASSERT_GT(backend.device_count(), 0);
  expect_round_trip(backend);
}

TEST(LoaderAbi, TreatsAPartialSetOfKernelModuleEntriesAsNone) {
  auto opened = Backend::open(mutant_path("partial_modules"), {});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const tsr_backend_api_v1& api = opened.value()->api();
  // The mutant kept module_load, module_unload and module_get_function but not launch: a module
  // nobody can launch is no feature, so the loader drops all four (and logs it once).
  EXPECT_EQ(api.module_load, nullptr);
  EXPECT_EQ(api.module_unload, nullptr);
  EXPECT_EQ(api.module_get_function, nullptr);
  EXPECT_EQ(api.launch, nullptr);
  EXPECT_NE(api.host_signal_create, nullptr) << "other optional entries are kept";
  // The unmodified host backend keeps the four.
  auto host = Backend::open("host", {TESSERA_BUILD_BACKEND_DIR});
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  EXPECT_NE(host.value()->api().module_load, nullptr);
  EXPECT_NE(host.value()->api().launch, nullptr);
}

TEST(LoaderAbi, LoadsANewerMinorAndIgnoresEntriesItDoesNotKnow) {
  auto opened = Backend::open(mutant_path("newer_minor"), {});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Backend& backend = *opened.value();
  EXPECT_EQ(backend.reported_abi_minor(), static_cast<uint32_t>(TSR_BACKEND_ABI_MINOR + 1));
  EXPECT_GT(backend.reported_struct_size(), sizeof(tsr_backend_api_v1));
  EXPECT_EQ(backend.api().struct_size, sizeof(tsr_backend_api_v1));
  EXPECT_EQ(backend.name(), "mutant-newer_minor");
  ASSERT_TRUE(backend.init().ok());
  ASSERT_GT(backend.device_count(), 0);
  expect_round_trip(backend);
}

TEST(LoaderAbi, ReportsTheBackendsOwnMessageWhenInitFails) {
  auto opened = Backend::open(mutant_path("init_fails"), {});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Backend& backend = *opened.value();
  const Status init = backend.init();
  EXPECT_EQ(init.code(), StatusCode::kNoDriver) << init.to_string();
  EXPECT_TRUE(mentions(init, "mutant: driver missing on purpose"));
  EXPECT_FALSE(backend.initialized());
  std::string reason;
  EXPECT_EQ(backend.device_count(&reason), 0);
  EXPECT_FALSE(reason.empty());
}

TEST(LoaderAbi, StillLoadsGoodBackendsAfterRefusingBrokenOnes) {
  for (const char* broken : {"wrong_major", "missing_required", "only_v2"}) {
    EXPECT_FALSE(Backend::open(mutant_path(broken), {}).ok()) << broken;
    // By name too, from a folder that holds broken and good libraries alike.
    EXPECT_FALSE(Backend::open(std::string("mutant-") + broken, {TESSERA_MUTANT_DIR}).ok())
        << broken;
  }
  auto host = Backend::open("host", {TESSERA_MUTANT_DIR, TESSERA_BUILD_BACKEND_DIR});
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  ASSERT_TRUE(host.value()->init().ok());
  ASSERT_GT(host.value()->device_count(), 0);
  expect_round_trip(*host.value());
  auto newer = Backend::open("mutant-newer_minor", {TESSERA_MUTANT_DIR});
  EXPECT_TRUE(newer.ok()) << newer.status().to_string();
}

TEST(LoaderAbi, SaysWhichFoldersItSearchedForAnUnknownName) {
  auto opened = Backend::open("no-such-backend", {TESSERA_MUTANT_DIR});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(mentions(opened.status(), TESSERA_MUTANT_DIR));
}

}  // namespace
}  // namespace tessera::hal
