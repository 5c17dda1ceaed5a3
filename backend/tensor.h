// Tensor: a non-owning view of a contiguous row-major array on one device, and
// Buffer: the owning allocation behind it.
//
// Activations and weights are kF32 on the CPU backend and kBF16 on the CUDA
// backend; integer step metadata never travels as a Tensor (see step.h).
#pragma once

#include <array>
#include <cassert>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "model/dtype.h"

namespace tpserve {

enum class Device { kCpu, kCuda };

inline constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};  // row-major, contiguous

  Tensor() = default;
  Tensor(void* data, DType dtype, Device device, std::initializer_list<int64_t> dims);
  // The same from a runtime shape (1 to kMaxDims non-negative dimensions; anything
  // else aborts naming `op`): what a backend's Allocate describes before it
  // has memory (data stays nullptr).
  static Tensor Describe(DType dtype, Device device, std::span<const int64_t> dims,
                         const char* op);

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  // Elements per row of the 2-D view [dim(0), numel / dim(0)].
  int64_t row_width() const { return ndim == 0 || shape[0] == 0 ? 0 : numel() / shape[0]; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Rows [begin, begin + count) along the first dimension (a view).
  Tensor Rows(int64_t begin, int64_t count) const;
  // The same memory with another shape of equal numel (a view).
  Tensor View(std::initializer_list<int64_t> dims) const;
  std::string ShapeString() const;  // "[3, 4]"
};

// Owning storage for a Tensor; frees through the backend that allocated it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tensor view, std::function<void(void*)> free) : view_(view), free_(std::move(free)) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  const Tensor& tensor() const { return view_; }
  operator const Tensor&() const { return view_; }  // NOLINT: a Buffer is usable where a Tensor is
  bool empty() const { return view_.data == nullptr; }
  void Reset();

 private:
  Tensor view_;
  std::function<void(void*)> free_;
};

}  // namespace tpserve
