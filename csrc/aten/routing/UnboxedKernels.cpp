// Unboxed kernels for the operators a training step calls most.
//
// The routed fallback (RoutedFallback.cpp) serves every operator, so it is boxed: the
// dispatcher packs the arguments into IValues, the fallback reads the schema,
// and the kernel device's kernel unpacks them again.  On the H200 that costs
// 4-8 us per call against ~0.6 us for the view-and-adopt work itself (measured
// with _to_copy, which has always had an unboxed kernel), and a transformer
// step makes over a thousand such calls.  For the operators listed at the end,
// a template generated from the operator's own signature (at::_ops::<op>) does
// the same work unboxed: kernel views of the flagos arguments, a redispatch to
// the kernel device's kernel, results mapped back.
//
// The routing table still decides: while an operator is routed elsewhere (a
// FLAGOS_OP_* override, the cpu provider, an unavailable provider) or
// FLAGOS_LOG_DISPATCH is on, the call goes to the routed fallback instead.
// Random operators run unboxed only without a Generator argument and where the kernel device's default
// generator is flagos's own (flagos_generator_is_kernel_default); elsewhere the routed fallback hands kernels
// the flagos generator.
//
// Most foreach operators' CUDA kernels read only what every strided tensor has (data pointers, sizes,
// strides, dtype, device equality across the lists) and allocate their results from the inputs' options.
// On the cuda platform they therefore take the flagos tensors themselves ("direct" kernels below): an
// optimizer step passes lists of every parameter, gradient and state, and a kernel view per element
// doubled the objects the step touched per tensor, each one cold in the processor's cache by the time the
// optimizer visits it (tools/native_profile.py: the AdamW updates took 2.5x native's host time).
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/boxing/impl/boxing.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/diagonal_backward_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/isin_ops.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/select_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/slice_backward_ops.h>
#include <ATen/ops/softplus_ops.h>
#include <ATen/ops/softplus_backward_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/zero_ops.h>

#include "aten/routing/RoutedFallback.h"
#include "aten/views/CallViews.h"
#include "aten/views/KernelView.h"
#include "aten/routing/Routing.h"
#include "aten/device_check/SameDeviceCheck.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"

