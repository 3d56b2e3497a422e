// Loading one backend library and normalising its table to this build's ABI minor.
#include "tessera/hal/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "tessera/common/env.h"
#include "tessera/common/log.h"

namespace tessera::hal {
namespace {

// One row per [required] entry of backend_abi.h: its name and where it ends in the table, so a
// table whose struct_size stops short of it is refused with the entry named.
struct RequiredEntry {
  std::string_view name;
  size_t end;
  bool (*present)(const tsr_backend_api_v1&);
};

#define TSR_REQUIRED(field)                                                          \
  RequiredEntry {                                                                    \
#field, offsetof(tsr_backend_api_v1, field) + sizeof(tsr_backend_api_v1::field), \
        [](const tsr_backend_api_v1& api) { return api.field != nullptr; }           \
  }

const RequiredEntry kRequired[] = {
    TSR_REQUIRED(init),          TSR_REQUIRED(finalize),           TSR_REQUIRED(last_error),
    TSR_REQUIRED(device_count),  TSR_REQUIRED(device_properties),  TSR_REQUIRED(device_malloc),
    TSR_REQUIRED(device_free),   TSR_REQUIRED(host_malloc_pinned), TSR_REQUIRED(host_free_pinned),
    TSR_REQUIRED(memory_info),   TSR_REQUIRED(memcpy_async),       TSR_REQUIRED(memset_async),
    TSR_REQUIRED(stream_create), TSR_REQUIRED(stream_destroy),     TSR_REQUIRED(stream_synchronize),
    TSR_REQUIRED(stream_query),  TSR_REQUIRED(stream_wait_event),  TSR_REQUIRED(event_create),
    TSR_REQUIRED(event_destroy), TSR_REQUIRED(event_record),       TSR_REQUIRED(event_synchronize),
    TSR_REQUIRED(event_query),
};
#undef TSR_REQUIRED

// Routes backend log lines into the project logger under the subsystem "hal".
void log_from_backend(void* user_data, tsr_log_level level, const char* message) {
  auto* name = static_cast<const std::string*>(user_data);
  auto lvl = static_cast<log::Level>(level < 0 ? 0 : (level > 4 ? 4 : level));
  if (!log::enabled(lvl, "hal")) return;
  log::write(lvl, "hal", "[" + *name + "] " + (message ? message : ""));
}

std::string dlerror_text() {
  const char* err = dlerror();
  return err ? err : "unknown dlopen error";
}

// Another major exports tessera_backend_get_api_v<N>; name it instead of "symbol missing".
std::string other_major_symbol(void* handle) {
  for (int major = 2; major <= 16; ++major) {
    std::string symbol = "tessera_backend_get_api_v" + std::to_string(major);
    if (dlsym(handle, symbol.c_str()) != nullptr) return symbol;
  }
  return {};
}

// Kernel modules (minor 3) are one feature in four entries: a partial set cannot be used, so the
// loader treats it as none and says so once, when the library is opened.
void drop_partial_module_set(tsr_backend_api_v1& api, const std::string& path) {
  const bool all = api.module_load && api.module_unload && api.module_get_function && api.launch;
  if (all) return;
  if (api.module_load || api.module_unload || api.module_get_function || api.launch) {
    TSR_LOG(kWarn, "hal") << path << ": provides only some of the four kernel-module entries "
                          << "(module_load, module_unload, module_get_function, launch); kernel "
                          << "modules are treated as unsupported";
  }
  api.module_load = nullptr;
  api.module_unload = nullptr;
  api.module_get_function = nullptr;
  api.launch = nullptr;
}

}  // namespace

const std::vector<std::string_view>& required_entry_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& entry : kRequired) out.push_back(entry.name);
    return out;
  }();
  return names;
}

Status status_from_backend(tsr_status code, const tsr_backend_api_v1& api,
                           std::string_view operation) {
  if (code == TSR_OK) return Status();
  std::string message = std::string(api.name ? api.name : "backend") + " " + std::string(operation);
  const char* detail = api.last_error ? api.last_error() : nullptr;
  if (detail != nullptr && detail[0] != '\0') {
    message += ": ";
    message += detail;
  }
  return Status(static_cast<StatusCode>(code), std::move(message));
}

