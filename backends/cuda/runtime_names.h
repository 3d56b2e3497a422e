/*
 * Every runtime name the CUDA backend uses, in one place, so the same sources build against any
 * CUDA-shaped runtime (docs/CUDA_COMPATIBLE_STACKS.md):
 *
 *   NVIDIA CUDA, Iluvatar CoreX   prefix cuda   header cuda_runtime_api.h   (the default)
 *   MetaX MACA                    prefix mc     header mc_runtime_api.h
 *   Moore Threads MUSA            prefix musa   header musa_runtime_api.h
 *   Biren SUPA                    prefix supa   header supa_runtime_api.h
 *   tests/cuda_shim               prefix fakert header fakert_runtime.h
 *
 * CMake passes TESSERA_CUDA_RUNTIME_PREFIX (a bare token, e.g. cuda) and
 * TESSERA_CUDA_RUNTIME_HEADER (a quoted file name); rtMalloc then reads cudaMalloc, mcMalloc, ...
 * The backend never spells a runtime name directly: only rt* aliases from this file.
 *
 * Where one stack spells a name differently, define that alias before this header is read (for
 * example in a header given with -include, or -D'rtIpcMemLazyEnablePeerAccess=1'); each alias
 * below is only a default. This list is also the exact subset of the runtime a stack must offer:
 * tests/cuda_shim/fakert_runtime.h implements precisely these names.
 *
 * Plain C, included from C++ and from CUDA sources.
 */
#ifndef TESSERA_BACKENDS_CUDA_RUNTIME_NAMES_H_
#define TESSERA_BACKENDS_CUDA_RUNTIME_NAMES_H_

#ifndef TESSERA_CUDA_RUNTIME_PREFIX
#define TESSERA_CUDA_RUNTIME_PREFIX cuda
#endif
#ifndef TESSERA_CUDA_RUNTIME_HEADER
#define TESSERA_CUDA_RUNTIME_HEADER "cuda_runtime_api.h"
#endif

#include TESSERA_CUDA_RUNTIME_HEADER

#define TSR_RT_PASTE2(a, b) a##b
#define TSR_RT_PASTE(a, b) TSR_RT_PASTE2(a, b)
/* TSR_RT(Malloc) -> cudaMalloc (or mcMalloc, musaMalloc, ...). */
#define TSR_RT(name) TSR_RT_PASTE(TESSERA_CUDA_RUNTIME_PREFIX, name)
/* The spelled-out name of an alias after expansion, for messages: TSR_RT_NAME(rtMalloc) is
 * "cudaMalloc". */
#define TSR_RT_STR2(x) #x
#define TSR_RT_NAME(x) TSR_RT_STR2(x)
/* "cuda", "mc", ...: names the stack in messages. */
#define TSR_RT_PREFIX_NAME TSR_RT_NAME(TESSERA_CUDA_RUNTIME_PREFIX)

/* ---- types ------------------------------------------------------------------------------- */
#ifndef rtError_t
#define rtError_t TSR_RT(Error_t)
#endif
#ifndef rtStream_t
#define rtStream_t TSR_RT(Stream_t)
#endif
#ifndef rtEvent_t
#define rtEvent_t TSR_RT(Event_t)
#endif
/* Fields read: name, uuid.bytes, totalGlobalMem, multiProcessorCount, major, minor,
 * pciDomainID, pciBusID, pciDeviceID, memoryBusWidth. */
#ifndef rtDeviceProp
#define rtDeviceProp TSR_RT(DeviceProp)
#endif
#ifndef rtIpcMemHandle_t
#define rtIpcMemHandle_t TSR_RT(IpcMemHandle_t)
#endif

