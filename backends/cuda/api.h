// The implementations behind tsr_backend_api_v1's entries, defined in the file that owns the
// object and gathered into the table by entry.cc. Semantics, thread-safety and ownership are those
// of backend_abi.h.
#pragma once

#include "tessera/hal/backend_abi.h"

namespace tessera::cuda::api {

// devices.cc
int32_t device_count(const char** out_reason);
tsr_status device_properties(int32_t device, tsr_device_properties* out);
tsr_status memory_info(int32_t device, size_t* out_free, size_t* out_total);
tsr_status device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can_access);
tsr_status device_enable_peer_access(int32_t device, int32_t peer);

// memory.cc
tsr_status device_malloc(int32_t device, size_t bytes, void** out_ptr);
tsr_status device_free(int32_t device, void* ptr);
tsr_status host_malloc_pinned(size_t bytes, void** out_ptr);
tsr_status host_free_pinned(void* ptr);
tsr_status host_register(void* ptr, size_t bytes);
tsr_status host_unregister(void* ptr);
tsr_status pointer_attributes(const void* ptr, tsr_pointer_attributes* out);

// transfer.cc
tsr_status memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream);
tsr_status memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream);
tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream stream);

// stream.cc
tsr_status stream_create(int32_t device, int32_t priority, tsr_stream* out_stream);
tsr_status stream_destroy(tsr_stream stream);
tsr_status stream_synchronize(tsr_stream stream);
tsr_status stream_query(tsr_stream stream);
tsr_status stream_wait_event(tsr_stream stream, tsr_event event);
tsr_status stream_add_callback(tsr_stream stream, tsr_host_fn fn, void* user_data);
tsr_status stream_add_callback_with_message(tsr_stream stream, tsr_host_msg_fn fn, void* user_data);

// host_signal.cc: set in the table only when host_signals_available() (state.h).
tsr_status host_signal_create(int32_t device, tsr_host_signal* out_signal);
tsr_status host_signal_destroy(tsr_host_signal signal);
tsr_status host_signal_raise(tsr_host_signal signal, uint64_t value);
tsr_status host_signal_query(tsr_host_signal signal, uint64_t* out_value);
tsr_status stream_wait_host_signal(tsr_stream stream, tsr_host_signal signal, uint64_t value);

// event.cc
tsr_status event_create(int32_t device, uint32_t flags, tsr_event* out_event);
tsr_status event_destroy(tsr_event event);
tsr_status event_record(tsr_event event, tsr_stream stream);
tsr_status event_synchronize(tsr_event event);
tsr_status event_query(tsr_event event);
tsr_status event_elapsed_time(tsr_event start, tsr_event end, float* out_ms);

// ipc.cc: NULL when built with IPC off.
extern tsr_status (*const ipc_get_handle)(void* device_ptr, tsr_ipc_handle* out_handle);
extern tsr_status (*const ipc_open_handle)(int32_t device, const tsr_ipc_handle* handle,
                                           void** out_ptr);
extern tsr_status (*const ipc_close_handle)(void* ptr);

// compute.cc: NULL when built without kernels.
extern tsr_status (*const reduce_async)(void* dst, const void* const* srcs, int32_t num_srcs,
                                        size_t count, tsr_dtype dtype, tsr_reduce_op op,
                                        tsr_stream stream);
extern tsr_status (*const cast_async)(void* dst, tsr_dtype dst_dtype, const void* src,
                                      tsr_dtype src_dtype, size_t count, tsr_stream stream);

// compute.cc: NULL when built without the CUDA language (busy_wait.cu).
extern tsr_status (*const stream_busy_wait)(tsr_stream stream, uint64_t microseconds);

// gemm.cc: NULL when built without a BLAS library name.
extern tsr_status (*const gemm_async)(const tsr_gemm_desc* desc, tsr_stream stream);

// module.cc: kernel modules (ABI minor 3); always in the table, UNIMPLEMENTED where
// module_formats() has no bit for the format.
tsr_status module_load(int32_t device, int32_t format, const void* image, size_t image_bytes,
                       const char* name, tsr_module* out_module);
tsr_status module_unload(tsr_module module);
tsr_status module_get_function(tsr_module module, const char* name, tsr_function* out_function);
tsr_status launch(tsr_stream stream, tsr_function function, const tsr_launch_config* config,
                  const tsr_kernel_arg* args, size_t arg_count);

// collectives.cc: the sub-table when the collective library loads, else NULL. Loads it once.
const tsr_collectives_api_v1* collectives();

}  // namespace tessera::cuda::api