std::string backend_file_name(std::string_view name) {
  return "libtessera-backend-" + std::string(name) + ".so";
}

namespace {

// Whether `file` (a program or library) is one of the build tree's outputs: build/bin/* or
// build/lib/*. Only the output folders count, so an install into build/install is an install.
bool is_build_output(const std::string& file, const std::string& build_root) {
  if (file.empty() || build_root.empty()) return false;
  std::error_code ec;
  const auto parent = std::filesystem::weakly_canonical(file, ec).parent_path();
  const auto root = std::filesystem::weakly_canonical(build_root, ec);
  if (parent == root / "bin" || parent == root / "lib") return true;
  // The Python package's compiled modules (<build>/python/tessera[/torch]) are build outputs too.
  const auto rel = parent.lexically_relative(root / "python");
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

std::vector<std::string> backend_search_dirs(const SearchPathInputs& inputs) {
  std::vector<std::string> dirs = inputs.env_dirs;
  std::error_code ec;
  // Relative to the running program: <prefix>/bin/exe -> <prefix>/lib/tessera, so a relocated
  // install finds its backends.
  bool found_relative = false;
  if (!inputs.program.empty()) {
    auto prefix = std::filesystem::path(inputs.program).parent_path().parent_path();
    for (const char* libdir : {"lib/tessera", "lib64/tessera"}) {
      auto dir = prefix / libdir;
      if (std::filesystem::is_directory(dir, ec)) {
        dirs.push_back(dir.string());
        found_relative = true;
      }
    }
  }
  // Relative to the library holding this code: <libdir>/libtessera_runtime.so -> <libdir>/tessera,
  // so a program linked against a relocated install (not under its bin/) finds the backends too.
  if (!inputs.library.empty()) {
    auto dir = std::filesystem::path(inputs.library).parent_path() / "tessera";
    if (std::filesystem::is_directory(dir, ec)) {
      dirs.push_back(dir.string());
      found_relative = true;
    }
  }
  // The build tree only for its own programs, and the configured prefix only for a program that
  // is next to no backend folder: an installed tool must not pick up a stale backend from the
  // tree it was built in or from another prefix.
  if (is_build_output(inputs.program, inputs.build_root) ||
      is_build_output(inputs.library, inputs.build_root)) {
    dirs.push_back(inputs.build_backend_dir);
  } else if (!found_relative) {
    dirs.push_back(inputs.install_backend_dir);
  }
  // Drop repeats, keeping the first (highest-priority) occurrence.
  std::vector<std::string> unique;
  for (auto& dir : dirs) {
    bool seen = false;
    for (auto& u : unique) seen = seen || u == dir;
    if (!seen) unique.push_back(dir);
  }
  return unique;
}

std::vector<std::string> default_search_dirs() {
  SearchPathInputs inputs;
  if (auto path = env::get("TESSERA_BACKEND_PATH")) inputs.env_dirs = env::split(*path, ":");
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) inputs.program = exe.string();
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&default_search_dirs), &self) != 0 && self.dli_fname) {
    inputs.library = self.dli_fname;
  }
  inputs.build_root = TESSERA_BUILD_ROOT;
  inputs.build_backend_dir = TESSERA_BUILD_BACKEND_DIR;
  inputs.install_backend_dir = TESSERA_INSTALL_BACKEND_DIR;
  return backend_search_dirs(inputs);
}

