# Sourced by scripts/pack-gpu-deps.sh and scripts/check-gpu-deps.sh: the shared
# libraries, by soname, that a GPU machine has without the packed folder (glibc,
# the C++ runtime, the CUDA toolkit and its driver, NCCL in the toolkit or in
# python3's nvidia-nccl package). Everything else an executable needs is packed.
gpu_base_libs_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so(\.[0-9]+)*$'
