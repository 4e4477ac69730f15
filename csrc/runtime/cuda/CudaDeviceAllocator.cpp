// flagos device memory on the cuda platform: PyTorch's CUDA caching allocator,
// reached through the device-generic allocator interface, so flagos tensors and
// the results of boxed CUDA kernels share one pool and one set of statistics
// (torch.flagos.memory_allocated() == torch.cuda.memory_allocated()).
#include "runtime/FlagosDeviceAllocator.h"

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <mutex>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

namespace {

c10::DeviceAllocator& cuda_allocator() {
  static std::once_flag initialized;
  // PyTorch initialises its CUDA allocator lazily, at the first CUDA use.
  std::call_once(initialized, [] { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); });
  auto* allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  TORCH_CHECK(allocator != nullptr, "PyTorch's CUDA allocator is not available; is this a CUDA build of torch?");
  return *allocator;
}

// A flagos DataPtr owns the CUDA allocation it wraps (a CUDA DataPtr) or shares
// the storage of a kernel result (a c10::Storage).
void delete_wrapped_data_ptr(void* ctx) { delete static_cast<c10::DataPtr*>(ctx); }
void delete_shared_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

const c10::DataPtr* underlying(const c10::DataPtr& flagos) {
  if (flagos.get_deleter() == &delete_wrapped_data_ptr) return static_cast<const c10::DataPtr*>(flagos.get_context());
  if (flagos.get_deleter() == &delete_shared_storage) {
    return &static_cast<const c10::Storage*>(flagos.get_context())->data_ptr();
  }
  return nullptr;
}

}  // namespace

c10::DataPtr FlagosDeviceAllocator::allocate(size_t nbytes) { return allocate_on(runtime::current_device(), nbytes); }

c10::DataPtr FlagosDeviceAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, device));
  auto cuda = cuda_allocator().allocate(nbytes);  // raises torch.OutOfMemoryError when the device is full
  if (cuda.get() == nullptr) return c10::DataPtr(nullptr, where);
  void* ptr = cuda.get();
  return c10::DataPtr(ptr, new c10::DataPtr(std::move(cuda)), &delete_wrapped_data_ptr, where);
}

c10::DeleterFnPtr FlagosDeviceAllocator::raw_deleter() const { return nullptr; }

void FlagosDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  runtime::copy(dest, src, count, runtime::CopyKind::DeviceToDevice, nullptr);
}

void FlagosDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) { cuda_allocator().emptyCache(mempool_id); }

void FlagosDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (const auto* cuda = underlying(ptr)) {
    cuda_allocator().recordStream(*cuda, c10::Stream(c10::Stream::UNSAFE,
                                                     c10::Device(c10::DeviceType::CUDA, stream.device_index()),
                                                     stream.id()));
  }
}

c10::CachingDeviceAllocator::DeviceStats FlagosDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  return cuda_allocator().getDeviceStats(device);
}

void FlagosDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  cuda_allocator().resetAccumulatedStats(device);
}

void FlagosDeviceAllocator::resetPeakStats(c10::DeviceIndex device) { cuda_allocator().resetPeakStats(device); }

std::pair<size_t, size_t> FlagosDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  return runtime::memory_info(device);
}

FlagosDeviceAllocator& device_allocator() {
  static FlagosDeviceAllocator allocator;
  return allocator;
}

c10::DataPtr adopt_kernel_allocation(const c10::Storage& kernel_storage, c10::DeviceIndex device) {
  void* ptr = const_cast<void*>(kernel_storage.data());
  return c10::DataPtr(ptr, new c10::Storage(kernel_storage), &delete_shared_storage,
                      c10::Device(c10::DeviceType::PrivateUse1, device));
}

}  // namespace torch_fl
