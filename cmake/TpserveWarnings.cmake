# Compiler flags shared by every tpserve target.
#   tpserve_flags  an interface target a library links (PRIVATE) to get -Wall -Wextra
#                  (and -Werror with TPSERVE_WERROR; ASan + UBSan with TPSERVE_SANITIZE)
add_library(tpserve_flags INTERFACE)
target_compile_options(tpserve_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TPSERVE_WERROR}>>:-Werror>)
if(TPSERVE_SANITIZE)
  # gcc's -fsanitize=undefined leaves out float-cast-overflow (clang's includes it): a
  # float or double converted to an integer or float type that cannot hold it is UB.
  target_compile_options(tpserve_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer
                              -fno-sanitize-recover=undefined,float-cast-overflow>)
  target_link_options(tpserve_flags INTERFACE -fsanitize=address,undefined,float-cast-overflow)
endif()
