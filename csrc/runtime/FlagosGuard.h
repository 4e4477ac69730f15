// The PrivateUse1 device guard: device switching, streams and events for
// c10::DeviceGuard, torch.Stream, torch.Event and torch.accelerator.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

namespace torch_fl {

struct FlagosGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool is_high_priority = false) const override;
  c10::Stream getNewStream(c10::Device device, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  void* getStreamNativeHandle(const c10::Stream stream) const override;
  c10::DeviceIndex deviceCount() const noexcept override;

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override;

  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  // torch.accelerator.get_device_capability.  A flagos tensor of any scalar type runs on its kernel device's
  // kernels (CPU, CUDA), which take every one: all types, as the default capability says.
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override { return {}; }
#endif
};

}  // namespace torch_fl
