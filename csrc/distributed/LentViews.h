// Kernel views lent to a communication engine (gloo, NCCL) for the length of one
// collective, and the way back from what the engine returns to flagos tensors.
#pragma once

#include <string_view>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

namespace torch_fl::distributed {

// The kernel views of the flagos tensors of one collective.
//
// A lent view owns a reference to its flagos tensor's storage: the engine runs
// asynchronously (gloo on its worker threads, NCCL on its own stream) and keeps
// its input views alive until the work completes (ProcessGroupNCCL stashes them,
// gloo's work holds them), so the flagos memory stays alive exactly as long,
// even when the caller drops both the tensor and the work.  CUDA's caching
// allocator cannot be told instead (recordStream ignores memory it did not hand
// out, and a view's memory is the flagos allocation's).
class LentViews {
 public:
  // `op`, `backend`: the collective's and the process group backend's names, for errors.
  LentViews(std::string_view op, std::string_view backend) : op_(op), backend_(backend) {}

  // The view of `t`.  Every tensor of a collective must be a dense flagos tensor
  // on the same flagos device: anything else is a one-line error naming the fix.
  at::Tensor lend(const at::Tensor& t);
  std::vector<at::Tensor> lend(const std::vector<at::Tensor>& ts);
  std::vector<std::vector<at::Tensor>> lend(const std::vector<std::vector<at::Tensor>>& tss);

  // The flagos device of the collective; nullopt when it has no tensors.
  std::optional<c10::Device> device() const { return device_; }

  // The engine's result with every lent view replaced by its flagos tensor
  // (a tensor, a tensor list, a list of those, or None).
  c10::IValue to_flagos(const c10::IValue& engine_value) const;
  std::vector<at::Tensor> to_flagos(const std::vector<at::Tensor>& views) const;

 private:
  at::Tensor flagos_of(const at::Tensor& view) const;

  std::string op_;
  std::string backend_;
  std::optional<c10::Device> device_;
  std::unordered_map<const void*, at::Tensor> flagos_by_view_;
};

}  // namespace torch_fl::distributed
