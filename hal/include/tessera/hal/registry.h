// The backend registry: which backend libraries exist, which loaded, and why the others did not.
//
// Each backend ends in exactly one state, with a reason for every state but `enabled`:
//   not-found        no libtessera-backend-<name>.so in the search path (e.g. not built here)
//   load-failed      dlopen refused the library (missing dependency, bad ELF)
//   symbol-missing   not a Tessera backend, or a [required] table entry is NULL / absent
//   version-mismatch built against another backend ABI major
//   init-failed      init returned an error (NO_DRIVER when the vendor driver is absent)
//   no-devices       initialised, zero usable devices (the backend's reason)
//   disabled         present but excluded by TESSERA_BACKENDS / the options
//   enabled          initialised with at least one device
// A failure in one backend never stops the others from loading.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::hal {

enum class BackendState {
  kEnabled,
  kNoDevices,
  kInitFailed,
  kVersionMismatch,
  kSymbolMissing,
  kLoadFailed,
  kNotFound,
  kDisabled,
};

// "enabled", "no-devices", "init-failed", ... as in the table above.
std::string_view backend_state_name(BackendState state);

struct BackendRecord {
  std::string name;
  std::string path;  // library path; empty when not found
  BackendState state = BackendState::kNotFound;
  std::string reason;                 // empty only when enabled
  StatusCode code = StatusCode::kOk;  // the status behind `reason`
  int32_t device_count = 0;
  std::string version;               // the backend's version string, when it loaded
  uint32_t abi_minor = 0;            // the ABI minor the backend reported, when it loaded
  std::shared_ptr<Backend> backend;  // set for enabled and no-devices backends
};

struct RegistryOptions {
  // Backends to load, by name, in order. nullopt: TESSERA_BACKENDS when set, else every backend
  // found. A leading "^" on the first name excludes the listed ones instead ("^skeleton").
  std::optional<std::string> selection;
  // Folders searched for backend libraries. Empty: default_search_dirs().
  std::vector<std::string> search_dirs;
  // Per-backend init options ("key=value;..."), by backend name.
  std::map<std::string, std::string> init_options;
};

// Backends every Tessera build knows about; they are listed even when not built, so
// `tessera devices` says why each is missing.
const std::vector<std::string>& known_backend_names();

class Registry {
 public:
  // Discovers and loads backends. Never fails because a backend failed (that backend records
  // why); fails only on a malformed selection (INVALID_ARGUMENT naming TESSERA_BACKENDS).
  static Result<std::unique_ptr<Registry>> create(const RegistryOptions& options = {});

  // Every backend considered, known ones first, then others found in the search path.
  const std::vector<BackendRecord>& records() const { return records_; }
  // The record for `name`, or nullptr.
  const BackendRecord* find(std::string_view name) const;
  const std::vector<std::string>& search_dirs() const { return search_dirs_; }

 private:
  Registry() = default;
  std::vector<BackendRecord> records_;
  std::vector<std::string> search_dirs_;
};

}  // namespace tessera::hal
