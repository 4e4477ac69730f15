#include "runtime/host/HostStreams.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include <c10/util/Exception.h>
#include <flagos_hostrt.h>

namespace torch_fl {

namespace {


struct DevicePool {
  std::once_flag created;
  std::array<runtime::StreamHandle, kStreamPoolSize> streams{};
  std::atomic<uint32_t> next{0};
};

DevicePool& pool(c10::DeviceIndex device) {
  static std::array<DevicePool, HOSTRT_MAX_DEVICES> pools;
  runtime::check_device_index(device);
  auto& p = pools[device];
  std::call_once(p.created, [&] {
    for (auto& s : p.streams) s = runtime::create_stream(device);
  });
  return p;
}

// Current stream id per device for this thread (0 = default stream).
thread_local std::array<c10::StreamId, HOSTRT_MAX_DEVICES> current_ids{};

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  return device < 0 ? runtime::current_device() : device;
}

}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, resolve(device)));
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve(device);
  runtime::check_device_index(device);
  return c10::Stream::unpack3(current_ids[device], device, c10::DeviceType::PrivateUse1);
}

void set_current_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "expected a flagos stream, got ", stream);
  const auto device = stream.device_index();
  runtime::check_device_index(device);
  TORCH_CHECK(stream.id() >= 0 && stream.id() <= kStreamPoolSize, "unknown flagos stream id ", stream.id());
  current_ids[device] = stream.id();
}

c10::Stream stream_from_pool(c10::DeviceIndex device) {
  device = resolve(device);
  auto& p = pool(device);
  const auto index = p.next.fetch_add(1) % kStreamPoolSize;
  return c10::Stream::unpack3(static_cast<c10::StreamId>(index + 1), device, c10::DeviceType::PrivateUse1);
}

runtime::StreamHandle runtime_stream(const c10::Stream& stream) {
  if (stream.id() == 0) return nullptr;
  TORCH_CHECK(stream.id() > 0 && stream.id() <= kStreamPoolSize, "unknown flagos stream id ", stream.id());
  return pool(stream.device_index()).streams[stream.id() - 1];
}

}  // namespace torch_fl
