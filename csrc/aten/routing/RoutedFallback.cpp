#include "aten/routing/RoutedFallback.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/native/CPUFallback.h>

#include "aten/views/CallViews.h"
#include "aten/views/KernelView.h"
#include "aten/routing/Routing.h"
#include "aten/device_check/SameDeviceCheck.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/FlagosGenerator.h"

namespace torch_fl::aten {

namespace {

bool is_optional_generator(const c10::Argument& argument) {
  const auto& type = argument.real_type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto* optional = type->castRaw<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// The device an operator runs on: that of its first flagos tensor argument,
// else of a flagos device argument, else the current device.
c10::Device op_device(const torch::jit::Stack& stack, size_t first, size_t count) {
  std::optional<c10::Device> from_device_arg;
  for (size_t i = first; i < first + count; ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && is_flagos(v.toTensor())) return v.toTensor().device();
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (is_flagos(t)) return t.device();
      }
    }
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1 && !from_device_arg) {
      from_device_arg = v.toDevice();
    }
  }
  if (from_device_arg && from_device_arg->has_index()) return *from_device_arg;
  return c10::Device(c10::DeviceType::PrivateUse1, runtime::current_device());
}

// What the boxing layer needs to know of an operator's schema, computed once
// per operator (per thread) instead of on every call.
struct OpPlan {
  std::vector<bool> written;    // the argument is written to (in-place, out=)
  std::vector<bool> generator;  // the argument is a Generator / Generator?
  bool uses_randomness = false;  // a generator argument, or seeded without one
  // Of a seeded operator, its `dropout_p` argument: attention kernels draw random numbers for dropout only.
  std::optional<size_t> dropout_p;
  const SameDevicePlan* same_device = nullptr;  // CUDA's device check, for where a CPU kernel runs
};

const OpPlan& plan_for(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const void*, OpPlan> plans;  // keyed like Routing's cache
  auto [it, inserted] = plans.try_emplace(&op.schema());
  if (inserted) {
    OpPlan& plan = it->second;
    bool has_generator = false;
    for (const auto& argument : op.schema().arguments()) {
      if (argument.name() == "dropout_p" && argument.type()->kind() == c10::TypeKind::FloatType) {
        plan.dropout_p = plan.written.size();
      }
      plan.written.push_back(argument.alias_info() != nullptr && argument.alias_info()->isWrite());
      plan.generator.push_back(is_optional_generator(argument));
      has_generator = has_generator || plan.generator.back();
    }
    plan.uses_randomness = has_generator || op.hasTag(at::Tag::nondeterministic_seeded);
    plan.same_device = same_device_plan(op);
  }
  return it->second;
}

FlagosGenerator& flagos_generator_of(c10::Device device) {
  return *static_cast<FlagosGenerator*>(default_generator(device.index()).unsafeGetGeneratorImpl());
}

// What a CPU generator draws from: its engine and the normal samples it keeps for the next draw, exactly what its
// get_state() serialises.  Copied member by member it is a few kilobytes of memcpy, where a state tensor each way
// was an allocation and a TensorIterator copy (a tenth of the layer's instructions in a training step with
// dropout on the host platform, docs/performance.md).
struct CpuDrawState {
  at::mt19937 engine;
  std::optional<float> next_float_normal;
  std::optional<double> next_double_normal;

  static CpuDrawState of(const at::Generator& g) {
    auto* cpu = g.get<at::CPUGeneratorImpl>();
    return {cpu->engine(), cpu->next_float_normal_sample(), cpu->next_double_normal_sample()};
  }
  void into(const at::Generator& g) const {
    auto* cpu = g.get<at::CPUGeneratorImpl>();
    cpu->set_engine(engine);
    cpu->set_next_float_normal_sample(next_float_normal);
    cpu->set_next_double_normal_sample(next_double_normal);
  }
};

// Seeded random ops without a Generator argument (native_dropout, ...) draw
// from the kernel device's default generator inside the kernel.  For the call,
// that generator is lent the flagos generator's state, and the advanced state
// is handed back afterwards, so the flagos seed governs them too.  Only the host
// platform lends: there the flagos generator's engine is a CPU generator of its
// own, where on the cuda platform it is CUDA's default generator itself.
class LentKernelGenerator {
 public:
  explicit LentKernelGenerator(at::Generator engine)
      : engine_(std::move(engine)), kernel_(at::globalContext().defaultGenerator(engine_.device())) {
    TORCH_INTERNAL_ASSERT(engine_.device().is_cpu() &&
                              engine_.unsafeGetGeneratorImpl() != kernel_.unsafeGetGeneratorImpl(),
                          "only a CPU engine of flagos's own is lent to the kernel device's generator");
    std::scoped_lock both(engine_.mutex(), kernel_.mutex());
    saved_ = CpuDrawState::of(kernel_);
    CpuDrawState::of(engine_).into(kernel_);
  }
  ~LentKernelGenerator() {
    std::scoped_lock both(engine_.mutex(), kernel_.mutex());
    CpuDrawState::of(kernel_).into(engine_);
    saved_.into(kernel_);
  }
  LentKernelGenerator(const LentKernelGenerator&) = delete;
  LentKernelGenerator& operator=(const LentKernelGenerator&) = delete;