/* ---- status values ------------------------------------------------------------------------ */
#ifndef rtSuccess
#define rtSuccess TSR_RT(Success)
#endif
#ifndef rtErrorNotReady
#define rtErrorNotReady TSR_RT(ErrorNotReady)
#endif
#ifndef rtErrorInvalidValue
#define rtErrorInvalidValue TSR_RT(ErrorInvalidValue)
#endif
#ifndef rtErrorInvalidDevice
#define rtErrorInvalidDevice TSR_RT(ErrorInvalidDevice)
#endif
#ifndef rtErrorInvalidResourceHandle
#define rtErrorInvalidResourceHandle TSR_RT(ErrorInvalidResourceHandle)
#endif
#ifndef rtErrorMemoryAllocation
#define rtErrorMemoryAllocation TSR_RT(ErrorMemoryAllocation)
#endif
#ifndef rtErrorNoDevice
#define rtErrorNoDevice TSR_RT(ErrorNoDevice)
#endif
#ifndef rtErrorInsufficientDriver
#define rtErrorInsufficientDriver TSR_RT(ErrorInsufficientDriver)
#endif
#ifndef rtErrorNotSupported
#define rtErrorNotSupported TSR_RT(ErrorNotSupported)
#endif
#ifndef rtErrorNotPermitted
#define rtErrorNotPermitted TSR_RT(ErrorNotPermitted)
#endif
#ifndef rtErrorPeerAccessAlreadyEnabled
#define rtErrorPeerAccessAlreadyEnabled TSR_RT(ErrorPeerAccessAlreadyEnabled)
#endif
#ifndef rtErrorHostMemoryAlreadyRegistered
#define rtErrorHostMemoryAlreadyRegistered TSR_RT(ErrorHostMemoryAlreadyRegistered)
#endif

/* ---- flags and enum values ---------------------------------------------------------------- */
#ifndef rtMemcpyDefault
#define rtMemcpyDefault TSR_RT(MemcpyDefault)
#endif
#ifndef rtStreamNonBlocking
#define rtStreamNonBlocking TSR_RT(StreamNonBlocking)
#endif
#ifndef rtEventDefault
#define rtEventDefault TSR_RT(EventDefault)
#endif
#ifndef rtEventDisableTiming
#define rtEventDisableTiming TSR_RT(EventDisableTiming)
#endif
#ifndef rtHostAllocPortable
#define rtHostAllocPortable TSR_RT(HostAllocPortable)
#endif
#ifndef rtHostAllocMapped
#define rtHostAllocMapped TSR_RT(HostAllocMapped)
#endif
#ifndef rtHostRegisterPortable
#define rtHostRegisterPortable TSR_RT(HostRegisterPortable)
#endif
#ifndef rtIpcMemLazyEnablePeerAccess
#define rtIpcMemLazyEnablePeerAccess TSR_RT(IpcMemLazyEnablePeerAccess)
#endif
#ifndef rtDevAttrClockRate
#define rtDevAttrClockRate TSR_RT(DevAttrClockRate) /* kHz */
#endif
#ifndef rtDevAttrMemoryClockRate
#define rtDevAttrMemoryClockRate TSR_RT(DevAttrMemoryClockRate) /* kHz */
#endif
/* Launch limits (module.cc checks a launch against them): threads per block, block and grid
 * dimensions, shared memory per block (the opt-in maximum; a stack without it defines it as
 * rtDevAttrMaxSharedMemoryPerBlock). */
#ifndef rtDevAttrMaxThreadsPerBlock
#define rtDevAttrMaxThreadsPerBlock TSR_RT(DevAttrMaxThreadsPerBlock)
#endif
#ifndef rtDevAttrMaxBlockDimX
#define rtDevAttrMaxBlockDimX TSR_RT(DevAttrMaxBlockDimX)
#endif
#ifndef rtDevAttrMaxBlockDimY
#define rtDevAttrMaxBlockDimY TSR_RT(DevAttrMaxBlockDimY)
#endif
#ifndef rtDevAttrMaxBlockDimZ
#define rtDevAttrMaxBlockDimZ TSR_RT(DevAttrMaxBlockDimZ)
#endif
#ifndef rtDevAttrMaxGridDimX
#define rtDevAttrMaxGridDimX TSR_RT(DevAttrMaxGridDimX)
#endif
#ifndef rtDevAttrMaxGridDimY
#define rtDevAttrMaxGridDimY TSR_RT(DevAttrMaxGridDimY)
#endif
#ifndef rtDevAttrMaxGridDimZ
#define rtDevAttrMaxGridDimZ TSR_RT(DevAttrMaxGridDimZ)
#endif
#ifndef rtDevAttrMaxSharedMemoryPerBlockOptin
#define rtDevAttrMaxSharedMemoryPerBlockOptin TSR_RT(DevAttrMaxSharedMemoryPerBlockOptin)
#endif

