// The exported entry point and the function table. Only tessera_backend_get_api_v1 leaves the
// library (exports.map): the statically linked runtime stays private, so it never interposes an
// application's own copy.
#include "api.h"
#include "errors.h"
#include "state.h"

#ifndef TESSERA_CUDA_BACKEND_NAME
#define TESSERA_CUDA_BACKEND_NAME "cuda"
#endif
#ifndef TESSERA_CUDA_VERSION
#define TESSERA_CUDA_VERSION "0"
#endif

namespace tessera::cuda {

const char* const kBackendName = TESSERA_CUDA_BACKEND_NAME;

namespace {

void finalize_entry() {
  backend_finalize();
}
const char* last_error_entry() {
  return last_error_message();
}

tsr_backend_api_v1 make_table() {
  tsr_backend_api_v1 t{};
  t.struct_size = sizeof(tsr_backend_api_v1);
  t.abi_major = TSR_BACKEND_ABI_MAJOR;
  t.abi_minor = TSR_BACKEND_ABI_MINOR;
  t.name = TESSERA_CUDA_BACKEND_NAME;
  t.version = "tessera " TESSERA_CUDA_BACKEND_NAME " backend " TESSERA_CUDA_VERSION
              " (runtime " TSR_RT_PREFIX_NAME " from " TESSERA_CUDA_RUNTIME_HEADER
#if TESSERA_CUDA_HAVE_KERNELS
              ", reduce/cast kernels"
#else
              ", no kernels"
#endif
              ")";
  t.init = &backend_init;
  t.finalize = &finalize_entry;
  t.last_error = &last_error_entry;
  t.device_count = &api::device_count;
  t.device_properties = &api::device_properties;
  t.device_malloc = &api::device_malloc;
  t.device_free = &api::device_free;
  t.host_malloc_pinned = &api::host_malloc_pinned;
  t.host_free_pinned = &api::host_free_pinned;
  t.host_register = &api::host_register;
  t.host_unregister = &api::host_unregister;
  t.memory_info = &api::memory_info;
  t.pointer_attributes = &api::pointer_attributes;
  t.memcpy_async = &api::memcpy_async;
  t.memset_async = &api::memset_async;
  t.memcpy_peer_async = &api::memcpy_peer_async;
  t.stream_create = &api::stream_create;
  t.stream_destroy = &api::stream_destroy;
  t.stream_synchronize = &api::stream_synchronize;
  t.stream_query = &api::stream_query;
  t.stream_wait_event = &api::stream_wait_event;
  t.stream_add_callback = &api::stream_add_callback;
  t.event_create = &api::event_create;
  t.event_destroy = &api::event_destroy;
  t.event_record = &api::event_record;
  t.event_synchronize = &api::event_synchronize;
  t.event_query = &api::event_query;
  t.event_elapsed_time = &api::event_elapsed_time;
  t.device_can_access_peer = &api::device_can_access_peer;
  t.device_enable_peer_access = &api::device_enable_peer_access;
  t.ipc_get_handle = api::ipc_get_handle;
  t.ipc_open_handle = api::ipc_open_handle;
  t.ipc_close_handle = api::ipc_close_handle;
  t.reduce_async = api::reduce_async;
  t.cast_async = api::cast_async;
  t.gemm_async = api::gemm_async;
  t.collectives = api::collectives();  // NULL when the collective library is absent
  t.stream_busy_wait = api::stream_busy_wait;
  t.stream_add_callback_with_message = &api::stream_add_callback_with_message;
  if (host_signals_available()) {  // all five or none (backend_abi.h)
    t.host_signal_create = &api::host_signal_create;
    t.host_signal_destroy = &api::host_signal_destroy;
    t.host_signal_raise = &api::host_signal_raise;
    t.host_signal_query = &api::host_signal_query;
    t.stream_wait_host_signal = &api::stream_wait_host_signal;
  }
  t.module_load = &api::module_load;  // all four (backend_abi.h)
  t.module_unload = &api::module_unload;
  t.module_get_function = &api::module_get_function;
  t.launch = &api::launch;
  return t;
}

}  // namespace
}  // namespace tessera::cuda

extern "C" TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(
    const tsr_host_info* host) {
  // Any loader major gets the table; the loader refuses a mismatch with a clear message.
  tessera::cuda::set_host_info(host);
  static const tsr_backend_api_v1 table = tessera::cuda::make_table();
  return &table;
}
