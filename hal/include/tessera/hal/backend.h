// A loaded backend library: the dlopen handle, the function table normalised to this build's
// ABI minor, and the init reference it holds. The CTS and the Registry both build on this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/backend_abi.h"
#include "tessera/hal/memory_stats.h"

namespace tessera::hal {

// Converts a backend status code to a Status whose message is "<backend> <operation>: <the
// backend's last_error>". Use right after the failing call, on the same thread.
Status status_from_backend(tsr_status code, const tsr_backend_api_v1& api,
                           std::string_view operation);

// Names of the entries a backend must provide (the [required] marks of backend_abi.h).
const std::vector<std::string_view>& required_entry_names();

class Backend {
 public:
  // Opens a backend library without initialising it. `name_or_path` is a short name ("host",
  // looked up as libtessera-backend-<name>.so in `search_dirs`) or a path containing '/'.
  // Fails with NOT_FOUND (no such library; the message lists the folders searched),
  // UNAVAILABLE (dlopen failed: its message), VERSION_MISMATCH (another ABI major; the message
  // names the library path and the major it speaks), FAILED_PRECONDITION (a required entry is
  // missing or beyond struct_size; the message names the path and the entry).
  static Result<std::shared_ptr<Backend>> open(std::string_view name_or_path,
                                               const std::vector<std::string>& search_dirs);

  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Calls the backend's init once (refcounted on the backend side); `options` as in
  // tsr_init_options. Idempotent on this object. Thread-compatible.
  Status init(const std::string& options = "");
  bool initialized() const { return initialized_; }

  // The table with every entry this build knows; entries the backend lacks (NULL, or beyond its
  // struct_size) are NULL here. Valid while this object lives.
  const tsr_backend_api_v1& api() const { return api_; }

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  // struct_size and abi_minor as the backend reported them, before normalisation.
  size_t reported_struct_size() const { return reported_struct_size_; }
  uint32_t reported_abi_minor() const { return reported_abi_minor_; }

  // Number of usable devices (0 before init); `reason` filled when 0.
  int32_t device_count(std::string* reason = nullptr) const;

  // status_from_backend bound to this backend.
  Status check(tsr_status code, std::string_view operation) const {
    return code == TSR_OK ? Status() : status_from_backend(code, api_, operation);
  }

  // Device bytes held through DeviceBuffer on each of this backend's devices (memory_stats.h);
  // DeviceBuffer keeps them, Device::memory_stats reads them. Thread-safe.
  DeviceMemoryCounters& memory_counters() const { return memory_counters_; }

 private:
  Backend() = default;

  void* handle_ = nullptr;
  tsr_backend_api_v1 api_{};
  std::string name_;
  std::string path_;
  size_t reported_struct_size_ = 0;
  uint32_t reported_abi_minor_ = 0;
  bool initialized_ = false;
  mutable DeviceMemoryCounters memory_counters_;
};

// The folders searched for backend libraries, in order: each entry of TESSERA_BACKEND_PATH
// (colon-separated), then <prefix>/lib{,64}/tessera next to the running program and
// <libdir>/tessera next to the library holding the loader, then the build tree's backend folder for
// a program of this build tree, or the configured install folder for a program found next to
// neither. An installed program never searches the build tree it came from, nor another prefix.
std::vector<std::string> default_search_dirs();

// What default_search_dirs() decides from, so that a test can describe an installed layout.
struct SearchPathInputs {
  std::vector<std::string> env_dirs;  // TESSERA_BACKEND_PATH's folders
  std::string program;                // the running executable
  std::string library;                // the file holding the loader's code (may be `program`)
  std::string build_root;             // the build tree this loader was compiled in
  std::string build_backend_dir;      // <build_root>/lib/tessera
  std::string install_backend_dir;    // <configured prefix>/<libdir>/tessera
};
// The search path for `inputs` (default_search_dirs() with the real ones); no repeats.
std::vector<std::string> backend_search_dirs(const SearchPathInputs& inputs);

// "libtessera-backend-<name>.so"
std::string backend_file_name(std::string_view name);

}  // namespace tessera::hal
