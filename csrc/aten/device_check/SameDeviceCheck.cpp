#include "aten/device_check/SameDeviceCheck.h"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <ATen/core/op_registration/adaption.h>

#include "aten/routing/Routing.h"

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
#include "aten/device_check/generated/SameDeviceOps.inc"
  };
  return names;
}

std::unique_ptr<SameDevicePlan> make_plan(const c10::OperatorHandle& op) {
  const std::string key = short_op_name(op.operator_name());  // other namespaces keep theirs: not listed
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
  SameDeviceChecker checker(plan);
  for (size_t i = 0; i < plan.checked.size(); ++i) checker.next(stack[first + i]);
}

void SameDeviceChecker::next(const c10::IValue& v) {
  if (v.isTensor()) {
    check(v.toTensor());
  } else if (v.isTensorList()) {
    check_each(v.toTensorList());
  } else if (v.isOptionalTensorList()) {
    next(v.toOptionalTensorList());
  } else {
    ++index_;  // not a tensor, or an absent Tensor?
  }
}

void SameDeviceChecker::check_one(const at::Tensor& t) {
  if (!plan_.checked[index_]) return;
  c10::impl::check_and_update_common_device(common_, t, plan_.method.c_str(), plan_.names[index_].c_str());
}

}  // namespace torch_fl::aten
