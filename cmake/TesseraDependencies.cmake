# Finds the optional libraries. Each sets TESSERA_HAVE_<X>; nothing here is required for the HAL,
# the backends or the conformance suite.
find_package(Threads REQUIRED)

# GoogleTest: the system package, else Debian's source package, else the vendored copy.
if(TESSERA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    if(EXISTS /usr/src/googletest/googletest/CMakeLists.txt)
      set(_tsr_gtest_src /usr/src/googletest/googletest)
    else()
      set(_tsr_gtest_src ${PROJECT_SOURCE_DIR}/third_party/googletest)
    endif()
    message(STATUS "Tessera: GoogleTest from source at ${_tsr_gtest_src}")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${_tsr_gtest_src} ${PROJECT_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
    # GoogleTest 1.11+ defines these aliases itself; older copies do not.
    if(NOT TARGET GTest::gtest)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
  endif()
endif()

find_package(benchmark QUIET)
set(TESSERA_HAVE_BENCHMARK ${benchmark_FOUND})

# BLAS for the host backend's GEMM (OpenBLAS on Debian: libopenblas-dev).
set(BLA_VENDOR OpenBLAS)
find_package(BLAS QUIET)
if(NOT BLAS_FOUND)
  unset(BLA_VENDOR)
  find_package(BLAS QUIET)
endif()
find_path(TESSERA_CBLAS_INCLUDE_DIR NAMES cblas.h PATH_SUFFIXES openblas)
if(BLAS_FOUND AND TESSERA_CBLAS_INCLUDE_DIR)
  set(TESSERA_HAVE_BLAS ON)
else()
  set(TESSERA_HAVE_BLAS OFF)
endif()

# nlohmann-json and CLI11 (header-only): Debian's packages (scripts/setup.sh), else the copies in
# third_party/ (a GPU machine without Debian's -dev packages: bench/gpu_check.sh). The fallbacks are
# IMPORTED GLOBAL targets of the packages' own names, so every directory sees them and users test
# `TARGET nlohmann_json::nlohmann_json`, not nlohmann_json_FOUND.
# tessera_vendored_headers(<target> <third_party dir> <package>): the fallback target.
function(tessera_vendored_headers target dir package)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                                             ${PROJECT_SOURCE_DIR}/third_party/${dir}/include)
  message(STATUS "Tessera: ${package} not found; using the copy in third_party/${dir}")
endfunction()
find_package(nlohmann_json QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  tessera_vendored_headers(nlohmann_json::nlohmann_json nlohmann_json nlohmann-json)
endif()
if(TESSERA_BUILD_TOOLS)
  find_package(CLI11 QUIET)
  if(NOT TARGET CLI11::CLI11)
    tessera_vendored_headers(CLI11::CLI11 cli11 CLI11)
  endif()
endif()
