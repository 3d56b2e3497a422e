# tessera_add_cuda_like_backend(): builds backends/cuda against a CUDA-shaped runtime, the real
# CUDA runtime or a vendor's renamed copy of it (docs/CUDA_COMPATIBLE_STACKS.md). The same sources
# every time; what differs is configuration:
#
#   tessera_add_cuda_like_backend(<name>
#     PREFIX <token>            runtime symbol prefix: cuda, mc, musa, supa, fakert ...
#     HEADER <file>             the runtime header: cuda_runtime_api.h, mc_runtime_api.h ...
#     LIBRARY <targets/paths>   what to link for the runtime: CUDA::cudart_static, a path ...
#     [INCLUDE_DIRS <dirs>]     where HEADER lives, when not on the default path
#     [KERNELS ON|OFF]          compile reduce.cu/cast.cu/busy_wait.cu with the CUDA language
#                               (default OFF); OFF leaves reduce_async, cast_async and
#                               stream_busy_wait NULL (KERNEL_OBJECTS fill only the first two)
#     [ARCHITECTURES <list>]    CUDA architectures, e.g. "80;90": SASS for each, PTX for the last
#     [KERNEL_OBJECTS <files>]  reduce/cast kernels compiled outside CMake's CUDA language (hipcc
#                               for backends/hip); with KERNELS OFF, links them and fills the
#                               entries as KERNELS ON does
#     [IPC ON|OFF]              the stack has IPC memory handles (default ON)
#     [VENDOR <text>]           tsr_device_properties.vendor (default NVIDIA)
#     [NVIDIA_TABLES ON|OFF]    peak FLOP/s from NVIDIA's per-architecture table (default OFF)
#     [DRIVER_LIBRARY <soname>] probed with dlopen before init; its absence gives NO_DRIVER with
#                               the loader's message ("" skips the probe). Also where host
#                               signals find <DRIVER_PREFIX>StreamWaitValue64_v2 (runtime_names.h)
#     [DRIVER_PREFIX <p>]       the driver's symbol prefix (default cu: cuStreamWaitValue64_v2)
#     [BLAS_LIBRARIES <list>]   sonames tried for GEMM ("" leaves gemm_async NULL)
#     [BLAS_PREFIX <p>]         its symbol prefix (cublas: cublasGemmEx)
#     [CCL_LIBRARY <soname>]    collective library ("" leaves the collectives sub-table NULL)
#     [CCL_PREFIX <p>]          its symbol prefix (nccl: ncclAllReduce)
#     [MODULE_FORMATS <list>]   the tsr_module_format names module_load takes, without TSR_MODULE_
#                               (default CUDA_CUBIN;CUDA_PTX; HIP: HIP_CODE_OBJ; the fake driver
#                               of tests/cuda_shim: HOST_ELF). The module calls come from the
#                               driver library (DRIVER_PREFIX) or the runtime header
#                               (TSR_RT_MODULE_CALLS); without them devices report no formats
#     [TEST_ONLY]               not installed, not listed as built; written to OUTPUT_DIRECTORY
#     [OUTPUT_DIRECTORY <dir>])
#
# Creates target tessera-backend-<name>, file libtessera-backend-<name>.so.
include_guard(GLOBAL)

