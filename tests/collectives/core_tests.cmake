# Communicator, transport and algorithm tests.
add_executable(tessera_coll_test ${CMAKE_CURRENT_LIST_DIR}/comm_test.cc)
target_include_directories(tessera_coll_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(tessera_coll_test PRIVATE tessera::coll tessera::hal GTest::gtest_main)
tessera_target_defaults(tessera_coll_test)
gtest_discover_tests(tessera_coll_test PROPERTIES LABELS "collectives" TIMEOUT 300
                     ENVIRONMENT "TESSERA_BACKEND_PATH=${TESSERA_BUILD_BACKEND_DIR}")
