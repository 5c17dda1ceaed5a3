# Compiler flags shared by every tpserve target.
#   tpserve_flags  an interface target a library links (PRIVATE) to get -Wall -Wextra
#                  (and -Werror with TPSERVE_WERROR; ASan + UBSan with TPSERVE_SANITIZE)
add_library(tpserve_flags INTERFACE)
target_compile_options(tpserve_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TPSERVE_WERROR}>>:-Werror>)
# GCC 12 at -O3 reports -Wrestrict inside libstdc++ for `"literal" + std::string` and
# string::insert (GCC bug 105329, fixed in 13): a false positive that failed the demo's
# Release build at six places in the grammar library. GCC 12 only; later compilers keep it.
target_compile_options(tpserve_flags INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
if(TPSERVE_SANITIZE)
  # gcc's -fsanitize=undefined leaves out float-cast-overflow (clang's includes it): a
  # float or double converted to an integer or float type that cannot hold it is UB.
  target_compile_options(tpserve_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer
                              -fno-sanitize-recover=undefined,float-cast-overflow>)
  target_link_options(tpserve_flags INTERFACE -fsanitize=address,undefined,float-cast-overflow)
endif()

# tpserve_fast_when_sanitized(TARGETS <targets...> SOURCES <files...>): in a
# sanitized Debug build (scripts/test-sanitized.sh), compile those targets or
# source files (of the calling folder) at -O2. ASan and UBSan instrument them
# all the same, and reports keep file and line; a debugger loses their locals.
# For code whose -O0 run dominated the sanitized tests' time: the CPU backend's
# arithmetic, the grammar engine (README, "CI's time").
function(tpserve_fast_when_sanitized)
  cmake_parse_arguments(F "" "" "TARGETS;SOURCES" ${ARGN})
  if(NOT (TPSERVE_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Debug"))
    return()
  endif()
  foreach(t IN LISTS F_TARGETS)
    target_compile_options(${t} PRIVATE -O2)
  endforeach()
  if(F_SOURCES)
    set_property(SOURCE ${F_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -O2)
  endif()
endfunction()

# tpserve_check_flags(): fails the configure when a library or executable of
# the project does not link tpserve_flags, so no target is compiled without the
# warnings, -Werror and the sanitizers by accident (two libraries were, until
# this check). Generated protobuf/gRPC code is compiled as protoc writes it:
# the targets in TPSERVE_FLAGS_EXEMPT.
set(TPSERVE_FLAGS_EXEMPT tpserve_proto tpserve_health_proto)
function(tpserve_collect_unflagged dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(missing)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|MODULE_LIBRARY|EXECUTABLE)$"
       AND NOT t IN_LIST TPSERVE_FLAGS_EXEMPT)
      get_target_property(libs ${t} LINK_LIBRARIES)
      if(NOT libs OR NOT "tpserve_flags" IN_LIST libs)
        list(APPEND missing ${t})
      endif()
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d ${subdirs})
    tpserve_collect_unflagged(${d} sub)
    list(APPEND missing ${sub})
  endforeach()
  set(${out} ${missing} PARENT_SCOPE)
endfunction()
function(tpserve_check_flags)
  tpserve_collect_unflagged(${PROJECT_SOURCE_DIR} missing)
  if(missing)
    message(FATAL_ERROR "tpserve: these targets do not link tpserve_flags (warnings, -Werror, sanitizers): "
                        "${missing}; add it to their target_link_libraries (PRIVATE)")
  endif()
endfunction()
