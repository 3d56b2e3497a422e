/*
 * Memory of the porting example: device memory is aligned_alloc, pinned memory too, and every
 * range is kept in a registry (bad frees, pointer attributes, copy directions for a real port).
 * Transfers are memmove/memset, done before the enqueue call returns (synchronous streams).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

/* ---- memory ------------------------------------------------------------------------------- */

/* With g_mutex held: the allocation containing ptr, or NULL. */
static allocation* find_allocation(const void* ptr) {
  const char* p = (const char*)ptr;
  for (size_t i = 0; i < g_alloc_count; ++i) {
    if (p >= g_allocs[i].base && p < g_allocs[i].base + g_allocs[i].size) return &g_allocs[i];
  }
  return NULL;
}

static tsr_status add_allocation(allocation a) { /* g_mutex held */
  if (!pe_grow((void**)&g_allocs, &g_alloc_capacity, g_alloc_count, sizeof a)) {
    return pe_fail(TSR_RESOURCE_EXHAUSTED, "out of host memory for the allocation registry");
  }
  g_allocs[g_alloc_count++] = a;
  return TSR_OK;
}

static void remove_allocation(allocation* a) { /* g_mutex held */
  *a = g_allocs[--g_alloc_count];
}

tsr_status pe_device_malloc(int32_t device, size_t bytes, void** out_ptr) {
  tsr_status status = pe_check_device(device);
  if (status != TSR_OK) return status;
  if (out_ptr == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "device_malloc: out_ptr is NULL");
  if (bytes == 0) {
    *out_ptr = NULL;
    return TSR_OK;
  }
  pthread_mutex_lock(&g_mutex);
  size_t available = g_capacity - g_used[device];
  if (bytes > available) {
    pthread_mutex_unlock(&g_mutex);
    return pe_fail(TSR_RESOURCE_EXHAUSTED, "device %d: cannot allocate %zu bytes, %zu of %zu free",
                   (int)device, bytes, available, g_capacity);
  }
  g_used[device] += bytes; /* reserve before allocating outside the lock */
  pthread_mutex_unlock(&g_mutex);
  size_t rounded = (bytes + PE_ALIGNMENT - 1) / PE_ALIGNMENT * PE_ALIGNMENT;
  void* ptr = aligned_alloc(PE_ALIGNMENT, rounded);
  pthread_mutex_lock(&g_mutex);
  status = ptr ? add_allocation((allocation){ptr, bytes, device, TSR_MEMORY_DEVICE, 0})
               : pe_fail(TSR_RESOURCE_EXHAUSTED, "device %d: host malloc of %zu bytes failed",
                         (int)device, bytes);
  if (status != TSR_OK) g_used[device] -= bytes;
  pthread_mutex_unlock(&g_mutex);
  if (status != TSR_OK) {
    free(ptr);
    return status;
  }
  *out_ptr = ptr;
  return TSR_OK;
}

tsr_status pe_device_free(int32_t device, void* ptr) {
  tsr_status status = pe_check_device(device);
  if (status != TSR_OK) return status;
  if (ptr == NULL) return TSR_OK;
  pthread_mutex_lock(&g_mutex);
  allocation* a = find_allocation(ptr);
  if (a == NULL || a->base != ptr || a->type != TSR_MEMORY_DEVICE || a->device != device) {
    pthread_mutex_unlock(&g_mutex);
    return pe_fail(TSR_INVALID_ARGUMENT, "device_free: %p is not an allocation of device %d", ptr,
                   (int)device);
  }
  g_used[device] -= a->size;
  remove_allocation(a);
  pthread_mutex_unlock(&g_mutex);
  free(ptr); /* no pending work can touch it: streams finish their work at enqueue */
  return TSR_OK;
}

tsr_status pe_host_malloc_pinned(size_t bytes, void** out_ptr) {
  if (out_ptr == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "host_malloc_pinned: out_ptr is NULL");
  if (bytes == 0) {
    *out_ptr = NULL;
    return TSR_OK;
  }
  if (bytes > SIZE_MAX - PE_ALIGNMENT) {
    return pe_fail(TSR_RESOURCE_EXHAUSTED, "host_malloc_pinned: %zu bytes", bytes);
  }
  void* ptr = aligned_alloc(PE_ALIGNMENT, (bytes + PE_ALIGNMENT - 1) / PE_ALIGNMENT * PE_ALIGNMENT);
  if (ptr == NULL) return pe_fail(TSR_RESOURCE_EXHAUSTED, "host_malloc_pinned: %zu bytes", bytes);
  pthread_mutex_lock(&g_mutex);
  tsr_status status = add_allocation((allocation){ptr, bytes, -1, TSR_MEMORY_HOST_PINNED, 0});
  pthread_mutex_unlock(&g_mutex);
  if (status != TSR_OK) {
    free(ptr);
    return status;
  }
  *out_ptr = ptr;
  return TSR_OK;
}

