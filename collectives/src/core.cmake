# Communicators, transports, algorithms, tuner.
target_sources(tessera_coll PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm_impl.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm_exec.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm_stream.cc
  ${CMAKE_CURRENT_LIST_DIR}/flight_recorder.cc
  ${CMAKE_CURRENT_LIST_DIR}/membership.cc
  ${CMAKE_CURRENT_LIST_DIR}/memory_kind.cc
  ${CMAKE_CURRENT_LIST_DIR}/native_route.cc
  ${CMAKE_CURRENT_LIST_DIR}/staged.cc
  ${CMAKE_CURRENT_LIST_DIR}/peer_liveness.cc
  ${CMAKE_CURRENT_LIST_DIR}/reduce.cc
  ${CMAKE_CURRENT_LIST_DIR}/tuner.cc
  ${CMAKE_CURRENT_LIST_DIR}/algo/allreduce.cc
  ${CMAKE_CURRENT_LIST_DIR}/algo/others.cc
  ${CMAKE_CURRENT_LIST_DIR}/transport/header.cc
  ${CMAKE_CURRENT_LIST_DIR}/transport/shm_transport.cc)
target_link_libraries(tessera_coll PRIVATE tessera::host_kernels rt)
if(TARGET tessera::topology)
  target_link_libraries(tessera_coll PRIVATE tessera::topology)
  target_compile_definitions(tessera_coll PRIVATE TESSERA_COLL_HAVE_TOPOLOGY=1)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/transport/ucx.cmake)
