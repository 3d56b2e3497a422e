# overlap_bench: the overlap engine on forked ranks (or ranks of a launcher, across hosts) with
# busy-wait compute (runtime/overlap).
# Plain main (ranks are processes, which Google Benchmark does not model); builds only when the
# engine and CLI11 (its command line) are there.
if(TARGET tessera_overlap AND TARGET CLI11::CLI11)
  add_executable(overlap_bench ${CMAKE_CURRENT_LIST_DIR}/overlap_bench.cc)
  target_include_directories(overlap_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/collectives)
  target_link_libraries(overlap_bench PRIVATE tessera::overlap CLI11::CLI11)
  target_compile_definitions(overlap_bench PRIVATE
    TESSERA_BUILD_BACKEND_DIR="${TESSERA_BUILD_BACKEND_DIR}")
  if(TARGET tessera-backend-host)
    add_dependencies(overlap_bench tessera-backend-host)
  endif()
  tessera_target_defaults(overlap_bench)
endif()
