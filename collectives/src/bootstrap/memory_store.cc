// The in-process store: a map and a condition variable. Used for a single rank and in tests.
#include <condition_variable>
#include <map>
#include <mutex>

#include "internal.h"

namespace tessera::coll::detail {
namespace {

class MemoryStore final : public Store {
 public:
  Status set(std::string_view key, std::string_view value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[std::string(key)] = std::string(value);
    }
    cv_.notify_all();
    return {};
  }

  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto found = [&] { return data_.find(key) != data_.end(); };
    if (!cv_.wait_for(lock, timeout, found)) {
      return deadline_exceeded("in-process store: key '" + std::string(key) + "' not set within " +
                               std::to_string(timeout.count()) + " ms");
    }
    return data_.find(key)->second;
  }

  Result<int64_t> add(std::string_view key, int64_t delta) override {
    int64_t updated = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::string& value = data_[std::string(key)];
      int64_t current = 0;
      if (!value.empty()) {
        try {
          size_t used = 0;
          current = std::stoll(value, &used);
          if (used != value.size()) throw std::invalid_argument("trailing");
        } catch (const std::exception&) {
          return failed_precondition("in-process store: add '" + std::string(key) +
                                     "': the value is not an integer");
        }
      }
      updated = current + delta;
      value = std::to_string(updated);
    }
    cv_.notify_all();
    return updated;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> data_;
};

}  // namespace

std::unique_ptr<Store> make_memory_store() {
  return std::make_unique<MemoryStore>();
}

}  // namespace tessera::coll::detail
