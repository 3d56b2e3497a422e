// The overlap engine (tessera::overlap::GradSync) in data-parallel mode. A C caller computes its
// gradients itself, so a mark means "ready now": it is relayed through a stream of the context's
// device with no work on it, which the engine sees as an event that has already completed.
#include <string>

#include "internal.h"

namespace tessera::capi {
namespace {

Status create(tessera_context* ctx, const tessera_grad_sync_options* options,
              tessera_grad_sync** out) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  TSR_RETURN_IF_ERROR(check_pointer(out, "out"));
  overlap::GradSyncOptions o;
  if (options != nullptr) {
    TSR_RETURN_IF_ERROR(check_struct_size(options->struct_size,
                                          offsetof(tessera_grad_sync_options, zero_fill_unmarked) +
                                              sizeof(options->zero_fill_unmarked),
                                          "options"));
    if (options->reduce != TESSERA_AVG && options->reduce != TESSERA_SUM) {
      return invalid_argument("options->reduce " + std::to_string(int(options->reduce)) +
                              " must be TESSERA_AVG or TESSERA_SUM");
    }
    o.reduction =
        options->reduce == TESSERA_SUM ? overlap::Reduction::kSum : overlap::Reduction::kAverage;
    o.bucket_bytes = options->bucket_bytes;
    o.zero_fill_unmarked = options->zero_fill_unmarked != 0;
  }
  auto sync = std::make_unique<tessera_grad_sync>();
  sync->context = ctx->state;
  TSR_ASSIGN_OR_RETURN(sync->ready_stream, ctx->state->device->create_stream());
  TSR_ASSIGN_OR_RETURN(sync->engine,
                       overlap::GradSync::create(ctx->state->world, *ctx->state->device, o));
  *out = sync.release();
  return Status();
}

Status destroy(tessera_grad_sync* sync) {
  if (sync == nullptr) return Status();
  TSR_RETURN_IF_ERROR(check_handle(sync, Magic::kGradSync, "sync"));
  sync->magic = Magic::kDead;
  std::unique_ptr<tessera_grad_sync> owned(sync);
  owned->engine.reset();  // waits for queued work, before the stream and device go
  return Status();
}

Status add_parameter(tessera_grad_sync* sync, const char* name, void* data, void* grad,
                     size_t count, tessera_dtype dtype, int* out_index) {
  TSR_RETURN_IF_ERROR(check_handle(sync, Magic::kGradSync, "sync"));
  TSR_RETURN_IF_ERROR(check_pointer(name, "name"));
  TSR_RETURN_IF_ERROR(check_pointer(grad, "grad"));
  TSR_RETURN_IF_ERROR(check_dtype(dtype));
  TSR_ASSIGN_OR_RETURN(int index,
                       sync->engine->add_parameter(name, data, grad, count, to_dtype(dtype)));
  if (out_index != nullptr) *out_index = index;
  return Status();
}

Status finish(tessera_grad_sync* sync, tessera_step_stats* out_stats) {
  TSR_RETURN_IF_ERROR(check_handle(sync, Magic::kGradSync, "sync"));
  if (out_stats != nullptr) {
    TSR_RETURN_IF_ERROR(check_struct_size(
        out_stats->struct_size,
        offsetof(tessera_step_stats, overlap_ratio) + sizeof(out_stats->overlap_ratio),
        "out_stats"));
  }
  TSR_ASSIGN_OR_RETURN(const overlap::StepStats stats, sync->engine->finish());
  if (out_stats != nullptr) {
    out_stats->step = stats.step;
    out_stats->buckets = stats.buckets;
    out_stats->payload_bytes = stats.payload_bytes;
    out_stats->wire_bytes = stats.wire_bytes;
    out_stats->step_seconds = stats.step_seconds;
    out_stats->comm_seconds = stats.comm_seconds;
    out_stats->exposed_seconds = stats.exposed_seconds;
    out_stats->overlap_ratio = stats.overlap_ratio;
  }
  return Status();
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

tessera_status tessera_grad_sync_create(tessera_context* ctx,
                                        const tessera_grad_sync_options* options,
                                        tessera_grad_sync** out) {
  return guarded("tessera_grad_sync_create", [&] { return capi::create(ctx, options, out); });
}

tessera_status tessera_grad_sync_destroy(tessera_grad_sync* sync) {
  return guarded("tessera_grad_sync_destroy", [&] { return capi::destroy(sync); });
}

tessera_status tessera_grad_sync_add_parameter(tessera_grad_sync* sync, const char* name,
                                               void* data, void* grad, size_t count,
                                               tessera_dtype dtype, int* out_index) {
  return guarded("tessera_grad_sync_add_parameter", [&] {
    return capi::add_parameter(sync, name, data, grad, count, dtype, out_index);
  });
}

tessera_status tessera_grad_sync_mark_ready(tessera_grad_sync* sync, int index) {
  return guarded("tessera_grad_sync_mark_ready", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_handle(sync, capi::Magic::kGradSync, "sync"));
    return sync->engine->mark_ready(index, sync->ready_stream);
  });
}

tessera_status tessera_grad_sync_mark_unused(tessera_grad_sync* sync, int index) {
  return guarded("tessera_grad_sync_mark_unused", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_handle(sync, capi::Magic::kGradSync, "sync"));
    return sync->engine->mark_unused(index);
  });
}

tessera_status tessera_grad_sync_finish(tessera_grad_sync* sync, tessera_step_stats* out_stats) {
  return guarded("tessera_grad_sync_finish", [&] { return capi::finish(sync, out_stats); });
}

}  // extern "C"
