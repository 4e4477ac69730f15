// The runtime interface (DeviceRuntime.h) over the emulated host runtime.
#include "runtime/DeviceRuntime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <flagos_hostrt.h>

// A bad FLAGOS_HOST_* setting makes every call fail; the message then says
// which setting and how to fix it, instead of naming the call.
#define HOSTRT_CHECK(call)                                                                  \
  do {                                                                                      \
    const auto hostrt_status_ = (call);                                                     \
    TORCH_CHECK(hostrt_status_ != hostrtErrorInvalidConfiguration, hostrtGetConfigError()); \
    TORCH_CHECK(hostrt_status_ == hostrtSuccess, "flagos runtime error in ", #call, ": ",    \
                hostrtGetErrorString(hostrt_status_));                                      \
  } while (0)

namespace torch_fl::runtime {

namespace {

hostrtMemcpyKind to_hostrt(CopyKind kind) {
  switch (kind) {
    case CopyKind::HostToDevice: return hostrtMemcpyHostToDevice;
    case CopyKind::DeviceToHost: return hostrtMemcpyDeviceToHost;
    case CopyKind::DeviceToDevice: return hostrtMemcpyDeviceToDevice;
  }
  return hostrtMemcpyHostToHost;
}

// Runs `call` (a runtime call that acts on the current device) on `device`,
// restoring the caller's device before its status is checked.
template <typename Call>
void on_device(c10::DeviceIndex device, Call call) {
  int previous = 0;
  HOSTRT_CHECK(hostrtGetDevice(&previous));
  if (previous == device) {
    HOSTRT_CHECK(call());
    return;
  }
  HOSTRT_CHECK(hostrtSetDevice(device));
  const auto status = call();
  HOSTRT_CHECK(hostrtSetDevice(previous));
  HOSTRT_CHECK(status);
}

}  // namespace

const char* platform_name() noexcept { return "host"; }

c10::DeviceType kernel_device_type() noexcept { return c10::DeviceType::CPU; }

// CPU kernels allocate ordinary host memory, which this runtime does not track.
bool kernel_outputs_are_device_memory() noexcept { return false; }

at::Generator create_generator_engine(c10::DeviceIndex /*device*/) {
  return at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val);
}

at::Generator default_generator_engine(c10::DeviceIndex device) { return create_generator_engine(device); }

// The runtime reads its configuration once, when it loads, so the count never changes: asked once, as
// c10::cuda::device_count() asks CUDA once (every guard and allocation checks an index against it).
c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex count = [] {
    int devices = 0;
    return hostrtGetDeviceCount(&devices) == hostrtSuccess ? static_cast<c10::DeviceIndex>(devices)
                                                           : c10::DeviceIndex{0};
  }();
  return count;
}

std::string configuration_error() { return hostrtGetConfigError(); }

c10::DeviceIndex current_device() {
  int device = 0;
  HOSTRT_CHECK(hostrtGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void set_device(c10::DeviceIndex device) { HOSTRT_CHECK(hostrtSetDevice(device)); }

void synchronize_device(c10::DeviceIndex /*device*/) { HOSTRT_CHECK(hostrtDeviceSynchronize()); }

void* malloc_device(std::size_t bytes) {
  void* ptr = nullptr;
  const auto status = hostrtMalloc(&ptr, bytes);
  if (status == hostrtErrorMemoryAllocation) return nullptr;
  HOSTRT_CHECK(status);
  return ptr;
}

void free_device(void* ptr) { HOSTRT_CHECK(hostrtFree(ptr)); }

std::pair<std::size_t, std::size_t> memory_info(c10::DeviceIndex device) {
  std::size_t free_bytes = 0, total_bytes = 0;
  on_device(device, [&] { return hostrtMemGetInfo(&free_bytes, &total_bytes); });
  return {free_bytes, total_bytes};
}

void* malloc_host(std::size_t bytes) {
  void* ptr = nullptr;
  HOSTRT_CHECK(hostrtMallocHost(&ptr, bytes));
  return ptr;
}

void free_host(void* ptr) { HOSTRT_CHECK(hostrtFreeHost(ptr)); }

bool is_host_pinned(const void* ptr) {
  hostrtPointerAttributes attributes{};
  HOSTRT_CHECK(hostrtPointerGetAttributes(&attributes, ptr));
  return attributes.type == hostrtMemoryTypeHost;
}

std::optional<c10::DeviceIndex> device_of(const void* ptr) {
  hostrtPointerAttributes attributes{};
  HOSTRT_CHECK(hostrtPointerGetAttributes(&attributes, ptr));
  if (attributes.type != hostrtMemoryTypeDevice) return std::nullopt;
  return static_cast<c10::DeviceIndex>(attributes.device);
}

void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) {
  HOSTRT_CHECK(hostrtMemcpyAsync(dst, src, bytes, to_hostrt(kind), static_cast<hostrtStream_t>(stream)));
}

StreamHandle create_stream(c10::DeviceIndex device) {
  hostrtStream_t stream = nullptr;
  on_device(device, [&] { return hostrtStreamCreate(&stream); });
  return stream;
}

void synchronize_stream(StreamHandle stream) {
  HOSTRT_CHECK(hostrtStreamSynchronize(static_cast<hostrtStream_t>(stream)));
}

bool query_stream(StreamHandle stream) {
  const auto status = hostrtStreamQuery(static_cast<hostrtStream_t>(stream));
  if (status == hostrtErrorNotReady) return false;
  HOSTRT_CHECK(status);
  return true;
}

void stream_wait_event(StreamHandle stream, EventHandle event) {
  HOSTRT_CHECK(hostrtStreamWaitEvent(static_cast<hostrtStream_t>(stream), static_cast<hostrtEvent_t>(event)));
}

EventHandle create_event(bool enable_timing) {
  hostrtEvent_t event = nullptr;
  HOSTRT_CHECK(hostrtEventCreateWithFlags(&event, enable_timing ? hostrtEventDefault : hostrtEventDisableTiming));
  return event;
}

void destroy_event(EventHandle event) { HOSTRT_CHECK(hostrtEventDestroy(static_cast<hostrtEvent_t>(event))); }

void record_event(EventHandle event, StreamHandle stream) {
  HOSTRT_CHECK(hostrtEventRecord(static_cast<hostrtEvent_t>(event), static_cast<hostrtStream_t>(stream)));
}

bool query_event(EventHandle event) {
  const auto status = hostrtEventQuery(static_cast<hostrtEvent_t>(event));
  if (status == hostrtErrorNotReady) return false;
  HOSTRT_CHECK(status);
  return true;
}

void synchronize_event(EventHandle event) { HOSTRT_CHECK(hostrtEventSynchronize(static_cast<hostrtEvent_t>(event))); }

double event_elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0.0f;
  const auto status =
      hostrtEventElapsedTime(&ms, static_cast<hostrtEvent_t>(start), static_cast<hostrtEvent_t>(end));
  TORCH_CHECK(status == hostrtSuccess,
              "elapsed_time needs two recorded events created with enable_timing=True (",
              hostrtGetErrorString(status), ")");
  return ms;
}

std::vector<std::pair<std::string, uint64_t>> api_call_counts() {
  std::vector<std::pair<std::string, uint64_t>> counts;
  for (int i = 0; i < hostrtGetApiCallCount(); ++i) counts.emplace_back(hostrtGetApiCallName(i), hostrtGetApiCallCounter(i));
  return counts;
}

void reset_api_call_counts() { hostrtResetApiCallCounters(); }

}  // namespace torch_fl::runtime
