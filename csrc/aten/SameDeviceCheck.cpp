#include "aten/SameDeviceCheck.h"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <ATen/core/op_registration/adaption.h>

namespace torch_fl::aten {

namespace {

bool is_tensor_like(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.real_type();
  if (type->isSubtypeOf(*c10::TensorType::get())) return true;
  if (const auto* optional = type->castRaw<c10::OptionalType>()) {
    return optional->getElementType()->isSubtypeOf(*c10::TensorType::get());
  }
  if (const auto* list = type->castRaw<c10::ListType>()) {
    const c10::TypePtr& element = list->getElementType();
    if (element->isSubtypeOf(*c10::TensorType::get())) return true;
    if (const auto* optional = element->castRaw<c10::OptionalType>()) {
      return optional->getElementType()->isSubtypeOf(*c10::TensorType::get());
    }
  }
  return false;
}

const std::unordered_set<std::string>& checked_operators() {
  static const std::unordered_set<std::string> names = {
#include "aten/generated/SameDeviceOps.inc"
  };
  return names;
}

std::unique_ptr<SameDevicePlan> make_plan(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name.rfind("aten::", 0) != 0) return nullptr;
  std::string key = name.name.substr(6);
  if (!name.overload_name.empty()) key += "." + name.overload_name;
  if (checked_operators().count(key) == 0) return nullptr;
  auto plan = std::make_unique<SameDevicePlan>();
  plan->method = "wrapper_flagos_" + key;
  bool any = false;
  for (const c10::Argument& argument : op.schema().arguments()) {
    // torchgen checks the flat positional arguments and the out= arguments, not other keyword-only ones.
    const bool checked = is_tensor_like(argument) && (!argument.kwarg_only() || argument.is_out());
    plan->checked.push_back(checked);
    plan->names.push_back(argument.name());
    any = any || checked;
  }
  return any ? std::move(plan) : nullptr;
}

}  // namespace

const SameDevicePlan* same_device_plan(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const void*, std::unique_ptr<SameDevicePlan>> plans;  // keyed by the schema's address
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = plans.try_emplace(&op.schema());
  if (inserted) it->second = make_plan(op);
  return it->second.get();
}

void check_same_device(const SameDevicePlan& plan, const torch::jit::Stack& stack, size_t first) {
  std::optional<c10::Device> common;
  for (size_t i = 0; i < plan.checked.size(); ++i) {
    if (!plan.checked[i]) continue;
    const c10::IValue& v = stack[first + i];
    const char* argument = plan.names[i].c_str();
    if (v.isTensor()) {
      c10::impl::check_and_update_common_device(common, v.toTensor(), plan.method.c_str(), argument);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        c10::impl::check_and_update_common_device(common, t, plan.method.c_str(), argument);
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        c10::impl::check_and_update_common_device(common, t, plan.method.c_str(), argument);
      }
    }
  }
}

void SameDeviceChecker::check_one(const at::Tensor& t) {
  if (!plan_.checked[index_]) return;
  c10::impl::check_and_update_common_device(common_, t, plan_.method.c_str(), plan_.names[index_].c_str());
}

}  // namespace torch_fl::aten