/* ---- functions ---------------------------------------------------------------------------- */
#ifndef rtGetErrorName
#define rtGetErrorName TSR_RT(GetErrorName)
#endif
#ifndef rtGetErrorString
#define rtGetErrorString TSR_RT(GetErrorString)
#endif
#ifndef rtGetLastError
#define rtGetLastError TSR_RT(GetLastError)
#endif
#ifndef rtRuntimeGetVersion
#define rtRuntimeGetVersion TSR_RT(RuntimeGetVersion)
#endif
#ifndef rtDriverGetVersion
#define rtDriverGetVersion TSR_RT(DriverGetVersion)
#endif
#ifndef rtGetDeviceCount
#define rtGetDeviceCount TSR_RT(GetDeviceCount)
#endif
#ifndef rtGetDeviceProperties
#define rtGetDeviceProperties TSR_RT(GetDeviceProperties)
#endif
#ifndef rtDeviceGetAttribute
#define rtDeviceGetAttribute TSR_RT(DeviceGetAttribute)
#endif
#ifndef rtGetDevice
#define rtGetDevice TSR_RT(GetDevice)
#endif
#ifndef rtSetDevice
#define rtSetDevice TSR_RT(SetDevice)
#endif
#ifndef rtMalloc
#define rtMalloc TSR_RT(Malloc)
#endif
#ifndef rtFree
#define rtFree TSR_RT(Free)
#endif
#ifndef rtHostAlloc
#define rtHostAlloc TSR_RT(HostAlloc)
#endif
#ifndef rtFreeHost
#define rtFreeHost TSR_RT(FreeHost)
#endif
#ifndef rtHostRegister
#define rtHostRegister TSR_RT(HostRegister)
#endif
#ifndef rtHostUnregister
#define rtHostUnregister TSR_RT(HostUnregister)
#endif
#ifndef rtMemGetInfo
#define rtMemGetInfo TSR_RT(MemGetInfo)
#endif
#ifndef rtMemcpyAsync
#define rtMemcpyAsync TSR_RT(MemcpyAsync)
#endif
#ifndef rtMemcpyPeerAsync
#define rtMemcpyPeerAsync TSR_RT(MemcpyPeerAsync)
#endif
#ifndef rtMemsetAsync
#define rtMemsetAsync TSR_RT(MemsetAsync)
#endif
#ifndef rtDeviceGetStreamPriorityRange
#define rtDeviceGetStreamPriorityRange TSR_RT(DeviceGetStreamPriorityRange)
#endif
#ifndef rtStreamCreateWithPriority
#define rtStreamCreateWithPriority TSR_RT(StreamCreateWithPriority)
#endif
#ifndef rtStreamDestroy
#define rtStreamDestroy TSR_RT(StreamDestroy)
#endif
#ifndef rtStreamSynchronize
#define rtStreamSynchronize TSR_RT(StreamSynchronize)
#endif
#ifndef rtStreamQuery
#define rtStreamQuery TSR_RT(StreamQuery)
#endif
#ifndef rtStreamWaitEvent
#define rtStreamWaitEvent TSR_RT(StreamWaitEvent)
#endif
#ifndef rtLaunchHostFunc
#define rtLaunchHostFunc TSR_RT(LaunchHostFunc)
#endif
/* Host functions that receive the stream's status (stream_add_callback_with_message). */
#ifndef rtStreamAddCallback
#define rtStreamAddCallback TSR_RT(StreamAddCallback)
#endif
#ifndef rtHostGetDevicePointer
#define rtHostGetDevicePointer TSR_RT(HostGetDevicePointer)
#endif
#ifndef rtEventCreateWithFlags
#define rtEventCreateWithFlags TSR_RT(EventCreateWithFlags)
#endif
#ifndef rtEventDestroy
#define rtEventDestroy TSR_RT(EventDestroy)
#endif
#ifndef rtEventRecord
#define rtEventRecord TSR_RT(EventRecord)
#endif
#ifndef rtEventSynchronize
#define rtEventSynchronize TSR_RT(EventSynchronize)
#endif
#ifndef rtEventQuery
#define rtEventQuery TSR_RT(EventQuery)
#endif
#ifndef rtEventElapsedTime
#define rtEventElapsedTime TSR_RT(EventElapsedTime)
#endif
#ifndef rtDeviceCanAccessPeer
#define rtDeviceCanAccessPeer TSR_RT(DeviceCanAccessPeer)
#endif
#ifndef rtDeviceEnablePeerAccess
#define rtDeviceEnablePeerAccess TSR_RT(DeviceEnablePeerAccess)
#endif
#ifndef rtIpcGetMemHandle
#define rtIpcGetMemHandle TSR_RT(IpcGetMemHandle)
#endif
#ifndef rtIpcOpenMemHandle
#define rtIpcOpenMemHandle TSR_RT(IpcOpenMemHandle)
#endif
#ifndef rtIpcCloseMemHandle
#define rtIpcCloseMemHandle TSR_RT(IpcCloseMemHandle)
#endif

