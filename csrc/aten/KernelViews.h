// The kernel views of one operator call: every flagos argument seen as a tensor
// of the kernel device type (KernelView.h), and the way back for the kernel's
// results.  Shared by the boxed routed fallback (RoutedFallback.cpp) and the unboxed
// kernels (UnboxedKernels.cpp).
#pragma once

#include <optional>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

namespace torch_fl::aten {

class KernelViews {
 public:
  // The kernel view of flagos tensor `t`, remembered so that results can be
  // mapped back; `written`: the schema marks the argument as written to.
  // Throws when `t` is on another flagos device than the earlier arguments.
  at::Tensor add(const at::Tensor& t, bool written);

  // Carries what the kernel did to written arguments' views (a resize, new
  // geometry) back to the flagos tensors.
  void sync_written();

  // A kernel result as a flagos tensor on `device`: the argument itself for
  // in-place and out= results, a flagos view for results aliasing an argument,
  // else the result adopted or copied (from_kernel_result).
  at::Tensor to_flagos(const at::Tensor& result, c10::Device device);

  // The device of the first flagos argument, if there was one.
  std::optional<c10::Device> device() const {
    return entries_.empty() ? std::nullopt : std::optional<c10::Device>(entries_.front().flagos.device());
  }

 private:
  struct Entry {
    at::Tensor flagos;
    at::Tensor view;
    bool written;
  };

  // The view `result` is, or else shares storage with.
  std::optional<size_t> find(const at::Tensor& result);

  c10::SmallVector<Entry, 6> entries_;
  // Foreach ops pass and return hundreds of tensors: past a few views the lookup is indexed.
  std::unordered_map<const void*, size_t> by_impl_;
  std::unordered_map<const void*, size_t> by_storage_;
};

}  // namespace torch_fl::aten
