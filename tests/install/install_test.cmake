# The steps of the install and example tests, run with `cmake -DMODE=<mode> ... -P install_test.cmake`
# (registered by tests/install/CMakeLists.txt):
#   install     BUILD_DIR, PREFIX, LIBDIR: `cmake --install BUILD_DIR --prefix PREFIX` into an emptied
#               PREFIX, then checks that the package, the pkg-config file, both libraries, the
#               headers, the host backend and the CLI are there. Copies files only (no build).
#   cmake       PREFIX, WORK, SOURCE_DIR, GENERATOR: configures and builds tests/install/
#               consumer_cmake against PREFIX, runs consumer_cxx and consumer_c under
#               PREFIX/bin/tessera launch -n 2.
#   pkgconfig   PREFIX, LIBDIR, WORK, SOURCE_DIR, CC, PKG_CONFIG: `cc consumer.c $(pkg-config --cflags --libs tessera)`
#               with PKG_CONFIG_PATH at PREFIX, run under PREFIX/bin/tessera launch -n 2.
#   example     LAUNCHER, PROGRAM, WORK: runs the in-tree build of consumer.c under LAUNCHER
#               (the build's tessera) launch -n 2.
#   doc         SOURCE_DIR: docs/API.md must show tests/install/consumer.c verbatim.
cmake_minimum_required(VERSION 3.16)

function(fail message)
  message(FATAL_ERROR "install_test (${MODE}): ${message}")
endfunction()

# Runs a command; fails with its output unless it exits 0. Sets <out_var> to stdout + stderr.
function(run out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out
                  TIMEOUT 240)
  if(NOT code EQUAL 0)
    string(REPLACE ";" " " shown "${ARGN}")
    fail("`${shown}` exited with '${code}':\n${out}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Runs `program args` as two ranks under `tessera launch`, then checks each rank's output lines.
function(run_two_ranks launcher pattern)
  run(out ${launcher} launch -n 2 --timeout-s 120 -- ${ARGN})
  foreach(rank 0 1)
    string(REPLACE "<R>" "${rank}" expected "${pattern}")
    if(NOT out MATCHES "${expected}")
      fail("no line matching '${expected}' in the output of ${ARGN}:\n${out}")
    endif()
  endforeach()
  message(STATUS "${out}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# The lines consumer.c prints on every rank that passes its checks.
set(c_pattern "\\[rank <R>\\] rank <R>: all checks passed")

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  run(out "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")
  foreach(file bin/tessera include/tessera.h include/tessera/coll/communicator.h
               include/tessera/hal/backend_abi.h include/tessera/checkpoint/checkpointer.h
               ${LIBDIR}/cmake/Tessera/TesseraConfig.cmake
               ${LIBDIR}/cmake/Tessera/TesseraConfigVersion.cmake
               ${LIBDIR}/cmake/Tessera/TesseraTargets.cmake ${LIBDIR}/pkgconfig/tessera.pc
               ${LIBDIR}/libtessera.so ${LIBDIR}/libtessera_runtime.so
               ${LIBDIR}/tessera/libtessera-backend-host.so)
    if(NOT EXISTS "${PREFIX}/${file}")
      fail("${PREFIX}/${file} was not installed")
    endif()
  endforeach()
elseif(MODE STREQUAL "cmake")
  file(REMOVE_RECURSE "${WORK}")
  run(out "${CMAKE_COMMAND}" -G "${GENERATOR}" -S "${SOURCE_DIR}/tests/install/consumer_cmake"
      -B "${WORK}/build" "-DCMAKE_PREFIX_PATH=${PREFIX}" -DCMAKE_BUILD_TYPE=Release)
  run(out "${CMAKE_COMMAND}" --build "${WORK}/build")
  # TESSERA_BACKEND_PATH unset: the programs must find the installed backends by themselves.
  run_two_ranks("${PREFIX}/bin/tessera" "\\[rank <R>\\] rank <R>: cxx checks passed"
                "${WORK}/build/consumer_cxx")
  # The backend must come from the prefix (found next to libtessera_runtime.so), not the build tree.
  string(FIND "${last_output}" "cxx backend ${PREFIX}/" at)
  if(at LESS 0)
    fail("consumer_cxx did not load the host backend from ${PREFIX}:\n${last_output}")
  endif()
  run_two_ranks("${PREFIX}/bin/tessera" "${c_pattern}" "${WORK}/build/consumer_c" "${WORK}/ckpt")
elseif(MODE STREQUAL "pkgconfig")
  file(REMOVE_RECURSE "${WORK}")
  file(MAKE_DIRECTORY "${WORK}")
  set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
  run(flags "${PKG_CONFIG}" --cflags --libs tessera)
  run(libdir "${PKG_CONFIG}" --variable=libdir tessera)
  string(STRIP "${flags}" flags)
  string(STRIP "${libdir}" libdir)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(out "${CC}" -std=c11 -Wall -Wextra -Werror "${SOURCE_DIR}/tests/install/consumer.c"
      ${flags} "-Wl,-rpath,${libdir}" -o "${WORK}/consumer")
  run_two_ranks("${PREFIX}/bin/tessera" "${c_pattern}" "${WORK}/consumer" "${WORK}/ckpt")
elseif(MODE STREQUAL "example")
  file(REMOVE_RECURSE "${WORK}")
  run_two_ranks("${LAUNCHER}" "${c_pattern}" "${PROGRAM}" "${WORK}/ckpt")
elseif(MODE STREQUAL "doc")
  file(READ "${SOURCE_DIR}/tests/install/consumer.c" example)
  file(READ "${SOURCE_DIR}/docs/API.md" doc)
  string(FIND "${doc}" "```c\n${example}```" at)
  if(at LESS 0)
    fail("docs/API.md does not show tests/install/consumer.c verbatim in a ```c block; "
         "paste the file there again")
  endif()
else()
  fail("unknown MODE '${MODE}'")
endif()
