// The host platform's stand-in for the device check PyTorch generates into
// every CUDA kernel's wrapper: an operator whose CUDA kernel requires its
// positional and out= tensors on one device refuses a CPU tensor beside flagos
// tensors, as on CUDA, where a CPU kernel runs it (which would take it).  The
// cuda platform's kernel device runs CUDA's kernels, whose wrappers check.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_fl::aten {

// The arguments an operator's check covers, by schema position.
struct SameDevicePlan {
  std::string method;               // named in the error, like CUDA's wrapper name
  std::vector<bool> checked;        // positional or out= tensor-like argument
  std::vector<std::string> names;   // the arguments' schema names
};

// The operator's plan, or nullptr when CUDA does not check it (device_check:
// NoCheck, no CUDA kernel).  Callers apply it where a CPU kernel runs: the host
// platform's kernel device, and the cpu provider on any platform.
const SameDevicePlan* same_device_plan(const c10::OperatorHandle& op);

// Boxed calls: the operator's arguments on the stack, from `first` (each through SameDeviceChecker).
void check_same_device(const SameDevicePlan& plan, const torch::jit::Stack& stack, size_t first);

// One argument at a time, in schema order: unboxed, or boxed as an IValue.
class SameDeviceChecker {
 public:
  explicit SameDeviceChecker(const SameDevicePlan& plan) : plan_(plan) {}
  void next(const at::Tensor& t) { check(t); }
  void next(const std::optional<at::Tensor>& t) {
    if (t.has_value()) check(*t);
    else ++index_;
  }
  void next(at::TensorList list) { check_each(list); }
  void next(const at::ITensorListRef& list) { check_each(list); }
  void next(const c10::IValue& boxed);
  void next(const c10::List<std::optional<at::Tensor>>& list) {
    for (const std::optional<at::Tensor>& t : list) {
      if (t.has_value()) check_one(*t);
    }
    ++index_;
  }
  template <class T>
  void next(const T& /*not a tensor*/) { ++index_; }

 private:
  void check(const at::Tensor& t) {
    check_one(t);
    ++index_;
  }
  template <class List>
  void check_each(const List& list) {
    for (const at::Tensor& t : list) check_one(t);
    ++index_;
  }
  void check_one(const at::Tensor& t);

  const SameDevicePlan& plan_;
  std::optional<c10::Device> common_;
  size_t index_ = 0;
};

}  // namespace torch_fl::aten
