# Warnings and sanitizers for project targets: call tessera_target_defaults(<target>).
function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
    $<$<AND:$<BOOL:${TESSERA_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
endfunction()

if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _tsr_san "${TESSERA_SANITIZE}")
  add_compile_options(-fsanitize=${_tsr_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_tsr_san})
  message(STATUS "Tessera: sanitizers ${_tsr_san}")
endif()
