/*
 * The HIP runtime as the CUDA backend's sources see it (backends/cuda/runtime_names.h, prefix
 * `hip`). Given to tessera_add_cuda_like_backend as HEADER: it includes HIP's C API and defines
 * the aliases where HIP's spelling is not cuda -> hip, plus the two device hooks (vendor, UUID).
 * Plain C; the same file serves Hygon DTK, which is HIP.
 */
#ifndef TESSERA_BACKENDS_HIP_RUNTIME_NAMES_H_
#define TESSERA_BACKENDS_HIP_RUNTIME_NAMES_H_

#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_NVIDIA__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <stdio.h>
#include <string.h>

/* Names that are not cuda* -> hip*. */
#define rtDeviceProp hipDeviceProp_t
#define rtHostAlloc hipHostMalloc
#define rtHostAllocPortable hipHostMallocPortable
#define rtHostAllocMapped hipHostMallocMapped
#define rtFreeHost hipHostFree
#define rtDevAttrClockRate hipDeviceAttributeClockRate
#define rtDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
/* Launch limits (backends/cuda/module.cc). HIP's opt-in shared memory attribute is CUDA-only:
 * the plain per-block maximum is the limit. */
#define rtDevAttrMaxThreadsPerBlock hipDeviceAttributeMaxThreadsPerBlock
#define rtDevAttrMaxBlockDimX hipDeviceAttributeMaxBlockDimX
#define rtDevAttrMaxBlockDimY hipDeviceAttributeMaxBlockDimY
#define rtDevAttrMaxBlockDimZ hipDeviceAttributeMaxBlockDimZ
#define rtDevAttrMaxGridDimX hipDeviceAttributeMaxGridDimX
#define rtDevAttrMaxGridDimY hipDeviceAttributeMaxGridDimY
#define rtDevAttrMaxGridDimZ hipDeviceAttributeMaxGridDimZ
#define rtDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeMaxSharedMemoryPerBlock
/* HIP has no cudaErrorNotPermitted; "not initialised" is the closest FAILED_PRECONDITION. */
#define rtErrorNotPermitted hipErrorNotInitialized

/* libamdhip64 5.2 declares hipLaunchHostFunc but does not export it: run the host function
 * through hipStreamAddCallback, which every HIP release has. */
#include <stdlib.h>
typedef struct tsr_hip_host_call {
  hipHostFn_t fn;
  void* user_data;
} tsr_hip_host_call;
static inline void tsr_hip_host_trampoline(hipStream_t stream, hipError_t status, void* data) {
  tsr_hip_host_call call = *(tsr_hip_host_call*)data;
  (void)stream;
  (void)status; /* the backend's callback reads the stream's state itself */
  free(data);
  call.fn(call.user_data);
}
static inline hipError_t tsr_hip_launch_host_func(hipStream_t stream, hipHostFn_t fn, void* user) {
  tsr_hip_host_call* call = (tsr_hip_host_call*)malloc(sizeof *call);
  hipError_t error;
  if (call == NULL) return hipErrorOutOfMemory;
  call->fn = fn;
  call->user_data = user;
  error = hipStreamAddCallback(stream, tsr_hip_host_trampoline, call, 0);
  if (error != hipSuccess) free(call);
  return error;
}
#define rtLaunchHostFunc tsr_hip_launch_host_func

/* Host signals (backends/cuda/host_signal.cc): HIP's runtime has the stream memory wait itself,
 * so no driver library is needed. GEQ is hipStreamWaitValueGte with every bit of the mask; the
 * signal word is hipHostMalloc'd with hipHostMallocMapped and reached through
 * hipHostGetDevicePointer (the backend keeps it at or below 2^63 - 1, so a signed or an unsigned
 * comparison gives the same answer). */
#define TSR_RT_STREAM_WAIT_VALUE64(stream, device_ptr, value) \
  hipStreamWaitValue64((stream), (device_ptr), (value), hipStreamWaitValueGte, ~(uint64_t)0)
#define TSR_RT_CAN_WAIT_VALUE64(device, out) \
  hipDeviceGetAttribute((out), hipDeviceAttributeCanUseStreamWaitValue, (device))

/* Kernel modules (backends/cuda/module.cc): HIP's runtime has the module API itself, so no driver
 * library is involved. Images are code objects or code object bundles (hipcc --genco); HIP has no
 * parameter query, so launches are not checked against the kernel's parameters. The function
 * attributes use CUDA's numbering (HIP_FUNC_ATTRIBUTE_* has the same order). */
#define TSR_RT_MODULE_CALLS 1
static inline int tsr_rt_module_load(void** module, const void* image) {
  return (int)hipModuleLoadData((hipModule_t*)module, image);
}
static inline int tsr_rt_module_unload(void* module) {
  return (int)hipModuleUnload((hipModule_t)module);
}
static inline int tsr_rt_module_get_function(void** function, void* module, const char* name) {
  return (int)hipModuleGetFunction((hipFunction_t*)function, (hipModule_t)module, name);
}
static inline int tsr_rt_module_launch(void* function, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes,
                                       hipStream_t stream, void** params) {
  return (int)hipModuleLaunchKernel((hipFunction_t)function, gx, gy, gz, bx, by, bz, shared_bytes,
                                    stream, params, NULL);
}
static inline int tsr_rt_func_get_attribute(int* value, int attribute, void* function) {
  return (int)hipFuncGetAttribute(value, (hipFunction_attribute)attribute, (hipFunction_t)function);
}

/* hipBLAS's hipblasGemmEx has cublasGemmEx's shape with its own enum values:
 * HIPBLAS_OP_N/T, HIPBLAS_R_32F/64F/16F/16B, compute types as data types (hipBLAS < 6),
 * HIPBLAS_GEMM_DEFAULT. */
#define TSR_BLAS_ENUMS \
  { 111, 112, 151, 152, 150, 168, 151, 152, 160 }

/* hipDeviceProp_t (HIP 5.x) has no uuid: ask hipDeviceGetUuid; zero when it fails. */
static inline void tsr_hip_device_uuid(int index, unsigned char out[16]) {
  hipUUID uuid;
  hipDevice_t device;
  memset(out, 0, 16);
  if (hipDeviceGet(&device, index) == hipSuccess && hipDeviceGetUuid(&uuid, device) == hipSuccess) {
    memcpy(out, uuid.bytes, 16);
  }
  (void)hipGetLastError();
}
#define TSR_RT_DEVICE_UUID(prop, index, out) tsr_hip_device_uuid((index), (out))

/* AMD GPUs and Hygon DCUs run the same HIP: tell them apart by the PCI vendor id in sysfs
 * (0x1002 AMD, 0x1d94 Hygon), falling back to the device name ("DCU ..."/"Hygon ..."). */
static inline const char* tsr_hip_vendor(const hipDeviceProp_t* prop) {
  char path[96];
  unsigned vendor = 0;
  FILE* file;
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.0/vendor",
           (unsigned)prop->pciDomainID & 0xffffu, (unsigned)prop->pciBusID & 0xffu,
           (unsigned)prop->pciDeviceID & 0xffu);
  file = fopen(path, "r");
  if (file != NULL) {
    if (fscanf(file, "%x", &vendor) != 1) vendor = 0;
    fclose(file);
  }
  if (vendor == 0x1d94u || strstr(prop->name, "DCU") != NULL ||
      strstr(prop->name, "Hygon") != NULL) {
    return "Hygon";
  }
  return "AMD";
}
#define TSR_RT_DEVICE_VENDOR(prop) tsr_hip_vendor(&(prop))

#endif /* TESSERA_BACKENDS_HIP_RUNTIME_NAMES_H_ */
