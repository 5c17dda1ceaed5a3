#include "collective_checks.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include "base/random.h"
#include "model/dtype.h"
#if defined(TPSERVE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tpserve::comm_test {
namespace {

// A tensor's bytes on the host, mirrored on the device for kCuda tests.
class TestTensor {
 public:
  TestTensor(DType dtype, Device device, std::initializer_list<int64_t> dims)
      : dtype_(dtype), view_(nullptr, dtype, device, dims) {
    host_.resize(view_.nbytes());
    view_.data = host_.data();
#if defined(TPSERVE_WITH_CUDA)
    if (device == Device::kCuda && !host_.empty()) {
      // A failed allocation leaves no data pointer: the collective rejects it loudly.
      view_.data = cudaMalloc(&dev_, host_.size()) == cudaSuccess ? dev_ : nullptr;
    }
#else
    if (device == Device::kCuda) view_.data = nullptr;  // no CUDA: rejected loudly
#endif
  }
  ~TestTensor() {
#if defined(TPSERVE_WITH_CUDA)
    if (dev_ != nullptr) cudaFree(dev_);
#endif
  }
  TestTensor(const TestTensor&) = delete;
  TestTensor& operator=(const TestTensor&) = delete;

  const Tensor& tensor() const { return view_; }
  int64_t numel() const { return view_.numel(); }
  void Set(int64_t i, float v) {
    if (dtype_ == DType::kF32) {
      std::memcpy(host_.data() + 4 * i, &v, 4);
    } else {
      uint16_t b = FloatToBf16(v);
      std::memcpy(host_.data() + 2 * i, &b, 2);
    }
  }
  float Get(int64_t i) const {
    if (dtype_ == DType::kF32) {
      float v;
      std::memcpy(&v, host_.data() + 4 * i, 4);
      return v;
    }
    uint16_t b;
    std::memcpy(&b, host_.data() + 2 * i, 2);
    return Bf16ToFloat(b);
  }
  void Upload() {
#if defined(TPSERVE_WITH_CUDA)
    if (dev_ != nullptr) cudaMemcpy(dev_, host_.data(), host_.size(), cudaMemcpyHostToDevice);
#endif
  }
  void Download() {
#if defined(TPSERVE_WITH_CUDA)
    if (dev_ != nullptr) cudaMemcpy(host_.data(), dev_, host_.size(), cudaMemcpyDeviceToHost);
#endif
  }

 private:
  DType dtype_;
  Tensor view_;
  std::vector<char> host_;
#if defined(TPSERVE_WITH_CUDA)
  void* dev_ = nullptr;  // the device copy of host_, for kCuda
#endif
};

struct Checker {
  Communicator& comm;
  const CheckOptions& opt;
  int failures = 0;

  bool Ok(const absl::Status& s, const char* what) {
    if (s.ok() && opt.sync) return Ok(opt.sync(), what);
    if (s.ok()) return true;
    std::fprintf(stderr, "rank %d: %s failed: %s\n", comm.rank(), what, s.ToString().c_str());
    ++failures;
    return false;
  }
  void Expect(const char* what, DType dtype, int64_t n, int64_t i, float got, float want) {
    // bit-exact, NaN included (a poisoned, never-written output stays NaN)
    if (std::memcmp(&got, &want, sizeof got) == 0) return;
    if (failures < 20) {
      std::fprintf(stderr, "rank %d: %s %s n=%lld: element %lld is %.9g, expected %.9g\n",
                   comm.rank(), what, std::string(DTypeName(dtype)).c_str(),
                   static_cast<long long>(n), static_cast<long long>(i), got, want);
    }
    ++failures;
  }
  float Round(DType dtype, double v) {
    return dtype == DType::kF32 ? static_cast<float>(v) : Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
  }