/* ---- host signals (host_signal.cc) ---------------------------------------------------------
 * A host signal is a 64-bit word in mapped pinned memory (rtHostAlloc with rtHostAllocMapped) that
 * the host raises and a stream waits on with a "wait until value >= N" stream memory operation.
 * CUDA's runtime has no such call; the driver does (cuStreamWaitValue64), so by default the
 * backend resolves it from TESSERA_CUDA_DRIVER_LIBRARY with the symbol prefix
 * TESSERA_CUDA_DRIVER_PREFIX (cu): <prefix>StreamWaitValue64_v2 (or the older unversioned name),
 * with <prefix>DeviceGet / <prefix>DeviceGetAttribute to ask whether a device supports it.
 * A stack whose runtime has the wait itself (HIP: hipStreamWaitValue64) defines instead, in its
 * runtime header:
 *   TSR_RT_STREAM_WAIT_VALUE64(stream, device_ptr, value)  rtError_t; later work on `stream`
 *                                      waits until the 64-bit word at device_ptr is >= value
 *   TSR_RT_CAN_WAIT_VALUE64(device, int* out)   rtError_t; *out = 1 when `device` supports it
 * With neither (no driver library, or a driver without the symbol) the five host-signal entries
 * are NULL. */

/* ---- kernel modules (module.cc) ------------------------------------------------------------
 * The CUDA runtime has no module API; the driver does. By default the backend resolves from
 * TESSERA_CUDA_DRIVER_LIBRARY, with the prefix TESSERA_CUDA_DRIVER_PREFIX: <p>ModuleLoadData,
 * <p>ModuleLoadDataEx (PTX, with the JIT error log), <p>ModuleGetFunction, <p>LaunchKernel,
 * <p>ModuleUnload, <p>FuncGetAttribute, and, when present, <p>FuncSetAttribute (dynamic shared
 * memory above the default) and <p>FuncGetParamInfo (argument checks; CUDA 12.4+). Modules live in
 * the device's primary context, the one the runtime uses. A stack whose runtime has the module
 * calls itself (HIP: hipModuleLoadData, ...) defines TSR_RT_MODULE_CALLS in its runtime header and
 * these, all returning the runtime's error as an int (0 success, 500 not found):
 *   tsr_rt_module_load(void** module, const void* image)
 *   tsr_rt_module_unload(void* module)
 *   tsr_rt_module_get_function(void** function, void* module, const char* name)
 *   tsr_rt_module_launch(void* function, unsigned gx, gy, gz, bx, by, bz, unsigned shared_bytes,
 *                        rtStream_t stream, void** params)
 *   tsr_rt_func_get_attribute(int* value, int attribute, void* function)  (CUDA's numbering)
 * CMake's MODULE_FORMATS (tessera_add_cuda_like_backend) says which tsr_module_format values the
 * build hands to the module loader: CUBIN and PTX for CUDA, the HIP code object for HIP, the host
 * format for tests/cuda_shim's fake driver. */

#endif /* TESSERA_BACKENDS_CUDA_RUNTIME_NAMES_H_ */
