#include "tessera/hal/memory.h"

#include <utility>

#include "tessera/common/log.h"

namespace tessera::hal {

DeviceBuffer::DeviceBuffer(std::shared_ptr<Backend> backend, int32_t device, void* ptr,
                           size_t bytes)
    : backend_(std::move(backend)), device_(device), ptr_(ptr), bytes_(bytes) {
  if (ptr_ != nullptr) backend_->memory_counters().add(device_, bytes_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::move(other.backend_);
    device_ = std::exchange(other.device_, -1);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status DeviceBuffer::release() {
  if (ptr_ == nullptr) return Status();
  Status status = backend_->check(backend_->api().device_free(device_, ptr_), "device_free");
  backend_->memory_counters().remove(device_, bytes_);
  ptr_ = nullptr;
  bytes_ = 0;
  return status;
}

void DeviceBuffer::reset() {
  Status status = release();
  if (!status.ok()) TSR_LOG(kError, "hal") << "freeing a device buffer: " << status.to_string();
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::move(other.backend_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void HostBuffer::reset() {
  if (ptr_ == nullptr) return;
  Status status = backend_->check(backend_->api().host_free_pinned(ptr_), "host_free_pinned");
  if (!status.ok())
    TSR_LOG(kError, "hal") << "freeing a pinned host buffer: " << status.to_string();
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace tessera::hal
