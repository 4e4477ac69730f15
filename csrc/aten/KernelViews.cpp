#include "aten/KernelViews.h"

#include <ATen/ATen.h>

#include "aten/NativeView.h"

namespace torch_fl::aten {

at::Tensor KernelViews::add(const at::Tensor& t, bool written) {
  // PyTorch's kernels would reject operands on two CUDA devices; the host
  // views all look like CPU tensors, so the check is made here.
  TORCH_CHECK(device_tensors_.empty() || device_tensors_.front().device() == t.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              device_tensors_.front().device(), " and ", t.device(), "!");
  device_tensors_.push_back(t);
  views_.push_back(native_view(t));
  written_.push_back(written);
  return views_.back();
}

void KernelViews::sync_written() {
  for (size_t k = 0; k < views_.size(); ++k) {
    if (written_[k]) sync_from_native_view(device_tensors_[k], views_[k]);
  }
}

at::Tensor KernelViews::to_flagos(const at::Tensor& result, c10::Device device) {
  if (!result.defined() || result.device().type() == c10::DeviceType::PrivateUse1) return result;
  const auto k = find(result);
  if (!k.has_value()) return from_native(result, device);
  if (result.unsafeGetTensorImpl() == views_[*k].unsafeGetTensorImpl()) return device_tensors_[*k];
  auto alias = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(device_tensors_[*k].storage()),
                                                        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                        result.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(result.sizes(), result.strides(), result.storage_offset());
  return alias;
}

std::optional<size_t> KernelViews::find(const at::Tensor& result) {
  const void* impl = result.unsafeGetTensorImpl();
  const void* storage = result.storage().unsafeGetStorageImpl();
  if (views_.size() <= 8) {
    for (size_t k = 0; k < views_.size(); ++k) {
      if (views_[k].unsafeGetTensorImpl() == impl) return k;
    }
    for (size_t k = 0; k < views_.size(); ++k) {
      if (views_[k].storage().unsafeGetStorageImpl() == storage) return k;
    }
    return std::nullopt;
  }
  if (by_impl_.empty()) {
    for (size_t k = 0; k < views_.size(); ++k) {
      by_impl_.emplace(views_[k].unsafeGetTensorImpl(), k);
      by_storage_.emplace(views_[k].storage().unsafeGetStorageImpl(), k);
    }
  }
  if (auto it = by_impl_.find(impl); it != by_impl_.end()) return it->second;
  if (auto it = by_storage_.find(storage); it != by_storage_.end()) return it->second;
  return std::nullopt;
}

}  // namespace torch_fl::aten
