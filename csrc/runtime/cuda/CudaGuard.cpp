// The flagos device guard on the cuda platform: a translation of PyTorch's own
// CUDA guard.  A flagos device, stream or event *is* the CUDA one with the same
// index and id, so switching the flagos device or stream switches CUDA's, and
// every kernel the cuda provider boxes runs on the stream the user selected.
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/FlagosGuard.h"

namespace torch_fl {

namespace {

const c10::impl::DeviceGuardImplInterface& cuda() {
  static const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return *impl;
}

c10::Device to_cuda(c10::Device d) {
  TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "expected a flagos device, got ", d);
  return c10::Device(c10::DeviceType::CUDA, d.index());
}

c10::Device to_flagos(c10::Device d) { return c10::Device(c10::DeviceType::PrivateUse1, d.index()); }

c10::Stream to_cuda(const c10::Stream& s) { return c10::Stream(c10::Stream::UNSAFE, to_cuda(s.device()), s.id()); }

c10::Stream to_flagos(const c10::Stream& s) {
  return c10::Stream(c10::Stream::UNSAFE, to_flagos(s.device()), s.id());
}

}  // namespace

c10::Device FlagosGuardImpl::exchangeDevice(c10::Device d) const { return to_flagos(cuda().exchangeDevice(to_cuda(d))); }
c10::Device FlagosGuardImpl::getDevice() const { return to_flagos(cuda().getDevice()); }
void FlagosGuardImpl::setDevice(c10::Device d) const { cuda().setDevice(to_cuda(d)); }
void FlagosGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  cuda().uncheckedSetDevice(c10::Device(c10::DeviceType::CUDA, d.index()));
}
c10::Stream FlagosGuardImpl::getStream(c10::Device d) const { return to_flagos(cuda().getStream(to_cuda(d))); }
c10::Stream FlagosGuardImpl::getDefaultStream(c10::Device d) const {
  return to_flagos(cuda().getDefaultStream(to_cuda(d)));
}
c10::Stream FlagosGuardImpl::getStreamFromGlobalPool(c10::Device d, bool is_high_priority) const {
  return to_flagos(cuda().getStreamFromGlobalPool(to_cuda(d), is_high_priority));
}
c10::Stream FlagosGuardImpl::getNewStream(c10::Device d, int priority) const {
  return to_flagos(cuda().getNewStream(to_cuda(d), priority));
}
c10::Stream FlagosGuardImpl::exchangeStream(c10::Stream s) const {
  return to_flagos(cuda().exchangeStream(to_cuda(s)));
}
void* FlagosGuardImpl::getStreamNativeHandle(const c10::Stream s) const {
  return cuda().getStreamNativeHandle(to_cuda(s));
}
c10::DeviceIndex FlagosGuardImpl::deviceCount() const noexcept { return cuda().deviceCount(); }

void FlagosGuardImpl::destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept {
  cuda().destroyEvent(event, device_index);
}
void FlagosGuardImpl::record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
                             const c10::EventFlag flag) const {
  cuda().record(event, to_cuda(stream), device_index, flag);
}
void FlagosGuardImpl::block(void* event, const c10::Stream& stream) const { cuda().block(event, to_cuda(stream)); }
bool FlagosGuardImpl::queryEvent(void* event) const { return cuda().queryEvent(event); }
void FlagosGuardImpl::synchronizeEvent(void* event) const { cuda().synchronizeEvent(event); }
double FlagosGuardImpl::elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const {
  return cuda().elapsedTime(start, end, device_index);
}
bool FlagosGuardImpl::queryStream(const c10::Stream& stream) const { return cuda().queryStream(to_cuda(stream)); }
void FlagosGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  cuda().synchronizeStream(to_cuda(stream));
}
void FlagosGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  cuda().synchronizeDevice(device_index);
}
void FlagosGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  device_allocator().recordStream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlagosGuardImpl);

}  // namespace torch_fl
