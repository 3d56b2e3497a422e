# Finding the compilers that make kernel images at build time, and their common flags: used by the
# CTS's kernel images (hal/cts/kernels) and the GPT trainer's (examples/trainer/gpt/kernels), so
# both find the same tools the same way.
#
# tessera_find_nvcc(<out_var>): nvcc (CMAKE_CUDA_COMPILER, the CUDA toolkit's, or
#   /usr/local/cuda/bin), "" when none or when TESSERA_BACKEND_CUDA is OFF.
# tessera_cuda_gencode(<out_var> <archs>): nvcc -gencode flags for a fatbin with SASS for each
#   architecture and PTX for the newest (so newer GPUs JIT it).
# tessera_find_spirv_tools(<clang_var> <llvm_spirv_var>): clang and llvm-spirv of one LLVM version
#   (the Level Zero backend's TESSERA_ZE_CLANG / TESSERA_ZE_LLVM_SPIRV, else Debian's clang-14 and
#   llvm-spirv-14), "" when missing or when TESSERA_BACKEND_LEVEL_ZERO is OFF; also finds
#   TESSERA_SPIRV_VAL (spirv-val) when present.
function(tessera_find_nvcc out_var)
  set(_nvcc "")
  if(NOT TESSERA_BACKEND_CUDA STREQUAL "OFF")
    if(CMAKE_CUDA_COMPILER MATCHES "nvcc$")
      set(_nvcc ${CMAKE_CUDA_COMPILER})
    elseif(CUDAToolkit_NVCC_EXECUTABLE)
      set(_nvcc ${CUDAToolkit_NVCC_EXECUTABLE})
    else()
      find_program(TESSERA_NVCC nvcc PATHS /usr/local/cuda/bin)
      if(TESSERA_NVCC)
        set(_nvcc ${TESSERA_NVCC})
      endif()
    endif()
  endif()
  set(${out_var} "${_nvcc}" PARENT_SCOPE)
endfunction()

function(tessera_cuda_gencode out_var archs)
  set(_gencode "")
  list(GET archs -1 _last)
  foreach(arch IN LISTS archs)
    if(arch STREQUAL _last)
      list(APPEND _gencode -gencode arch=compute_${arch},code=[sm_${arch},compute_${arch}])
    else()
      list(APPEND _gencode -gencode arch=compute_${arch},code=sm_${arch})
    endif()
  endforeach()
  set(${out_var} ${_gencode} PARENT_SCOPE)
endfunction()

function(tessera_find_spirv_tools clang_var llvm_spirv_var)
  set(_clang "")
  set(_llvm_spirv "")
  if(NOT TESSERA_BACKEND_LEVEL_ZERO STREQUAL "OFF")
    set(_clang ${TESSERA_ZE_CLANG})
    set(_llvm_spirv ${TESSERA_ZE_LLVM_SPIRV})
    if(NOT _clang OR NOT _llvm_spirv)
      find_program(TESSERA_CLANG14 clang-14)
      find_program(TESSERA_LLVM_SPIRV14 llvm-spirv-14)
      set(_clang "")
      set(_llvm_spirv "")
      if(TESSERA_CLANG14 AND TESSERA_LLVM_SPIRV14)
        set(_clang ${TESSERA_CLANG14})
        set(_llvm_spirv ${TESSERA_LLVM_SPIRV14})
      endif()
    endif()
    find_program(TESSERA_SPIRV_VAL spirv-val)
  endif()
  set(${clang_var} "${_clang}" PARENT_SCOPE)
  set(${llvm_spirv_var} "${_llvm_spirv}" PARENT_SCOPE)
endfunction()
