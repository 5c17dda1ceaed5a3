#include "backend/tensor.h"

#include "base/check.h"

namespace tpserve {

Tensor::Tensor(void* data_in, DType dtype_in, Device device_in, std::initializer_list<int64_t> dims)
    : data(data_in), dtype(dtype_in), device(device_in), ndim(static_cast<int>(dims.size())) {
  TPSERVE_CHECK(dims.size() <= kMaxDims, "Tensor: ", dims.size(), " dimensions, at most ", kMaxDims,
                " supported");
  int i = 0;
  for (int64_t d : dims) shape[i++] = d;
}

Tensor Tensor::Describe(DType dtype, Device device, std::span<const int64_t> dims, const char* op) {
  TPSERVE_CHECK(!dims.empty() && dims.size() <= static_cast<size_t>(kMaxDims), op, ": ", dims.size(),
                " dimensions; 1 to ", kMaxDims, " are supported");
  Tensor t;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    TPSERVE_CHECK(dims[i] >= 0, op, ": dimension ", i, " is ", dims[i]);
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
  TPSERVE_CHECK(ndim != 0 && begin >= 0 && count >= 0 && begin + count <= shape[0], "Tensor::Rows(",
                begin, ", ", count, ") outside ", ShapeString());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_width()) * DTypeSize(dtype);
  t.shape[0] = count;
  return t;
}

Tensor Tensor::View(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  TPSERVE_CHECK(t.numel() == numel(), "Tensor::View: ", ShapeString(), " has ", numel(),
                " elements, the view ", t.ShapeString(), " has ", t.numel());
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
