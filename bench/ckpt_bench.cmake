# ckpt_bench (runtime/checkpoint): N ranks as processes over socketpairs (the test support's
# SocketRankGroup). Included from bench/CMakeLists.txt; builds when the checkpointer and CLI11 (its
# command line) are there.
if(TARGET tessera_checkpoint AND TARGET CLI11::CLI11)
  add_executable(ckpt_bench ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.cc)
  target_link_libraries(ckpt_bench PRIVATE tessera::checkpoint CLI11::CLI11)
  target_include_directories(ckpt_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/checkpoint)
  tessera_target_defaults(ckpt_bench)
endif()
