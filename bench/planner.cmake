# Planner benchmarks (issue 6). Included from bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
# Builds tessera_planner_bench when the planner and Google Benchmark are both available.
if(TARGET tessera_planner AND TARGET benchmark::benchmark)
  add_executable(tessera_planner_bench ${CMAKE_CURRENT_LIST_DIR}/planner_bench.cc)
  target_link_libraries(tessera_planner_bench PRIVATE tessera::planner benchmark::benchmark)
  tessera_target_defaults(tessera_planner_bench)
endif()
