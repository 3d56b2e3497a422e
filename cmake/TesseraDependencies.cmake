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

if(TESSERA_BUILD_TOOLS)
  find_package(nlohmann_json QUIET)
  find_package(CLI11 QUIET)
  if(NOT nlohmann_json_FOUND OR NOT CLI11_FOUND)
    message(STATUS "Tessera: tools off (nlohmann_json found: ${nlohmann_json_FOUND}, "
                   "CLI11 found: ${CLI11_FOUND}); run scripts/setup.sh to install them")
    set(TESSERA_BUILD_TOOLS OFF)
  endif()
endif()
