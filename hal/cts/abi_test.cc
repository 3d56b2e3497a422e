// ABI negotiation and lifecycle. These tests call the library's own tessera_backend_get_api_v1
// (not the loader's normalised copy) so that they see exactly what the backend exports, and they
// need no device: they run against a backend with zero devices too.
#include <dlfcn.h>

#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "fixture.h"
#include "support.h"
#include "tessera/common/log.h"

namespace tessera::cts {
namespace {

class Abi : public CtsTest {};

struct RequiredEntry {
  const char* name;
  size_t end;  // offset just past the entry
  const void* (*get)(const tsr_backend_api_v1&);
};

// The [required] marks of backend_abi.h, written out here rather than taken from the loader:
// the CTS checks the loader's reading of the header as much as the backend.
#define TSR_CTS_STRING(x) #x
#define TSR_CTS_REQUIRED(field)                                                            \
  RequiredEntry {                                                                          \
    TSR_CTS_STRING(field),                                                                 \
        offsetof(tsr_backend_api_v1, field) + sizeof(tsr_backend_api_v1::field),           \
        [](const tsr_backend_api_v1& t) { return reinterpret_cast<const void*>(t.field); } \
  }
const RequiredEntry kRequired[] = {
    TSR_CTS_REQUIRED(init),
    TSR_CTS_REQUIRED(finalize),
    TSR_CTS_REQUIRED(last_error),
    TSR_CTS_REQUIRED(device_count),
    TSR_CTS_REQUIRED(device_properties),
    TSR_CTS_REQUIRED(device_malloc),
    TSR_CTS_REQUIRED(device_free),
    TSR_CTS_REQUIRED(host_malloc_pinned),
    TSR_CTS_REQUIRED(host_free_pinned),
    TSR_CTS_REQUIRED(memory_info),
    TSR_CTS_REQUIRED(memcpy_async),
    TSR_CTS_REQUIRED(memset_async),
    TSR_CTS_REQUIRED(stream_create),
    TSR_CTS_REQUIRED(stream_destroy),
    TSR_CTS_REQUIRED(stream_synchronize),
    TSR_CTS_REQUIRED(stream_query),
    TSR_CTS_REQUIRED(stream_wait_event),
    TSR_CTS_REQUIRED(event_create),
    TSR_CTS_REQUIRED(event_destroy),
    TSR_CTS_REQUIRED(event_record),
    TSR_CTS_REQUIRED(event_synchronize),
    TSR_CTS_REQUIRED(event_query),
};
#undef TSR_CTS_REQUIRED
#undef TSR_CTS_STRING
constexpr size_t kLastRequiredEnd =
    offsetof(tsr_backend_api_v1, event_query) + sizeof(tsr_backend_api_v1::event_query);

// Backend log lines go to Tessera's logger, as they do through the loader.
void forward_log(void*, tsr_log_level level, const char* message) {
  const auto lvl = static_cast<log::Level>(level < 0 ? 0 : (level > 4 ? 4 : level));
  if (log::enabled(lvl, "hal")) log::write(lvl, "hal", std::string("[cts] ") + message);
}

std::atomic<int> g_poison_log_calls{0};
// Put beyond a truncated host_info's struct_size: a backend must never read, let alone call it.
void poison_log(void*, tsr_log_level, const char*) {
  ++g_poison_log_calls;
}

tsr_get_api_v1_fn library_entry_point() {
  // A second reference to the library the loader already mapped; kept for the whole run.
  static void* handle = dlopen(context().backend->path().c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<tsr_get_api_v1_fn>(dlsym(handle, TSR_BACKEND_ENTRY_POINT));
}

tsr_host_info full_host_info() {
  tsr_host_info host{};
  host.struct_size = sizeof host;
  host.abi_major = TSR_BACKEND_ABI_MAJOR;
  host.abi_minor = TSR_BACKEND_ABI_MINOR;
  host.log = &forward_log;
  host.log_level = static_cast<int32_t>(log::threshold());
  return host;
}

// The checks every table must pass, whatever host_info produced it.
::testing::AssertionResult table_is_valid(const tsr_backend_api_v1* table) {
  if (table == nullptr) return ::testing::AssertionFailure() << "the entry point returned NULL";
  if (table->abi_major != TSR_BACKEND_ABI_MAJOR) {
    return ::testing::AssertionFailure()
           << "abi_major is " << table->abi_major << ", expected " << TSR_BACKEND_ABI_MAJOR;
  }
  if (table->struct_size < kLastRequiredEnd) {
    return ::testing::AssertionFailure()
           << "struct_size " << table->struct_size << " stops before the last required entry "
           << "(event_query ends at " << kLastRequiredEnd << ")";
  }
  if (table->name == nullptr || table->name[0] == '\0') {
    return ::testing::AssertionFailure() << "name is NULL or empty";
  }
  if (table->version == nullptr) return ::testing::AssertionFailure() << "version is NULL";
  for (const auto& entry : kRequired) {
    if (entry.get(*table) == nullptr) {
      return ::testing::AssertionFailure() << "required entry " << entry.name << " is NULL";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_F(Abi, ReturnsAValidTableForTheCurrentHostInfo) {
  auto entry = library_entry_point();
  ASSERT_NE(entry, nullptr) << dlerror();
  const tsr_host_info host = full_host_info();
  const tsr_backend_api_v1* table = entry(&host);
  ASSERT_TRUE(table_is_valid(table));
  EXPECT_STREQ(table->name, context().backend->name().c_str());
  // A backend built against this very header has exactly this header's table.
  if (table->abi_minor == TSR_BACKEND_ABI_MINOR) {
    EXPECT_EQ(table->struct_size, sizeof(tsr_backend_api_v1))
        << "abi_minor " << table->abi_minor << " is this header's, so struct_size should be "
        << "sizeof(tsr_backend_api_v1)";
  }
}

TEST_F(Abi, AcceptsASmallerHostInfoFromAnOlderLoader) {
  auto entry = library_entry_point();
  ASSERT_NE(entry, nullptr) << dlerror();
  // Only struct_size, abi_major and abi_minor fit; the fields beyond hold a function the backend
  // must not pick up (it reads only what fits in struct_size).
  tsr_host_info host = full_host_info();
  host.struct_size = offsetof(tsr_host_info, log);
  host.log = &poison_log;
  host.log_level = TSR_LOG_TRACE;
  g_poison_log_calls = 0;
  const tsr_backend_api_v1* table = entry(&host);
  ASSERT_TRUE(table_is_valid(table));
  // Provoke some work that may log, then restore a normal host_info for the rest of the run.
  const char* reason = nullptr;
  (void)table->device_count(&reason);
  tsr_device_properties properties{};
  properties.struct_size = sizeof properties;
  (void)table->device_properties(-1, &properties);
  const tsr_host_info normal = full_host_info();
  ASSERT_TRUE(table_is_valid(entry(&normal)));
  EXPECT_EQ(g_poison_log_calls.load(), 0)
      << "the backend called a log function that lay beyond host_info.struct_size";
}

TEST_F(Abi, AcceptsALargerHostInfoFromANewerLoader) {
  auto entry = library_entry_point();
  ASSERT_NE(entry, nullptr) << dlerror();
  struct NewerHostInfo {
    tsr_host_info known;
    unsigned char appended[64];  // fields of a future minor, zero as a newer loader sends them
  } host{};
  host.known = full_host_info();
  host.known.struct_size = sizeof host;
  host.known.abi_minor = TSR_BACKEND_ABI_MINOR + 1;
  ASSERT_TRUE(table_is_valid(entry(&host.known)));
  const tsr_host_info normal = full_host_info();
  ASSERT_TRUE(table_is_valid(entry(&normal)));
}

TEST_F(Abi, HasEveryRequiredEntryInsideItsStructSize) {
  auto entry = library_entry_point();
  ASSERT_NE(entry, nullptr) << dlerror();
  const tsr_host_info host = full_host_info();
  const tsr_backend_api_v1* table = entry(&host);
  ASSERT_NE(table, nullptr);
  for (const auto& required : kRequired) {
    EXPECT_LE(required.end, table->struct_size)
        << "required entry " << required.name << " lies beyond struct_size";
    EXPECT_NE(required.get(*table), nullptr) << "required entry " << required.name << " is NULL";
  }
}

TEST_F(Abi, NamesItselfAfterItsLibraryFile) {
  const std::string file = std::filesystem::path(context().backend->path()).filename().string();
  const std::string expected = "libtessera-backend-" + std::string(api().name) + ".so";
  EXPECT_EQ(file, expected) << "the table's name should match the library file name";
}

TEST_F(Abi, ReportsDeviceCountWithoutFailing) {
  const char* reason = nullptr;
  const int32_t with_reason = api().device_count(&reason);
  const int32_t without_reason = api().device_count(nullptr);
  EXPECT_GE(with_reason, 0);
  EXPECT_EQ(with_reason, without_reason);
  if (with_reason == 0) {
    ASSERT_NE(reason, nullptr) << "zero devices and no reason given";
    EXPECT_STRNE(reason, "") << "zero devices and an empty reason";
  }
}

TEST_F(Abi, StartsEveryThreadWithAnEmptyLastError) {
  const char* on_main = api().last_error();
  ASSERT_NE(on_main, nullptr) << "last_error returned NULL";
  std::string on_fresh_thread = "(not run)";
  bool was_null = false;
  std::thread([&] {
    const char* text = api().last_error();
    was_null = text == nullptr;
    if (text != nullptr) on_fresh_thread = text;
  }).join();
  EXPECT_FALSE(was_null) << "last_error returned NULL on a new thread";
  EXPECT_EQ(on_fresh_thread, "") << "a thread that made no call should have no error";
}

TEST_F(Abi, KeepsTheLastErrorOfEachThreadApart) {
  // Thread A fails, thread B fails differently, then A's message must still be A's own.
  std::barrier sync(2);
  std::string a_first, a_after, b_message;
  tsr_status a_status = TSR_OK;
  tsr_status b_status = TSR_OK;
  std::thread a([&] {
    tsr_device_properties properties{};
    properties.struct_size = sizeof properties;
    a_status = api().device_properties(-1, &properties);
    const char* text = api().last_error();
    a_first = text ? text : "(NULL)";
    sync.arrive_and_wait();  // B fails now
    sync.arrive_and_wait();
    text = api().last_error();
    a_after = text ? text : "(NULL)";
  });
  std::thread b([&] {
    sync.arrive_and_wait();
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    b_status = api().memory_info(-7, &free_bytes, &total_bytes);
    const char* text = api().last_error();
    b_message = text ? text : "(NULL)";
    sync.arrive_and_wait();
  });
  a.join();
  b.join();
  EXPECT_NE(a_status, TSR_OK) << "device_properties(-1) succeeded";
  EXPECT_NE(b_status, TSR_OK) << "memory_info(-7) succeeded";
  EXPECT_NE(a_first, "") << "device_properties(-1) failed without a message";
  EXPECT_NE(b_message, "") << "memory_info(-7) failed without a message";
  EXPECT_EQ(a_after, a_first) << "thread B's failure changed thread A's last_error";
}

TEST_F(Abi, CountsInitAndFinalizeReferences) {
  if (!context().init_status.ok()) {
    GTEST_SKIP() << "backend init failed: " << context().init_status.to_string();
  }
  // The run holds one reference already; two more and their release must leave it working.
  tsr_init_options options{};
  options.struct_size = sizeof options;
  options.options = context().options.empty() ? nullptr : context().options.c_str();
  CTS_ASSERT_OK(api().init(&options));
  CTS_ASSERT_OK(api().init(nullptr));  // later inits ignore their options
  api().finalize();
  api().finalize();
  EXPECT_EQ(api().device_count(nullptr), context().device_count)
      << "finalize dropped more than its own reference";
  if (context().device_count > 0) {
    OwnedStream stream;
    CTS_ASSERT_OK(OwnedStream::create(0, &stream));
    CTS_EXPECT_OK(stream.synchronize());
  }
}

TEST_F(Abi, DescribesItsCollectivesSubTableWhenItHasOne) {
  // The collectives sub-table is the one optional part a backend may leave NULL without listing
  // it: most have no vendor collective library, and Tessera's own collectives then take over.
  const tsr_collectives_api_v1* collectives = api().collectives;
  if (collectives == nullptr) return;
  EXPECT_GE(collectives->struct_size, offsetof(tsr_collectives_api_v1, get_unique_id))
      << "collectives->struct_size is too small to hold its header";
  EXPECT_NE(collectives->library, nullptr) << "collectives->library is NULL";
}

}  // namespace
}  // namespace tessera::cts
