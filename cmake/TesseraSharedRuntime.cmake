# tessera_runtime_shared: libtessera_runtime.so, the C++ libraries of the project (common, hal,
# collectives, topology, ir, planner, overlap, checkpoint) linked whole into one shared library.
# It is what the installed package gives C++ consumers (Tessera::hal ... Tessera::runtime) and what
# the C API (libtessera.so) stands on. Why one shared library rather than the static archives:
#  - their private dependencies (zstd, xxhash, hwloc, UCX, PMIx, the host kernels) stay inside,
#    so a consumer needs nothing but this file and the headers (no find_dependency chain);
#  - one copy of the process-wide state (logger, backend registry) serves the C and C++ APIs.
# The in-tree targets stay static: tests, tools and benchmarks link them as before.
set(_tsr_runtime_parts tessera_common tessera_hal tessera_coll tessera_topology tessera_ir
                       tessera_planner tessera_overlap tessera_checkpoint)
set(_tsr_runtime_archives "")
set(_tsr_runtime_present "")
foreach(_tsr_part ${_tsr_runtime_parts})
  if(TARGET ${_tsr_part})
    list(APPEND _tsr_runtime_archives "$<TARGET_FILE:${_tsr_part}>")
    list(APPEND _tsr_runtime_present ${_tsr_part})
  endif()
endforeach()

add_library(tessera_runtime_shared SHARED ${PROJECT_SOURCE_DIR}/runtime/c_api/src/runtime_library.cc)
# Every object of the archives, not only those the anchor file references; then the archives again
# as ordinary libraries, which brings their own dependencies (and finds nothing left to pull).
target_link_options(tessera_runtime_shared PRIVATE "LINKER:--whole-archive"
                    ${_tsr_runtime_archives} "LINKER:--no-whole-archive")
tessera_link_no_undefined(tessera_runtime_shared)
target_link_libraries(tessera_runtime_shared PRIVATE ${_tsr_runtime_present})
target_include_directories(tessera_runtime_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/common/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/hal/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/collectives/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/topology/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/runtime/ir/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/runtime/planner/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/runtime/overlap/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/runtime/checkpoint/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(tessera_runtime_shared INTERFACE cxx_std_20)
set_target_properties(tessera_runtime_shared PROPERTIES
  OUTPUT_NAME tessera_runtime
  EXPORT_NAME tessera_runtime
  VERSION ${PROJECT_VERSION}
  # 0.x: every minor may break the ABI, so the soname carries it (libtessera_runtime.so.0.1).
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
tessera_target_defaults(tessera_runtime_shared)
target_compile_definitions(tessera_runtime_shared PRIVATE TESSERA_VERSION="${PROJECT_VERSION}")
