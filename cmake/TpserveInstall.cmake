# `cmake --install BUILD --prefix PREFIX` puts every tpserve-* program in
# PREFIX/bin (the build leaves them in BUILD/tools/<name>/ and BUILD/launcher/),
# e.g. --prefix /opt/tpserve for deploy/ (the Docker image, the systemd units
# and the Slurm script look there) or --prefix ~/.local for one user's PATH.
# The coordinator finds tpserve-worker next to itself for --spawn-workers.
include(GNUInstallDirs)
set(_tpserve_programs
  tpserve-coordinator tpserve-worker tpserve-launch tpserve-client tpserve-http tpserve-bench
  tpserve-generate tpserve-tokenize tpserve-make-model tpserve-logits tpserve-grammar)
set(_tpserve_installed "")
foreach(program IN LISTS _tpserve_programs)
  if(TARGET ${program})  # the engine-only build (TPSERVE_ENGINE_ONLY) has fewer
    list(APPEND _tpserve_installed ${program})
  endif()
endforeach()
# Libraries from outside the system's folders (CUDA, NCCL from python3's
# nvidia-nccl) stay found: their folders go into the
# installed programs' RUNPATH, as the build's own.
set_target_properties(${_tpserve_installed} PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS ${_tpserve_installed} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
