#include "fixture.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "context.h"

namespace tessera::cts {
namespace {

struct OptionalEntry {
  std::string_view name;
  size_t offset;
};

#define TSR_CTS_STRING(x) #x
#define TSR_CTS_OPTIONAL(field)                                \
  OptionalEntry {                                              \
    TSR_CTS_STRING(field), offsetof(tsr_backend_api_v1, field) \
  }
// The [optional] marks of backend_abi.h, plus the collectives sub-table.
constexpr OptionalEntry kOptional[] = {
    TSR_CTS_OPTIONAL(host_register),
    TSR_CTS_OPTIONAL(host_unregister),
    TSR_CTS_OPTIONAL(pointer_attributes),
    TSR_CTS_OPTIONAL(memcpy_peer_async),
    TSR_CTS_OPTIONAL(stream_add_callback),
    TSR_CTS_OPTIONAL(event_elapsed_time),
    TSR_CTS_OPTIONAL(device_can_access_peer),
    TSR_CTS_OPTIONAL(device_enable_peer_access),
    TSR_CTS_OPTIONAL(ipc_get_handle),
    TSR_CTS_OPTIONAL(ipc_open_handle),
    TSR_CTS_OPTIONAL(ipc_close_handle),
    TSR_CTS_OPTIONAL(reduce_async),
    TSR_CTS_OPTIONAL(cast_async),
    TSR_CTS_OPTIONAL(gemm_async),
    TSR_CTS_OPTIONAL(collectives),
    TSR_CTS_OPTIONAL(stream_busy_wait),
    TSR_CTS_OPTIONAL(stream_add_callback_with_message),
    TSR_CTS_OPTIONAL(host_signal_create),
    TSR_CTS_OPTIONAL(host_signal_destroy),
    TSR_CTS_OPTIONAL(host_signal_raise),
    TSR_CTS_OPTIONAL(host_signal_query),
    TSR_CTS_OPTIONAL(stream_wait_host_signal),
    TSR_CTS_OPTIONAL(module_load),
    TSR_CTS_OPTIONAL(module_unload),
    TSR_CTS_OPTIONAL(module_get_function),
    TSR_CTS_OPTIONAL(launch),
};
#undef TSR_CTS_OPTIONAL
#undef TSR_CTS_STRING

const OptionalEntry* find_optional(std::string_view name) {
  for (const auto& entry : kOptional) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::map<std::string, std::vector<std::string>>& declared_entries() {
  static std::map<std::string, std::vector<std::string>> entries;
  return entries;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

bool is_optional_entry(std::string_view entry) {
  return find_optional(entry) != nullptr;
}

bool has_entry(std::string_view entry) {
  const OptionalEntry* found = find_optional(entry);
  if (found == nullptr) return false;
  const void* pointer = nullptr;
  std::memcpy(&pointer, reinterpret_cast<const char*>(&api()) + found->offset, sizeof pointer);
  return pointer != nullptr;
}

bool declare_entries(const std::string& full_name, std::vector<std::string> entries) {
  for (const auto& entry : entries) {
    if (!is_optional_entry(entry)) {
      // A typo in the CTS itself: fail loudly before any test runs.
      std::fprintf(stderr, "tessera-cts: test %s declares '%s', which is not an optional entry\n",
                   full_name.c_str(), entry.c_str());
      std::abort();
    }
  }
  auto& list = declared_entries()[full_name];
  list.insert(list.end(), entries.begin(), entries.end());
  return true;
}

const std::vector<std::string>& declared_entries_of(const std::string& full_name) {
  static const std::vector<std::string> kNone;
  auto found = declared_entries().find(full_name);
  return found == declared_entries().end() ? kNone : found->second;
}

std::vector<std::string> null_entries_of(const std::string& full_name) {
  std::vector<std::string> out;
  for (const auto& entry : declared_entries_of(full_name)) {
    if (!has_entry(entry)) out.push_back(entry);
  }
  return out;
}

void register_generated_test(const char* suite, const std::string& name, const char* file, int line,
                             std::vector<std::string> entries, std::function<void()> body) {
  declare_entries(std::string(suite) + "." + name, std::move(entries));
  ::testing::RegisterTest(
      suite, name.c_str(), nullptr, nullptr, file, line,
      [body = std::move(body)]() -> GeneratedTest* { return new GeneratedTest(body); });
}

std::string CtsTest::test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

std::mt19937_64 CtsTest::make_rng() {
  return std::mt19937_64(context().seed ^ fnv1a(test_name()));
}

std::string CtsTest::seed_note() {
  return "seed " + std::to_string(context().seed) +
         " (TESSERA_CTS_SEED=" + std::to_string(context().seed) + " reproduces)";
}

void CtsTest::SetUp() {
  Context& ctx = context();
  const std::string name = test_name();
  const Expectation* expectation = ctx.expectations.find(name);

  const std::vector<std::string> null_entries = null_entries_of(name);

  if (expectation != nullptr && expectation->kind == Expectation::Kind::kUnsupported) {
    ++ctx.unsupported;
    if (!null_entries.empty()) {
      GTEST_SKIP() << "unsupported: " << join(null_entries)
                   << (null_entries.size() > 1 ? " are" : " is") << " NULL; " << cite(*expectation);
    }
    GTEST_SKIP() << "unsupported: " << cite(*expectation);
  }
  if (needs_devices()) {
    if (!ctx.init_status.ok()) {
      GTEST_SKIP() << "backend init failed: " << ctx.init_status.to_string();
    }
    if (ctx.device_count <= 0) GTEST_SKIP() << "no devices: " << ctx.no_device_reason;
  }
  if (!null_entries.empty()) {
    // Fatal in SetUp, so the body never calls through a NULL pointer.
    const std::string where = ctx.expectations.file().empty()
                                  ? std::string("an expectations file (--expectations FILE)")
                                  : ctx.expectations.file();
    GTEST_FAIL() << (null_entries.size() > 1 ? "optional entries " : "optional entry ")
                 << join(null_entries) << (null_entries.size() > 1 ? " are" : " is") << " NULL and "
                 << name
                 << " is not listed as unsupported: a backend states what it leaves out; add "
                 << "'unsupported " << name << " : <reason>' to " << where
                 << " (tessera-cts --write-expectations FILE drafts every such line)";
  }
  if (expectation != nullptr && expectation->kind == Expectation::Kind::kXfail) {
    xfail_ = expectation;
    captured_ = std::make_unique<::testing::TestPartResultArray>();
    reporter_ = std::make_unique<::testing::ScopedFakeTestPartResultReporter>(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, captured_.get());
  }
}

void CtsTest::TearDown() {
  if (reporter_ == nullptr) return;
  reporter_.reset();  // restores the real reporter: what follows is reported normally
  int failures = 0;
  std::string first_failure;
  std::string skip_message;
  for (int i = 0; i < captured_->size(); ++i) {
    const ::testing::TestPartResult& result = captured_->GetTestPartResult(i);
    if (result.skipped()) {
      skip_message = result.message();
    } else if (result.failed()) {
      if (failures++ == 0) {
        first_failure = std::string(result.file_name() ? result.file_name() : "?") + ":" +
                        std::to_string(result.line_number()) + ": " + result.summary();
        for (char& c : first_failure) c = c == '\n' ? ' ' : c;  // one line per verdict
      }
    }
  }
  const Expectation& entry = *xfail_;
  if (failures > 0) {
    ++context().expected_failures;
    std::printf("[    XFAIL ] %s: %d expected failure(s), listed in %s; first: %s\n",
                test_name().c_str(), failures, cite(entry).c_str(), first_failure.c_str());
    std::fflush(stdout);
    RecordProperty("xfail", entry.reason);
    return;
  }
  if (!skip_message.empty()) GTEST_SKIP() << skip_message;
  ADD_FAILURE() << "unexpected pass: " << entry.pattern << " is listed as xfail in " << entry.file
                << ":" << entry.line << " (" << entry.reason << ")";
}

}  // namespace tessera::cts
