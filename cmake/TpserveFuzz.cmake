# libFuzzer targets (clang only, -DTPSERVE_FUZZ=ON; scripts/fuzz.sh builds and runs them).
#   tpserve_fuzz_instrument(<libraries...>)  compile those libraries with coverage, ASan and
#                                            UBSan so the fuzzer is guided by, and checks, their code
#   tpserve_add_fuzzer(<name> SOURCES <files...> LIBS <targets...>)
#                                            one fuzzer executable (libFuzzer's main)
set(TPSERVE_FUZZ_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)

function(tpserve_fuzz_instrument)
  foreach(lib ${ARGN})
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link ${TPSERVE_FUZZ_SANITIZERS})
  endforeach()
endfunction()

function(tpserve_add_fuzzer name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer ${TPSERVE_FUZZ_SANITIZERS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer ${TPSERVE_FUZZ_SANITIZERS})
  target_link_libraries(${name} PRIVATE ${F_LIBS} tpserve_flags)
endfunction()
