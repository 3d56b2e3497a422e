# Warnings and sanitizers for project targets: call tessera_target_defaults(<target>).
function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
    $<$<AND:$<BOOL:${TESSERA_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
endfunction()

# Shared libraries link with --no-undefined, so that a missing symbol fails the build rather than
# a later dlopen. Not under clang's sanitizers: clang leaves the sanitizer runtime out of shared
# libraries (the executable that loads them brings it), so their __asan_*, __ubsan_* and coverage
# references are undefined by design.
function(tessera_link_no_undefined target)
  if(TESSERA_SANITIZE AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    return()
  endif()
  target_link_options(${target} PRIVATE "LINKER:--no-undefined")
endfunction()

# The linker: LLVM's lld where it is installed (Debian's `lld`, scripts/setup.sh), which links this
# tree's ~200 executables and libraries 3-5 times faster than GNU ld (bin/tessera: 3.9 s -> 0.8 s
# with line tables); linking was a ninth of a CI build's CPU time. TESSERA_LINKER=default keeps the
# compiler's own choice. C and C++ links only: nvcc drives its own. lld resolves symbols from
# static archives in any order where GNU ld needs each archive after its users, so it warns
# (--warn-backrefs) where GNU ld would fail: a missing target_link_libraries edge shows here too.
set(TESSERA_LINKER "auto" CACHE STRING "Linker for C/C++ links: auto (lld when found), lld, default")
set_property(CACHE TESSERA_LINKER PROPERTY STRINGS auto lld default)
if(TESSERA_LINKER STREQUAL "auto" OR TESSERA_LINKER STREQUAL "lld")
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" TESSERA_HAVE_LLD)
  if(TESSERA_HAVE_LLD)
    add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld;-Wl,--warn-backrefs>")
  elseif(TESSERA_LINKER STREQUAL "lld")
    message(FATAL_ERROR "TESSERA_LINKER=lld but '${CMAKE_CXX_COMPILER} -fuse-ld=lld' cannot link "
                        "(install Debian's lld, or set TESSERA_LINKER=auto)")
  endif()
elseif(NOT TESSERA_LINKER STREQUAL "default")
  message(FATAL_ERROR "TESSERA_LINKER is '${TESSERA_LINKER}': auto, lld or default")
endif()

if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _tsr_san "${TESSERA_SANITIZE}")
  add_compile_options(-fsanitize=${_tsr_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_tsr_san})
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND "undefined" IN_LIST TESSERA_SANITIZE)
    # Two of clang's UBSan checks (gcc has neither in this form) flag what a C ABI does by design:
    # `enum`, a C caller passing any int as an ABI enum (the CTS passes dtype 99 to check that the
    # backend refuses it); `function`, the CUDA-shaped backends calling dlsym'd vendor entry points
    # through their own declarations, equal in ABI but not in C++ type.
    add_compile_options(-fno-sanitize=enum,function)
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # A C program linked by clang gets the C half of UBSan only, while the C++ libraries it links
    # (libtessera.so) call the C++ half's handlers (vptr, function type), which need libstdc++.
    add_link_options("$<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime;-lstdc++>")
  endif()
  message(STATUS "Tessera: sanitizers ${_tsr_san}")
endif()

# Every project library of a fuzz build carries libFuzzer's coverage instrumentation; the fuzz
# executables link the fuzzer itself (tests/fuzz/CMakeLists.txt). TESSERA_FUZZ_COVERAGE picks how
# much: `full` (the `fuzz` preset, for long runs: edges plus comparison tracing, which lets the
# fuzzer solve magic values and lengths) or `edges` (the `asan` preset, whose tree CI both tests
# and fuzzes briefly: edge counters only, which cost the test suite little).
set(TESSERA_FUZZ_COVERAGE "full" CACHE STRING "Coverage for TESSERA_FUZZ builds: full or edges")
set_property(CACHE TESSERA_FUZZ_COVERAGE PROPERTY STRINGS full edges)
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (the fuzz and asan presets set clang++-14)")
  endif()
  if(TESSERA_FUZZ_COVERAGE STREQUAL "full")
    add_compile_options(-fsanitize=fuzzer-no-link)
  elseif(TESSERA_FUZZ_COVERAGE STREQUAL "edges")
    add_compile_options(-fsanitize-coverage=inline-8bit-counters,pc-table)
  else()
    message(FATAL_ERROR "TESSERA_FUZZ_COVERAGE is '${TESSERA_FUZZ_COVERAGE}': full or edges")
  endif()
endif()

# Unity (jumbo) builds for the targets whose files each spend most of their compile time on the
# same headers (nlohmann-json, CLI11, GoogleTest, the backends' shared headers): one compiler run
# per batch of files instead of one per file parses and instantiates them once per batch. On 2
# cores this is what keeps CI within its 45-minute budget (README.md). The files of a batch (up to
# BATCH_SIZE, in source-list order) share one translation unit, so helpers in anonymous namespaces
# should not share a name across the files of a batch: the same signature is a redefinition the
# compiler reports (rename the helper), but different parameters make silent overloads, and a
# later call may bind to the other file's helper. Macros also reach the files after theirs.
# TESSERA_UNITY_BUILD=OFF compiles every file on its own (quicker rebuilds while editing one
# file). SKIP lists files (relative to the calling CMakeLists.txt) that stay on their own because a
# name collides. CUDA sources never join a batch (newer CMake would batch them too).
option(TESSERA_UNITY_BUILD "Compile the header-heavy targets (tessera_unity_build) as unity batches" ON)
function(tessera_unity_build target)
  cmake_parse_arguments(arg "" "BATCH_SIZE" "SKIP" ${ARGN})
  if(NOT TESSERA_UNITY_BUILD OR NOT TARGET ${target})
    return()
  endif()
  if(NOT arg_BATCH_SIZE)
    set(arg_BATCH_SIZE 8)
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${arg_BATCH_SIZE})
  get_target_property(sources ${target} SOURCES)
  list(FILTER sources INCLUDE REGEX "\\.cu$")
  if(arg_SKIP OR sources)
    set_source_files_properties(${arg_SKIP} ${sources} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
