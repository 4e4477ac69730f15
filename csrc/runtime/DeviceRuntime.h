// The runtime interface every accelerator implements.
//
// torch_fl is built for exactly one platform at a time (FLAGOS_PLATFORM in
// CMake), so the interface is a set of free functions resolved at link time:
// runtime/host/HostRuntime.cpp implements it over the C API of the emulated
// runtime library (csrc/hostrt), and a vendor implements the same declarations
// over its own runtime.  Every function converts the vendor's error codes to
// c10::Error in one checking macro of its implementation (HOSTRT_CHECK);
// device_count() never throws.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <optional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_fl::runtime {

using StreamHandle = void*;  // a vendor stream; nullptr is the device's default stream
using EventHandle = void*;

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

// Name of the runtime behind this build ("host", "cuda", ...).
const char* platform_name() noexcept;

// The device type whose PyTorch kernels run on this runtime's memory in place:
// CPU for the host runtime (its device memory is host memory), CUDA for cuda.
c10::DeviceType kernel_device_type() noexcept;
// Whether every allocation of the kernel device type's allocator is this runtime's
// device memory, wherever it is made (cuda: one pool).  Where not (host), a kernel's
// allocations are device memory only inside KernelAllocations (FlagosDeviceAllocator.h).
bool kernel_outputs_are_device_memory() noexcept;

// A new random generator of the kernel device type for flagos device `device`
// (the engine of a flagos generator, see FlagosGenerator.h).
at::Generator create_generator_engine(c10::DeviceIndex device);
// The engine of flagos device `device`'s default generator.  cuda: CUDA's own
// default generator of that device (flagos:N is cuda:N), which seeded kernels
// without a generator argument (dropout, attention with dropout) draw from, so
// nothing is lent to them per call.  host: a generator of its own, apart from
// torch's CPU default generator.
at::Generator default_generator_engine(c10::DeviceIndex device);

// Number of devices; 0 when the runtime is unusable (see configuration_error()).
c10::DeviceIndex device_count() noexcept;
// Why the runtime is unusable, or "" when it is fine.
std::string configuration_error();

// Throws c10::Error naming a bad index (or why the runtime is unusable).
void check_device_index(c10::DeviceIndex device);

c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex device);
void synchronize_device(c10::DeviceIndex device);

// Device memory on the current device.  Returns nullptr when the device is out
// of memory, so that the caching allocator can free its cache and retry.
void* malloc_device(std::size_t bytes);
void free_device(void* ptr);
// (free, total) bytes of `device`.
std::pair<std::size_t, std::size_t> memory_info(c10::DeviceIndex device);

// Page-locked host memory.
void* malloc_host(std::size_t bytes);
void free_host(void* ptr);
bool is_host_pinned(const void* ptr);
// The device owning `ptr`, if it is device memory of this runtime.
std::optional<c10::DeviceIndex> device_of(const void* ptr);

void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream);

StreamHandle create_stream(c10::DeviceIndex device);
void synchronize_stream(StreamHandle stream);
bool query_stream(StreamHandle stream);
void stream_wait_event(StreamHandle stream, EventHandle event);

EventHandle create_event(bool enable_timing);
void destroy_event(EventHandle event);
void record_event(EventHandle event, StreamHandle stream);
bool query_event(EventHandle event);
void synchronize_event(EventHandle event);
double event_elapsed_ms(EventHandle start, EventHandle end);

// How often each function of the vendor runtime's API was called since the process started or the last
// reset, by the function's name, where the runtime counts its calls (the host runtime's tracing interface);
// empty where it does not (on cuda, the profiler's CUDA activity counts them).  Tests hold the plugin to a
// number of runtime calls per operator with it.
std::vector<std::pair<std::string, uint64_t>> api_call_counts();
void reset_api_call_counts();

}  // namespace torch_fl::runtime