 private:
  at::Generator engine_;
  at::Generator kernel_;
  CpuDrawState saved_;  // the kernel generator's own
};

}  // namespace

bool takes_generator(const c10::FunctionSchema& schema) {
  for (const auto& argument : schema.arguments()) {
    if (is_optional_generator(argument)) return true;
  }
  return false;
}

bool flagos_generator_is_kernel_default(c10::Device device) {
  // Neither generator of a device is ever replaced (a flagos generator's engine is fixed at its making, and so
  // is the kernel device's default generator), so the answer is worked out once per device: each dropout of a
  // training step asks.
  static std::array<std::atomic<int8_t>, 64> known{};  // per device: 0 not yet, 1 yes, -1 no
  TORCH_CHECK(device.index() >= 0 && static_cast<size_t>(device.index()) < known.size(), "flagos device index ",
              static_cast<int>(device.index()), " out of range");
  std::atomic<int8_t>& answer = known[device.index()];
  int8_t is_default = answer.load(std::memory_order_relaxed);
  if (is_default == 0) {
    const auto engine = flagos_generator_of(device).engine();
    is_default = engine == at::globalContext().defaultGenerator(engine.device()) ? 1 : -1;
    answer.store(is_default, std::memory_order_relaxed);
  }
  return is_default > 0;
}

namespace {

// Kernels accept only generators of their own device type: give them the
// engine of the flagos generator, and the device's default generator where
// none was passed, so that torch.flagos.manual_seed governs random ops on
// flagos.  Returns the lent default generator for seeded ops that have no
// Generator argument.
std::unique_ptr<LentKernelGenerator> substitute_generators(const OpPlan& plan, torch::jit::Stack& stack,
                                                           size_t first, c10::Device device,
                                                           c10::DeviceType provider_type) {
  if (!plan.uses_randomness) return nullptr;
  const size_t count = plan.generator.size();
  if (flagos_generator_of(device).engine().device().type() != provider_type) {
    // The cpu provider on a platform whose engines are not CPU generators:
    // CPU kernels draw from the CPU default generator (torch.manual_seed).
    for (size_t i = 0; i < count; ++i) {
      auto& v = stack[first + i];
      if (v.isGenerator() && v.toGenerator().device().type() == c10::DeviceType::PrivateUse1) {
        v = c10::IValue(at::detail::getDefaultCPUGenerator());
      }
    }
    return nullptr;
  }
  bool has_generator_argument = false;
  for (size_t i = 0; i < count; ++i) {
    if (!plan.generator[i]) continue;
    has_generator_argument = true;
    auto& v = stack[first + i];
    if (v.isNone()) {
      v = c10::IValue(flagos_generator_of(device).engine());
    } else if (v.isGenerator() && v.toGenerator().device().type() == c10::DeviceType::PrivateUse1) {
      v = c10::IValue(v.toGenerator().get<FlagosGenerator>()->engine());
    }
  }
  if (has_generator_argument) return nullptr;
  // Without dropout there is nothing to lend: on the host platform the state copies each way cost a decoded
  // token a fifth of the layer's extra instructions (docs/performance.md, "results written in place").
  if (plan.dropout_p && stack[first + *plan.dropout_p].toDouble() == 0.0) return nullptr;
  // cuda: the engine is the kernel device's default generator itself (default_generator_engine).
  if (flagos_generator_is_kernel_default(device)) return nullptr;
  return std::make_unique<LentKernelGenerator>(flagos_generator_of(device).engine());
}

// Providers `host` and `cuda`: PyTorch's kernel for the runtime's kernel
// device type (CPU, CUDA) runs in place on zero-copy views of the device memory.
void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t first = stack->size() - arguments.size();
  const c10::Device device = op_device(*stack, first, arguments.size());
  const auto kernel_type = runtime::kernel_device_type();
  const OpPlan& plan = plan_for(op);
  if (plan.same_device != nullptr && kernel_type == c10::DeviceType::CPU) {
    check_same_device(*plan.same_device, *stack, first);
  }
  // No device guard here: CPU kernels ignore the current device, and PyTorch's
  // generated CUDA wrappers guard the device of their (kernel view) operands
  // themselves; a second guard costs a noticeable share of a small op.

