// The bridges between c10d::Store and coll::Store (stores.h).
#include "stores.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>

namespace tessera::torch_c10d {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// coll::Store over a c10d::Store. get() polls check() rather than calling wait(key, timeout):
// a TCPStore client whose wait timed out can read the late reply as the answer to its next
// request, and wait() with a zero timeout means "forever" in c10d (the bootstrap probes with 0).
class C10dStoreAdapter final : public coll::Store {
 public:
  C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  Status set(std::string_view key, std::string_view value) override {
    return guarded("set", key, [&] {
      store_->set(prefix_ + std::string(key), std::vector<uint8_t>(value.begin(), value.end()));
    });
  }

  Result<std::string> get(std::string_view key, milliseconds timeout) override {
    const std::string full = prefix_ + std::string(key);
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(50);
    for (;;) {
      bool present = false;
      Status checked = guarded("check", key, [&] { present = store_->check({full}); });
      if (!checked.ok()) return checked;
      if (present) break;
      if (Clock::now() >= deadline) {
        return deadline_exceeded("torch store: key '" + full + "' not set within " +
                                 std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
    std::vector<uint8_t> bytes;
    Status got = guarded("get", key, [&] { bytes = store_->get(full); });
    if (!got.ok()) return got;
    return std::string(bytes.begin(), bytes.end());
  }

  Result<int64_t> add(std::string_view key, int64_t delta) override {
    int64_t value = 0;
    Status added =
        guarded("add", key, [&] { value = store_->add(prefix_ + std::string(key), delta); });
    if (!added.ok()) return added;
    return value;
  }

 private:
  // No exception may leave a coll::Store call (the bootstrap reads Status only).
  template <typename F>
  Status guarded(const char* call, std::string_view key, F&& body) {
    try {
      body();
      return Status();
    } catch (const std::exception& e) {
      return unavailable("torch store " + std::string(call) + " of key '" + prefix_ +
                         std::string(key) + "': " + e.what());
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  const std::string prefix_;
};

// c10d::Store over Tessera's TCP store (the one `tessera launch` hosts).
class LauncherStore final : public c10d::Store {
 public:
  LauncherStore(std::unique_ptr<coll::Store> store, std::string where, milliseconds timeout)
      : store_(std::move(store)), where_(std::move(where)) {
    timeout_ = timeout;
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    check(store_->set(key, std::string(value.begin(), value.end())), "set", key);
  }

  std::vector<uint8_t> get(const std::string& key) override {
    auto value = store_->get(key, timeout_);
    check(value.status(), "get", key);
    return std::vector<uint8_t>(value->begin(), value->end());
  }

  int64_t add(const std::string& key, int64_t value) override {
    auto sum = store_->add(key, value);
    check(sum.status(), "add", key);
    return *sum;
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const std::string& key : keys) {
      auto value = store_->get(key, milliseconds(0));
      if (value.status().code() == StatusCode::kDeadlineExceeded) return false;
      check(value.status(), "check", key);
    }
    return true;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const std::string& key : keys) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      auto value = store_->get(key, std::max(left, milliseconds(0)));
      check(value.status(), "wait", key);
    }
  }

  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>&,
                                  const std::vector<uint8_t>&) override {
    unsupported("compareSet", key);
  }
  bool deleteKey(const std::string& key) override { unsupported("deleteKey", key); }
  int64_t getNumKeys() override { unsupported("getNumKeys", ""); }

 private:
  void check(const Status& status, const char* call, const std::string& key) const {
    TORCH_CHECK(status.ok(), "tessera launcher store at ", where_, ": ", call, " of key '", key,
                "': ", status.to_string());
  }
  [[noreturn]] void unsupported(const char* call, const std::string& key) const {
    TORCH_CHECK(false, "tessera launcher store at ", where_, ": ", call, " (key '", key,
                "') is not supported (set, get, add, check and wait are)");
  }

  std::unique_ptr<coll::Store> store_;
  const std::string where_;
};

}  // namespace

std::unique_ptr<coll::Store> wrap_c10d_store(c10::intrusive_ptr<c10d::Store> store,
                                             std::string prefix) {
  return std::make_unique<C10dStoreAdapter>(std::move(store), std::move(prefix));
}

c10::intrusive_ptr<c10d::Store> connect_launcher_store(const std::string& host, int port,
                                                       milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  auto store = coll::connect_tcp_store(host, port, timeout);
  TORCH_CHECK(store.ok(), "tessera launcher store at ", where,
              " (MASTER_ADDR:MASTER_PORT): ", store.status().to_string());
  return c10::make_intrusive<LauncherStore>(std::move(*store), where, timeout);
}

}  // namespace tessera::torch_c10d
