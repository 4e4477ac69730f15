// The emulated vendor runtime behind the `host` platform (see include/flagos_hostrt.h).
//
// Work submitted to a stream runs to completion in the submitting thread before
// the call returns, the way a synchronous device would behave.  Streams and
// events therefore keep PyTorch's ordering semantics trivially; events carry a
// timestamp taken when they are recorded so that elapsed-time queries are real.

#include "include/flagos_hostrt.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <unistd.h>

namespace {

constexpr int kDefaultDevices = 2;
constexpr size_t kAlignment = 64;

struct Allocation {
  size_t size;
  int device;  // -1 for pinned host memory
};

struct Config {
  int devices = 0;
  size_t memory_limit = 0;  // 0 = unlimited
  std::string error;        // non-empty = configuration unusable
};

bool parse_memory_limit(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || errno != 0 || text[0] == '-') return false;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned long long scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const char prefix = unit[0];
    const std::string rest = unit.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "IB")) return false;
    switch (prefix) {
      case 'K': scale = 1ULL << 10; break;
      case 'M': scale = 1ULL << 20; break;
      case 'G': scale = 1ULL << 30; break;
      case 'T': scale = 1ULL << 40; break;
      default: return false;
    }
  }
  if (value == 0 || value > ULLONG_MAX / scale) return false;
  *out = static_cast<size_t>(value * scale);
  return true;
}

Config read_config() {
  Config config;
  config.devices = kDefaultDevices;
  if (const char* text = std::getenv("FLAGOS_HOST_DEVICES")) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < 1 || value > HOSTRT_MAX_DEVICES) {
      config.error = std::string("FLAGOS_HOST_DEVICES='") + text +
                     "' is not a device count; set it to a whole number from 1 to " +
                     std::to_string(HOSTRT_MAX_DEVICES) + " or unset it (default " +
                     std::to_string(kDefaultDevices) + ")";
      config.devices = 0;
      return config;
    }
    config.devices = static_cast<int>(value);
  }
  if (const char* text = std::getenv("FLAGOS_HOST_MEMORY_LIMIT")) {
    if (*text != '\0' && !parse_memory_limit(text, &config.memory_limit)) {
      config.error = std::string("FLAGOS_HOST_MEMORY_LIMIT='") + text +
                     "' is not a memory size; use bytes or a number with K/M/G/T, e.g. 512M, or unset it";
      config.devices = 0;
    }
  }
  return config;
}

struct State {
  Config config = read_config();
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // keyed by base address
  size_t used[HOSTRT_MAX_DEVICES] = {};
};

State& state() {
  static State* s = new State();  // leaked on purpose: frees may run during process teardown
  return *s;
}

thread_local int current_device = 0;


}  // namespace

struct hostrtStream_st {
  int device;
};

struct hostrtEvent_st {
  unsigned int flags;
  bool recorded;
  std::chrono::steady_clock::time_point time;
};

namespace {

hostrtError_t check_config() {
  return state().config.error.empty() ? hostrtSuccess : hostrtErrorInvalidConfiguration;
}

// Classifies `ptr` under the registry lock; returns false if it is not inside a
// live allocation.
bool find_allocation(const void* ptr, uintptr_t* base, Allocation* found) {
  auto& s = state();
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return false;
  --it;
  if (address >= it->first + (it->second.size == 0 ? 1 : it->second.size)) return false;
  *base = it->first;
  *found = it->second;
  return true;
}

hostrtError_t check_copy(void* dst, const void* src, size_t count, hostrtMemcpyKind kind) {
  if (count == 0) return hostrtSuccess;
  if (dst == nullptr || src == nullptr) return hostrtErrorInvalidValue;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto is_device_range = [](const void* p, size_t n) {
    uintptr_t base = 0;
    Allocation a{};
    if (!find_allocation(p, &base, &a) || a.device < 0) return false;
    return reinterpret_cast<uintptr_t>(p) + n <= base + a.size;
  };
  const bool dst_device = kind == hostrtMemcpyHostToDevice || kind == hostrtMemcpyDeviceToDevice;
  const bool src_device = kind == hostrtMemcpyDeviceToHost || kind == hostrtMemcpyDeviceToDevice;
  if (dst_device && !is_device_range(dst, count)) return hostrtErrorInvalidValue;
  if (src_device && !is_device_range(src, count)) return hostrtErrorInvalidValue;
  return hostrtSuccess;
}


// API call counters (hostrtGetApiCallCounter): one relaxed atomic increment per call, as cheap as a vendor's
// tracing hook, so that tests can hold the plugin to a number of runtime calls per operator.
#define HOSTRT_API_CALLS(X) \
  X(GetDeviceCount)\
  X(SetDevice)\
  X(GetDevice)\
  X(DeviceSynchronize)\
  X(Malloc)\
  X(Free)\
  X(MemGetInfo)\
  X(MallocHost)\
  X(FreeHost)\
  X(PointerGetAttributes)\
  X(Memcpy)\
  X(MemcpyAsync)\
  X(StreamCreate)\
  X(StreamDestroy)\
  X(StreamSynchronize)\
  X(StreamQuery)\
  X(StreamWaitEvent)\
  X(EventCreateWithFlags)\
  X(EventDestroy)\
  X(EventRecord)\
  X(EventQuery)\
  X(EventSynchronize)\
  X(EventElapsedTime)

enum class ApiCall : int {
#define HOSTRT_ENUM(name) name,
  HOSTRT_API_CALLS(HOSTRT_ENUM)
#undef HOSTRT_ENUM
  Count
};

constexpr const char* kApiCallNames[] = {
#define HOSTRT_NAME(name) "hostrt" #name,
    HOSTRT_API_CALLS(HOSTRT_NAME)
#undef HOSTRT_NAME
};

std::atomic<unsigned long long> api_calls[static_cast<int>(ApiCall::Count)];

inline void count_call(ApiCall call) { api_calls[static_cast<int>(call)].fetch_add(1, std::memory_order_relaxed); }

// Both copy calls: work runs to completion in the submitting thread (see the top of this file).
hostrtError_t copy_now(void* dst, const void* src, size_t count, hostrtMemcpyKind kind) {
  if (auto e = check_copy(dst, src, count, kind)) return e;
  if (count != 0) std::memmove(dst, src, count);
  return hostrtSuccess;
}

}  // namespace

