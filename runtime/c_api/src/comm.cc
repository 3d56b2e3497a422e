// Blocking collectives over the context's world communicator.
#include <string>

#include "internal.h"

namespace tessera::capi {
namespace {

// The checks every data-moving call shares: a live context, a known dtype, and buffers that are
// not NULL when there is something to move.
Status check_call(const tessera_context* ctx, const void* send, const void* recv, size_t count,
                  tessera_dtype dtype) {
  TSR_RETURN_IF_ERROR(check_handle(ctx, Magic::kContext, "ctx"));
  TSR_RETURN_IF_ERROR(check_dtype(dtype));
  if (count > 0) {
    TSR_RETURN_IF_ERROR(check_pointer(send, "send"));
    TSR_RETURN_IF_ERROR(check_pointer(recv, "recv"));
  }
  return Status();
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

tessera_status tessera_allreduce(tessera_context* ctx, const void* send, void* recv, size_t count,
                                 tessera_dtype dtype, tessera_reduce_op op) {
  return guarded("tessera_allreduce", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_call(ctx, send, recv, count, dtype));
    TSR_RETURN_IF_ERROR(capi::check_reduce_op(op));
    return ctx->state->world->allreduce(send, recv, count, capi::to_dtype(dtype),
                                        capi::to_reduce_op(op));
  });
}

tessera_status tessera_allgather(tessera_context* ctx, const void* send, void* recv, size_t count,
                                 tessera_dtype dtype) {
  return guarded("tessera_allgather", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_call(ctx, send, recv, count, dtype));
    return ctx->state->world->allgather(send, recv, count, capi::to_dtype(dtype));
  });
}

tessera_status tessera_reduce_scatter(tessera_context* ctx, const void* send, void* recv,
                                      size_t recv_count, tessera_dtype dtype,
                                      tessera_reduce_op op) {
  return guarded("tessera_reduce_scatter", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_call(ctx, send, recv, recv_count, dtype));
    TSR_RETURN_IF_ERROR(capi::check_reduce_op(op));
    return ctx->state->world->reduce_scatter(send, recv, recv_count, capi::to_dtype(dtype),
                                             capi::to_reduce_op(op));
  });
}

tessera_status tessera_broadcast(tessera_context* ctx, const void* send, void* recv, size_t count,
                                 tessera_dtype dtype, int root) {
  return guarded("tessera_broadcast", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_handle(ctx, capi::Magic::kContext, "ctx"));
    TSR_RETURN_IF_ERROR(capi::check_dtype(dtype));
    const int size = ctx->state->world->size();
    if (root < 0 || root >= size) {
      return invalid_argument("root " + std::to_string(root) + " is not a rank of the " +
                              std::to_string(size) + "-rank communicator");
    }
    if (count > 0) {
      TSR_RETURN_IF_ERROR(capi::check_pointer(recv, "recv"));
      if (ctx->state->world->rank() == root) TSR_RETURN_IF_ERROR(capi::check_pointer(send, "send"));
    }
    // Non-root ranks may pass send == NULL; the communicator reads send on the root only.
    const void* source = send != nullptr ? send : recv;
    return ctx->state->world->broadcast(source, recv, count, capi::to_dtype(dtype), root);
  });
}

tessera_status tessera_barrier(tessera_context* ctx) {
  return guarded("tessera_barrier", [&]() -> Status {
    TSR_RETURN_IF_ERROR(capi::check_handle(ctx, capi::Magic::kContext, "ctx"));
    return ctx->state->world->barrier();
  });
}

}  // extern "C"
