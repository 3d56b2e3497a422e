# Communicator, transport and algorithm tests; membership from creation cards; device memory
# (staged route, refusals, stream operations without blocked callbacks). All under
# TESSERA_DEVICE_TEST_ENV (tests/CMakeLists.txt).
add_executable(tessera_coll_test ${CMAKE_CURRENT_LIST_DIR}/comm_test.cc
               ${CMAKE_CURRENT_LIST_DIR}/device_memory_test.cc
               ${CMAKE_CURRENT_LIST_DIR}/membership_test.cc)
# membership_test.cc calls compute_membership (collectives/src/membership.h) directly.
target_include_directories(tessera_coll_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                           ${PROJECT_SOURCE_DIR}/collectives/src)
target_link_libraries(tessera_coll_test PRIVATE tessera::coll tessera::hal GTest::gtest_main)
tessera_target_defaults(tessera_coll_test)
tessera_gtest_env(_coll_test_env "TESSERA_BACKEND_PATH=${TESSERA_BUILD_BACKEND_DIR}"
                  ${TESSERA_DEVICE_TEST_ENV})
gtest_discover_tests(tessera_coll_test PROPERTIES LABELS "collectives" TIMEOUT 300
                     ENVIRONMENT "${_coll_test_env}")
tessera_unity_build(tessera_coll_test SKIP ${CMAKE_CURRENT_LIST_DIR}/device_memory_test.cc)
