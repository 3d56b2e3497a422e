#include "tessera/hal/registry.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "tessera/common/env.h"
#include "tessera/common/log.h"

namespace tessera::hal {
namespace {

BackendState state_for_open_failure(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound: return BackendState::kNotFound;
    case StatusCode::kVersionMismatch: return BackendState::kVersionMismatch;
    case StatusCode::kUnavailable: return BackendState::kLoadFailed;
    default: return BackendState::kSymbolMissing;
  }
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Backend names of libtessera-backend-<name>.so files in `dirs`, in folder order.
std::vector<std::string> discover(const std::vector<std::string>& dirs) {
  static constexpr std::string_view kPrefix = "libtessera-backend-";
  static constexpr std::string_view kSuffix = ".so";
  std::vector<std::string> names;
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::vector<std::string> here;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::string file = entry.path().filename().string();
      if (file.size() > kPrefix.size() + kSuffix.size() && file.starts_with(kPrefix) &&
          file.ends_with(kSuffix)) {
        here.push_back(file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size()));
      }
    }
    std::sort(here.begin(), here.end());
    for (auto& name : here) {
      if (!contains(names, name)) names.push_back(std::move(name));
    }
  }
  return names;
}

}  // namespace

std::string_view backend_state_name(BackendState state) {
  switch (state) {
    case BackendState::kEnabled: return "enabled";
    case BackendState::kNoDevices: return "no-devices";
    case BackendState::kInitFailed: return "init-failed";
    case BackendState::kVersionMismatch: return "version-mismatch";
    case BackendState::kSymbolMissing: return "symbol-missing";
    case BackendState::kLoadFailed: return "load-failed";
    case BackendState::kNotFound: return "not-found";
    case BackendState::kDisabled: return "disabled";
  }
  return "?";
}

const std::vector<std::string>& known_backend_names() {
  static const std::vector<std::string> names = {"host", "cuda", "hip", "level_zero", "skeleton"};
  return names;
}

namespace {

// Which backends RegistryOptions::selection (else TESSERA_BACKENDS) asks for: "a,b" only those,
// "^a,b" all but those, unset all.
struct Selection {
  bool given = false;
  bool exclude = false;
  std::vector<std::string> names;
  std::string source;  // where it came from, for messages
  bool chooses(std::string_view name) const { return !given || (contains(names, name) != exclude); }
};

Result<Selection> parse_selection(const RegistryOptions& options) {
  Selection selection;
  selection.source = "RegistryOptions::selection";
  std::optional<std::string> text_value = options.selection;
  if (!text_value) {
    text_value = env::get("TESSERA_BACKENDS");
    selection.source = "TESSERA_BACKENDS";
  }
  if (!text_value) return selection;
  selection.given = true;
  std::string_view text = *text_value;
  selection.exclude = !text.empty() && text.front() == '^';
  if (selection.exclude) text.remove_prefix(1);
  selection.names = env::split(text, ",");
  for (const auto& name : selection.names) {
    bool valid = std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!valid) {
      return invalid_argument(selection.source + "='" + *text_value + "': '" + name +
                              "' is not a backend name (letters, digits, '_' and '-' only)");
    }
  }
  return selection;
}

// The record of backend `name`: opened from `search_dirs` and initialised with `init_options`,
// or the reason it could not be (a known backend this build did not make says which CMake
// option would).
BackendRecord open_and_init(const std::string& name, const std::vector<std::string>& search_dirs,
                            const std::string& init_options) {
  BackendRecord record;
  record.name = name;
  auto opened = Backend::open(name, search_dirs);
  if (!opened.ok()) {
    record.state = state_for_open_failure(opened.status().code());
    record.code = opened.status().code();
    record.reason = opened.status().message();
    if (record.state == BackendState::kNotFound && contains(known_backend_names(), name) &&
        !contains(env::split(TESSERA_BUILT_BACKENDS, ","), name)) {
      std::string option = name;
      for (char& c : option) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      record.reason = "not built in this Tessera (CMake option TESSERA_BACKEND_" + option +
                      "=ON builds it where its SDK is found)";
    }
    return record;
  }
  std::shared_ptr<Backend> backend = std::move(opened).value();
  record.path = backend->path();
  record.version = backend->api().version ? backend->api().version : "";
  record.abi_minor = backend->reported_abi_minor();
  Status init = backend->init(init_options);
  if (!init.ok()) {
    record.state = BackendState::kInitFailed;
    record.code = init.code();
    record.reason = init.to_string();
    return record;
  }
  record.device_count = backend->device_count(&record.reason);
  record.state = record.device_count > 0 ? BackendState::kEnabled : BackendState::kNoDevices;
  if (record.device_count > 0) record.reason.clear();
  record.backend = std::move(backend);
  return record;
}

}  // namespace

const BackendRecord* Registry::find(std::string_view name) const {
  for (const auto& record : records_) {
    if (record.name == name) return &record;
  }
  return nullptr;
}

Result<std::unique_ptr<Registry>> Registry::create(const RegistryOptions& options) {
  // Every program that uses a device comes through here: the place a malformed TESSERA_LOG or
  // TESSERA_LOG_SUBSYS becomes an error rather than the logger's one-line complaint.
  TSR_RETURN_IF_ERROR(log::check_environment());
  std::unique_ptr<Registry> registry(new Registry());
  registry->search_dirs_ =
      options.search_dirs.empty() ? default_search_dirs() : options.search_dirs;
  TSR_ASSIGN_OR_RETURN(const Selection selection, parse_selection(options));

  std::vector<std::string> names = known_backend_names();
  for (auto& name : discover(registry->search_dirs_)) {
    if (!contains(names, name)) names.push_back(std::move(name));
  }
  // A selected name that is neither known nor found is still listed, as not-found.
  if (!selection.exclude) {
    for (const auto& name : selection.names) {
      if (!contains(names, name)) names.push_back(name);
    }
  }

  for (const auto& name : names) {
    BackendRecord record;
    if (!selection.chooses(name)) {
      record.name = name;
      record.state = BackendState::kDisabled;
      record.reason = "excluded by " + selection.source;
    } else {
      auto it = options.init_options.find(name);
      record = open_and_init(name, registry->search_dirs_,
                             it == options.init_options.end() ? "" : it->second);
    }
    TSR_LOG(kInfo, "hal") << "backend " << name << ": " << backend_state_name(record.state)
                          << (record.reason.empty() ? "" : ": " + record.reason);
    registry->records_.push_back(std::move(record));
  }
  return registry;
}

}  // namespace tessera::hal
