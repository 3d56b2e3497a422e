// Opaque handles for streams, events, host signals, modules and kernel functions. A handle is not a
// pointer but a 64-bit id that is never reused in the life of the process, with a tag in its low
// bits: a destroyed handle, a handle of the wrong kind (an event passed as a stream) or a forged
// value is always detected and reported as TSR_INVALID_ARGUMENT instead of touching freed memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace tessera::host {

inline constexpr uint64_t kStreamTag = 0x5;
inline constexpr uint64_t kEventTag = 0xE;
inline constexpr uint64_t kHostSignalTag = 0x9;
inline constexpr uint64_t kModuleTag = 0xA;  // 0xC is the CCL's communicators (ccl.cc)
inline constexpr uint64_t kFunctionTag = 0xF;
inline constexpr unsigned kTagBits = 4;

// Process-wide, so ids stay unique across finalize/init cycles.
inline uint64_t next_handle_serial() {
  static std::atomic<uint64_t> serial{1};
  return serial.fetch_add(1, std::memory_order_relaxed);
}

// Maps live handle ids to their objects. All members are thread-safe. Objects are shared_ptr so a
// call that looked one up keeps it alive while another thread destroys the handle.
template <typename T>
class HandleTable {
 public:
  explicit HandleTable(uint64_t tag) : tag_(tag) {}

  // Registers `object`; returns its new id (never 0).
  uint64_t insert(std::shared_ptr<T> object) {
    uint64_t id = (next_handle_serial() << kTagBits) | tag_;
    std::unique_lock lock(mutex_);
    objects_.emplace(id, std::move(object));
    return id;
  }

  // The live object for `id`, or null when `id` is unknown, destroyed or of another kind.
  std::shared_ptr<T> find(uint64_t id) const {
    if ((id & ((1u << kTagBits) - 1)) != tag_) return nullptr;
    std::shared_lock lock(mutex_);
    auto it = objects_.find(id);
    return it == objects_.end() ? nullptr : it->second;
  }

  // Unregisters `id` and returns its object (null when it was not live).
  std::shared_ptr<T> remove(uint64_t id) {
    std::unique_lock lock(mutex_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

  // A copy of every live object, for operations over all of them (drain, finalize).
  std::vector<std::shared_ptr<T>> snapshot() const {
    std::shared_lock lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(objects_.size());
    for (const auto& [id, object] : objects_) out.push_back(object);
    return out;
  }

  // Unregisters everything and returns the objects.
  std::vector<std::shared_ptr<T>> clear() {
    std::unique_lock lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(objects_.size());
    for (auto& [id, object] : objects_) out.push_back(std::move(object));
    objects_.clear();
    return out;
  }

 private:
  const uint64_t tag_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<T>> objects_;
};

}  // namespace tessera::host
