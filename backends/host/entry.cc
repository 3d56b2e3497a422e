// The exported entry point and the function table. Everything else in this library is hidden
// (CMake builds it with -fvisibility=hidden); only tessera_backend_get_api_v1 is exported.
#include "api.h"
#include "ccl.h"
#include "errors.h"
#include "state.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::host {
namespace {

void finalize_entry() {
  backend_finalize();
}
const char* last_error_entry() {
  return last_error_message();
}

#define TESSERA_HOST_STRINGIFY2(x) #x
#define TESSERA_HOST_STRINGIFY(x) TESSERA_HOST_STRINGIFY2(x)

const tsr_backend_api_v1 kApi = [] {
  tsr_backend_api_v1 t{};
  t.struct_size = sizeof(tsr_backend_api_v1);
  t.abi_major = TSR_BACKEND_ABI_MAJOR;
  t.abi_minor = TSR_BACKEND_ABI_MINOR;
  t.name = "host";
  t.version = "tessera host backend " TESSERA_HOST_STRINGIFY(TESSERA_HOST_VERSION)
#if TESSERA_HOST_HAVE_BLAS
      " (GEMM through CBLAS)";
#else
      " (GEMM through plain loops: built without BLAS)";
#endif
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
  t.ipc_get_handle = &api::ipc_get_handle;
  t.ipc_open_handle = &api::ipc_open_handle;
  t.ipc_close_handle = &api::ipc_close_handle;
  t.reduce_async = &api::reduce_async;
  t.cast_async = &api::cast_async;
  t.gemm_async = api::gemm_async;
  t.collectives = api::collectives();  // the host reference CCL (ccl.h), usable when enabled
  t.stream_busy_wait = &api::stream_busy_wait;
  t.stream_add_callback_with_message = &api::stream_add_callback_with_message;
  t.host_signal_create = &api::host_signal_create;
  t.host_signal_destroy = &api::host_signal_destroy;
  t.host_signal_raise = &api::host_signal_raise;
  t.host_signal_query = &api::host_signal_query;
  t.stream_wait_host_signal = &api::stream_wait_host_signal;
  t.module_load = &api::module_load;
  t.module_unload = &api::module_unload;
  t.module_get_function = &api::module_get_function;
  t.launch = &api::launch;
  return t;
}();

}  // namespace
}  // namespace tessera::host

extern "C" TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(
    const tsr_host_info* host) {
  // Any loader major gets the table; the loader compares abi_major and refuses a mismatch with a
  // clear message, which is better than a NULL it cannot explain.
  tessera::host::set_host_info(host);
  return &tessera::host::kApi;
}
