#include "distributed/LentViews.h"

#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include "aten/views/KernelView.h"

namespace torch_fl::distributed {

namespace {

void release_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

// kernel_view(t) whose memory keeps t's storage alive (see LentViews).
at::Tensor owning_view(const at::Tensor& t) {
  auto view = aten::kernel_view(t);
  auto* impl = view.storage().unsafeGetStorageImpl();
  const c10::Device where = impl->data_ptr().device();
  void* data = impl->mutable_data();
  impl->set_data_ptr_noswap(c10::DataPtr(data, new c10::Storage(t.storage()), &release_storage, where));
  // The engine never resizes a collective's buffers; a view that could grow would
  // silently detach from the flagos memory.
  impl->set_resizable(false);
  return view;
}

}  // namespace

at::Tensor LentViews::lend(const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), op_, " on the ", backend_, " process group got an undefined tensor");
  TORCH_CHECK_VALUE(aten::is_flagos(t), op_, " on the ", backend_, " process group got a tensor on ", t.device(),
                    device_ ? c10::str(" beside one on ", *device_) : std::string(),
                    "; put every tensor of a collective on one flagos device (t.to('flagos')), or run CPU tensors "
                    "through a cpu backend (init_process_group(backend='cpu:gloo,flagos:", backend_, "'))");
  TORCH_CHECK_VALUE(t.layout() == c10::kStrided, op_, " on the ", backend_, " process group supports strided "
                    "(dense) tensors; got layout ", t.layout(), " (convert with t.to_dense())");
  TORCH_CHECK_VALUE(!device_ || *device_ == t.device(), op_, " on the ", backend_,
                    " process group got tensors on ", *device_, " and ", t.device(),
                    "; one process group rank drives one flagos device: move them to one device "
                    "(torch.flagos.set_device(rank) and t.to('flagos'))");
  device_ = t.device();
  auto view = owning_view(t);
  flagos_by_view_.emplace(view.unsafeGetTensorImpl(), t);
  return view;
}

std::vector<at::Tensor> LentViews::lend(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> views;
  views.reserve(ts.size());
  for (const auto& t : ts) views.push_back(lend(t));
  return views;
}

std::vector<std::vector<at::Tensor>> LentViews::lend(const std::vector<std::vector<at::Tensor>>& tss) {
  std::vector<std::vector<at::Tensor>> views;
  views.reserve(tss.size());
  for (const auto& ts : tss) views.push_back(lend(ts));
  return views;
}

at::Tensor LentViews::flagos_of(const at::Tensor& view) const {
  if (!view.defined()) return view;
  const auto it = flagos_by_view_.find(view.unsafeGetTensorImpl());
  if (it != flagos_by_view_.end()) return it->second;
  // A tensor the engine made itself (none of gloo's or NCCL's collectives return
  // one today): hand it back as flagos memory.
  TORCH_INTERNAL_ASSERT(device_.has_value(), op_, ": the engine returned a tensor but none was lent");
  return aten::from_kernel_result(view, *device_);
}

std::vector<at::Tensor> LentViews::to_flagos(const std::vector<at::Tensor>& views) const {
  std::vector<at::Tensor> out;
  out.reserve(views.size());
  for (const auto& v : views) out.push_back(flagos_of(v));
  return out;
}

c10::IValue LentViews::to_flagos(const c10::IValue& engine_value) const {
  if (engine_value.isTensor()) return flagos_of(engine_value.toTensor());
  if (engine_value.isTensorList()) return to_flagos(engine_value.toTensorVector());
  if (engine_value.isList()) {
    auto list = c10::impl::GenericList(engine_value.toList().elementType());
    for (const c10::IValue& item : engine_value.toListRef()) list.push_back(to_flagos(item));
    return list;
  }
  return engine_value;
}

}  // namespace torch_fl::distributed
