#include "runtime/FlagosHostAllocator.h"

#include <cstring>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

namespace {
void free_pinned(void* ptr) {
  if (ptr != nullptr) runtime::free_host(ptr);
}
}  // namespace

at::DataPtr FlagosHostAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return at::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  void* ptr = runtime::malloc_host(nbytes);
  return at::DataPtr(ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU));
}

c10::DeleterFnPtr FlagosHostAllocator::raw_deleter() const { return &free_pinned; }

void FlagosHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

// Pinned blocks are not cached, so a block freed while a stream still reads it
// cannot be handed out again early; there is nothing to record.
bool FlagosHostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) { return true; }
void FlagosHostAllocator::empty_cache() {}
at::HostStats FlagosHostAllocator::get_stats() { return {}; }
void FlagosHostAllocator::reset_accumulated_stats() {}
void FlagosHostAllocator::reset_peak_stats() {}

FlagosHostAllocator& host_allocator() {
  static FlagosHostAllocator allocator;
  return allocator;
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &host_allocator())

}  // namespace torch_fl
