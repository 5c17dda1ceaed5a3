# Decides whether the CUDA code is built (TPSERVE_CUDA = AUTO | ON | OFF) and sets
# TPSERVE_WITH_CUDA. AUTO builds it whenever nvcc is found, even without a GPU, so
# the CUDA code is compiled by every build and by CI.
set(TPSERVE_WITH_CUDA OFF)
if(NOT TPSERVE_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)   # A100 and H100/H200
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)   # CMake 3.25 does not know nvcc 13 speaks C++20
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TPSERVE_WITH_CUDA ON)
  elseif(TPSERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TPSERVE_CUDA=ON but no CUDA compiler was found. Install the CUDA "
                        "toolkit (nvcc in /usr/local/cuda/bin) or configure with -DTPSERVE_CUDA=OFF.")
  endif()
endif()
message(STATUS "tpserve: CUDA backend ${TPSERVE_WITH_CUDA} (TPSERVE_CUDA=${TPSERVE_CUDA})")