  void AllReduce(DType dtype, int64_t n, int which) {
    TestTensor t(dtype, opt.device, {n});
    for (int64_t i = 0; i < n; ++i) t.Set(i, InputValue(opt.seed, which, comm.rank(), i));
    t.Upload();
    if (!Ok(comm.AllReduceSum(t.tensor()), "AllReduceSum")) return;
    t.Download();
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int r = 0; r < comm.world_size(); ++r) sum += InputValue(opt.seed, which, r, i);
      Expect("AllReduceSum", dtype, n, i, t.Get(i), Round(dtype, sum));
    }
  }

  // Inputs with full 24-bit mantissas and mixed magnitudes, so that the order
  // of the additions shows in the bits; f32 only.
  void AllReduceInRankOrder(int64_t n, int which) {
    const auto value = [&](int r, int64_t i) {
      const float v = InputValue(opt.seed, which, r, i);
      return v * (1.0f + 1.0f / 3.0f) * std::ldexp(1.0f, static_cast<int>(i % 7) * (r - 1));
    };
    TestTensor t(DType::kF32, opt.device, {n});
    for (int64_t i = 0; i < n; ++i) t.Set(i, value(comm.rank(), i));
    t.Upload();
    if (!Ok(comm.AllReduceSum(t.tensor()), "AllReduceSum in rank order")) return;
    t.Download();
    for (int64_t i = 0; i < n; ++i) {
      float sum = value(0, i);
      for (int r = 1; r < comm.world_size(); ++r) sum = sum + value(r, i);
      Expect("AllReduceSum in rank order", DType::kF32, n, i, t.Get(i), sum);
    }
  }

  void Gather(DType dtype, int64_t n, int which, bool all) {
    const int world = comm.world_size();
    TestTensor in(dtype, opt.device, {n});
    for (int64_t i = 0; i < n; ++i) in.Set(i, InputValue(opt.seed, which, comm.rank(), i));
    in.Upload();
    TestTensor out(dtype, opt.device, {world, n});
    for (int64_t i = 0; i < out.numel(); ++i) out.Set(i, std::numeric_limits<float>::quiet_NaN());
    out.Upload();
    const bool receives = all || comm.rank() == 0;
    Tensor out_view = receives ? out.tensor() : Tensor();
    const char* what = all ? "AllGather" : "Gather";
    if (!Ok(all ? comm.AllGather(in.tensor(), out_view) : comm.Gather(in.tensor(), out_view), what))
      return;
    if (!receives) return;
    out.Download();
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        Expect(what, dtype, n, r * n + i, out.Get(r * n + i),
               Round(dtype, InputValue(opt.seed, which, r, i)));
      }
    }
  }

  void Broadcast(DType dtype, int64_t n, int which) {
    for (int root = 0; root < comm.world_size(); ++root) {
      TestTensor t(dtype, opt.device, {n});
      for (int64_t i = 0; i < n; ++i) t.Set(i, InputValue(opt.seed, which + root, comm.rank(), i));
      t.Upload();
      if (!Ok(comm.Broadcast(t.tensor(), root), "Broadcast")) return;
      t.Download();
      for (int64_t i = 0; i < n; ++i) {
        Expect("Broadcast", dtype, n, i, t.Get(i),
               Round(dtype, InputValue(opt.seed, which + root, root, i)));
      }
    }
  }

  // Each rank leaves a mark before the barrier (the last rank late); after it,
  // every mark must be there.
  void Barrier() {
    const int world = comm.world_size();
    auto mark = [&](int r) { return opt.barrier_dir + "/mark." + std::to_string(r); };
    if (comm.rank() == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::ofstream(mark(comm.rank())) << "here";
    if (!Ok(comm.Barrier(), "Barrier")) return;
    for (int r = 0; r < world; ++r) {
      if (!std::filesystem::exists(mark(r))) {
        std::fprintf(stderr, "rank %d: Barrier returned before rank %d arrived\n", comm.rank(), r);
        ++failures;
      }
    }
  }
};

}  // namespace

float InputValue(uint64_t seed, int which, int rank, int64_t i) {
  uint64_t h = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(which) * 1000003u + static_cast<uint64_t>(rank)) ^
                   SplitMix64(static_cast<uint64_t>(i) + 0x51ed27u));
  int k = static_cast<int>(h % 511) - 255;  // -255 .. 255: 8 significant bits, exact in bf16
  return static_cast<float>(k) / 64.0f;
}

int RunCollectiveChecks(Communicator& comm, const CheckOptions& options) {
  Checker c{comm, options};
  int which = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 7, 4097}) {
      c.AllReduce(dtype, n, which += 100);
      c.Gather(dtype, n, which += 100, /*all=*/false);
      c.Gather(dtype, n, which += 100, /*all=*/true);
      c.Broadcast(dtype, n, which += 100);
    }
  }
  if (options.rank_order_sum) {
    for (int64_t n : {1, 7, 4097}) c.AllReduceInRankOrder(n, 7777);  // one input: a prefix reduces alike
  }
  if (!options.barrier_dir.empty()) c.Barrier();
  return c.failures;
}

}  // namespace tpserve::comm_test