  CallViews views;
  for (size_t i = 0; i < arguments.size(); ++i) {
    auto& v = (*stack)[first + i];
    const bool written = plan.written[i];
    if (v.isTensor()) {
      if (is_flagos(v.toTensor())) v = views.add_owned(std::move(v).toTensor(), written);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> converted;
      converted.reserve(list.size());
      for (const at::Tensor& t : list) converted.push_back(is_flagos(t) ? views.add_owned(t, written) : t);
      v = converted;
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> converted;
      converted.reserve(list.size());
      for (const std::optional<at::Tensor>& t : list) {
        converted.push_back(t.has_value() && is_flagos(*t) ? std::optional<at::Tensor>(views.add_owned(*t, written))
                                                           : t);
      }
      v = converted;
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      v = c10::IValue(kernel_device_of(v.toDevice()));
    }
  }
  const auto lent_generator = substitute_generators(plan, *stack, first, device, kernel_type);

  {
    // The kernel's own allocations (its results) are flagos memory of the call's device, adopted below.
    const KernelAllocations allocations(device.index());
    op.redispatchBoxed(kernel_dispatch_keys(), stack);
  }

  views.sync_written();
  const size_t num_returns = schema.returns().size();
  const size_t returns_first = stack->size() - num_returns;
  for (size_t j = returns_first; j < stack->size(); ++j) {
    auto& r = (*stack)[j];
    if (r.isTensor()) {
      r = views.to_flagos(std::move(r).toTensor(), device);
    } else if (r.isTensorList()) {
      auto list = r.toTensorList();
      c10::List<at::Tensor> converted;
      converted.reserve(list.size());
      for (const at::Tensor& t : list) converted.push_back(views.to_flagos(t, device));
      r = converted;
    }
  }
}

// Provider `cpu`: PyTorch's copy-based CPU fallback.
void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  const c10::Device device = op_device(*stack, first, arguments.size());
  const OpPlan& plan = plan_for(op);
  if (plan.same_device != nullptr) check_same_device(*plan.same_device, *stack, first);
  const auto lent_generator = substitute_generators(plan, *stack, first, device, c10::kCPU);
  at::native::cpu_fallback(op, stack);
}

void warn_unavailable_once(const c10::OperatorHandle& op, const Route& route) {
  static std::mutex mutex;
  static std::unordered_set<std::string> warned;
  const auto name = c10::toString(op.operator_name());
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(name).second) return;
  TORCH_WARN("flagos: provider '", provider_name(route.requested), "' cannot run ", name,
             " here; falling back to provider '", provider_name(route.effective),
             "' (set FLAGOS_OP_<op> or the routing file to choose another provider)");
}

std::atomic<bool> counting_boxed{false};
std::mutex boxed_counts_mutex;
// Keyed by the operator's schema, which lives as long as the operator (as Routing's cache is).
std::unordered_map<const c10::FunctionSchema*, uint64_t>& boxed_counts() {
  static auto* counts = new std::unordered_map<const c10::FunctionSchema*, uint64_t>();
  return *counts;
}

}  // namespace

void count_boxed_calls(bool on) { counting_boxed.store(on, std::memory_order_relaxed); }

std::vector<std::pair<std::string, uint64_t>> boxed_call_counts(bool reset) {
  std::lock_guard<std::mutex> lock(boxed_counts_mutex);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [schema, calls] : boxed_counts()) out.emplace_back(c10::toString(schema->operator_name()), calls);
  if (reset) boxed_counts().clear();
  return out;
}

void routed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (C10_UNLIKELY(counting_boxed.load(std::memory_order_relaxed))) {
    std::lock_guard<std::mutex> lock(boxed_counts_mutex);
    ++boxed_counts()[&op.schema()];
  }
  const Route route = route_for(op);
  if (route.effective != route.requested) warn_unavailable_once(op, route);
  if (log_dispatch_enabled()) {
    std::fprintf(stderr, "[torch_fl] %s -> %s%s\n", c10::toString(op.operator_name()).c_str(),
                 provider_name(route.effective), route.effective != route.requested ? " (fallback)" : "");
  }
  switch (route.effective) {
    case Provider::Host:
    case Provider::Cuda:
      run_on_kernel_device(op, stack);
      return;
    case Provider::Cpu:
      run_cpu(op, stack);
      return;
    default:
      TORCH_CHECK(false, "flagos provider '", provider_name(route.effective), "' is not built into this plugin");
  }
}

}  // namespace torch_fl::aten
