// The checkpointer (tessera::ckpt::Checkpointer) over host memory and device memory of the
// context's device, coordinated through the context's world communicator (CommRankGroup) or,
// without a context, as a single rank of host tensors.
#include <string>
#include <vector>

#include "internal.h"
#include "tessera/checkpoint/comm_rank_group.h"

namespace tessera::capi {
namespace {

Status create(tessera_context* ctx, const tessera_checkpoint_options* options,
              tessera_checkpoint** out) {
  if (ctx != nullptr) TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  TSR_RETURN_IF_ERROR(check_pointer(options, "options"));
  TSR_RETURN_IF_ERROR(check_pointer(out, "out"));
  TSR_RETURN_IF_ERROR(check_struct_size(
      options->struct_size,
      offsetof(tessera_checkpoint_options, no_fsync) + sizeof(options->no_fsync), "options"));
  TSR_RETURN_IF_ERROR(check_pointer(options->dir, "options->dir"));
  if (options->keep_last < 0 || options->full_every < 0) {
    return invalid_argument("options->keep_last and options->full_every must not be negative");
  }
  ckpt::CheckpointOptions o;
  o.dir = options->dir;
  if (options->keep_last > 0) o.keep_last = options->keep_last;
  if (options->full_every > 0) o.full_every = options->full_every;
  o.peer_replica = options->peer_replica != 0;
  o.fsync = options->no_fsync == 0;
  std::shared_ptr<ckpt::RankGroup> group;
  if (ctx != nullptr) {
    // Buddies on another host when there are several: a host failure then loses no replica.
    if (ctx->state->world->num_hosts() > 1) o.replica_stride = ctx->state->world->local_size();
    group = std::make_shared<ckpt::CommRankGroup>(ctx->state->world);
    // Pinned snapshot buffers and copies for device tensors; registration asks this device's
    // backend what each tensor's memory is.
    o.device = ctx->state->device;
  } else {
    group = std::make_shared<ckpt::SingleRankGroup>();
  }
  auto handle = std::make_unique<tessera_checkpoint>();
  if (ctx != nullptr) handle->context = ctx->state;
  TSR_ASSIGN_OR_RETURN(handle->checkpointer, ckpt::Checkpointer::create(o, std::move(group)));
  *out = handle.release();
  return Status();
}

Status destroy(tessera_checkpoint* ckpt) {
  if (ckpt == nullptr) return Status();
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  ckpt->magic = Magic::kDead;
  std::unique_ptr<tessera_checkpoint> owned(ckpt);
  owned->checkpointer.reset();  // waits for the save in flight, while the communicator lives
  return Status();
}

Status add_tensor(tessera_checkpoint* ckpt, const char* name, tessera_dtype dtype,
                  const int64_t* shape, int ndim, const int64_t* slice_offset,
                  const int64_t* slice_len, void* data, int replicated) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  TSR_RETURN_IF_ERROR(check_pointer(name, "name"));
  TSR_RETURN_IF_ERROR(check_dtype(dtype));
  TSR_RETURN_IF_ERROR(check_pointer(data, "data"));
  if (ndim < 0 || ndim > 64) {
    return invalid_argument("tensor '" + std::string(name) + "': ndim " + std::to_string(ndim) +
                            " is not in 0..64");
  }
  if (ndim > 0) TSR_RETURN_IF_ERROR(check_pointer(shape, "shape"));
  if ((slice_offset == nullptr) != (slice_len == nullptr)) {
    return invalid_argument("tensor '" + std::string(name) +
                            "': slice_offset and slice_len must both be NULL or both be given");
  }
  std::vector<int64_t> dims(shape, shape + ndim);
  ckpt::Slice slice = ckpt::full_slice(dims);
  if (slice_offset != nullptr) {
    slice.offset.assign(slice_offset, slice_offset + ndim);
    slice.len.assign(slice_len, slice_len + ndim);
  }
  // Host or device memory, as the device's backend says (no device without a context: host).
  return ckpt->checkpointer->registry().add_tensor(name, to_dtype(dtype), std::move(dims),
                                                   std::move(slice), data, replicated != 0);
}

Status add_blob(tessera_checkpoint* ckpt, const char* name, tessera_blob_get_fn get,
                tessera_blob_set_fn set, void* user_data, int replicated) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  TSR_RETURN_IF_ERROR(check_pointer(name, "name"));
  if (get == nullptr) return invalid_argument("blob '" + std::string(name) + "': get is NULL");
  if (set == nullptr) return invalid_argument("blob '" + std::string(name) + "': set is NULL");
  ckpt::BlobEntry blob;
  blob.name = name;
  blob.replicated = replicated != 0;
  blob.get = [get, user_data] {
    const void* data = nullptr;
    size_t size = 0;
    get(user_data, &data, &size);
    if (data == nullptr) return std::string();
    return std::string(static_cast<const char*>(data), size);
  };
  blob.set = [set, user_data, blob_name = blob.name](std::string_view bytes) -> Status {
    const tessera_status code = set(user_data, bytes.data(), bytes.size());
    if (code == TESSERA_OK) return Status();
    return Status(
        static_cast<StatusCode>(code),
        "blob '" + blob_name + "': the set callback returned " + tessera_status_name(code));
  };
  return ckpt->checkpointer->registry().add_blob(std::move(blob));
}

