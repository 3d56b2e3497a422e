#include "ipc_child.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "support.h"
#include "tessera/hal/backend.h"

namespace tessera::cts {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera-cts ipc child: %s\n", message.c_str());
  return 3;
}

std::string last_error_of(const tsr_backend_api_v1& table) {
  const char* text = table.last_error();
  return text != nullptr ? text : "(last_error returned NULL)";
}

}  // namespace

std::string hex_encode(const tsr_ipc_handle& handle) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : handle.bytes) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

std::optional<tsr_ipc_handle> hex_decode(const std::string& text) {
  if (text.size() != 2 * TSR_IPC_HANDLE_BYTES) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  tsr_ipc_handle handle{};
  for (size_t i = 0; i < TSR_IPC_HANDLE_BYTES; ++i) {
    const int high = digit(text[2 * i]);
    const int low = digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    handle.bytes[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return handle;
}

int run_ipc_child(const std::string& backend_arg, const std::string& options,
                  const std::string& hex_handle) {
  const auto handle = hex_decode(hex_handle);
  if (!handle) return fail("malformed handle '" + hex_handle + "'");
  auto opened = hal::Backend::open(backend_arg, hal::default_search_dirs());
  if (!opened.ok()) return fail(opened.status().to_string());
  std::shared_ptr<hal::Backend> backend = opened.value();
  if (Status init = backend->init(options); !init.ok()) return fail(init.to_string());
  const tsr_backend_api_v1& table = backend->api();
  if (table.ipc_open_handle == nullptr || table.ipc_close_handle == nullptr) {
    return fail("ipc_open_handle or ipc_close_handle is NULL");
  }

  void* mapped = nullptr;
  if (table.ipc_open_handle(0, &*handle, &mapped) != TSR_OK) {
    return fail("ipc_open_handle: " + last_error_of(table));
  }
  if (table.pointer_attributes != nullptr) {
    tsr_pointer_attributes attributes{};
    attributes.struct_size = sizeof attributes;
    if (table.pointer_attributes(mapped, &attributes) != TSR_OK) {
      return fail("pointer_attributes on the opened handle: " + last_error_of(table));
    }
    if (attributes.type != TSR_MEMORY_DEVICE_IPC) {
      return fail("pointer_attributes on the opened handle gives type " +
                  std::to_string(attributes.type) + ", expected TSR_MEMORY_DEVICE_IPC (3)");
    }
  }

  tsr_stream stream = nullptr;
  if (table.stream_create(0, 0, &stream) != TSR_OK) {
    return fail("stream_create: " + last_error_of(table));
  }
  std::vector<uint8_t> seen(kIpcBytes);
  if (table.memcpy_async(seen.data(), mapped, kIpcBytes, stream) != TSR_OK ||
      table.stream_synchronize(stream) != TSR_OK) {
    return fail("reading the shared allocation: " + last_error_of(table));
  }
  const std::vector<uint8_t> expected = make_pattern(kIpcBytes, kIpcParentSalt);
  for (size_t i = 0; i < kIpcBytes; ++i) {
    if (seen[i] != expected[i]) {
      return fail("byte " + std::to_string(i) + " of the parent's pattern is " +
                  std::to_string(seen[i]) + ", expected " + std::to_string(expected[i]));
    }
  }
  const std::vector<uint8_t> reply = make_pattern(kIpcBytes, kIpcChildSalt);
  if (table.memcpy_async(mapped, reply.data(), kIpcBytes, stream) != TSR_OK ||
      table.stream_synchronize(stream) != TSR_OK) {
    return fail("writing the shared allocation: " + last_error_of(table));
  }
  if (table.stream_destroy(stream) != TSR_OK)
    return fail("stream_destroy: " + last_error_of(table));
  if (table.ipc_close_handle(mapped) != TSR_OK) {
    return fail("ipc_close_handle: " + last_error_of(table));
  }
  return 0;
}

}  // namespace tessera::cts
