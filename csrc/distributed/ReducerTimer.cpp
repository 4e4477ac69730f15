// DDP's reducer times forward, backward and communication with a timer it looks
// up by the parameters' device type (c10d::TimerRegistry); PyTorch registers
// CPU's and CUDA's, torch_npu its own (reducer_npu.cpp).  Without one for
// PrivateUse1 DDP's runtime statistics stay empty and it warns that "Time stats
// are currently only collected for CPU and CUDA devices".
//
// The flagos timer is the kernel device's: CUDA's (device events on the current
// stream, which is flagos's) on the cuda platform, CPU's host clock on the host
// platform, whose device work is done when the call returns.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include "aten/views/KernelView.h"
#include "runtime/DeviceRuntime.h"

namespace torch_fl::distributed {

namespace {

class KernelDeviceTimer final : public c10d::Timer {
 public:
  explicit KernelDeviceTimer(c10::Device device) : kernel_timer_(create_kernel_timer(device)) {}

  void record(Event event) override {
    // The base keeps the host timestamps DDP's logger reads (getTimestamp).
    Timer::record(event);
    kernel_timer_->record(event);
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    return kernel_timer_->measureDifference(start, end);
  }

 private:
  static std::unique_ptr<c10d::Timer> create_kernel_timer(c10::Device device) {
    const auto type = runtime::kernel_device_type();
    auto timer = c10d::TimerRegistry()->Create(type, aten::kernel_device_of(device));
    TORCH_CHECK(timer, "DDP has no timer for the kernel device ", type, " of ", device,
                "; this torch was built without it (use the torch build torch_fl was built for)");
    return timer;
  }

  std::unique_ptr<c10d::Timer> kernel_timer_;
};

}  // namespace

}  // namespace torch_fl::distributed

// The registration macro names the registry unqualified: it must expand in c10d.
namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_fl::distributed::KernelDeviceTimer);
}  // namespace c10d