Status save_async(tessera_checkpoint* ckpt, int64_t step, double* out_blocking_s) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  if (step < 0) return invalid_argument("step " + std::to_string(step) + " is negative");
  TSR_ASSIGN_OR_RETURN(const ckpt::SaveStart start, ckpt->checkpointer->save_async(step));
  if (out_blocking_s != nullptr) *out_blocking_s = start.blocking_s;
  return Status();
}

Status wait(tessera_checkpoint* ckpt, int64_t* out_step) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  TSR_ASSIGN_OR_RETURN(const ckpt::SaveResult result, ckpt->checkpointer->wait());
  TSR_RETURN_IF_ERROR(result.status.with_context("save of step " + std::to_string(result.step)));
  if (out_step != nullptr) *out_step = result.step;
  return Status();
}

Status load(tessera_checkpoint* ckpt, int64_t step, int fallback, int64_t* out_step) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  ckpt::LoadOptions options;
  if (step >= 0) options.step = step;
  options.fallback = fallback != 0;
  TSR_ASSIGN_OR_RETURN(const ckpt::LoadResult result, ckpt->checkpointer->load(options));
  if (out_step != nullptr) *out_step = result.step;
  return Status();
}

Status restore(tessera_checkpoint* ckpt, int64_t* out_step, int* out_from_peer) {
  TSR_RETURN_IF_ERROR(check_handle(ckpt, Magic::kCheckpoint, "ckpt"));
  TSR_ASSIGN_OR_RETURN(const ckpt::RestoreResult result, ckpt->checkpointer->restore());
  if (out_step != nullptr) *out_step = result.step;
  if (out_from_peer != nullptr) *out_from_peer = result.from_peer ? 1 : 0;
  return Status();
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

tessera_status tessera_checkpoint_create(tessera_context* ctx,
                                         const tessera_checkpoint_options* options,
                                         tessera_checkpoint** out) {
  return guarded("tessera_checkpoint_create", [&] { return capi::create(ctx, options, out); });
}

tessera_status tessera_checkpoint_destroy(tessera_checkpoint* ckpt) {
  return guarded("tessera_checkpoint_destroy", [&] { return capi::destroy(ckpt); });
}

tessera_status tessera_checkpoint_add_tensor(tessera_checkpoint* ckpt, const char* name,
                                             tessera_dtype dtype, const int64_t* shape, int ndim,
                                             const int64_t* slice_offset, const int64_t* slice_len,
                                             void* data, int replicated) {
  return guarded("tessera_checkpoint_add_tensor", [&] {
    return capi::add_tensor(ckpt, name, dtype, shape, ndim, slice_offset, slice_len, data,
                            replicated);
  });
}

tessera_status tessera_checkpoint_add_blob(tessera_checkpoint* ckpt, const char* name,
                                           tessera_blob_get_fn get, tessera_blob_set_fn set,
                                           void* user_data, int replicated) {
  return guarded("tessera_checkpoint_add_blob",
                 [&] { return capi::add_blob(ckpt, name, get, set, user_data, replicated); });
}

tessera_status tessera_checkpoint_save_async(tessera_checkpoint* ckpt, int64_t step,
                                             double* out_blocking_s) {
  return guarded("tessera_checkpoint_save_async",
                 [&] { return capi::save_async(ckpt, step, out_blocking_s); });
}

tessera_status tessera_checkpoint_wait(tessera_checkpoint* ckpt, int64_t* out_step) {
  return guarded("tessera_checkpoint_wait", [&] { return capi::wait(ckpt, out_step); });
}

tessera_status tessera_checkpoint_load(tessera_checkpoint* ckpt, int64_t step, int fallback,
                                       int64_t* out_step) {
  return guarded("tessera_checkpoint_load",
                 [&] { return capi::load(ckpt, step, fallback, out_step); });
}

tessera_status tessera_checkpoint_restore(tessera_checkpoint* ckpt, int64_t* out_step,
                                          int* out_from_peer) {
  return guarded("tessera_checkpoint_restore",
                 [&] { return capi::restore(ckpt, out_step, out_from_peer); });
}

}  // extern "C"
