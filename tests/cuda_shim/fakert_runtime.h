/*
 * fakert: a fake CUDA-shaped runtime for tests. It exports, under the prefix `fakert`, exactly the
 * subset of the CUDA runtime API that backends/cuda uses (backends/cuda/runtime_names.h), with
 * CUDA's signatures and semantics, over plain host memory: FAKERT_DEVICES devices (default 1, 0
 * makes fakertGetDeviceCount fail with fakertErrorNoDevice) of FAKERT_DEVICE_MEMORY bytes each
 * (default 2 GiB), streams run by one worker thread each, events with timing, host functions.
 * IPC is not supported (fakertErrorNotSupported). Mapped pinned memory has a device address of its
 * own (not the host address, and not one the CPU can dereference), and a fake driver, fakecu*,
 * offers the stream memory wait host signals use (fakecuStreamWaitValue64_v2). It stands in for
 * MetaX's mc*, Moore Threads' musa* or Biren's supa* runtimes, which cannot be installed here, to
 * prove that the backend builds and works under another prefix by configuration alone.
 */
#ifndef TESSERA_TESTS_CUDA_SHIM_FAKERT_RUNTIME_H_
#define TESSERA_TESTS_CUDA_SHIM_FAKERT_RUNTIME_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fakertError {
  fakertSuccess = 0,
  fakertErrorInvalidValue = 1,
  fakertErrorMemoryAllocation = 2,
  fakertErrorInsufficientDriver = 35,
  fakertErrorNoDevice = 100,
  fakertErrorInvalidDevice = 101,
  fakertErrorInvalidResourceHandle = 400,
  fakertErrorNotReady = 600,
  fakertErrorPeerAccessAlreadyEnabled = 704,
  fakertErrorLaunchFailure = 719,
  fakertErrorHostMemoryAlreadyRegistered = 712,
  fakertErrorNotPermitted = 800,
  fakertErrorNotSupported = 801
} fakertError_t;

typedef struct fakertStream_st* fakertStream_t;
typedef struct fakertEvent_st* fakertEvent_t;
typedef void (*fakertHostFn_t)(void* user_data);
typedef void (*fakertStreamCallback_t)(fakertStream_t stream, fakertError_t status,
                                       void* user_data);

typedef struct fakertUUID_st {
  char bytes[16];
} fakertUUID_t;

typedef struct fakertDeviceProp {
  char name[256];
  fakertUUID_t uuid;
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major;
  int minor;
  int pciDomainID;
  int pciBusID;
  int pciDeviceID;
  int memoryBusWidth;
} fakertDeviceProp;

typedef struct fakertIpcMemHandle_st {
  char reserved[64];
} fakertIpcMemHandle_t;

enum fakertMemcpyKind { fakertMemcpyDefault = 4 };
/* CUDA's numbers. The limits: 1024 threads per block, blocks up to (1024, 1024, 64), grids up to
 * (2^31 - 1, 65535, 65535), 48 KiB of shared memory per block (96 KiB with the opt-in). */
enum fakertDeviceAttr {
  fakertDevAttrMaxThreadsPerBlock = 1,
  fakertDevAttrMaxBlockDimX = 2,
  fakertDevAttrMaxBlockDimY = 3,
  fakertDevAttrMaxBlockDimZ = 4,
  fakertDevAttrMaxGridDimX = 5,
  fakertDevAttrMaxGridDimY = 6,
  fakertDevAttrMaxGridDimZ = 7,
  fakertDevAttrMaxSharedMemoryPerBlock = 8,
  fakertDevAttrClockRate = 13,
  fakertDevAttrMemoryClockRate = 36,
  fakertDevAttrMaxSharedMemoryPerBlockOptin = 97
};
#define fakertStreamNonBlocking 0x01
#define fakertEventDefault 0x00
#define fakertEventDisableTiming 0x02
#define fakertHostAllocPortable 0x01
#define fakertHostAllocMapped 0x02
#define fakertHostRegisterPortable 0x01
#define fakertIpcMemLazyEnablePeerAccess 0x01

const char* fakertGetErrorName(fakertError_t error);
const char* fakertGetErrorString(fakertError_t error);
fakertError_t fakertGetLastError(void);
fakertError_t fakertRuntimeGetVersion(int* version);
fakertError_t fakertDriverGetVersion(int* version);

fakertError_t fakertGetDeviceCount(int* count);
fakertError_t fakertGetDeviceProperties(fakertDeviceProp* prop, int device);
fakertError_t fakertDeviceGetAttribute(int* value, enum fakertDeviceAttr attr, int device);
fakertError_t fakertGetDevice(int* device);
fakertError_t fakertSetDevice(int device);
fakertError_t fakertDeviceGetStreamPriorityRange(int* least, int* greatest);
fakertError_t fakertDeviceCanAccessPeer(int* can_access, int device, int peer);
fakertError_t fakertDeviceEnablePeerAccess(int peer, unsigned int flags);

fakertError_t fakertMalloc(void** ptr, size_t bytes);
fakertError_t fakertFree(void* ptr);
fakertError_t fakertHostAlloc(void** ptr, size_t bytes, unsigned int flags);
fakertError_t fakertFreeHost(void* ptr);
fakertError_t fakertHostRegister(void* ptr, size_t bytes, unsigned int flags);
fakertError_t fakertHostUnregister(void* ptr);
/* The device address of mapped pinned memory (fakertHostAllocMapped); flags must be 0. */
fakertError_t fakertHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags);
fakertError_t fakertMemGetInfo(size_t* free_bytes, size_t* total_bytes);