function(tessera_add_cuda_like_backend name)
  cmake_parse_arguments(ARG "TEST_ONLY"
    "PREFIX;HEADER;KERNELS;IPC;VENDOR;NVIDIA_TABLES;DRIVER_LIBRARY;DRIVER_PREFIX;BLAS_PREFIX;CCL_LIBRARY;CCL_PREFIX;OUTPUT_DIRECTORY"
    "LIBRARY;INCLUDE_DIRS;BLAS_LIBRARIES;ARCHITECTURES;KERNEL_OBJECTS;MODULE_FORMATS" ${ARGN})
  foreach(required PREFIX HEADER LIBRARY)
    if(NOT ARG_${required})
      message(FATAL_ERROR "tessera_add_cuda_like_backend(${name}): ${required} is required")
    endif()
  endforeach()
  foreach(flag KERNELS NVIDIA_TABLES)
    if(NOT DEFINED ARG_${flag})
      set(ARG_${flag} OFF)
    endif()
  endforeach()
  if(NOT DEFINED ARG_IPC)
    set(ARG_IPC ON)
  endif()
  if(NOT DEFINED ARG_VENDOR)
    set(ARG_VENDOR NVIDIA)
  endif()
  foreach(optional DRIVER_LIBRARY CCL_LIBRARY)
    if(NOT DEFINED ARG_${optional})
      set(ARG_${optional} "")
    endif()
  endforeach()
  if(NOT ARG_BLAS_PREFIX)
    set(ARG_BLAS_PREFIX cublas)
  endif()
  if(NOT ARG_DRIVER_PREFIX)
    set(ARG_DRIVER_PREFIX cu)
  endif()
  if(NOT ARG_CCL_PREFIX)
    set(ARG_CCL_PREFIX nccl)
  endif()
  if(NOT DEFINED ARG_MODULE_FORMATS)
    set(ARG_MODULE_FORMATS CUDA_CUBIN CUDA_PTX)
  endif()
  # As tsr_module_format in backend_abi.h.
  set(module_format_bits 0)
  set(known_formats HOST_ELF CUDA_CUBIN CUDA_PTX HIP_CODE_OBJ SPIRV)
  foreach(format IN LISTS ARG_MODULE_FORMATS)
    list(FIND known_formats ${format} index)
    if(index LESS 0)
      message(FATAL_ERROR "tessera_add_cuda_like_backend(${name}): MODULE_FORMATS: unknown "
                          "format ${format} (HOST_ELF, CUDA_CUBIN, CUDA_PTX, HIP_CODE_OBJ, SPIRV)")
    endif()
    math(EXPR module_format_bits "${module_format_bits} | (1 << (${index} + 1))")
  endforeach()

  set(dir ${PROJECT_SOURCE_DIR}/backends/cuda)
  set(sources ${dir}/collectives.cc ${dir}/compute.cc ${dir}/devices.cc ${dir}/entry.cc
              ${dir}/errors.cc ${dir}/event.cc ${dir}/gemm.cc ${dir}/host_signal.cc ${dir}/ipc.cc
              ${dir}/memory.cc ${dir}/module.cc
              ${dir}/state.cc ${dir}/stream.cc ${dir}/transfer.cc)
  if(ARG_KERNELS)
    list(APPEND sources ${dir}/reduce.cu ${dir}/cast.cu ${dir}/busy_wait.cu)
  endif()
  list(APPEND sources ${ARG_KERNEL_OBJECTS})

  set(target tessera-backend-${name})
  if(ARG_TEST_ONLY)
    add_library(${target} MODULE ${sources})
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/hal/include)
    set_target_properties(${target} PROPERTIES
      PREFIX "lib"
      OUTPUT_NAME tessera-backend-${name}
      LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY}
      C_VISIBILITY_PRESET hidden
      CXX_VISIBILITY_PRESET hidden
      VISIBILITY_INLINES_HIDDEN ON)
    tessera_link_no_undefined(${target})
    tessera_target_defaults(${target})
    tessera_unity_build(${target})
  else()
    tessera_add_backend(${name} SOURCES ${sources})
  endif()

  target_include_directories(${target} PRIVATE ${dir} ${ARG_INCLUDE_DIRS})
  string(REPLACE ";" ":" blas_list "${ARG_BLAS_LIBRARIES}")
  foreach(flag KERNELS IPC NVIDIA_TABLES)
    if(ARG_${flag} OR (flag STREQUAL "KERNELS" AND ARG_KERNEL_OBJECTS))
      set(have_${flag} 1)
    else()
      set(have_${flag} 0)
    endif()
  endforeach()
  target_compile_definitions(${target} PRIVATE
    TESSERA_CUDA_RUNTIME_PREFIX=${ARG_PREFIX}
    TESSERA_CUDA_RUNTIME_HEADER="${ARG_HEADER}"
    TESSERA_CUDA_BACKEND_NAME="${name}"
    TESSERA_CUDA_VERSION="${PROJECT_VERSION}"
    TESSERA_CUDA_VENDOR="${ARG_VENDOR}"
    TESSERA_CUDA_HAVE_KERNELS=${have_KERNELS}
    TESSERA_CUDA_HAVE_BUSY_WAIT=$<BOOL:${ARG_KERNELS}>
    TESSERA_CUDA_HAVE_IPC=${have_IPC}
    TESSERA_CUDA_NVIDIA_TABLES=${have_NVIDIA_TABLES}
    TESSERA_CUDA_DRIVER_LIBRARY="${ARG_DRIVER_LIBRARY}"
    TESSERA_CUDA_DRIVER_PREFIX="${ARG_DRIVER_PREFIX}"
    TESSERA_CUDA_BLAS_LIBRARIES="${blas_list}"
    TESSERA_CUDA_BLAS_PREFIX="${ARG_BLAS_PREFIX}"
    TESSERA_CUDA_CCL_LIBRARY="${ARG_CCL_LIBRARY}"
    TESSERA_CUDA_CCL_PREFIX="${ARG_CCL_PREFIX}"
    TESSERA_CUDA_MODULE_FORMATS=${module_format_bits}u)
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS})
  # Only the entry point is exported; a statically linked runtime stays private.
  target_link_options(${target} PRIVATE -Wl,--version-script=${dir}/exports.map)
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${dir}/exports.map)

  if(ARG_KERNELS)
    # SASS for every listed architecture, PTX for the last (newer GPUs JIT it).
    set(archs "")
    list(LENGTH ARG_ARCHITECTURES count)
    math(EXPR last "${count} - 1")
    set(i 0)
    foreach(arch IN LISTS ARG_ARCHITECTURES)
      if(i EQUAL last)
        list(APPEND archs "${arch}")
      else()
        list(APPEND archs "${arch}-real")
      endif()
      math(EXPR i "${i} + 1")
    endforeach()
    set_target_properties(${target} PROPERTIES
      CUDA_ARCHITECTURES "${archs}"
      CUDA_STANDARD 17
      CUDA_STANDARD_REQUIRED ON
      CUDA_RUNTIME_LIBRARY Static)
    # IEEE results bit for bit: no fast math, no flush-to-zero, correctly rounded division.
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-ftz=false -prec-div=true -Xcompiler=-fvisibility=hidden>)
  endif()
endfunction()
