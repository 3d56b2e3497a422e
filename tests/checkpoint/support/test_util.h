// Test support: scratch directories, file corruption helpers and process RSS. Header-only.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

namespace tessera::ckpt::testing {

// A fresh directory under the test temp dir, removed at destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = ::testing::TempDir() + "/tsr_ckpt_" + tag + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

inline void truncate_to(const std::string& path, uint64_t size) {
  std::filesystem::resize_file(path, size);
}

// Resident set size of this process in bytes (Linux /proc/self/statm).
inline size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// A seed from TESSERA_TEST_SEED or the clock, printed so a failure can be replayed.
inline uint64_t test_seed(const char* what) {
  uint64_t seed;
  if (const char* env = std::getenv("TESSERA_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = std::random_device{}();
  }
  std::printf("[ seed ] %s: TESSERA_TEST_SEED=%llu\n", what, static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace tessera::ckpt::testing
