// The PrivateUse1 registration table: native kernels, the routed fallback for
// everything else, and the autocast policy for torch.autocast("flagos").
#include <ATen/autocast_mode.h>
#include <ATen/ops/_to_copy_ops.h>
#include <torch/library.h>

#include "aten/Boxing.h"
#include "aten/Registration.h"
#include "runtime/DeviceRuntime.h"
#include "aten/NativeOps.h"
#include "aten/NativeView.h"
#include "aten/OverrideableOps.h"

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

// A backend without its own kernel for an op gets PyTorch's generic one where
// the op has it, and never reaches the routed fallback:
//  * structured ops (add.Tensor, add_.Tensor; CompositeExplicitAutogradNonFunctional):
//    a kernel that allocates the output on the backend and calls the out=
//    variant -- the same kernel in the end, but two shape passes, a flagos
//    allocation and one more boxed call per op;
//  * CompositeExplicitAutograd and CompositeImplicitAutograd ops that also have
//    device kernels: a *different* computation (addr as mul+add, group norm
//    and mish's gradient decomposed, foreach ops looping over single-tensor
//    ops, native_layer_norm through batch_norm) whose rounding differs from
//    the device kernel's -- flagos would not compute what CPU or CUDA computes.
// So every such op is routed itself, to the kernel device's own kernel, except
// a structured op on a platform whose kernel results must be copied into
// device memory (host): there the generic path reaches the same kernel through
// its out= variant without that copy.  Ops returning views keep the generic
// path (it builds them from flagos's own view ops).  The set is read from the
// dispatcher, never kept by hand.
namespace {

at::Tensor to_copy_on_kernel_device(const at::Tensor& self, std::optional<c10::ScalarType> dtype,
                                    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                    std::optional<bool> pin_memory, bool non_blocking,
                                    std::optional<c10::MemoryFormat> memory_format) {
  const auto target = device.value_or(self.device());
  c10::Device kernel_target = target;
  if (target.type() == c10::DeviceType::PrivateUse1) {
    kernel_target = c10::Device(runtime::kernel_device_type(), target.has_index() ? target.index()
                                                                                 : self.device().index());
  }
  // Straight to the kernel device's kernel: a top-level at::_to_copy would dispatch from the start again.
  auto result = at::_ops::_to_copy::redispatch(kernel_dispatch_keys(), native_view_if_flagos(self), dtype, layout, kernel_target,
                                               pin_memory, non_blocking, memory_format);
  return target.type() == c10::DeviceType::PrivateUse1 ? from_native(result, c10::Device(target.type(),
                                                                                          kernel_target.index()))
                                                       : result;
}

// add_.Tensor and the like: named with a trailing underscore, no out= arguments.
bool is_in_place(const c10::FunctionSchema& schema) {
  const auto& name = schema.name();
  if (name.empty() || name.back() != '_') return false;
  for (const auto& argument : schema.arguments()) {
    if (argument.is_out()) return false;
  }
  return true;
}

// A view op: a result aliases an argument without writing to it.
bool returns_view(const c10::FunctionSchema& schema) {
  for (const auto& result : schema.returns()) {
    if (result.alias_info() != nullptr && !result.alias_info()->isWrite()) return true;
  }
  return false;
}

bool routes_to_kernel_device(const c10::OperatorHandle& op, c10::DispatchKey kernel_key, bool adopt_results) {
  using c10::DispatchKey;
  if (op.hasKernelForDispatchKey(DispatchKey::PrivateUse1) || !op.hasKernelForDispatchKey(kernel_key) ||
      returns_view(op.schema())) {
    return false;
  }
  if (op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd) ||
      op.hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd)) {
    return true;
  }
  return op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutogradNonFunctional) &&
         (adopt_results || is_in_place(op.schema()));
}

}  // namespace

void register_kernel_device_routes() {
  static const bool registered = [] {
    const bool adopt_results = runtime::kernel_outputs_are_device_memory();
    auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                       __LINE__);  // lives as long as the process
    const auto kernel_key = kernel_dispatch_keys().highestPriorityTypeId();
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      const auto op = dispatcher.findOp(name);
      if (!op.has_value() || !routes_to_kernel_device(*op, kernel_key, adopt_results)) continue;
      const auto short_name = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
      library->impl(short_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
    }
    // dtype conversions (every autocast cast): one kernel-device _to_copy on a
    // kernel view, instead of a flagos allocation plus copy_ plus _copy_from.
    if (adopt_results) library->impl("_to_copy", TORCH_FN(to_copy_on_kernel_device));
    return true;
  }();
  (void)registered;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
}

