// Pinned (page-locked) host memory from the runtime, for tensor.pin_memory()
// and torch.empty(..., pin_memory=True) while flagos is the accelerator.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_fl {

class FlagosHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;
};

FlagosHostAllocator& host_allocator();

}  // namespace torch_fl