namespace torch_fl::aten {

namespace {

// Whether the routing table sends `op` (whose route `slot` remembers) to the kernel device's own kernel right now.
bool runs_on_kernel_device(const c10::OperatorHandle& op, RouteSlot& slot) {
  if (log_dispatch_enabled()) return false;
  const Route route = slot.get(op);
  return route.effective == route.requested &&
         (route.effective == Provider::Cuda || route.effective == Provider::Host);
}

// How one argument reaches the kernel: tensors as kernel views, the rest as given.
template <class A>
struct KernelArgument {
  KernelArgument(CallViews& /*views*/, A value) : value(std::forward<A>(value)) {}
  A value;
  A get() { return std::forward<A>(value); }
};

template <>
struct KernelArgument<const at::Tensor&> {
  KernelArgument(CallViews& views, const at::Tensor& t) : tensor(is_flagos(t) ? views.add(t, false) : t) {}
  at::Tensor tensor;
  const at::Tensor& get() { return tensor; }
};

// In-place self: written, and the flagos tensor is what the operator returns.
template <>
struct KernelArgument<at::Tensor&> {
  KernelArgument(CallViews& views, at::Tensor& t) : original(t), tensor(is_flagos(t) ? views.add(t, true) : t) {}
  at::Tensor& original;
  at::Tensor tensor;
  at::Tensor& get() { return tensor; }
};

template <>
struct KernelArgument<const std::optional<at::Tensor>&> {
  KernelArgument(CallViews& views, const std::optional<at::Tensor>& t)
      : tensor(t.has_value() && is_flagos(*t) ? std::optional<at::Tensor>(views.add(*t, false)) : t) {}
  std::optional<at::Tensor> tensor;
  const std::optional<at::Tensor>& get() { return tensor; }
};

// Tensor lists.  In-place foreach operators write their list's values, never
// its tensors' geometry, so nothing needs carrying back.  The views of a short list (cat's operands: a cache
// update, rotary embeddings' halves) live in the argument itself: a heap block per call would be one more
// allocation and free than the kernel device's own call makes.
using ListViews = c10::SmallVector<at::Tensor, 4>;

template <class List>
ListViews list_views(CallViews& views, const List& list) {
  ListViews tensors;
  tensors.reserve(list.size());
  for (const at::Tensor& t : list) tensors.push_back(is_flagos(t) ? views.add(t, false) : t);
  return tensors;
}

template <>
struct KernelArgument<at::TensorList> {
  KernelArgument(CallViews& views, at::TensorList list) : tensors(list_views(views, list)) {}
  ListViews tensors;
  at::TensorList get() { return tensors; }
};

template <>
struct KernelArgument<const at::ITensorListRef&> {
  KernelArgument(CallViews& views, const at::ITensorListRef& list) : tensors(list_views(views, list)) {}
  ListViews tensors;
  // Made at the call: the list reference must see the views where they ended up.
  at::ITensorListRef get() { return at::ITensorListRef(at::TensorList(tensors)); }
};

// Indices, some absent (x[idx], x[:, mask]).
template <>
struct KernelArgument<const c10::List<std::optional<at::Tensor>>&> {
  KernelArgument(CallViews& views, const c10::List<std::optional<at::Tensor>>& list) {
    tensors.reserve(list.size());
    for (const std::optional<at::Tensor>& t : list) {
      tensors.push_back(t.has_value() && is_flagos(*t) ? std::optional<at::Tensor>(views.add(*t, false)) : t);
    }
  }
  c10::List<std::optional<at::Tensor>> tensors;
  const c10::List<std::optional<at::Tensor>>& get() { return tensors; }
};

// Kernel results back on flagos; a result that is no tensor (a choice, a count) as the kernel gave it.
template <class R>
struct KernelResult {
  static R back(CallViews& /*views*/, R&& result, c10::Device /*device*/) { return std::move(result); }
};

// Results are consumed: one that nothing else holds becomes the flagos tensor in place.
template <>
struct KernelResult<at::Tensor> {
  static at::Tensor back(CallViews& views, at::Tensor&& result, c10::Device device) {
    return views.to_flagos(std::move(result), device);
  }
};

template <>
struct KernelResult<std::vector<at::Tensor>> {
  static std::vector<at::Tensor> back(CallViews& views, std::vector<at::Tensor>&& results, c10::Device device) {
    for (at::Tensor& r : results) r = views.to_flagos(std::move(r), device);
    return std::move(results);
  }
};

template <class... T>
struct KernelResult<std::tuple<T...>> {
  static std::tuple<T...> back(CallViews& views, std::tuple<T...>&& results, c10::Device device) {
    return std::apply(
        [&](auto&... r) { return std::tuple<T...>(KernelResult<T>::back(views, std::move(r), device)...); }, results);
  }
};

// The flagos argument an in-place kernel returned (as its view).
template <class C>
void match_original(C& /*argument*/, const at::Tensor& /*result*/, at::Tensor*& /*found*/) {}
void match_original(KernelArgument<at::Tensor&>& argument, const at::Tensor& result, at::Tensor*& found) {
  if (found == nullptr && argument.tensor.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) {
    found = &argument.original;
  }
}

// Whether an argument may reach a direct kernel as it is: every tensor of a list on flagos, a lone tensor on
// flagos or the CPU (a scalar operand, as CUDA's kernels accept), anything else as given.
template <class A>
bool direct_argument(const A& /*value*/) { return true; }
bool direct_argument(const at::Tensor& t) { return !t.defined() || is_flagos(t) || t.is_cpu(); }
bool direct_argument(const std::optional<at::Tensor>& t) { return !t.has_value() || direct_argument(*t); }
bool direct_argument(at::TensorList list) {
  for (const at::Tensor& t : list) {
    if (!is_flagos(t)) return false;
  }
  return true;
}

// A direct kernel's results, which it made from its flagos inputs' options, on flagos: any other tensor
// (a kernel that allocated on its own device) adopted as the view path would.
at::Tensor direct_result(at::Tensor&& result) {
  if (!result.defined() || is_flagos(result)) return std::move(result);
  return from_kernel_result(std::move(result), c10::Device(c10::DeviceType::PrivateUse1, runtime::current_device()));
}
std::vector<at::Tensor> direct_result(std::vector<at::Tensor>&& results) {
  for (at::Tensor& r : results) r = direct_result(std::move(r));
  return std::move(results);
}

// How an operator reaches the kernel device's kernel: through kernel views of its flagos arguments, or
// (Reach::Direct, on the cuda platform) with the flagos tensors as they are.
enum class Reach { Views, Direct };

template <class Op, Reach reach = Reach::Views, class Signature = typename Op::schema>
struct Unboxed;

template <class Op, Reach reach, class R, class... A>
struct Unboxed<Op, reach, R(A...)> {
  static R call(A... args) {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    static RouteSlot route;
    static const bool seeded = op.hasTag(at::Tag::nondeterministic_seeded);
    static const bool generator_argument = takes_generator(op.schema());
    if (!runs_on_kernel_device(op, route) ||
        (seeded && (generator_argument || !flagos_generator_is_kernel_default(c10::Device(
                                              c10::DeviceType::PrivateUse1, runtime::current_device()))))) {
      return c10::impl::BoxedKernelWrapper<R(A...)>::call(c10::BoxedKernel::makeFromFunction<&routed_fallback>(), op,
                                                          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          std::forward<A>(args)...);
    }
    if constexpr (reach == Reach::Direct) {
      // The host platform's CPU kernels are per-tensor loops over the dispatcher: views serve them better.
      static const bool direct = runtime::kernel_device_type() == c10::DeviceType::CUDA;
      if (direct && (direct_argument(std::as_const(args)) && ...)) {
        if constexpr (std::is_void_v<R>) {
          Op::redispatch(kernel_dispatch_keys(), std::forward<A>(args)...);
          return;
        } else {
          return direct_result(Op::redispatch(kernel_dispatch_keys(), std::forward<A>(args)...));
        }
      }
    }
    // CUDA's kernels check devices themselves; the host platform's CPU kernels would take a CPU tensor.
    static const SameDevicePlan* const same_device =
        runtime::kernel_device_type() == c10::DeviceType::CPU ? same_device_plan(op) : nullptr;
    if (same_device != nullptr) {
      SameDeviceChecker checker(*same_device);
      (checker.next(std::as_const(args)), ...);
    }
    CallViews views;
    // Braced initialisation: the arguments convert left to right.
    std::tuple<KernelArgument<A>...> kernel_args{KernelArgument<A>(views, std::forward<A>(args))...};
    const auto run = [](auto&... a) -> decltype(auto) { return Op::redispatch(kernel_dispatch_keys(), a.get()...); };
    const auto first = views.device();
    const c10::Device device =
        first.has_value() ? *first : c10::Device(c10::DeviceType::PrivateUse1, runtime::current_device());
    // The kernel's own allocations (its results) are flagos memory of the call's device, adopted below.
    const KernelAllocations allocations(device.index());
    if constexpr (std::is_void_v<R>) {
      std::apply(run, kernel_args);
      views.sync_written();
    } else if constexpr (std::is_same_v<R, at::Tensor&>) {
      at::Tensor& result = std::apply(run, kernel_args);
      views.sync_written();
      at::Tensor* original = nullptr;
      std::apply([&](auto&... a) { (match_original(a, result, original), ...); }, kernel_args);
      TORCH_INTERNAL_ASSERT(original != nullptr, Op::name, " returned a tensor that is not its in-place argument");
      return *original;
    } else {
      R result = std::apply(run, kernel_args);
      views.sync_written();
      return KernelResult<R>::back(views, std::move(result), device);
    }
  }
};

template <class Op, Reach reach = Reach::Views>
void unboxed(torch::Library& library) {
  std::string name = Op::name;
  name = name.substr(name.find("::") + 2);
  if (*Op::overload_name != '\0') name += std::string(".") + Op::overload_name;
  library.impl(name.c_str(), TORCH_FN((&Unboxed<Op, reach>::call)));
}

template <class Op>
void direct(torch::Library& library) {
  unboxed<Op, Reach::Direct>(library);
}

}  // namespace

// The list comes from profiling a transformer training step (benchmarks/device/gpu_step_profile.py)
// plus the usual companions of those operators (other activations, softmax and
// cross-entropy, embeddings, the optimizers' foreach updates).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace ops = at::_ops;
  // matrix products, and their out= forms: code inductor generates calls these (extern_kernels.mm(..., out=buf))
  unboxed<ops::mm>(m);
  unboxed<ops::mm_out>(m);
  unboxed<ops::addmm>(m);
  unboxed<ops::addmm_out>(m);
  unboxed<ops::bmm>(m);
  unboxed<ops::bmm_out>(m);
  unboxed<ops::baddbmm>(m);
  unboxed<ops::baddbmm_out>(m);
  // pointwise
  unboxed<ops::add_Tensor>(m);
  unboxed<ops::add__Tensor>(m);
  unboxed<ops::sub_Tensor>(m);
  unboxed<ops::sub__Tensor>(m);
  unboxed<ops::mul_Tensor>(m);
  unboxed<ops::mul__Tensor>(m);
  unboxed<ops::div_Tensor>(m);
  unboxed<ops::div__Tensor>(m);
  unboxed<ops::pow_Tensor_Scalar>(m);
  unboxed<ops::neg>(m);
  unboxed<ops::abs>(m);
  unboxed<ops::exp>(m);
  unboxed<ops::log>(m);
  unboxed<ops::sqrt>(m);
  unboxed<ops::rsqrt>(m);
  unboxed<ops::reciprocal>(m);
  unboxed<ops::cos>(m);  // rotary embeddings' tables, once per forward of a decoder
  unboxed<ops::sin>(m);
  unboxed<ops::clamp_min>(m);
  unboxed<ops::where_self>(m);
  unboxed<ops::where_self_out>(m);  // attention's safe softmax, in the math kernel
  unboxed<ops::masked_fill__Scalar>(m);
  unboxed<ops::fill__Scalar>(m);
  unboxed<ops::zero_>(m);
  unboxed<ops::clone>(m);
  // activations and their gradients
  unboxed<ops::relu>(m);
  unboxed<ops::relu_>(m);
  unboxed<ops::threshold_backward>(m);
  unboxed<ops::gelu>(m);
  unboxed<ops::gelu_backward>(m);
  unboxed<ops::silu>(m);
  unboxed<ops::silu_backward>(m);
  unboxed<ops::sigmoid>(m);
  unboxed<ops::sigmoid_backward>(m);
  unboxed<ops::tanh>(m);
  unboxed<ops::tanh_backward>(m);
  // reductions, normalisation, softmax, losses
  unboxed<ops::sum>(m);
  unboxed<ops::sum_dim_IntList>(m);
  unboxed<ops::mean_dim>(m);
  unboxed<ops::amax>(m);
  unboxed<ops::argmax>(m);  // greedy decoding's next token
  unboxed<ops::native_layer_norm>(m);
  unboxed<ops::native_layer_norm_backward>(m);
  unboxed<ops::_softmax>(m);
  unboxed<ops::_softmax_backward_data>(m);
  unboxed<ops::_log_softmax>(m);
  unboxed<ops::_log_softmax_backward_data>(m);
  unboxed<ops::nll_loss_forward>(m);
  unboxed<ops::nll_loss_backward>(m);
  unboxed<ops::native_dropout>(m);
  unboxed<ops::native_dropout_backward>(m);
  // attention: the kernel choice (CUDA makes it without a dispatcher call; PrivateUse1 asks through one), the
  // fused kernels (random: their dropout) and their backward ops
  unboxed<ops::_fused_sdp_choice>(m);
  unboxed<ops::_scaled_dot_product_flash_attention>(m);
  unboxed<ops::_scaled_dot_product_efficient_attention>(m);
  unboxed<ops::_scaled_dot_product_cudnn_attention>(m);
  unboxed<ops::_scaled_dot_product_flash_attention_backward>(m);
  unboxed<ops::_scaled_dot_product_efficient_attention_backward>(m);
  unboxed<ops::_scaled_dot_product_cudnn_attention_backward>(m);
  // indexing and joining
  unboxed<ops::index_select>(m);
  unboxed<ops::embedding_dense_backward>(m);
  unboxed<ops::cat>(m);
  // factories that fill what PyTorch's generic kernel allocated: a decoder's cache positions, once per token
  unboxed<ops::arange_start_out>(m);
  // Composites that every backend runs as several operators (zeros, a view, copy_; clone, then the in-place
  // form): on flagos each of those would cross the layer and make its own kernel views; on the kernel device
  // the whole composite is one crossing, and runs exactly the code native CUDA runs.  The gradients of
  // indexing (proj[0] in attention's packed projection) and masking make them hot.
  unboxed<ops::select_backward>(m);
  unboxed<ops::slice_backward>(m);
  unboxed<ops::diagonal_backward>(m);
  unboxed<ops::masked_fill_Scalar>(m);
  unboxed<ops::masked_fill_Tensor>(m);
  // comparisons, masks and the reductions over them: attention masks built per forward, and generate()'s
  // stopping tests per token, in Hugging Face models (torch_fl.routing.count_boxed_calls over tests/models)
  unboxed<ops::eq_Scalar>(m);
  unboxed<ops::eq_Tensor>(m);
  unboxed<ops::ne_Scalar>(m);
  unboxed<ops::ne_Tensor>(m);
  unboxed<ops::lt_Scalar>(m);
  unboxed<ops::lt_Tensor>(m);
  unboxed<ops::le_Scalar>(m);
  unboxed<ops::le_Tensor>(m);
  unboxed<ops::gt_Scalar>(m);
  unboxed<ops::gt_Tensor>(m);
  unboxed<ops::ge_Scalar>(m);
  unboxed<ops::ge_Tensor>(m);
  unboxed<ops::bitwise_and_Tensor>(m);
  unboxed<ops::bitwise_or_Tensor>(m);
  unboxed<ops::bitwise_not>(m);
  unboxed<ops::logical_not>(m);
  unboxed<ops::isin_Tensor_Tensor>(m);
  unboxed<ops::isneginf>(m);
  unboxed<ops::any>(m);
  unboxed<ops::any_dim>(m);
  unboxed<ops::all>(m);
  unboxed<ops::all_dim>(m);
  unboxed<ops::max>(m);
  unboxed<ops::min>(m);
  unboxed<ops::minimum>(m);
  unboxed<ops::maximum>(m);
  unboxed<ops::cumsum>(m);
  unboxed<ops::gather>(m);
  unboxed<ops::softplus>(m);
  unboxed<ops::softplus_backward>(m);
  unboxed<ops::clamp>(m);
  unboxed<ops::ceil>(m);
  unboxed<ops::sign>(m);
  unboxed<ops::pow_Tensor_Tensor>(m);
  unboxed<ops::index_Tensor>(m);
  unboxed<ops::scatter_add>(m);
  unboxed<ops::scatter_add_>(m);
  // optimizer updates: flagos tensors straight to the kernel device's kernel on the cuda platform
  direct<ops::_foreach_add__Scalar>(m);
  direct<ops::_foreach_add__List>(m);
  direct<ops::_foreach_add_List>(m);
  direct<ops::_foreach_mul__Scalar>(m);
  direct<ops::_foreach_mul__List>(m);
  direct<ops::_foreach_mul__Tensor>(m);
  direct<ops::_foreach_div__ScalarList>(m);
  direct<ops::_foreach_lerp__Scalar>(m);
  direct<ops::_foreach_maximum__List>(m);
  direct<ops::_foreach_addcmul__Scalar>(m);
  direct<ops::_foreach_addcdiv__Scalar>(m);
  direct<ops::_foreach_addcdiv__ScalarList>(m);
  direct<ops::_foreach_addcdiv__Tensor>(m);
  direct<ops::_foreach_sqrt>(m);
  direct<ops::_foreach_zero_>(m);
  // CUDA's norm makes its results with the CUDA allocator (at::native::empty_cuda) and guards as CUDA: views
  unboxed<ops::_foreach_norm_Scalar>(m);
}

}  // namespace torch_fl::aten