namespace {

// Backend::open's first phase: the library's path, from a path (containing '/') or a short name
// looked up in `search_dirs`. NOT_FOUND lists the folders searched.
Result<std::string> locate_library(std::string_view name_or_path,
                                   const std::vector<std::string>& search_dirs) {
  if (name_or_path.find('/') != std::string_view::npos) {
    std::string path(name_or_path);
    if (!std::filesystem::exists(path)) {
      return not_found("backend library '" + path + "' does not exist");
    }
    return path;
  }
  const std::string file = backend_file_name(name_or_path);
  std::string searched;
  for (const auto& dir : search_dirs) {
    auto candidate = std::filesystem::path(dir) / file;
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
    searched += (searched.empty() ? "" : ":") + dir;
  }
  return not_found("backend '" + std::string(name_or_path) + "': " + file + " not found in " +
                   (searched.empty() ? "(no folders)" : searched) +
                   " (TESSERA_BACKEND_PATH adds folders)");
}

// *entry: the entry point of this ABI major; VERSION_MISMATCH when the library speaks another
// one. (An out parameter: a Result of a function pointer trips -Wshadow in Result.)
Status find_entry_point(void* handle, const std::string& path, tsr_get_api_v1_fn* entry) {
  *entry = reinterpret_cast<tsr_get_api_v1_fn>(dlsym(handle, TSR_BACKEND_ENTRY_POINT));
  if (*entry != nullptr) return Status();
  std::string other = other_major_symbol(handle);
  if (!other.empty()) {
    return Status(StatusCode::kVersionMismatch,
                  path + " exports " + other + " but this Tessera speaks backend ABI major " +
                      std::to_string(TSR_BACKEND_ABI_MAJOR) + " (" + TSR_BACKEND_ENTRY_POINT + ")");
  }
  return failed_precondition(path + " is not a Tessera backend: symbol " + TSR_BACKEND_ENTRY_POINT +
                             " missing");
}

// The name the backend's log lines carry ("tessera-backend-host"). The backend keeps the log user
// data for as long as it stays loaded (forever: see ~Backend), so each library's name lives here
// once, however many times it is opened.
const std::string* interned_log_name(const std::string& path) {
  static std::mutex names_mutex;
  static std::vector<std::unique_ptr<std::string>> log_names;
  std::string name = std::filesystem::path(path).stem().string().substr(std::strlen("lib"));
  std::lock_guard<std::mutex> lock(names_mutex);
  for (const auto& known : log_names) {
    if (*known == name) return known.get();
  }
  log_names.push_back(std::make_unique<std::string>(std::move(name)));
  return log_names.back().get();
}

// What the loader tells the backend about itself: its ABI and where the backend logs.
tsr_host_info host_info(const std::string* log_name) {
  tsr_host_info host{};
  host.struct_size = sizeof(host);
  host.abi_major = TSR_BACKEND_ABI_MAJOR;
  host.abi_minor = TSR_BACKEND_ABI_MINOR;
  host.log = &log_from_backend;
  host.log_user_data = const_cast<std::string*>(log_name);
  host.log_level = static_cast<int32_t>(log::threshold());
  return host;
}

// The table the entry point returned: present, of this major, at least as large as its header.
Status check_table_header(const tsr_backend_api_v1* table, const std::string& path) {
  if (table == nullptr) {
    return failed_precondition(path + ": " + TSR_BACKEND_ENTRY_POINT + " returned no table");
  }
  if (table->abi_major != TSR_BACKEND_ABI_MAJOR) {
    return Status(StatusCode::kVersionMismatch,
                  path + " was built for backend ABI major " + std::to_string(table->abi_major) +
                      ", this Tessera speaks major " + std::to_string(TSR_BACKEND_ABI_MAJOR));
  }
  constexpr size_t kHeaderEnd = offsetof(tsr_backend_api_v1, version) + sizeof(const char*);
  if (table->struct_size < kHeaderEnd) {
    return failed_precondition(path + ": table struct_size " + std::to_string(table->struct_size) +
                               " is smaller than its header (" + std::to_string(kHeaderEnd) +
                               " bytes)");
  }
  return Status();
}

// Every [required] entry within the backend's struct_size and not NULL; the first missing one
// named.
Status check_required_entries(const tsr_backend_api_v1& api, size_t struct_size,
                              const std::string& path) {
  for (const auto& required : kRequired) {
    if (struct_size < required.end || !required.present(api)) {
      return failed_precondition(path + ": required entry '" + std::string(required.name) +
                                 "' is " +
                                 (struct_size < required.end ? "beyond struct_size" : "NULL"));
    }
  }
  return Status();
}

// A feature made of several entries is usable only whole: a backend providing some of them is
// treated as providing none (said once, when the library is opened), so callers test one entry.
template <typename... Entry>
void keep_whole_feature(tsr_backend_api_v1& api, const std::string& path, const char* feature,
                        Entry tsr_backend_api_v1::*... entries) {
  const size_t present = (size_t(api.*entries != nullptr) + ...);
  if (present == sizeof...(entries)) return;
  if (present > 0) {
    TSR_LOG(kWarn, "hal") << path << ": provides only some of the " << sizeof...(entries)
                          << " entries of " << feature << "; " << feature
                          << " are treated as unsupported";
  }
  ((api.*entries = nullptr), ...);
}

}  // namespace

