#include "aten/HostView.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"

namespace torch_fl::aten {

at::Tensor host_view(const at::Tensor& device_tensor) {
  const auto& storage = device_tensor.storage();
  c10::Storage view_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                            c10::DataPtr(const_cast<void*>(storage.data()), c10::Device(c10::DeviceType::CPU)),
                            at::getCPUAllocator(), /*resizable=*/true);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(view_storage),
                                                       c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                       device_tensor.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(device_tensor.sizes(), device_tensor.strides(),
                                                    device_tensor.storage_offset());
  return view;
}

void sync_from_host_view(const at::Tensor& device_tensor, const at::Tensor& view) {
  const auto& storage = device_tensor.storage();
  if (view.storage().data() != storage.data()) {
    // The kernel resized the view: its bytes now live in CPU memory.
    const size_t nbytes = view.storage().nbytes();
    auto fresh = device_allocator().allocate_on(device_tensor.device().index(), nbytes);
    if (nbytes > 0) {
      runtime::copy(fresh.get(), view.storage().data(), nbytes, runtime::CopyKind::HostToDevice, nullptr);
    }
    auto* impl = storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(nbytes);
  }
  if (view.sizes() != device_tensor.sizes() || view.strides() != device_tensor.strides() ||
      view.storage_offset() != device_tensor.storage_offset()) {
    device_tensor.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
}

at::Tensor to_device(const at::Tensor& cpu, c10::Device device) {
  const bool dense = cpu.is_non_overlapping_and_dense();
  auto out = dense ? at::empty_strided(cpu.sizes(), cpu.strides(), cpu.options().device(device))
                   : at::empty(cpu.sizes(), cpu.options().device(device));
  if (dense && out.strides() == cpu.strides()) {
    const size_t nbytes = static_cast<size_t>(cpu.numel()) * cpu.element_size();
    if (nbytes > 0) {
      runtime::copy(out.data_ptr(), cpu.const_data_ptr(), nbytes, runtime::CopyKind::HostToDevice, nullptr);
    }
  } else {
    host_view(out).copy_(cpu);
  }
  return out;
}

}  // namespace torch_fl::aten
