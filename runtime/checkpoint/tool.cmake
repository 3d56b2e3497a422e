# Included by tools/CMakeLists.txt: adds `tessera ckpt` to the tessera command. Without the
# checkpointer (no zstd/xxhash) the subcommand says so and exits 2.
target_sources(tessera PRIVATE ${PROJECT_SOURCE_DIR}/tools/tessera/ckpt_command.cc)
if(TARGET tessera_checkpoint)
  target_link_libraries(tessera PRIVATE tessera::checkpoint)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CHECKPOINT=1)
endif()
