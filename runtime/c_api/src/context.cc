// tessera_init_from_env and the context's accessors: the launcher's environment -> bootstrap,
// platform, device, world communicator.
#include <chrono>
#include <memory>
#include <string>

#include "internal.h"

namespace tessera::capi {
namespace {

// "host:1" as given; "host" alone: device local_rank modulo the backend's count.
Result<hal::Device> pick_device(const hal::Platform& platform, const std::string& spec,
                                int local_rank) {
  if (spec.find(':') != std::string::npos) return platform.device(spec);
  std::vector<hal::Device> devices = platform.devices(spec);
  if (devices.empty()) {
    const hal::BackendRecord* record = platform.registry().find(spec);
    std::string why = record == nullptr ? "no backend of that name"
                                        : std::string(hal::backend_state_name(record->state)) +
                                              (record->reason.empty() ? "" : ": " + record->reason);
    return not_found("device '" + spec + "': backend has no devices (" + why + ")");
  }
  return devices[static_cast<size_t>(local_rank) % devices.size()];
}

Status init(const tessera_init_options* options, tessera_context** out_ctx) {
  TSR_RETURN_IF_ERROR(check_pointer(out_ctx, "out_ctx"));
  std::string device_spec = "host";
  std::chrono::milliseconds timeout{0};
  if (options != nullptr) {
    TSR_RETURN_IF_ERROR(check_struct_size(
        options->struct_size,
        offsetof(tessera_init_options, timeout_ms) + sizeof(options->timeout_ms), "options"));
    if (options->device != nullptr && options->device[0] != '\0') device_spec = options->device;
    if (options->timeout_ms < 0) {
      return invalid_argument("options->timeout_ms " + std::to_string(options->timeout_ms) +
                              " is negative");
    }
    timeout = std::chrono::milliseconds(options->timeout_ms);
  }

  auto state = std::make_shared<ContextState>();
  coll::BootstrapOptions boot_options;
  if (timeout.count() > 0) boot_options.timeout = timeout;
  TSR_ASSIGN_OR_RETURN(state->bootstrap, coll::Bootstrap::from_environment(boot_options));
  TSR_ASSIGN_OR_RETURN(state->platform, hal::Platform::create());
  auto device = pick_device(*state->platform, device_spec, state->bootstrap->info().local_rank);
  if (!device.ok()) return device.status();
  state->device = device.value();
  state->device_name = state->device->id();
  coll::CommOptions comm_options;
  comm_options.timeout = timeout;
  TSR_ASSIGN_OR_RETURN(state->world,
                       coll::Communicator::create(state->bootstrap, *state->device, comm_options));
  auto ctx = std::make_unique<tessera_context>();
  ctx->state = std::move(state);
  *out_ctx = ctx.release();
  return Status();
}

Status destroy(tessera_context* ctx) {
  if (ctx == nullptr) return Status();
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  // The barrier first: a peer may still drain its last operation, and the communicator's
  // teardown would abort it (see tests/overlap/support.h, CHILD_DONE).
  Status barrier = ctx->state->world->aborted() ? Status() : ctx->state->world->barrier();
  ctx->magic = Magic::kDead;
  std::unique_ptr<tessera_context> owned(ctx);
  return barrier.with_context("closing barrier");
}

template <typename Get>
Status read_int(const tessera_context* ctx, int* out, Get get) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  TSR_RETURN_IF_ERROR(check_pointer(out, "out"));
  *out = get(*ctx->state->world);
  return Status();
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

tessera_status tessera_init_from_env(const tessera_init_options* options,
                                     tessera_context** out_ctx) {
  return guarded("tessera_init_from_env", [&] { return capi::init(options, out_ctx); });
}

tessera_status tessera_context_destroy(tessera_context* ctx) {
  return guarded("tessera_context_destroy", [&] { return capi::destroy(ctx); });
}

tessera_status tessera_rank(const tessera_context* ctx, int* out_rank) {
  return guarded("tessera_rank", [&] {
    return capi::read_int(ctx, out_rank, [](const coll::Communicator& c) { return c.rank(); });
  });
}

tessera_status tessera_size(const tessera_context* ctx, int* out_size) {
  return guarded("tessera_size", [&] {
    return capi::read_int(ctx, out_size, [](const coll::Communicator& c) { return c.size(); });
  });
}

tessera_status tessera_local_rank(const tessera_context* ctx, int* out_local_rank) {
  return guarded("tessera_local_rank", [&] {
    return capi::read_int(ctx, out_local_rank,
                          [](const coll::Communicator& c) { return c.local_rank(); });
  });
}

tessera_status tessera_local_size(const tessera_context* ctx, int* out_local_size) {
  return guarded("tessera_local_size", [&] {
    return capi::read_int(ctx, out_local_size,
                          [](const coll::Communicator& c) { return c.local_size(); });
  });
}

tessera_status tessera_device_name(const tessera_context* ctx, const char** out_name) {
  return guarded("tessera_device_name", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_handle(ctx, capi::Magic::kContext, "ctx"));
    TSR_RETURN_IF_ERROR(capi::check_pointer(out_name, "out_name"));
    *out_name = ctx->state->device_name.c_str();
    return Status();
  });
}

}  // extern "C"