tsr_status pe_host_free_pinned(void* ptr) {
  if (ptr == NULL) return TSR_OK;
  pthread_mutex_lock(&g_mutex);
  allocation* a = find_allocation(ptr);
  if (a == NULL || a->base != ptr || a->type != TSR_MEMORY_HOST_PINNED || a->registered) {
    pthread_mutex_unlock(&g_mutex);
    return pe_fail(TSR_INVALID_ARGUMENT, "host_free_pinned: %p is not from host_malloc_pinned",
                   ptr);
  }
  remove_allocation(a);
  pthread_mutex_unlock(&g_mutex);
  free(ptr);
  return TSR_OK;
}

tsr_status pe_host_register(void* ptr, size_t bytes) {
  if (ptr == NULL || bytes == 0) {
    return pe_fail(TSR_INVALID_ARGUMENT, "host_register: NULL pointer or zero size");
  }
  pthread_mutex_lock(&g_mutex);
  tsr_status status = TSR_OK;
  for (size_t i = 0; i < g_alloc_count && status == TSR_OK; ++i) {
    const allocation* a = &g_allocs[i];
    if ((char*)ptr < a->base + a->size && a->base < (char*)ptr + bytes) {
      status = pe_fail(TSR_ALREADY_EXISTS, "host_register: [%p, +%zu) overlaps a known range", ptr,
                       bytes);
    }
  }
  if (status == TSR_OK) {
    status = add_allocation((allocation){ptr, bytes, -1, TSR_MEMORY_HOST_PINNED, 1});
  }
  pthread_mutex_unlock(&g_mutex);
  return status;
}

tsr_status pe_host_unregister(void* ptr) {
  pthread_mutex_lock(&g_mutex);
  allocation* a = find_allocation(ptr);
  if (a == NULL || a->base != ptr || !a->registered) {
    pthread_mutex_unlock(&g_mutex);
    return pe_fail(TSR_INVALID_ARGUMENT, "host_unregister: %p was not registered", ptr);
  }
  remove_allocation(a);
  pthread_mutex_unlock(&g_mutex);
  return TSR_OK;
}

tsr_status pe_memory_info(int32_t device, size_t* out_free, size_t* out_total) {
  tsr_status status = pe_check_device(device);
  if (status != TSR_OK) return status;
  if (out_free == NULL || out_total == NULL) {
    return pe_fail(TSR_INVALID_ARGUMENT, "memory_info: NULL output");
  }
  pthread_mutex_lock(&g_mutex);
  *out_free = g_capacity - g_used[device];
  *out_total = g_capacity;
  pthread_mutex_unlock(&g_mutex);
  return TSR_OK;
}

tsr_status pe_pointer_attributes(const void* ptr, tsr_pointer_attributes* out) {
  if (out == NULL || out->struct_size < sizeof(size_t)) {
    return pe_fail(TSR_INVALID_ARGUMENT, "pointer_attributes: out is NULL or too small");
  }
  tsr_pointer_attributes a;
  memset(&a, 0, sizeof a);
  a.type = TSR_MEMORY_UNKNOWN;
  a.device = -1;
  pthread_mutex_lock(&g_mutex);
  const allocation* found = ptr ? find_allocation(ptr) : NULL;
  if (found != NULL) {
    a.type = found->type;
    a.device = found->device;
    a.base = found->base;
    a.size = found->size;
  }
  pthread_mutex_unlock(&g_mutex);
  size_t size = out->struct_size < sizeof a ? out->struct_size : sizeof a;
  a.struct_size = out->struct_size;
  memcpy(out, &a, size);
  return TSR_OK;
}

/* ---- transfers ---------------------------------------------------------------------------- */

tsr_status pe_memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream) {
  tsr_status status = pe_check_stream(stream, "memcpy_async");
  if (status != TSR_OK || bytes == 0) return status;
  if (dst == NULL || src == NULL) {
    return pe_fail(TSR_INVALID_ARGUMENT, "memcpy_async: NULL pointer with %zu bytes", bytes);
  }
  memmove(dst, src, bytes); /* every direction is host memory here */
  return TSR_OK;
}

tsr_status pe_memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream) {
  tsr_status status = pe_check_stream(stream, "memset_async");
  if (status != TSR_OK || bytes == 0) return status;
  if (dst == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "memset_async: NULL with %zu bytes", bytes);
  memset(dst, (uint8_t)value, bytes);
  return TSR_OK;
}

tsr_status pe_memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                                size_t bytes, tsr_stream stream) {
  tsr_status status = pe_check_device(dst_device);
  if (status == TSR_OK) status = pe_check_device(src_device);
  if (status != TSR_OK) return status;
  return pe_memcpy_async(dst, src, bytes, stream);
}

tsr_status pe_device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can) {
  tsr_status status = pe_check_device(device);
  if (status == TSR_OK) status = pe_check_device(peer);
  if (status != TSR_OK) return status;
  if (out_can == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "device_can_access_peer: NULL output");
  *out_can = 1; /* one address space */
  return TSR_OK;
}

tsr_status pe_device_enable_peer_access(int32_t device, int32_t peer) {
  tsr_status status = pe_check_device(device);
  return status == TSR_OK ? pe_check_device(peer) : status;
}
