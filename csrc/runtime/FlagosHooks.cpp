#include "runtime/FlagosHooks.h"

#include <ATen/Context.h>

#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/FlagosGenerator.h"
#include "runtime/FlagosHostAllocator.h"

namespace torch_fl {

bool FlagosHooks::isAvailable() const { return runtime::device_count() > 0; }

bool FlagosHooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return device_index >= 0 && device_index < runtime::device_count();
}

c10::DeviceIndex FlagosHooks::deviceCount() const { return runtime::device_count(); }

void FlagosHooks::setCurrentDevice(c10::DeviceIndex device) const { runtime::set_device(device); }

c10::DeviceIndex FlagosHooks::getCurrentDevice() const { return runtime::current_device(); }

c10::DeviceIndex FlagosHooks::exchangeDevice(c10::DeviceIndex device) const {
  const auto previous = runtime::current_device();
  if (device != previous) runtime::set_device(device);
  return previous;
}

c10::DeviceIndex FlagosHooks::maybeExchangeDevice(c10::DeviceIndex device) const { return exchangeDevice(device); }

bool FlagosHooks::isPinnedPtr(const void* data) const { return runtime::is_host_pinned(data); }

at::Allocator* FlagosHooks::getPinnedMemoryAllocator() const { return &host_allocator(); }

at::Device FlagosHooks::getDeviceFromPtr(void* data) const {
  const auto device = runtime::device_of(data);
  TORCH_CHECK(device.has_value(), "pointer ", data, " is not flagos device memory");
  return at::Device(c10::DeviceType::PrivateUse1, *device);
}

const at::Generator& FlagosHooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator FlagosHooks::getNewGenerator(c10::DeviceIndex device_index) const { return new_generator(device_index); }

void FlagosHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const {
  resize_storage(storage, new_bytes);
}

void register_hooks() {
  static bool registered = [] {
    at::RegisterPrivateUse1HooksInterface(new FlagosHooks());
    // The runtime is ready once the plugin has loaded (init() has nothing to do),
    // and PyTorch's context must know: Context::isPinnedPtr answers false for a
    // device it has not initialised, and PrivateUse1 is the accelerator it asks
    // first -- DDP's reducer asserts that its pinned staging buffers are pinned.
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
    return true;
  }();
  (void)registered;
}

}  // namespace torch_fl
