# tessera_add_backend(<name> SOURCES ...): builds libtessera-backend-<name>.so as a MODULE that the
# loader dlopens. A backend sees only hal/include/tessera/hal/backend_abi.h of the project.
set(TESSERA_BUILT_BACKENDS "" CACHE INTERNAL "")

function(tessera_add_backend name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  set(target tessera-backend-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/hal/include)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME tessera-backend-${name}
    LIBRARY_OUTPUT_DIRECTORY ${TESSERA_BUILD_BACKEND_DIR}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  tessera_link_no_undefined(${target})
  tessera_target_defaults(${target})
  tessera_unity_build(${target})
  install(TARGETS ${target} LIBRARY DESTINATION ${TESSERA_INSTALL_BACKEND_DIR})
  set(TESSERA_BUILT_BACKENDS "${TESSERA_BUILT_BACKENDS};${name}" CACHE INTERNAL "")
endfunction()
