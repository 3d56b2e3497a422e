# The UCX transport (between hosts): UCX found through pkg-config `ucx`, else a stub whose
# create_ucx_transport() returns UNAVAILABLE "built without UCX". TESSERA_WITH_UCX=OFF builds the
# stub even when UCX is there (as the topology layer does): the tsan preset needs it, because
# UCX's memory hooks (libucm's madvise) crash ThreadSanitizer when a thread exits.
option(TESSERA_WITH_UCX "Use UCX (topology queries, the UCX transport) when found" ON)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND AND TESSERA_WITH_UCX)
  pkg_check_modules(TESSERA_UCX QUIET IMPORTED_TARGET ucx)
endif()
if(TESSERA_WITH_UCX AND TESSERA_UCX_FOUND)
  target_sources(tessera_coll PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/ucx_transport.cc
    ${CMAKE_CURRENT_LIST_DIR}/ucx_worker.cc)
  target_link_libraries(tessera_coll PRIVATE PkgConfig::TESSERA_UCX)
  target_compile_definitions(tessera_coll PUBLIC TESSERA_COLL_HAVE_UCX=1)
  message(STATUS "Tessera: UCX transport with UCX ${TESSERA_UCX_VERSION}")
elseif(NOT TESSERA_WITH_UCX)
  target_sources(tessera_coll PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ucx_transport_none.cc)
  message(STATUS "Tessera: UCX transport off (TESSERA_WITH_UCX=OFF)")
else()
  target_sources(tessera_coll PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ucx_transport_none.cc)
  message(STATUS "Tessera: UCX not found (pkg-config ucx): the UCX transport is unavailable")
endif()
