// flagos device memory on the cuda platform: PyTorch's CUDA caching allocator,
// reached through the device-generic allocator interface, so flagos tensors and
// the results of boxed CUDA kernels share one pool and one set of statistics
// (torch.flagos.memory_allocated() == torch.cuda.memory_allocated()).
#include "runtime/FlagosDeviceAllocator.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

namespace {

c10::DeviceAllocator& cuda_allocator() {
  // PyTorch initialises its CUDA allocator lazily, at the first CUDA use; it cannot be swapped once it has
  // served (torch.cuda.memory.change_current_allocator refuses), so the pointer is looked up once.  A static's
  // initialisation check is inline; std::call_once was a call into libc on every flagos allocation.
  static c10::DeviceAllocator* const allocator = [] {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    auto* cuda = c10::getDeviceAllocator(c10::DeviceType::CUDA);
    TORCH_CHECK(cuda != nullptr, "PyTorch's CUDA allocator is not available; is this a CUDA build of torch?");
    return cuda;
  }();
  return *allocator;
}

}  // namespace

c10::DataPtr FlagosDeviceAllocator::allocate(size_t nbytes) {
  // CUDA's allocator serves the current device and says which one that was: no device query here.
  auto memory = cuda_allocator().allocate(nbytes);  // raises torch.OutOfMemoryError when the device is full
  memory.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, memory.device().index()));
  return memory;
}

c10::DataPtr FlagosDeviceAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  // CUDA's allocator serves the current device; a guard only where another one is asked for (the factories
  // that call this have already made theirs current, and a guard's exit costs a driver query).
  std::optional<c10::cuda::CUDAGuard> guard;
  if (device != c10::cuda::current_device()) guard.emplace(device);
  return allocate(nbytes);
}

c10::DeleterFnPtr FlagosDeviceAllocator::raw_deleter() const { return nullptr; }

void FlagosDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  runtime::copy(dest, src, count, runtime::CopyKind::DeviceToDevice, nullptr);
}

void FlagosDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) { cuda_allocator().emptyCache(mempool_id); }

void FlagosDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  // CUDA's allocator recognises its blocks by their DataPtr: the kernel storage's, for shared memory.
  cuda_allocator().recordStream(kernel_memory_of(ptr), c10::Stream(c10::Stream::UNSAFE,
                                                              c10::Device(c10::DeviceType::CUDA, stream.device_index()),
                                                              stream.id()));
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

namespace {
// What set_memory_fraction last gave CUDA's allocator per device (asking CUDA back needs a newer torch).
std::array<std::atomic<double>, 64>& fractions() {
  static auto* all = [] {
    auto* a = new std::array<std::atomic<double>, 64>();
    for (auto& f : *a) f.store(1.0);
    return a;
  }();
  return *all;
}
}  // namespace

void FlagosDeviceAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "invalid memory fraction ", fraction,
              ": give a share of the device's memory between 0 and 1");
  runtime::check_device_index(device);
  cuda_allocator();  // initialised, so that CUDA's allocator has its per-device state
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device);
  fractions()[device].store(fraction);
}

double FlagosDeviceAllocator::memory_fraction(c10::DeviceIndex device) {
  runtime::check_device_index(device);
  return fractions()[device].load();
}

std::vector<c10::CachingDeviceAllocator::SegmentInfo> FlagosDeviceAllocator::snapshot_segments() {
  TORCH_CHECK(false, "flagos blocks are CUDA's on this platform: take torch.cuda.memory._snapshot()");
}

FlagosDeviceAllocator& device_allocator() {
  static FlagosDeviceAllocator allocator;
  return allocator;
}

KernelAllocations::KernelAllocations(c10::DeviceIndex device) : previous_(device) {}
KernelAllocations::~KernelAllocations() = default;

bool is_device_memory(const c10::DataPtr& memory) { return memory.device().is_cuda(); }

}  // namespace torch_fl
