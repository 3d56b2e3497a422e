// Owning handles for device and pinned host memory. Move-only; freeing happens in the destructor
// (failures there are logged, never thrown).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::hal {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Takes ownership of `ptr`, allocated by backend->api().device_malloc on `device`; its bytes
  // count in the backend's memory_counters() until released.
  DeviceBuffer(std::shared_ptr<Backend> backend, int32_t device, void* ptr, size_t bytes);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  int32_t device() const { return device_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  // Frees now; returns the backend's verdict.
  Status release();

 private:
  void reset();
  std::shared_ptr<Backend> backend_;
  int32_t device_ = -1;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(std::shared_ptr<Backend> backend, void* ptr, size_t bytes)
      : backend_(std::move(backend)), ptr_(ptr), bytes_(bytes) {}
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& other) noexcept { *this = std::move(other); }
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(ptr_), bytes_}; }
  template <typename T>
  std::span<T> as() const {
    return {static_cast<T*>(ptr_), bytes_ / sizeof(T)};
  }

 private:
  void reset();
  std::shared_ptr<Backend> backend_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::hal