extern "C" {

const char* hostrtGetErrorString(hostrtError_t error) {
  switch (error) {
    case hostrtSuccess: return "no error";
    case hostrtErrorInvalidValue: return "invalid argument";
    case hostrtErrorMemoryAllocation: return "out of device memory";
    case hostrtErrorInvalidDevice: return "invalid device ordinal";
    case hostrtErrorNotReady: return "device not ready";
    case hostrtErrorInvalidConfiguration: return "invalid runtime configuration";
    case hostrtErrorInvalidResourceHandle: return "invalid resource handle";
  }
  return "unknown error";
}

const char* hostrtGetConfigError(void) { return state().config.error.c_str(); }

int hostrtGetVersion(void) { return 1000; }

hostrtError_t hostrtGetDeviceCount(int* count) {
  count_call(ApiCall::GetDeviceCount);
  if (count == nullptr) return hostrtErrorInvalidValue;
  *count = state().config.devices;
  return check_config();
}

hostrtError_t hostrtSetDevice(int device) {
  count_call(ApiCall::SetDevice);
  if (auto e = check_config()) return e;
  if (device < 0 || device >= state().config.devices) return hostrtErrorInvalidDevice;
  current_device = device;
  return hostrtSuccess;
}

hostrtError_t hostrtGetDevice(int* device) {
  count_call(ApiCall::GetDevice);
  if (device == nullptr) return hostrtErrorInvalidValue;
  if (auto e = check_config()) return e;
  *device = current_device;
  return hostrtSuccess;
}

hostrtError_t hostrtDeviceSynchronize(void) { count_call(ApiCall::DeviceSynchronize); return check_config(); }

hostrtError_t hostrtMalloc(void** ptr, size_t size) {
  count_call(ApiCall::Malloc);
  if (ptr == nullptr) return hostrtErrorInvalidValue;
  if (auto e = check_config()) return e;
  auto& s = state();
  const int device = current_device;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    const size_t limit = s.config.memory_limit;
    if (limit != 0 && (size > limit || s.used[device] > limit - size)) return hostrtErrorMemoryAllocation;
    s.used[device] += size;
  }
  const size_t rounded = ((size == 0 ? 1 : size) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (p == nullptr) {
    s.used[device] -= size;
    return hostrtErrorMemoryAllocation;
  }
  s.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, device};
  *ptr = p;
  return hostrtSuccess;
}

hostrtError_t hostrtFree(void* ptr) {
  count_call(ApiCall::Free);
  if (ptr == nullptr) return hostrtSuccess;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second.device < 0) return hostrtErrorInvalidValue;
  s.used[it->second.device] -= it->second.size;
  s.allocations.erase(it);
  std::free(ptr);
  return hostrtSuccess;
}

hostrtError_t hostrtMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  count_call(ApiCall::MemGetInfo);
  if (free_bytes == nullptr || total_bytes == nullptr) return hostrtErrorInvalidValue;
  if (auto e = check_config()) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  size_t total = s.config.memory_limit;
  if (total == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGE_SIZE);
    total = static_cast<size_t>(pages) * static_cast<size_t>(page_size);
  }
  const size_t used = s.used[current_device];
  *total_bytes = total;
  *free_bytes = used > total ? 0 : total - used;
  return hostrtSuccess;
}

hostrtError_t hostrtMallocHost(void** ptr, size_t size) {
  count_call(ApiCall::MallocHost);
  if (ptr == nullptr) return hostrtErrorInvalidValue;
  const size_t rounded = ((size == 0 ? 1 : size) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return hostrtErrorMemoryAllocation;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, -1};
  *ptr = p;
  return hostrtSuccess;
}

hostrtError_t hostrtFreeHost(void* ptr) {
  count_call(ApiCall::FreeHost);
  if (ptr == nullptr) return hostrtSuccess;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second.device >= 0) return hostrtErrorInvalidValue;
  s.allocations.erase(it);
  std::free(ptr);
  return hostrtSuccess;
}

