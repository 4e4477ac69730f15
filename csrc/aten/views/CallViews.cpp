#include "aten/views/CallViews.h"

#include <ATen/ATen.h>

#include "aten/views/KernelView.h"

namespace torch_fl::aten {

at::Tensor CallViews::add(const at::Tensor& t, bool written) {
  return add_entry(c10::MaybeOwned<at::Tensor>::borrowed(t), written);
}

at::Tensor CallViews::add_owned(at::Tensor t, bool written) {
  return add_entry(c10::MaybeOwned<at::Tensor>::owned(std::move(t)), written);
}

at::Tensor CallViews::add_entry(c10::MaybeOwned<at::Tensor> t, bool written) {
  // PyTorch's kernels would reject operands on two CUDA devices; the host
  // views all look like CPU tensors, so the check is made here.
  TORCH_CHECK(entries_.empty() || entries_.front().flagos->device() == t->device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              entries_.front().flagos->device(), " and ", t->device(), "!");
  auto view = cached_kernel_view(*t);
  // A written argument and another argument over the same flagos storage get views over one kernel
  // storage, as the two tensors have one storage: PyTorch's overlap checks know aliases by their
  // storage (MemoryOverlap.cpp: x[1:].add_(x[:-1]) must raise, not compute), and a kernel that
  // reallocates an out= argument does so for every view of it.  A storage nothing else holds cannot
  // be another argument's.
  // (unsafe_storage() reads the storage member inline; storage() and has_storage() are out-of-line calls.)
  const c10::Storage& own = t->unsafeGetTensorImpl()->unsafe_storage();
  if (own && own.use_count() > 1) {
    const c10::StorageImpl* storage = own.unsafeGetStorageImpl();
    for (const Entry& e : entries_) {
      if ((written || e.written) && e.flagos->unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl() == storage) {
        if (!e.view.storage().is_alias_of(view.storage())) view = kernel_view_sharing(*t, e.view.storage());
        break;
      }
    }
  }
  entries_.push_back(Entry{std::move(t), view, written});
  return view;
}

void CallViews::sync_written() {
  for (const Entry& e : entries_) {
    if (!e.written) continue;
    // A view the kernel gave memory of its own (an out= argument it resized) hands that memory to the flagos
    // tensor and stays a view the cache can hand out again.  Where the memory cannot move, the view would keep
    // it alive in the cache: it is dropped instead.
    const bool kept_memory = e.view.storage().data() != e.flagos->storage().data() &&
                             !move_reallocated_memory(*e.flagos, e.view);
    sync_from_kernel_view(*e.flagos, e.view);
    if (kept_memory) forget_kernel_view(*e.flagos);
  }
}

at::Tensor CallViews::to_flagos(at::Tensor result, c10::Device device) {
  if (!result.defined() || is_flagos(result)) return result;
  // A fresh tensor: nothing else holds it or its storage, so it is no view of this call (each view is held
  // here) and shares no view's storage (each view holds its own): no search.  The usual one, over device
  // memory, becomes flagos in place at once.
  if (adopt_fresh_in_place(result, device)) return result;
  // Not strided: no storage to match; from_kernel_result says so in one line.
  if (result.layout() != c10::kStrided) return from_kernel_result(std::move(result), device);
  if (held_only_by_caller(result)) return from_kernel_result(std::move(result), device);
  const auto k = find(result);
  if (!k.has_value()) return from_kernel_result(std::move(result), device);
  const Entry& e = entries_[*k];
  if (result.unsafeGetTensorImpl() == e.view.unsafeGetTensorImpl()) return *e.flagos;
  return alias_of_kernel_result(std::move(result), e.flagos->storage());
}

std::optional<size_t> CallViews::find(const at::Tensor& result) {
  const void* impl = result.unsafeGetTensorImpl();
  const void* storage = result.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  const auto storage_of = [](const Entry& e) { return e.view.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl(); };
  if (entries_.size() <= 8) {
    for (size_t k = 0; k < entries_.size(); ++k) {
      if (entries_[k].view.unsafeGetTensorImpl() == impl) return k;
    }
    for (size_t k = 0; k < entries_.size(); ++k) {
      if (storage_of(entries_[k]) == storage) return k;
    }
    return std::nullopt;
  }
  if (!index_) {
    index_ = std::make_unique<Index>();
    for (size_t k = 0; k < entries_.size(); ++k) {
      index_->by_impl.emplace(entries_[k].view.unsafeGetTensorImpl(), k);
      index_->by_storage.emplace(storage_of(entries_[k]), k);
    }
  }
  if (auto it = index_->by_impl.find(impl); it != index_->by_impl.end()) return it->second;
  if (auto it = index_->by_storage.find(storage); it != index_->by_storage.end()) return it->second;
  return std::nullopt;
}

}  // namespace torch_fl::aten
