#include "state.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "errors.h"

namespace tessera::host {
namespace {

std::mutex g_lifecycle_mutex;  // serialises init and finalize
int g_references = 0;          // guarded by g_lifecycle_mutex
// Read lock-free by every entry; written only under g_lifecycle_mutex.
std::atomic<Backend*> g_backend{nullptr};

}  // namespace

Backend* current_backend() {
  return g_backend.load(std::memory_order_acquire);
}

tsr_status require_backend(const char* operation, Backend** out) {
  Backend* backend = current_backend();
  if (backend == nullptr) {
    return fail(TSR_FAILED_PRECONDITION, "%s: host backend not initialised (call init first)",
                operation);
  }
  *out = backend;
  return TSR_OK;
}

tsr_status lookup_device(Backend& backend, const char* operation, int32_t index, Device** out) {
  if (index < 0 || size_t(index) >= backend.devices.size()) {
    return fail(TSR_INVALID_ARGUMENT, "%s: device %d does not exist (the host backend has %zu)",
                operation, index, backend.devices.size());
  }
  *out = backend.devices[size_t(index)].get();
  return TSR_OK;
}

void copy_prefix(void* out, const void* full, size_t full_size) {
  size_t wanted;
  std::memcpy(&wanted, out, sizeof wanted);
  size_t bytes = std::min(wanted, full_size);
  if (bytes > sizeof(size_t)) {
    std::memcpy(static_cast<char*>(out) + sizeof(size_t),
                static_cast<const char*>(full) + sizeof(size_t), bytes - sizeof(size_t));
  }
  // Bytes beyond full_size (fields of a newer minor) are left as the caller set them: zeroing
  // them would write out->struct_size bytes, and a caller that forgot to set struct_size would
  // have its stack overwritten. Callers zero-initialise their structs, as the examples do.
}

tsr_status backend_init(const tsr_init_options* options) {
  return guarded("init", [&] {
    std::lock_guard lock(g_lifecycle_mutex);
    if (g_references > 0) {
      ++g_references;  // only the first init reads options
      return TSR_OK;
    }
    const char* option_string = nullptr;
    constexpr size_t kOptionsEnd = offsetof(tsr_init_options, options) + sizeof(const char*);
    if (options != nullptr && options->struct_size >= kOptionsEnd) option_string = options->options;

    auto backend = std::make_unique<Backend>();
    if (tsr_status s = load_config(option_string, &backend->config); s != TSR_OK) return s;
    if (backend->config.callback_threads == 1) {
      backend->callback_thread = std::make_unique<CallbackThread>();
      log(TSR_LOG_INFO,
          "host backend: every host callback runs on one shared thread "
          "(callback_threads=1)");
    }
    for (int32_t i = 0; i < backend->config.devices; ++i) {
      backend->devices.push_back(std::make_unique<Device>(i, backend->config.memory_per_device,
                                                          backend->config.memory_source,
                                                          backend->config.discrete));
    }
    log(TSR_LOG_INFO, "host backend: %d %sdevice(s), %s each (%s)", backend->config.devices,
        backend->config.discrete ? "discrete " : "",
        format_bytes(backend->config.memory_per_device).c_str(), backend->config.memory_source);
    g_backend.store(backend.release(), std::memory_order_release);
    g_references = 1;
    return TSR_OK;
  });
}

void backend_finalize() {
  std::lock_guard lock(g_lifecycle_mutex);
  if (g_references == 0) return;  // unbalanced finalize: nothing to drop
  if (g_references > 1) {
    --g_references;
    return;
  }
  if (current_worker_stream() != nullptr) {
    // Tearing down from a host callback would join the calling thread; refuse and keep running.
    log(TSR_LOG_ERROR, "host backend: last finalize called from a stream callback; ignored");
    return;
  }
  g_references = 0;
  Backend* backend = g_backend.exchange(nullptr, std::memory_order_acq_rel);
  shutdown_streams(*backend);  // runs queued work to completion before memory goes away
  backend->events.clear();
  backend->host_signals.clear();
  backend->functions.clear();  // the streams are joined: no launch holds a module any more
  backend->modules.clear();
  backend->callback_thread.reset();  // idle: every stream that used it is joined
  for (const Allocation& allocation : backend->memory.take_all()) {
    release_allocation(*backend, allocation);
  }
  delete backend;
}

}  // namespace tessera::host
