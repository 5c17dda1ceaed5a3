# The linker: lld when the compiler accepts -fuse-ld=lld (scripts/install-deps.sh
# installs it), else the toolchain's default (GNU ld, as on a GPU machine without the
# Debian packages). The build links ~200 executables; one test's link took
# 0.9-1.7 CPU-s with GNU ld and 0.3-0.4 with lld (worker_step_runner_test,
# request_errors_test, tpserve-logits: 2026-12-03), about 3 CPU-minutes of a fresh
# build. lld resolves archives in any order and sanitizer and fuzzer runtimes link
# as with ld; TPSERVE_LLD=OFF keeps the default linker.
option(TPSERVE_LLD "Link with lld when the compiler accepts -fuse-ld=lld" ON)
if(TPSERVE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" TPSERVE_HAVE_LLD)
  if(TPSERVE_HAVE_LLD)
    # C++ links only: nvcc's device link keeps its own driver.
    add_link_options($<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>)
  endif()
endif()