Result<std::shared_ptr<Backend>> Backend::open(std::string_view name_or_path,
                                               const std::vector<std::string>& search_dirs) {
  TSR_ASSIGN_OR_RETURN(const std::string path, locate_library(name_or_path, search_dirs));
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    return unavailable("cannot load backend library " + path + ": " + dlerror_text());
  }
  std::shared_ptr<Backend> backend(new Backend());
  backend->handle_ = handle;  // closed by ~Backend on every path below
  backend->path_ = path;

  tsr_get_api_v1_fn entry = nullptr;
  TSR_RETURN_IF_ERROR(find_entry_point(handle, path, &entry));
  const std::string* log_name = interned_log_name(path);
  const tsr_host_info host = host_info(log_name);
  const tsr_backend_api_v1* table = entry(&host);
  TSR_RETURN_IF_ERROR(check_table_header(table, path));
  // Copy what the backend has; what it lacks (an older minor) stays zero, i.e. absent.
  std::memcpy(&backend->api_, table, std::min(table->struct_size, sizeof(tsr_backend_api_v1)));
  backend->api_.struct_size = sizeof(tsr_backend_api_v1);
  backend->reported_struct_size_ = table->struct_size;
  backend->reported_abi_minor_ = table->abi_minor;
  TSR_RETURN_IF_ERROR(check_required_entries(backend->api_, table->struct_size, path));
  auto& api = backend->api_;
  keep_whole_feature(api, path, "host signals", &tsr_backend_api_v1::host_signal_create,
                     &tsr_backend_api_v1::host_signal_destroy,
                     &tsr_backend_api_v1::host_signal_raise, &tsr_backend_api_v1::host_signal_query,
                     &tsr_backend_api_v1::stream_wait_host_signal);
  drop_partial_module_set(api, path);
  backend->name_ = (table->name && table->name[0]) ? table->name : *log_name;
  TSR_LOG(kDebug, "hal") << "opened backend " << backend->name_ << " from " << path << " (ABI "
                         << table->abi_major << "." << table->abi_minor << ", table "
                         << table->struct_size << " bytes)";
  return backend;
}

Backend::~Backend() {
  if (initialized_) api_.finalize();
  // Backends may own threads and atexit handlers; unloading them while those live is unsafe, so
  // the library stays mapped (as CUDA and NCCL plugins do). The handle's reference is kept.
}

Status Backend::init(const std::string& options) {
  if (initialized_) return Status();
  tsr_init_options init_options{};
  init_options.struct_size = sizeof(init_options);
  init_options.options = options.empty() ? nullptr : options.c_str();
  TSR_RETURN_IF_ERROR(check(api_.init(&init_options), "init"));
  initialized_ = true;
  return Status();
}

int32_t Backend::device_count(std::string* reason) const {
  if (!initialized_) {
    if (reason) *reason = "backend not initialised";
    return 0;
  }
  const char* why = nullptr;
  int32_t count = api_.device_count(&why);
  if (count <= 0 && reason) *reason = why ? why : "no devices (the backend gave no reason)";
  return count < 0 ? 0 : count;
}

}  // namespace tessera::hal