hostrtError_t hostrtPointerGetAttributes(hostrtPointerAttributes* attributes, const void* ptr) {
  count_call(ApiCall::PointerGetAttributes);
  if (attributes == nullptr) return hostrtErrorInvalidValue;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  uintptr_t base = 0;
  Allocation a{};
  if (ptr == nullptr || !find_allocation(ptr, &base, &a)) {
    *attributes = hostrtPointerAttributes{hostrtMemoryTypeUnregistered, -1, nullptr, 0};
    return hostrtSuccess;
  }
  attributes->type = a.device >= 0 ? hostrtMemoryTypeDevice : hostrtMemoryTypeHost;
  attributes->device = a.device;
  attributes->base = reinterpret_cast<void*>(base);
  attributes->size = a.size;
  return hostrtSuccess;
}

hostrtError_t hostrtMemcpy(void* dst, const void* src, size_t count, hostrtMemcpyKind kind) {
  count_call(ApiCall::Memcpy);
  return copy_now(dst, src, count, kind);
}

hostrtError_t hostrtMemcpyAsync(void* dst, const void* src, size_t count, hostrtMemcpyKind kind,
                                hostrtStream_t /*stream*/) {
  count_call(ApiCall::MemcpyAsync);
  return copy_now(dst, src, count, kind);
}

hostrtError_t hostrtStreamCreate(hostrtStream_t* stream) {
  count_call(ApiCall::StreamCreate);
  if (stream == nullptr) return hostrtErrorInvalidValue;
  if (auto e = check_config()) return e;
  *stream = new hostrtStream_st{current_device};
  return hostrtSuccess;
}

hostrtError_t hostrtStreamDestroy(hostrtStream_t stream) {
  count_call(ApiCall::StreamDestroy);
  if (stream == nullptr) return hostrtErrorInvalidResourceHandle;
  delete stream;
  return hostrtSuccess;
}

hostrtError_t hostrtStreamSynchronize(hostrtStream_t /*stream*/) { count_call(ApiCall::StreamSynchronize); return check_config(); }
hostrtError_t hostrtStreamQuery(hostrtStream_t /*stream*/) { count_call(ApiCall::StreamQuery); return check_config(); }

hostrtError_t hostrtStreamWaitEvent(hostrtStream_t /*stream*/, hostrtEvent_t event) {
  count_call(ApiCall::StreamWaitEvent);
  return event == nullptr ? hostrtErrorInvalidResourceHandle : hostrtSuccess;
}

hostrtError_t hostrtEventCreateWithFlags(hostrtEvent_t* event, unsigned int flags) {
  count_call(ApiCall::EventCreateWithFlags);
  if (event == nullptr) return hostrtErrorInvalidValue;
  *event = new hostrtEvent_st{flags, false, {}};
  return hostrtSuccess;
}

hostrtError_t hostrtEventDestroy(hostrtEvent_t event) {
  count_call(ApiCall::EventDestroy);
  if (event == nullptr) return hostrtErrorInvalidResourceHandle;
  delete event;
  return hostrtSuccess;
}

hostrtError_t hostrtEventRecord(hostrtEvent_t event, hostrtStream_t /*stream*/) {
  count_call(ApiCall::EventRecord);
  if (event == nullptr) return hostrtErrorInvalidResourceHandle;
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return hostrtSuccess;
}

hostrtError_t hostrtEventQuery(hostrtEvent_t event) {
  count_call(ApiCall::EventQuery);
  return event == nullptr ? hostrtErrorInvalidResourceHandle : hostrtSuccess;
}

hostrtError_t hostrtEventSynchronize(hostrtEvent_t event) {
  count_call(ApiCall::EventSynchronize);
  return event == nullptr ? hostrtErrorInvalidResourceHandle : hostrtSuccess;
}

hostrtError_t hostrtEventElapsedTime(float* ms, hostrtEvent_t start, hostrtEvent_t end) {
  count_call(ApiCall::EventElapsedTime);
  if (ms == nullptr) return hostrtErrorInvalidValue;
  if (start == nullptr || end == nullptr) return hostrtErrorInvalidResourceHandle;
  if ((start->flags & hostrtEventDisableTiming) || (end->flags & hostrtEventDisableTiming) ||
      !start->recorded || !end->recorded) {
    return hostrtErrorInvalidValue;
  }
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return hostrtSuccess;
}

int hostrtGetApiCallCount(void) { return static_cast<int>(ApiCall::Count); }

const char* hostrtGetApiCallName(int index) {
  return index >= 0 && index < static_cast<int>(ApiCall::Count) ? kApiCallNames[index] : nullptr;
}

unsigned long long hostrtGetApiCallCounter(int index) {
  return index >= 0 && index < static_cast<int>(ApiCall::Count) ? api_calls[index].load(std::memory_order_relaxed)
                                                                 : 0;
}

void hostrtResetApiCallCounters(void) {
  for (auto& counter : api_calls) counter.store(0, std::memory_order_relaxed);
}

}  // extern "C"
