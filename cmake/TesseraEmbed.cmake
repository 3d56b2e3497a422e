# tessera_embed_image(<out_var> <symbol> <input> [DEPENDS <targets/files>...])
# Generates, at build time, a C++ source defining
#   extern const unsigned char <symbol>[];   extern const unsigned long <symbol>_size;
# (global namespace, 16-byte aligned) with the bytes of <input> (a kernel image the build makes),
# and sets <out_var> to that source's path, to add to a target. Declare the symbols where used:
#   extern const unsigned char tsr_gpt_host_image[]; extern const unsigned long tsr_gpt_host_image_size;
# Why embedded: a program carrying its kernels runs from any directory and cannot load a stale
# image from another build (the CTS, which is given images, searches paths instead).
set(TESSERA_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_image.cmake)
function(tessera_embed_image out_var symbol input)
  cmake_parse_arguments(ARG "" "" "DEPENDS" ${ARGN})
  set(_out ${CMAKE_CURRENT_BINARY_DIR}/embedded/${symbol}.cc)
  add_custom_command(
    OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${_out} -DSYMBOL=${symbol} -DINPUT=${input}
            -P ${TESSERA_EMBED_SCRIPT}
    DEPENDS ${input} ${ARG_DEPENDS} ${TESSERA_EMBED_SCRIPT}
    COMMENT "Embedding ${input} as ${symbol}"
    VERBATIM)
  set(${out_var} ${_out} PARENT_SCOPE)
endfunction()
