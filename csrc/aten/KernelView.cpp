#include "aten/KernelView.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include "aten/NativeOps.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"

namespace torch_fl::aten {

namespace {

// Wraps the storage of a kernel result into a flagos storage sharing its memory.
c10::Storage adopt_storage(const c10::Storage& kernel_storage, c10::Device device) {
  return c10::Storage(c10::Storage::use_byte_size_t(), kernel_storage.nbytes(),
                      adopt_kernel_allocation(kernel_storage, device.index()), &device_allocator(), /*resizable=*/true);
}

}  // namespace

c10::DispatchKeySet kernel_dispatch_keys() {
  static const c10::DispatchKeySet keys(
      c10::computeDispatchKey(std::nullopt, c10::kStrided, runtime::kernel_device_type()));
  return keys;
}

c10::Device kernel_device_of(c10::Device flagos_device) {
  const auto type = runtime::kernel_device_type();
  return type == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(type, flagos_device.index());
}

void copy_lazy_bits(const at::Tensor& from, const at::Tensor& to) {
  // Conjugate and negative views are a bit on the tensor, resolved lazily by
  // the kernels that see it (mm, copy_, ...): a view without them would read
  // conj(x) as x.
  if (from.is_conj()) to._set_conj(true);
  if (from.is_neg()) to._set_neg(true);
}

at::Tensor kernel_view(const at::Tensor& flagos_tensor) {
  const c10::Device where = kernel_device_of(flagos_tensor.device());
  if (flagos_tensor._is_zerotensor()) {
    // An efficient zero tensor has no memory: the kernel reads zeros.
    return at::zeros({}, flagos_tensor.options().device(where)).expand(flagos_tensor.sizes());
  }
  const auto& storage = flagos_tensor.storage();
  c10::Storage view_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                            c10::DataPtr(const_cast<void*>(storage.data()), where), c10::GetAllocator(where.type()),
                            /*resizable=*/true);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(view_storage), kernel_dispatch_keys(), flagos_tensor.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(flagos_tensor.sizes(), flagos_tensor.strides(),
                                                    flagos_tensor.storage_offset());
  copy_lazy_bits(flagos_tensor, view);
  return view;
}

void sync_from_kernel_view(const at::Tensor& flagos_tensor, const at::Tensor& view) {
  const auto& storage = flagos_tensor.storage();
  if (view.storage().data() != storage.data()) {
    // The kernel resized the view: its bytes now live in memory it allocated.
    auto* impl = storage.unsafeGetStorageImpl();
    const size_t nbytes = view.storage().nbytes();
    if (runtime::kernel_outputs_are_device_memory()) {
      impl->set_data_ptr_noswap(adopt_kernel_allocation(view.storage(), flagos_tensor.device().index()));
    } else {
      auto fresh = device_allocator().allocate_on(flagos_tensor.device().index(), nbytes);
      if (nbytes > 0) {
        runtime::copy(fresh.get(), view.storage().data(), nbytes, runtime::CopyKind::HostToDevice, nullptr);
      }
      impl->set_data_ptr_noswap(std::move(fresh));
    }
    impl->set_nbytes(nbytes);
  }
  if (view.sizes() != flagos_tensor.sizes() || view.strides() != flagos_tensor.strides() ||
      view.storage_offset() != flagos_tensor.storage_offset()) {
    flagos_tensor.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
  // Kernels may leave an out= result as a conjugate view of what they wrote
  // (linalg_lu_solve with left=False flips the bit instead of conjugating).
  if (view.is_conj() != flagos_tensor.is_conj()) flagos_tensor._set_conj(view.is_conj());
  if (view.is_neg() != flagos_tensor.is_neg()) flagos_tensor._set_neg(view.is_neg());
}

at::Tensor from_kernel_result(const at::Tensor& result, c10::Device device) {
  TORCH_CHECK_NOT_IMPLEMENTED(result.layout() == c10::kStrided, sparse_layout_advice(result.layout()));
  if (result._is_zerotensor()) {
    return efficient_zero_tensor(result.sym_sizes(), result.scalar_type(), std::nullopt, device, std::nullopt);
  }
  if (!runtime::kernel_outputs_are_device_memory()) {
    return to_device(result.device().type() == c10::kCPU ? result : result.cpu(), device);
  }
  // A device kernel's CPU result is a CPU tensor natively too -- the RNG seed and
  // offset of the attention kernels, which their backward reads on the host -- so
  // it stays one; moved to device memory, the backward would read a device pointer.
  if (result.device().type() == c10::kCPU) return result;
  auto adopted = at::detail::make_tensor<c10::TensorImpl>(
      adopt_storage(result.storage(), device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype());
  adopted.unsafeGetTensorImpl()->set_sizes_and_strides(result.sizes(), result.strides(), result.storage_offset());
  copy_lazy_bits(result, adopted);
  return adopted;
}

at::Tensor to_device(const at::Tensor& cpu, c10::Device device) {
  // Keep a dense result's layout, so that the copy is one block copy.
  auto out = cpu.is_non_overlapping_and_dense()
                 ? at::empty_strided(cpu.sizes(), cpu.strides(), cpu.options().device(device))
                 : at::empty(cpu.sizes(), cpu.options().device(device));
  return copy_from(cpu, out, /*non_blocking=*/false);
}

}  // namespace torch_fl::aten
