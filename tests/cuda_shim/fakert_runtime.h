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
enum fakertDeviceAttr { fakertDevAttrClockRate = 13, fakertDevAttrMemoryClockRate = 36 };
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
/* flags must be 0. Fake streams never fail, so the callback always gets fakertSuccess. */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_TESTS_CUDA_SHIM_FAKERT_RUNTIME_H_ */
