// The caching device allocator behind every flagos tensor.
//
// Freed blocks stay cached per device and are reused for requests of a similar
// size; when the runtime reports out-of-memory the device's cache is released
// and the request retried once before c10::OutOfMemoryError is raised.
// Statistics follow c10::CachingDeviceAllocator::DeviceStats so that
// torch.accelerator.* and torch.flagos.* memory queries read the same numbers.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <vector>

namespace torch_fl {

class FlagosDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  // The runtimes torch_fl drives complete stream work in order before a block
  // can be freed (the host runtime is synchronous), so there is nothing to defer.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Allocation on an explicit device (used by the hooks to resize storages).
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);

  // torch.flagos.set_per_process_memory_fraction: the share (0..1) of `device`'s memory that this process's
  // reserved blocks may reach; an allocation beyond it frees the cache, then raises OutOfMemoryError.
  void set_memory_fraction(double fraction, c10::DeviceIndex device);
  double memory_fraction(c10::DeviceIndex device);

  // Every block the allocator holds, as torch.cuda.memory_snapshot's segments, with the stacks
  // runtime/MemoryHistory.h kept; only where the allocator owns its blocks (not on cuda, whose
  // blocks CUDA's own snapshot describes).
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> snapshot_segments();
};

FlagosDeviceAllocator& device_allocator();

// While one lives on a thread, the kernel device's allocations made there are flagos memory of `device` where
// the runtime can make them so, and a kernel's results are then adopted as flagos tensors, never copied.
// host: PyTorch's CPU allocator answers from the flagos allocator (runtime/host/HostDeviceAllocator.cpp);
// cuda: nothing to do, CUDA's allocator hands out flagos memory already.
class KernelAllocations {
 public:
  explicit KernelAllocations(c10::DeviceIndex device);
  ~KernelAllocations();
  KernelAllocations(const KernelAllocations&) = delete;
  KernelAllocations& operator=(const KernelAllocations&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Whether a kernel's allocation `memory` is flagos memory that a flagos tensor may own as it is: on cuda
// every CUDA allocation (one pool); on host a block the flagos allocator served inside KernelAllocations.
bool is_device_memory(const c10::DataPtr& memory);

// A flagos allocation on `device` that shares (and keeps alive) the memory of a kernel's storage, which
// is_device_memory() accepted.
c10::DataPtr adopt_kernel_allocation(const c10::Storage& kernel_storage, c10::DeviceIndex device);

// The kernel storage's DataPtr behind a flagos one that adopt_kernel_allocation() made, else `flagos` itself.
const c10::DataPtr& kernel_memory_of(const c10::DataPtr& flagos);

// Makes `kernel_storage`, a kernel result's storage that nothing else holds and whose memory
// is_device_memory() accepted, flagos memory of `device` in place: no second storage, no wrapper per result.
void adopt_kernel_storage_in_place(c10::StorageImpl& kernel_storage, c10::DeviceIndex device);

// Moves the memory of `kernel_storage` (a kernel view's storage that a kernel gave memory of its own, which
// is_device_memory() accepted) into `flagos_storage` as flagos memory of `device`; `kernel_storage` is left
// borrowing it, as a kernel view borrows its flagos tensor's memory.
void move_kernel_memory(c10::StorageImpl& kernel_storage, c10::StorageImpl& flagos_storage, c10::DeviceIndex device);

// Gives `storage` a new block of `new_bytes` on its device, keeping the first
// min(old, new) bytes (torch's resize_ and untyped_storage().resize_()).
void resize_storage(const c10::Storage& storage, size_t new_bytes);

}  // namespace torch_fl
