// Kernel results in flagos memory on the host platform (KernelAllocations, FlagosDeviceAllocator.h).
//
// The host runtime's device memory is host memory, so PyTorch's CPU kernels can write their results into
// it: inside KernelAllocations, PyTorch's CPU allocator (this wrapper, installed over the one PyTorch had)
// serves the calling thread from the flagos allocator, and from_kernel_result() adopts such a result in
// place instead of copying it into a new flagos block.  Everywhere else, other threads included, every CPU
// allocation is the previous allocator's, as before.
#include "runtime/FlagosDeviceAllocator.h"

#include <c10/core/CPUAllocator.h>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

namespace {

thread_local c10::DeviceIndex kernel_allocation_device = -1;

class KernelAwareCpuAllocator final : public c10::Allocator {
 public:
  explicit KernelAwareCpuAllocator(c10::Allocator* cpu) : cpu_(cpu) {}

  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = kernel_allocation_device;
    if (device < 0 || nbytes == 0) return cpu_->allocate(nbytes);
    // A flagos block labelled CPU: the kernel's CPU tensor owns it until its result is adopted.
    auto memory = device_allocator().allocate_on(device, nbytes);
    memory.unsafe_set_device(c10::Device(c10::kCPU));
    return memory;
  }

  // The raw interface frees either kind: raw_allocate() may have been served from either.
  c10::DeleterFnPtr raw_deleter() const override { return cpu_->raw_deleter() ? &free_either : nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    cpu_->copy_data(dest, src, count);
  }

  static void free_either(void* ptr) {
    if (runtime::device_of(ptr).has_value()) {
      device_allocator().raw_deleter()(ptr);
    } else {
      instance()->cpu_->raw_deleter()(ptr);
    }
  }

  static KernelAwareCpuAllocator* instance() {
    static auto* wrapper = [] {
      auto* w = new KernelAwareCpuAllocator(c10::GetCPUAllocator());
      // Above the default CPU allocator's priority (0), so that it replaces it process-wide.
      c10::SetCPUAllocator(w, /*priority=*/1);
      return w;
    }();
    return wrapper;
  }

 private:
  c10::Allocator* cpu_;
};

const bool cpu_allocator_installed = KernelAwareCpuAllocator::instance() != nullptr;

}  // namespace

// Where another library installed a CPU allocator over this wrapper, nothing reads the device: results are
// then CPU memory and copied, as before.
KernelAllocations::KernelAllocations(c10::DeviceIndex device) : previous_(kernel_allocation_device) {
  kernel_allocation_device = device;
}

KernelAllocations::~KernelAllocations() { kernel_allocation_device = previous_; }

bool is_device_memory(const c10::DataPtr& memory) { return memory.get_deleter() == device_allocator().raw_deleter(); }

}  // namespace torch_fl
