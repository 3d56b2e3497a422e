# Warnings and sanitizers for project targets: call tessera_target_defaults(<target>).
function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
    $<$<AND:$<BOOL:${TESSERA_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
endfunction()

if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _tsr_san "${TESSERA_SANITIZE}")
  add_compile_options(-fsanitize=${_tsr_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_tsr_san})
  message(STATUS "Tessera: sanitizers ${_tsr_san}")
endif()

# Every project library of a fuzz build carries libFuzzer's coverage instrumentation; the fuzz
# executables link the fuzzer itself (tests/fuzz/CMakeLists.txt).
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (cmake --preset fuzz sets clang++-14)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Unity (jumbo) builds for the targets whose files each spend most of their compile time on the
# same header-only libraries (nlohmann-json, CLI11, GoogleTest): one compiler run per batch of
# files instead of one per file instantiates those templates once per batch. On 2 cores this is
# what keeps CI within its 45-minute budget (README.md). The files of a batch share one
# translation unit, so helpers in anonymous namespaces must not share a name across the files of a
# batch (the compiler reports a redefinition: rename the helper). TESSERA_UNITY_BUILD=OFF compiles
# every file on its own (quicker rebuilds while editing one file). SKIP lists files (relative to
# the calling CMakeLists.txt) that stay on their own because a helper name collides.
option(TESSERA_UNITY_BUILD "Compile the json/CLI11/test-heavy targets as unity batches" ON)
function(tessera_unity_build target)
  cmake_parse_arguments(arg "" "BATCH_SIZE" "SKIP" ${ARGN})
  if(NOT TESSERA_UNITY_BUILD OR NOT TARGET ${target})
    return()
  endif()
  if(NOT arg_BATCH_SIZE)
    set(arg_BATCH_SIZE 8)
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${arg_BATCH_SIZE})
  if(arg_SKIP)
    set_source_files_properties(${arg_SKIP} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