// Autocast: ops not listed keep their dtype.  The lists follow PyTorch's CUDA
// policy (aten/src/ATen/autocast_mode.cpp) for the ops a model commonly hits.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp: run in the autocast dtype
  KERNEL_PRIVATEUSEONE(_convolution, deprecated, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose2d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose3d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmv, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addr, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mv, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(prelu, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
  // fp32: numerically sensitive, run in float32
  KERNEL_PRIVATEUSEONE(acos, fp32)
  KERNEL_PRIVATEUSEONE(asin, fp32)
  KERNEL_PRIVATEUSEONE(cosh, fp32)
  KERNEL_PRIVATEUSEONE(erfinv, fp32)
  KERNEL_PRIVATEUSEONE(exp, fp32)
  KERNEL_PRIVATEUSEONE(expm1, fp32)
  KERNEL_PRIVATEUSEONE(log, fp32)
  KERNEL_PRIVATEUSEONE(log10, fp32)
  KERNEL_PRIVATEUSEONE(log2, fp32)
  KERNEL_PRIVATEUSEONE(log1p, fp32)
  KERNEL_PRIVATEUSEONE(reciprocal, fp32)
  KERNEL_PRIVATEUSEONE(rsqrt, fp32)
  KERNEL_PRIVATEUSEONE(sinh, fp32)
  KERNEL_PRIVATEUSEONE(tan, fp32)
  KERNEL_PRIVATEUSEONE(pow, Tensor_Scalar, fp32)
  KERNEL_PRIVATEUSEONE(pow, Tensor_Tensor, fp32)
  KERNEL_PRIVATEUSEONE(pow, Scalar, fp32)
  KERNEL_PRIVATEUSEONE(softplus, fp32)
  KERNEL_PRIVATEUSEONE(layer_norm, fp32)
  KERNEL_PRIVATEUSEONE(group_norm, fp32)
  KERNEL_PRIVATEUSEONE(norm, Scalar, fp32)
  KERNEL_PRIVATEUSEONE(norm, ScalarOpt_dim, fp32)
  KERNEL_PRIVATEUSEONE(cosine_similarity, fp32)
  KERNEL_PRIVATEUSEONE(cosine_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss2d, fp32)
  KERNEL_PRIVATEUSEONE(hinge_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(kl_div, fp32)
  KERNEL_PRIVATEUSEONE(l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(huber_loss, fp32)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(margin_ranking_loss, fp32)
  KERNEL_PRIVATEUSEONE(soft_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)
  KERNEL_PRIVATEUSEONE(dist, fp32)
  KERNEL_PRIVATEUSEONE(cdist, fp32)
  KERNEL_PRIVATEUSEONE(renorm, fp32)
  KERNEL_PRIVATEUSEONE(logsumexp, fp32)
  KERNEL_PRIVATEUSEONE(softmax, int, fp32)
  KERNEL_PRIVATEUSEONE(log_softmax, int, fp32)
  KERNEL_PRIVATEUSEONE(cross_entropy_loss, fp32)
  KERNEL_PRIVATEUSEONE(cumsum, fp32)
  KERNEL_PRIVATEUSEONE(cumprod, fp32)
  KERNEL_PRIVATEUSEONE(sum, fp32)
  KERNEL_PRIVATEUSEONE(prod, fp32)
  // promote: run in the widest input dtype
  KERNEL_PRIVATEUSEONE(cat, promote)
  KERNEL_PRIVATEUSEONE(stack, promote)
  KERNEL_PRIVATEUSEONE(addcdiv, promote)
  KERNEL_PRIVATEUSEONE(addcmul, promote)
  KERNEL_PRIVATEUSEONE(atan2, promote)
  KERNEL_PRIVATEUSEONE(index_put, promote)
  KERNEL_PRIVATEUSEONE(scatter_add, promote)
}

}  // namespace torch_fl::aten
