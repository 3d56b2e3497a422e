# Bootstrap sources (launcher detection, TCP store, PMIx store). The TCP store server is split by
# responsibility; tcp_store_server.h says what each tcp_store_*.cc holds.
target_sources(tessera_coll PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap.cc
  ${CMAKE_CURRENT_LIST_DIR}/launch_env.cc
  ${CMAKE_CURRENT_LIST_DIR}/memory_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/pmix_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/slurm.cc
  ${CMAKE_CURRENT_LIST_DIR}/socket.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_connections.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_framing.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_auth.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_store_commands.cc)

# PMIx (mpirun, srun --mpi=pmix) is optional: without it those launchers give a clear error.
option(TESSERA_WITH_PMIX "Use libpmix for mpirun/srun bootstrap when found" ON)
if(TESSERA_WITH_PMIX)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(TESSERA_PMIX QUIET IMPORTED_TARGET pmix)
  endif()
endif()
if(TESSERA_PMIX_FOUND)
  target_link_libraries(tessera_coll PRIVATE PkgConfig::TESSERA_PMIX)
  target_compile_definitions(tessera_coll PRIVATE TESSERA_HAVE_PMIX=1)
  message(STATUS "Tessera: collectives bootstrap with PMIx ${TESSERA_PMIX_VERSION}")
else()
  message(STATUS "Tessera: collectives bootstrap without PMIx (mpirun/srun --mpi=pmix unsupported)")
endif()
