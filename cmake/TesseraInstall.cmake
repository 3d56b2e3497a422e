# What `cmake --install` puts under the prefix (docs/API.md, "Linking"):
#   bin/tessera, bin/tessera-cts                 the CLI and the conformance suite (their folders)
#   share/tessera/cts/expectations/              every backend's CTS expectations file
#   share/tessera/skeleton/                      the porter's kit (backends/skeleton)
#   <libdir>/tessera/libtessera-backend-*.so     backends (tessera_add_backend), where the loader
#                                                looks: next to bin/, next to libtessera_runtime.so
#   <libdir>/libtessera_runtime.so               the C++ runtime (cmake/TesseraSharedRuntime.cmake)
#   <libdir>/libtessera.so                       the C API (runtime/c_api)
#   include/tessera.h, include/tessera/...       public headers
#   <libdir>/cmake/Tessera/                      find_package(Tessera): Tessera::hal,
#                                                ::collectives, ::planner, ::overlap, ::checkpoint,
#                                                ::runtime (all of them), ::c_api; a version file
#   <libdir>/pkgconfig/tessera.pc                pkg-config: the C API and the C++ runtime
# Without the runtime (no nlohmann-json, zstd or xxhash) only the CLI, CTS and backends install.
if(NOT TARGET tessera_c_api)
  message(STATUS "Tessera: no CMake package or pkg-config file (the runtime is not built)")
  return()
endif()
include(CMakePackageConfigHelpers)
set(TESSERA_INSTALL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)

# Public headers: each built component's include/ folder.
foreach(_tsr_pair "common;tessera_common" "hal;tessera_hal" "collectives;tessera_coll"
                  "topology;tessera_topology" "runtime/ir;tessera_ir"
                  "runtime/planner;tessera_planner" "runtime/overlap;tessera_overlap"
                  "runtime/checkpoint;tessera_checkpoint" "runtime/c_api;tessera_c_api")
  list(GET _tsr_pair 0 _tsr_dir)
  list(GET _tsr_pair 1 _tsr_target)
  if(TARGET ${_tsr_target})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_tsr_dir}/include/
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()

# The names consumers link. Each is an interface over the one shared library today; naming what a
# program uses keeps it building if the library is ever split.
set(_tsr_export_targets tessera_runtime_shared tessera_c_api)
foreach(_tsr_name hal collectives planner overlap checkpoint)
  add_library(tessera_pkg_${_tsr_name} INTERFACE)
  target_link_libraries(tessera_pkg_${_tsr_name} INTERFACE tessera_runtime_shared)
  set_target_properties(tessera_pkg_${_tsr_name} PROPERTIES EXPORT_NAME ${_tsr_name})
  list(APPEND _tsr_export_targets tessera_pkg_${_tsr_name})
endforeach()
add_library(tessera_pkg_runtime INTERFACE)
target_link_libraries(tessera_pkg_runtime INTERFACE tessera_pkg_planner tessera_pkg_overlap
                      tessera_pkg_checkpoint tessera_pkg_collectives tessera_pkg_hal)
set_target_properties(tessera_pkg_runtime PROPERTIES EXPORT_NAME runtime)
list(APPEND _tsr_export_targets tessera_pkg_runtime)

install(TARGETS ${_tsr_export_targets} EXPORT TesseraTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT TesseraTargets NAMESPACE Tessera:: FILE TesseraTargets.cmake
        DESTINATION ${TESSERA_INSTALL_CMAKE_DIR})

set(TESSERA_PACKAGE_HAS_CLI ${TESSERA_BUILD_TOOLS})
if(TARGET tessera-cts)
  set(TESSERA_PACKAGE_HAS_CTS ON)
else()
  set(TESSERA_PACKAGE_HAS_CTS OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/TesseraConfig.cmake
  INSTALL_DESTINATION ${TESSERA_INSTALL_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR CMAKE_INSTALL_DATADIR
            TESSERA_INSTALL_BACKEND_DIR)
# 0.x: a consumer built against 0.1 accepts 0.1.y only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/TesseraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/TesseraConfig.cmake
              ${PROJECT_BINARY_DIR}/package/TesseraConfigVersion.cmake
        DESTINATION ${TESSERA_INSTALL_CMAKE_DIR})

# pkg-config: relocatable (prefix from ${pcfiledir}), so an installed tree may be moved.
file(RELATIVE_PATH TESSERA_PC_PREFIX_FROM_PCDIR
     "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" TESSERA_PC_PREFIX_FROM_PCDIR "${TESSERA_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in ${PROJECT_BINARY_DIR}/package/tessera.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/tessera.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
