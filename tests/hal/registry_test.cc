#include "tessera/hal/registry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/hal/backend.h"

namespace tessera::hal {
namespace {

namespace fs = std::filesystem;

TEST(Registry, ListsEveryKnownBackendWithAStateAndAReason) {
  auto registry = Registry::create();
  ASSERT_TRUE(registry.ok()) << registry.status().to_string();
  for (const auto& name : known_backend_names()) {
    const BackendRecord* record = (*registry)->find(name);
    ASSERT_NE(record, nullptr) << name;
    if (record->state != BackendState::kEnabled) {
      EXPECT_FALSE(record->reason.empty()) << name << " is " << backend_state_name(record->state);
    }
  }
  EXPECT_EQ((*registry)->find("host")->state, BackendState::kEnabled);
  const BackendRecord* skeleton = (*registry)->find("skeleton");
  EXPECT_EQ(skeleton->state, BackendState::kNoDevices);
  EXPECT_EQ(skeleton->reason, "skeleton backend: not implemented");
}

TEST(Registry, LoadsOnlyTheSelectedBackends) {
  RegistryOptions options;
  options.selection = "host";
  auto registry = Registry::create(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->find("host")->state, BackendState::kEnabled);
  EXPECT_EQ((*registry)->find("skeleton")->state, BackendState::kDisabled);
  EXPECT_NE((*registry)->find("skeleton")->reason.find("excluded"), std::string::npos);
}

TEST(Registry, ACaretExcludesTheListedBackends) {
  RegistryOptions options;
  options.selection = "^skeleton,cuda";
  auto registry = Registry::create(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->find("host")->state, BackendState::kEnabled);
  EXPECT_EQ((*registry)->find("skeleton")->state, BackendState::kDisabled);
  EXPECT_EQ((*registry)->find("cuda")->state, BackendState::kDisabled);
}

TEST(Registry, ReadsTheSelectionFromTesseraBackends) {
  setenv("TESSERA_BACKENDS", "skeleton", 1);
  auto registry = Registry::create();
  unsetenv("TESSERA_BACKENDS");
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->find("host")->state, BackendState::kDisabled);
  EXPECT_NE((*registry)->find("host")->reason.find("TESSERA_BACKENDS"), std::string::npos);
}

TEST(Registry, RejectsAMalformedSelectionNamingTheVariable) {
  setenv("TESSERA_BACKENDS", "host;rm -rf", 1);
  auto registry = Registry::create();
  unsetenv("TESSERA_BACKENDS");
  ASSERT_FALSE(registry.ok());
  EXPECT_EQ(registry.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(registry.status().message().find("TESSERA_BACKENDS"), std::string::npos);
}

// Every device program starts here: a malformed logging variable fails it by name instead of
// being logged once and replaced by the default.
TEST(Registry, RefusesMalformedLoggingVariablesNamingThem) {
  setenv("TESSERA_LOG", "whatever", 1);
  auto registry = Registry::create();
  unsetenv("TESSERA_LOG");
  ASSERT_FALSE(registry.ok());
  EXPECT_EQ(registry.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(registry.status().message().find("TESSERA_LOG='whatever'"), std::string::npos)
      << registry.status().message();
  setenv("TESSERA_LOG_SUBSYS", "hal,bogus", 1);
  registry = Registry::create();
  unsetenv("TESSERA_LOG_SUBSYS");
  ASSERT_FALSE(registry.ok());
  EXPECT_NE(registry.status().message().find("'bogus' is not a subsystem"), std::string::npos)
      << registry.status().message();
}

TEST(Registry, AnUnknownSelectedBackendIsListedAsNotFound) {
  RegistryOptions options;
  options.selection = "host,ascend";
  auto registry = Registry::create(options);
  ASSERT_TRUE(registry.ok());
  const BackendRecord* ascend = (*registry)->find("ascend");
  ASSERT_NE(ascend, nullptr);
  EXPECT_EQ(ascend->state, BackendState::kNotFound);
  EXPECT_NE(ascend->reason.find("libtessera-backend-ascend.so"), std::string::npos);
}

TEST(Registry, DiscoversBackendsInFoldersFromTesseraBackendPath) {
  fs::path dir = fs::temp_directory_path() / ("tessera-registry-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(TESSERA_BUILD_BACKEND_DIR) / "libtessera-backend-skeleton.so",
                dir / "libtessera-backend-vendorx.so", fs::copy_options::overwrite_existing);
  setenv("TESSERA_BACKEND_PATH", dir.c_str(), 1);
  auto registry = Registry::create();
  unsetenv("TESSERA_BACKEND_PATH");
  fs::remove_all(dir);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->search_dirs().front(), dir.string());
  const BackendRecord* vendor = (*registry)->find("vendorx");
  ASSERT_NE(vendor, nullptr);
  EXPECT_EQ(vendor->state, BackendState::kNoDevices);
  EXPECT_EQ(vendor->path, (dir / "libtessera-backend-vendorx.so").string());
}

TEST(Registry, ALibraryThatIsNotABackendIsRefusedByName) {
  fs::path dir = fs::temp_directory_path() / ("tessera-registry-bad-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::path bogus = dir / "libtessera-backend-bogus.so";
  {
    std::FILE* f = std::fopen(bogus.c_str(), "w");
    std::fputs("not an ELF file", f);
    std::fclose(f);
  }
  RegistryOptions options;
  options.search_dirs = {dir.string(), TESSERA_BUILD_BACKEND_DIR};
  auto registry = Registry::create(options);
  fs::remove_all(dir);
  ASSERT_TRUE(registry.ok());
  const BackendRecord* record = (*registry)->find("bogus");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->state, BackendState::kLoadFailed);
  EXPECT_NE(record->reason.find(bogus.string()), std::string::npos);
  EXPECT_EQ((*registry)->find("host")->state, BackendState::kEnabled) << "others still load";
}

// A build tree and an install of it side by side, each with a backend folder, under a temp dir.
class SearchPath : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tessera-search-path-" + std::to_string(getpid()));
    for (const char* dir : {"build/bin", "build/lib/tessera", "prefix/bin", "prefix/lib/tessera",
                            "build/install/bin", "build/install/lib/tessera", "elsewhere/bin"}) {
      fs::create_directories(root_ / dir);
    }
    inputs_.env_dirs = {"/from/env"};
    inputs_.build_root = (root_ / "build").string();
    inputs_.build_backend_dir = (root_ / "build/lib/tessera").string();
    inputs_.install_backend_dir = "/configured/prefix/lib/tessera";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string at(const char* relative) const { return (root_ / relative).string(); }

  fs::path root_;
  SearchPathInputs inputs_;
};

TEST_F(SearchPath, AnInstalledProgramSearchesItsPrefixAndTesseraBackendPathOnly) {
  inputs_.program = inputs_.library = at("prefix/bin/tessera");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", at("prefix/lib/tessera")}));
  // Linked against the installed runtime from a program elsewhere: the library's folder.
  inputs_.program = at("elsewhere/bin/trainer");
  inputs_.library = at("prefix/lib/libtessera_runtime.so");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", at("prefix/lib/tessera")}));
}

TEST_F(SearchPath, AnInstallInsideTheBuildTreeIsStillAnInstall) {
  inputs_.program = inputs_.library = at("build/install/bin/tessera");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", at("build/install/lib/tessera")}));
}

TEST_F(SearchPath, AProgramOfTheBuildTreeSearchesTheBuildTree) {
  inputs_.program = inputs_.library = at("build/bin/tessera");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", at("build/lib/tessera")}));
  inputs_.program = at("elsewhere/bin/example");  // linked against the build tree's runtime
  inputs_.library = at("build/lib/libtessera_runtime.so");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", at("build/lib/tessera")}));
}

TEST_F(SearchPath, AProgramNextToNoBackendFolderSearchesTheConfiguredPrefix) {
  inputs_.program = inputs_.library = at("elsewhere/bin/trainer");
  EXPECT_EQ(backend_search_dirs(inputs_),
            (std::vector<std::string>{"/from/env", "/configured/prefix/lib/tessera"}));
}

}  // namespace
}  // namespace tessera::hal
