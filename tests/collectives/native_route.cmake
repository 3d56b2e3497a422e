# The native route (collectives/src/native_route.h) over the host backend's reference CCL on
# discrete host devices: the correctness suite's rank program with the route forced to native,
# and the route's own tests (streams, split, faults, refusals). Included after correctness/ (the
# rank program and multi_rank.h come from there). Each rank sets its own backend environment.
add_executable(tessera_coll_native_test ${CMAKE_CURRENT_LIST_DIR}/native_route_test.cc)
target_include_directories(tessera_coll_native_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(tessera_coll_native_test PRIVATE coll_test_multi_rank tessera::coll
                                                       tessera::hal GTest::gtest_main)
target_compile_definitions(tessera_coll_native_test PRIVATE
  COLL_CORRECTNESS_RANK_BIN="$<TARGET_FILE:coll_correctness_rank>")
add_dependencies(tessera_coll_native_test coll_correctness_rank)
if(TARGET tessera-backend-host)
  add_dependencies(tessera_coll_native_test tessera-backend-host)
endif()
tessera_target_defaults(tessera_coll_native_test)
tessera_gtest_env(_coll_native_env "TESSERA_BACKEND_PATH=${TESSERA_BUILD_BACKEND_DIR}"
                  ${TESSERA_DEVICE_TEST_ENV})
gtest_discover_tests(tessera_coll_native_test DISCOVERY_TIMEOUT 30
                     PROPERTIES LABELS "collectives" TIMEOUT 300 PROCESSORS 2
                                ENVIRONMENT "${_coll_native_env}")
