// Device memory of the context's device for C programs without a vendor runtime of their own:
// allocation (owned by the context until freed) and blocking copies on one stream of the device.
#include <cstdio>
#include <string>

#include "internal.h"

namespace tessera::capi {
namespace {

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

Status device_alloc(tessera_context* ctx, size_t bytes, void** out_ptr) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  TSR_RETURN_IF_ERROR(check_pointer(out_ptr, "out_ptr"));
  if (bytes == 0) return invalid_argument("bytes is 0");
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buffer, ctx->state->device->allocate(bytes));
  void* ptr = buffer.data();
  ctx->state->allocations.emplace(ptr, std::move(buffer));
  *out_ptr = ptr;
  return Status();
}

Status device_free(tessera_context* ctx, void* ptr) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  if (ptr == nullptr) return Status();
  auto it = ctx->state->allocations.find(ptr);
  if (it == ctx->state->allocations.end()) {
    return invalid_argument("ptr " + pointer_text(ptr) +
                            " was not returned by tessera_device_alloc on this context (or is "
                            "already freed)");
  }
  hal::DeviceBuffer buffer = std::move(it->second);
  ctx->state->allocations.erase(it);
  return buffer.release().with_context("freeing " + pointer_text(ptr) + " on " +
                                       ctx->state->device_name);
}

Status memcpy_blocking(tessera_context* ctx, void* dst, const void* src, size_t bytes) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  if (bytes == 0) return Status();
  TSR_RETURN_IF_ERROR(check_pointer(dst, "dst"));
  TSR_RETURN_IF_ERROR(check_pointer(src, "src"));
  ContextState& state = *ctx->state;
  if (!state.copy_stream) {
    TSR_ASSIGN_OR_RETURN(hal::Stream stream, state.device->create_stream());
    state.copy_stream = std::move(stream);
  }
  const std::string where = "copy of " + std::to_string(bytes) + " bytes from " +
                            pointer_text(src) + " to " + pointer_text(dst) + " on " +
                            state.device_name;
  TSR_RETURN_IF_ERROR(state.copy_stream->copy(dst, src, bytes).with_context(where));
  return state.copy_stream->synchronize().with_context(where);
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

tessera_status tessera_device_alloc(tessera_context* ctx, size_t bytes, void** out_ptr) {
  return guarded("tessera_device_alloc", [&] { return capi::device_alloc(ctx, bytes, out_ptr); });
}

tessera_status tessera_device_free(tessera_context* ctx, void* ptr) {
  return guarded("tessera_device_free", [&] { return capi::device_free(ctx, ptr); });
}

tessera_status tessera_memcpy(tessera_context* ctx, void* dst, const void* src, size_t bytes) {
  return guarded("tessera_memcpy", [&] { return capi::memcpy_blocking(ctx, dst, src, bytes); });
}

}  // extern "C"
