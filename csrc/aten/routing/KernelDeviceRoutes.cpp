// The dispatcher scan behind register_kernel_device_routes() (KernelDeviceRoutes.h).
// It runs when the plugin initialises rather than as a static registration: the
// set of operators is read from the dispatcher, which must by then hold every
// aten kernel.
#include "aten/routing/KernelDeviceRoutes.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy_ops.h>
#include <torch/library.h>

#include "aten/views/KernelView.h"
#include "aten/routing/RoutedFallback.h"
#include "aten/routing/Routing.h"
#include "runtime/DeviceRuntime.h"

namespace torch_fl::aten {

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
// a structured op on a platform whose kernel device allocates flagos memory only
// inside flagos's own calls (host, KernelAllocations in FlagosDeviceAllocator.h):
// there it keeps the generic path, which reaches the same kernel through its out=
// variant into a flagos allocation.  Ops returning views keep the generic
// path (it builds them from flagos's own view ops).  The set is read from the
// dispatcher; the one hand-kept rule is generic_kernel_names_its_devices().
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
  // The source's view is the cached one: autocast casts the same weights in every step.
  auto result = at::_ops::_to_copy::redispatch(kernel_dispatch_keys(), is_flagos(self) ? cached_kernel_view(self) : self,
                                               dtype, layout, kernel_target, pin_memory, non_blocking, memory_format);
  if (target.type() != c10::DeviceType::PrivateUse1) return result;
  // Moved, so that nothing else holds it: the result becomes the flagos tensor in place.
  return from_kernel_result(std::move(result), c10::Device(target.type(), kernel_target.index()));
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

// Out= forms whose only kernel is generic (CompositeExplicitAutograd) and accepts only the device types it
// names ("mode only supports CPU, CUDA and XPU device type"): on flagos they would raise although the kernel
// device runs them.  tests/opinfo/test_out_variants.py finds such ops across PyTorch's OpInfo database.
bool generic_kernel_names_its_devices(const c10::OperatorName& name) {
  return name.name == "aten::mode" && name.overload_name == "values";
}

bool routes_to_kernel_device(const c10::OperatorHandle& op, c10::DispatchKey kernel_key, bool adopt_results) {
  using c10::DispatchKey;
  if (op.hasKernelForDispatchKey(DispatchKey::PrivateUse1) || returns_view(op.schema())) return false;
  if (generic_kernel_names_its_devices(op.operator_name())) return true;
  if (!op.hasKernelForDispatchKey(kernel_key)) return false;
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
      library->impl(short_op_name(name).c_str(), torch::CppFunction::makeFromBoxedFunction<&routed_fallback>());
    }
    // dtype conversions (every autocast cast): one kernel-device _to_copy on a
    // kernel view, instead of a flagos allocation plus copy_ plus _copy_from.
    if (adopt_results) library->impl("_to_copy", TORCH_FN(to_copy_on_kernel_device));
    return true;
  }();
  (void)registered;
}

}  // namespace torch_fl::aten
