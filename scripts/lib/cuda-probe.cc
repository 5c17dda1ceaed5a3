// What the CUDA runtime says about this machine, for scripts/gpu-check.sh's
// preflight (built there with `nvcc -o PROBE scripts/lib/cuda-probe.cc`, no
// other source): one line with the device count, or the runtime's error, and
// the driver's and the runtime's CUDA versions. With --alloc it also
// allocates, sets and frees 1 MiB on device 0, the least a tool such as
// compute-sanitizer must let through (the preflight runs it under the tool to
// learn whether the tool works on this machine's runtime).
//
// Exit status: 0 with at least one device (and, with --alloc, the allocation
// done), 1 otherwise.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

void PrintVersion(const char* what, int v) { std::printf("%s %d.%d", what, v / 1000, v % 1000 / 10); }

}  // namespace

int main(int argc, char** argv) {
  const bool alloc = argc > 1 && std::strcmp(argv[1], "--alloc") == 0;
  int driver = 0, runtime = 0, count = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) count = 0;
  std::printf("cuda-probe: ");
  if (err == cudaSuccess) {
    std::printf("%d device(s)", count);
  } else {
    std::printf("cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  std::printf("; ");
  PrintVersion("driver CUDA", driver);
  if (driver == 0) std::printf(" (no driver)");
  std::printf(", ");
  PrintVersion("runtime", runtime);
  if (driver != 0 && runtime > driver) std::printf(" (newer than the driver supports)");
  std::printf("\n");
  if (count == 0) return 1;
  if (alloc) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 1 << 20);
    if (e == cudaSuccess) e = cudaMemset(p, 1, 1 << 20);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (p != nullptr && e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess) {
      std::printf("cuda-probe: 1 MiB on device 0 failed: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
      return 1;
    }
    std::printf("cuda-probe: 1 MiB allocated, set and freed on device 0\n");
  }
  return 0;
}
