// Enumeration and device properties, including the struct_size handshake on the way out.
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Device : public DeviceTest {};

constexpr uint8_t kCanary = 0xA5;

// A properties struct inside a larger buffer of canary bytes, so writes past struct_size show.
struct GuardedProperties {
  explicit GuardedProperties(size_t struct_size) : bytes(sizeof(tsr_device_properties) + 256) {
    std::memset(bytes.data(), kCanary, bytes.size());
    std::memcpy(bytes.data(), &struct_size, sizeof struct_size);
  }
  tsr_device_properties* get() { return reinterpret_cast<tsr_device_properties*>(bytes.data()); }
  // Success when every byte from `from` on is still the canary.
  ::testing::AssertionResult untouched_from(size_t from) const {
    for (size_t i = from; i < bytes.size(); ++i) {
      if (bytes[i] != kCanary) {
        return ::testing::AssertionFailure() << "byte " << i << " was written (struct_size "
                                             << "allowed writes below " << from << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }
  std::vector<uint8_t> bytes;  // operator new aligns it for tsr_device_properties
};

bool nul_terminated(const char* text, size_t capacity) {
  return std::memchr(text, '\0', capacity) != nullptr;
}

// "dddd:bb:dd.f" in lower-case hex.
bool is_pci_bus_id(const char* text) {
  const char* shape = "hhhh:hh:hh.h";
  if (std::strlen(text) != std::strlen(shape)) return false;
  for (size_t i = 0; shape[i] != '\0'; ++i) {
    const char c = text[i];
    if (shape[i] == 'h') {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    } else if (c != shape[i]) {
      return false;
    }
  }
  return true;
}

TEST_F(Device, CountsTheSameDevicesAsTheLoaderSaw) {
  EXPECT_EQ(api().device_count(nullptr), context().device_count);
  EXPECT_GT(context().device_count, 0);
}

TEST_F(Device, FillsThePropertiesOfEveryDevice) {
  for (int32_t d = 0; d < context().device_count; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    tsr_device_properties p{};
    p.struct_size = sizeof p;
    CTS_ASSERT_OK(api().device_properties(d, &p));
    ASSERT_TRUE(nul_terminated(p.name, sizeof p.name)) << "name is not NUL-terminated";
    ASSERT_TRUE(nul_terminated(p.vendor, sizeof p.vendor)) << "vendor is not NUL-terminated";
    ASSERT_TRUE(nul_terminated(p.pci_bus_id, sizeof p.pci_bus_id))
        << "pci_bus_id is not NUL-terminated";
    EXPECT_STRNE(p.name, "") << "name is empty";
    EXPECT_STRNE(p.vendor, "") << "vendor is empty";
    if (p.pci_bus_id[0] != '\0') {
      EXPECT_TRUE(is_pci_bus_id(p.pci_bus_id))
          << "pci_bus_id '" << p.pci_bus_id << "' is not dddd:bb:dd.f in lower-case hex";
    }
    EXPECT_GT(p.total_memory, 0u);
    EXPECT_GE(p.compute_units, 0);
    EXPECT_GE(p.numa_node, -1);
    EXPECT_GE(p.peak_flops_f64, 0.0);
    EXPECT_GE(p.peak_flops_f32, 0.0);
    EXPECT_GE(p.peak_flops_f16, 0.0);
    EXPECT_GE(p.peak_flops_bf16, 0.0);
    EXPECT_GE(p.memory_bandwidth, 0.0);
  }
}

TEST_F(Device, WritesOnlyTheFieldsThatFitInAnOlderCallersStruct) {
  // An older caller's struct ends before total_memory: name, vendor, uuid, pci_bus_id fit.
  const size_t truncated = offsetof(tsr_device_properties, total_memory);
  GuardedProperties guarded(truncated);
  CTS_ASSERT_OK(api().device_properties(0, guarded.get()));
  EXPECT_TRUE(guarded.untouched_from(truncated));
  EXPECT_STRNE(guarded.get()->name, "") << "the fields that fit were not filled";
}

TEST_F(Device, FillsTheKnownFieldsOfANewerCallersLargerStruct) {
  struct Newer {
    tsr_device_properties known;
    unsigned char appended[64];
  } newer{};
  newer.known.struct_size = sizeof newer;
  CTS_ASSERT_OK(api().device_properties(0, &newer.known));
  EXPECT_STRNE(newer.known.name, "");
  EXPECT_GT(newer.known.total_memory, 0u);
}

TEST_F(Device, RejectsAnInvalidDeviceIndexWithoutWritingTheOutput) {
  const int32_t count = context().device_count;
  for (int32_t bad : {-1, count, count + 1, 1 << 30}) {
    SCOPED_TRACE("device " + std::to_string(bad));
    GuardedProperties guarded(sizeof(tsr_device_properties));
    CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_properties(bad, guarded.get()));
    EXPECT_TRUE(guarded.untouched_from(sizeof(size_t))) << "outputs are written only on TSR_OK";
  }
}

TEST_F(Device, RejectsAnInvalidDeviceIndexInEveryPerDeviceCall) {
  const int32_t bad = context().device_count;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  void* ptr = nullptr;
  tsr_stream stream = nullptr;
  tsr_event event = nullptr;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().memory_info(bad, &free_bytes, &total_bytes));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_malloc(bad, 256, &ptr));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().stream_create(bad, 0, &stream));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().event_create(bad, 0, &event));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().memory_info(-1, &free_bytes, &total_bytes));
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(stream, nullptr);
  EXPECT_EQ(event, nullptr);
}

TEST_F(Device, AdvertisesOnlyCapabilitiesItsTableProvides) {
  struct Rule {
    uint64_t flag;
    const char* flag_name;
    std::vector<const char*> entries;
  };
  const Rule rules[] = {
      {TSR_CAP_HOST_REGISTER, "TSR_CAP_HOST_REGISTER", {"host_register", "host_unregister"}},
      {TSR_CAP_PEER_ACCESS,
       "TSR_CAP_PEER_ACCESS",
       {"device_can_access_peer", "device_enable_peer_access"}},
      {TSR_CAP_IPC, "TSR_CAP_IPC", {"ipc_get_handle", "ipc_open_handle", "ipc_close_handle"}},
      {TSR_CAP_EVENT_TIMING, "TSR_CAP_EVENT_TIMING", {"event_elapsed_time"}},
      {TSR_CAP_GEMM, "TSR_CAP_GEMM", {"gemm_async"}},
      {TSR_CAP_NATIVE_COLLECTIVES, "TSR_CAP_NATIVE_COLLECTIVES", {"collectives"}},
  };
  for (int32_t d = 0; d < context().device_count; ++d) {
    tsr_device_properties p{};
    p.struct_size = sizeof p;
    CTS_ASSERT_OK(api().device_properties(d, &p));
    for (const auto& rule : rules) {
      if ((p.capabilities & rule.flag) == 0) continue;
      for (const char* entry : rule.entries) {
        EXPECT_TRUE(has_entry(entry))
            << "device " << d << " advertises " << rule.flag_name << " but " << entry << " is NULL";
      }
    }
  }
}

}  // namespace
}  // namespace tessera::cts