fakertError_t fakertMemcpyAsync(void* dst, const void* src, size_t bytes,
                                enum fakertMemcpyKind kind, fakertStream_t stream);
fakertError_t fakertMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                    size_t bytes, fakertStream_t stream);
fakertError_t fakertMemsetAsync(void* dst, int value, size_t bytes, fakertStream_t stream);

fakertError_t fakertStreamCreateWithPriority(fakertStream_t* stream, unsigned int flags,
                                             int priority);
fakertError_t fakertStreamDestroy(fakertStream_t stream);
fakertError_t fakertStreamSynchronize(fakertStream_t stream);
fakertError_t fakertStreamQuery(fakertStream_t stream);
fakertError_t fakertStreamWaitEvent(fakertStream_t stream, fakertEvent_t event, unsigned int flags);
fakertError_t fakertLaunchHostFunc(fakertStream_t stream, fakertHostFn_t fn, void* user_data);
/* flags must be 0. The callback gets fakertSuccess, or fakertErrorLaunchFailure once a host
 * kernel failed on the stream (fakert_module.cc). */
fakertError_t fakertStreamAddCallback(fakertStream_t stream, fakertStreamCallback_t callback,
                                      void* user_data, unsigned int flags);

fakertError_t fakertEventCreateWithFlags(fakertEvent_t* event, unsigned int flags);
fakertError_t fakertEventDestroy(fakertEvent_t event);
fakertError_t fakertEventRecord(fakertEvent_t event, fakertStream_t stream);
fakertError_t fakertEventSynchronize(fakertEvent_t event);
fakertError_t fakertEventQuery(fakertEvent_t event);
fakertError_t fakertEventElapsedTime(float* ms, fakertEvent_t start, fakertEvent_t end);

fakertError_t fakertIpcGetMemHandle(fakertIpcMemHandle_t* handle, void* ptr);
fakertError_t fakertIpcOpenMemHandle(void** ptr, fakertIpcMemHandle_t handle, unsigned int flags);
fakertError_t fakertIpcCloseMemHandle(void* ptr);

/* ---- the fake driver (fakert_driver.cc) ----------------------------------------------------
 * The subset of CUDA's driver API that backends/cuda resolves with dlsym for host signals, with
 * the driver's signatures under the prefix fakecu (CUresult is int, 0 success; CUstream is the
 * runtime stream; CUdeviceptr is unsigned long long). FAKERT_NO_STREAM_MEM_OPS=1 makes every
 * device report attribute 122 (64-bit stream memory operations) as 0. */
#define FAKECU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define FAKECU_STREAM_WAIT_VALUE_GEQ 0x0
int fakecuStreamWaitValue64_v2(fakertStream_t stream, unsigned long long address,
                               unsigned long long value, unsigned int flags);
int fakecuDeviceGet(int* device, int ordinal);
int fakecuDeviceGetAttribute(int* value, int attribute, int device);
int fakecuGetErrorName(int result, const char** text);
int fakecuGetErrorString(int result, const char** text);

/* ---- the fake driver's modules (fakert_module.cc) --------------------------------------------
 * cuModuleLoadData and friends for the CUDA backend's module entries (backends/cuda/module.cc).
 * The fake has no GPU, so the only image it runs is the host format of backend_abi.h: an ELF
 * shared object for this CPU exporting tessera_host_module_v1, loaded from memory (memfd +
 * dlopen); a launch runs the kernel once per block, in order, on the stream's worker thread.
 * cuFuncGetParamInfo answers from the kernel's argument sizes. A cubin, a fatbin or PTX is refused
 * (FAKECU_ERROR_NO_BINARY_FOR_GPU, FAKECU_ERROR_INVALID_PTX with the reason in the JIT error log)
 * saying that the fake runtime has no GPU; the error string of an image error carries the calling
 * thread's last reason (the loader's message, the image's kind). A host kernel that returns
 * non-zero fails its stream, stickily: from then on fakertStreamSynchronize and fakertStreamQuery
 * on it return fakertErrorLaunchFailure (719, CUDA's number) and its stream callbacks receive that
 * status; the kernel's message goes to stderr. */
#define FAKECU_ERROR_INVALID_IMAGE 200
#define FAKECU_ERROR_NO_BINARY_FOR_GPU 209
#define FAKECU_ERROR_INVALID_PTX 218
#define FAKECU_ERROR_NOT_FOUND 500
#define FAKECU_ERROR_LAUNCH_FAILED 719
#define FAKECU_JIT_ERROR_LOG_BUFFER 5
#define FAKECU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define FAKECU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 0
#define FAKECU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define FAKECU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
typedef struct fakecuModule_st* fakecuModule;
typedef struct fakecuFunction_st* fakecuFunction;
int fakecuModuleLoadData(fakecuModule* module, const void* image);
int fakecuModuleLoadDataEx(fakecuModule* module, const void* image, unsigned int num_options,
                           int* options, void** option_values);
int fakecuModuleUnload(fakecuModule module);
int fakecuModuleGetFunction(fakecuFunction* function, fakecuModule module, const char* name);
int fakecuFuncGetAttribute(int* value, int attribute, fakecuFunction function);
int fakecuFuncSetAttribute(fakecuFunction function, int attribute, int value);
int fakecuFuncGetParamInfo(fakecuFunction function, size_t index, size_t* offset, size_t* size);
int fakecuLaunchKernel(fakecuFunction function, unsigned int grid_x, unsigned int grid_y,
                       unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                       unsigned int block_z, unsigned int shared_bytes, fakertStream_t stream,
                       void** params, void** extra);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_TESTS_CUDA_SHIM_FAKERT_RUNTIME_H_ */
