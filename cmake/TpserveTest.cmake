# tpserve_add_gtest(<name> SOURCES <files...> LIBS <targets...> LABELS <unit|tp|e2e|gpu|cuda-emu...>
#                   [TIMEOUT <seconds>] [PREFIX <ctest name prefix>])
# Builds one GoogleTest executable and registers its tests with ctest under the labels.
# PREFIX tells apart the tests of a source built twice (tests/cuda_emu/: "emu.").
include(GoogleTest)
function(tpserve_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT;PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "tpserve_add_gtest(${name}): give LABELS (unit, tp, e2e, gpu or cuda-emu)")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main tpserve_flags)
  target_compile_definitions(${name} PRIVATE
    TPSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TPSERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # TPSERVE_TEST_TIMEOUT: the e2e harness's watchdog speaks (what the test was
  # waiting for, its processes' logs) before ctest kills a test at TIMEOUT.
  gtest_discover_tests(${name}
    TEST_PREFIX "${T_PREFIX}"
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT TPSERVE_TEST_TIMEOUT=${T_TIMEOUT}
    DISCOVERY_TIMEOUT 60)
endfunction()
