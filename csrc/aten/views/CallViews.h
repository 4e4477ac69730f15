// The kernel views of one operator call: every flagos argument seen as a tensor
// of the kernel device type (KernelView.h), and the way back for the kernel's
// results.  Shared by the boxed routed fallback (RoutedFallback.cpp) and the unboxed
// kernels (UnboxedKernels.cpp).
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

namespace torch_fl::aten {

class CallViews {
 public:
  // The kernel view of flagos tensor `t`, remembered so that results can be
  // mapped back; `written`: the schema marks the argument as written to.
  // Throws when `t` is on another flagos device than the earlier arguments.
  // `t` is borrowed, not copied: the caller keeps it alive while this object
  // lives.  (Copying a tensor that only its Python object holds increfs that
  // object, which takes the GIL: PyTorch's "PyObject preservation" in
  // c10/util/intrusive_ptr.h.  Per argument that cost more than the view itself.)
  at::Tensor add(const at::Tensor& t, bool written);
  // As add(), for a tensor whose only holder is about to drop it (the boxed
  // fallback replaces the argument on its stack by the view).
  at::Tensor add_owned(at::Tensor t, bool written);

  // Carries what the kernel did to written arguments' views (a resize, new
  // geometry) back to the flagos tensors.
  void sync_written();

  // A kernel result as a flagos tensor on `device`: the argument itself for
  // in-place and out= results, a flagos view for results aliasing an argument,
  // else the result adopted or copied (from_kernel_result).
  // `result` is consumed: nothing else holding it, it becomes that tensor in place.
  at::Tensor to_flagos(at::Tensor result, c10::Device device);

  // The device of the first flagos argument, if there was one.
  std::optional<c10::Device> device() const {
    return entries_.empty() ? std::nullopt : std::optional<c10::Device>(entries_.front().flagos->device());
  }

 private:
  struct Entry {
    c10::MaybeOwned<at::Tensor> flagos;
    at::Tensor view;
    bool written;
  };

  at::Tensor add_entry(c10::MaybeOwned<at::Tensor> t, bool written);

  // The view `result` is, or else shares storage with.
  std::optional<size_t> find(const at::Tensor& result);

  c10::SmallVector<Entry, 6> entries_;
  // Foreach ops pass and return hundreds of tensors: past a few views the lookup is indexed.  Made only then:
  // most calls would otherwise build and free two empty maps.
  struct Index {
    std::unordered_map<const void*, size_t> by_impl;
    std::unordered_map<const void*, size_t> by_storage;
  };
  std::unique_ptr<Index> index_;
};

}  // namespace torch_fl::aten
