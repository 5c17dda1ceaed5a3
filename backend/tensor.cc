#include "backend/tensor.h"

#include <cstdio>
#include <cstdlib>

namespace tpserve {

Tensor::Tensor(void* data_in, DType dtype_in, Device device_in, std::initializer_list<int64_t> dims)
    : data(data_in), dtype(dtype_in), device(device_in), ndim(static_cast<int>(dims.size())) {
  if (dims.size() > kMaxDims) {
    std::fprintf(stderr, "Tensor: %zu dimensions, at most %d supported\n", dims.size(), kMaxDims);
    std::abort();
  }
  int i = 0;
  for (int64_t d : dims) shape[i++] = d;
}

Tensor Tensor::Describe(DType dtype, Device device, std::span<const int64_t> dims, const char* op) {
  if (dims.empty() || dims.size() > static_cast<size_t>(kMaxDims)) {
    std::fprintf(stderr, "%s: %zu dimensions; 1 to %d are supported\n", op, dims.size(), kMaxDims);
    std::abort();
  }
  Tensor t;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      std::fprintf(stderr, "%s: dimension %zu is %lld\n", op, i, static_cast<long long>(dims[i]));
      std::abort();
    }
    t.shape[i] = dims[i];
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return ndim == 0 ? 0 : n;
}

Tensor Tensor::Rows(int64_t begin, int64_t count) const {
  if (ndim == 0 || begin < 0 || count < 0 || begin + count > shape[0]) {
    std::fprintf(stderr, "Tensor::Rows(%lld, %lld) outside %s\n", static_cast<long long>(begin),
                 static_cast<long long>(count), ShapeString().c_str());
    std::abort();
  }
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_width()) * DTypeSize(dtype);
  t.shape[0] = count;
  return t;
}

Tensor Tensor::View(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  if (t.numel() != numel()) {
    std::fprintf(stderr, "Tensor::View: %s has %lld elements, the view %s has %lld\n",
                 ShapeString().c_str(), static_cast<long long>(numel()), t.ShapeString().c_str(),
                 static_cast<long long>(t.numel()));
    std::abort();
  }
  return t;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    view_ = other.view_;
    free_ = std::move(other.free_);
    other.view_ = Tensor();
    other.free_ = nullptr;
  }
  return *this;
}

void Buffer::Reset() {
  if (view_.data && free_) free_(view_.data);
  view_ = Tensor();
  free_ = nullptr;
}

}  // namespace tpserve
