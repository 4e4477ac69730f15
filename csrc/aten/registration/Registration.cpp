// The static PrivateUse1 registration table: flagos's native kernels, the ops
// routed by name, and the routed fallback for everything else.  The other
// registrations for flagos: the unboxed kernels (UnboxedKernels.cpp), the
// dispatcher scan at initialisation (KernelDeviceRoutes.cpp) and the autocast
// policy (AutocastPolicy.cpp).
#include <torch/library.h>

#include "aten/kernels/NativeOps.h"
#include "aten/kernels/OverrideableOps.h"
#include "aten/routing/RoutedFallback.h"

namespace torch_fl::aten {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_", TORCH_FN(set_empty_));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset_));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention_overrideable));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_overrideable_backward));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

// flagos tensors are strided: an operator that meets a sparse flagos tensor
// (or is asked to make one) says so in one line instead of PyTorch's "Could not
// run ... SparsePrivateUse1" or "Cannot access storage of SparseTensorImpl".
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&reject_sparse_layout>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&reject_sparse_layout>());
}

// Routed by name:
//  * mse_loss: its generic PrivateUse1 path calls the out= variant with a 0-dim
//    output that the CPU kernel then resizes (a deprecation warning on every
//    call); routing the functional op itself runs the kernel device's kernel;
//  * conj_physical_: its only kernel is a composite one that calls a
//    DispatchStub for the tensor's device type, which PrivateUse1 lacks
//    ("DispatchStub: missing kernel"); on a kernel view it finds the device's.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
  m.impl("conj_physical_", torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
}

// Everything else: the provider the routing table names (RoutedFallback.cpp).
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
}

}  // namespace torch_fl::aten
