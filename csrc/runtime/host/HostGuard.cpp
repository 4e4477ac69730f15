#include "runtime/FlagosGuard.h"

#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/host/HostStreams.h"

namespace torch_fl {

namespace {

void check_device(c10::Device device) {
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "expected a flagos device, got ", device);
  runtime::check_device_index(device.index());
}

}  // namespace

c10::Device FlagosGuardImpl::exchangeDevice(c10::Device device) const {
  check_device(device);
  const auto previous = runtime::current_device();
  if (previous != device.index()) runtime::set_device(device.index());
  return c10::Device(static_type, previous);
}

c10::Device FlagosGuardImpl::getDevice() const { return c10::Device(static_type, runtime::current_device()); }

void FlagosGuardImpl::setDevice(c10::Device device) const {
  check_device(device);
  // Autograd's device threads set their device before every node they run: a switch only where it changes
  // the device, as c10::cuda::SetDevice does for CUDA.
  if (runtime::current_device() != device.index()) runtime::set_device(device.index());
}

void FlagosGuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  try {
    // Guards restore the device they found, nearly always the current one: no switch then (as CUDA's guard).
    if (runtime::current_device() != device.index()) runtime::set_device(device.index());
  } catch (...) {
    // Guards restore devices from destructors; a failure here cannot be reported.
  }
}

c10::Stream FlagosGuardImpl::getStream(c10::Device device) const { return current_stream(device.index()); }

c10::Stream FlagosGuardImpl::getDefaultStream(c10::Device device) const { return default_stream(device.index()); }

c10::Stream FlagosGuardImpl::getStreamFromGlobalPool(c10::Device device, bool /*is_high_priority*/) const {
  return stream_from_pool(device.index());
}

c10::Stream FlagosGuardImpl::getNewStream(c10::Device device, int /*priority*/) const {
  return stream_from_pool(device.index());
}

c10::Stream FlagosGuardImpl::exchangeStream(c10::Stream stream) const {
  auto previous = current_stream(stream.device_index());
  set_current_stream(stream);
  return previous;
}

void* FlagosGuardImpl::getStreamNativeHandle(const c10::Stream stream) const { return runtime_stream(stream); }

c10::DeviceIndex FlagosGuardImpl::deviceCount() const noexcept { return runtime::device_count(); }

void FlagosGuardImpl::destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept {
  if (event == nullptr) return;
  try {
    runtime::destroy_event(event);
  } catch (...) {
  }
}

void FlagosGuardImpl::record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
                             const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "event device index ",
              static_cast<int>(device_index), " does not match the recording stream's device ",
              static_cast<int>(stream.device_index()));
  // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT, like CUDA.
  if (*event == nullptr) *event = runtime::create_event(flag == c10::EventFlag::BACKEND_DEFAULT);
  runtime::record_event(*event, runtime_stream(stream));
}

void FlagosGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  runtime::stream_wait_event(runtime_stream(stream), event);
}

bool FlagosGuardImpl::queryEvent(void* event) const { return event == nullptr || runtime::query_event(event); }

void FlagosGuardImpl::synchronizeEvent(void* event) const {
  if (event != nullptr) runtime::synchronize_event(event);
}

double FlagosGuardImpl::elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const {
  TORCH_CHECK(start != nullptr && end != nullptr, "both events must be recorded before elapsed_time()");
  return runtime::event_elapsed_ms(start, end);
}

bool FlagosGuardImpl::queryStream(const c10::Stream& stream) const {
  return runtime::query_stream(runtime_stream(stream));
}

void FlagosGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  runtime::synchronize_stream(runtime_stream(stream));
}

void FlagosGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  runtime::synchronize_device(device_index);
}

void FlagosGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  device_allocator().recordStream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlagosGuardImpl);

}  // namespace torch_fl
