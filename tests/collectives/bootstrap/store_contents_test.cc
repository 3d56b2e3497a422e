// What communicator creation publishes in the bootstrap store, which anyone who reaches the store
// can read: identifiers only, never an address of this process (that would undo ASLR) nor the
// kernel's boot id.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "internal.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"

namespace tessera::coll {
namespace {

// A store that keeps a copy of every value set through it.
class RecordingStore final : public Store {
 public:
  RecordingStore(std::unique_ptr<Store> inner, std::vector<std::string>* values)
      : inner_(std::move(inner)), values_(values) {}
  Status set(std::string_view key, std::string_view value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_->emplace_back(value);
    return inner_->set(key, value);
  }
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }
  Result<int64_t> add(std::string_view key, int64_t delta) override {
    return inner_->add(key, delta);
  }

 private:
  std::unique_ptr<Store> inner_;
  std::vector<std::string>* values_;
  std::mutex mutex_;
};

struct Range {
  uint64_t start, end;
};

std::vector<Range> mapped_ranges() {
  std::vector<Range> out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    Range r{};
    char dash = 0;
    f >> std::hex >> r.start >> dash >> r.end;
    if (f) out.push_back(r);
  }
  return out;
}

// Every run of decimal digits in `text` that reads as a number of 2^32 or more (user-space
// addresses of a PIE process or a shared library are above that).
std::vector<uint64_t> big_numbers(const std::string& text) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    const std::string digits = text.substr(i, j - i);
    if (digits.size() <= 20) {
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
      if (v >= (uint64_t{1} << 32)) out.push_back(v);
    }
    i = j;
  }
  return out;
}

TEST(StoreContents, CommunicatorCreationPublishesNoAddressNorBootId) {
  unsetenv("TESSERA_HOST_ID");
  std::vector<std::string> values;
  LaunchInfo info;
  auto store = std::make_unique<RecordingStore>(detail::make_memory_store(), &values);
  auto comm = Communicator::create(Bootstrap::from_parts(info, std::move(store)));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  ASSERT_FALSE(values.empty()) << "creation published nothing: this test checks nothing";
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  const std::vector<Range> ranges = mapped_ranges();
  for (const std::string& value : values) {
    if (!boot.empty()) {
      EXPECT_EQ(value.find(boot), std::string::npos) << value;
    }
    for (uint64_t n : big_numbers(value)) {
      for (const Range& r : ranges) {
        EXPECT_FALSE(n >= r.start && n < r.end)
            << "'" << value << "' holds " << n << ", an address mapped in this process";
      }
    }
  }
}

}  // namespace
}  // namespace tessera::coll
