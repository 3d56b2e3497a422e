# ckpt_bench (runtime/checkpoint): N ranks as processes over socketpairs (the test support's
# SocketRankGroup). Included from bench/CMakeLists.txt; builds when the checkpointer does.
if(TARGET tessera_checkpoint)
  add_executable(ckpt_bench ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.cc)
  target_link_libraries(ckpt_bench PRIVATE tessera::checkpoint)
  target_include_directories(ckpt_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/checkpoint)
  tessera_target_defaults(ckpt_bench)
endif()
