// The runtime interface (DeviceRuntime.h) over the CUDA runtime, shared with
// PyTorch's own CUDA backend: the current device is c10::cuda's, copies run on
// PyTorch's current CUDA stream, and every CUDA error becomes c10::Error
// through C10_CUDA_CHECK.
#include "runtime/DeviceRuntime.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace torch_fl::runtime {

namespace {

cudaStream_t stream_or_current(StreamHandle stream) {
  return stream != nullptr ? static_cast<cudaStream_t>(stream) : c10::cuda::getCurrentCUDAStream().stream();
}

cudaMemcpyKind to_cuda(CopyKind kind) {
  switch (kind) {
    case CopyKind::HostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::DeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::DeviceToDevice: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

}  // namespace

const char* platform_name() noexcept { return "cuda"; }

c10::DeviceType kernel_device_type() noexcept { return c10::DeviceType::CUDA; }

// flagos memory comes from PyTorch's CUDA caching allocator (CudaDeviceAllocator.cpp),
// so what a CUDA kernel allocates for its results already is flagos memory.
bool kernel_outputs_are_device_memory() noexcept { return true; }

at::Generator create_generator_engine(c10::DeviceIndex device) {
  return at::cuda::detail::createCUDAGenerator(device);
}

at::Generator default_generator_engine(c10::DeviceIndex device) {
  return at::cuda::detail::getDefaultCUDAGenerator(device);
}

c10::DeviceIndex device_count() noexcept { return c10::cuda::device_count(); }

std::string configuration_error() {
  return device_count() > 0 ? std::string()
                            : std::string("no CUDA device is visible to this process; install the NVIDIA driver, "
                                          "or check CUDA_VISIBLE_DEVICES");
}

c10::DeviceIndex current_device() { return c10::cuda::current_device(); }

void set_device(c10::DeviceIndex device) { c10::cuda::set_device(device); }

void synchronize_device(c10::DeviceIndex device) {
  const c10::cuda::CUDAGuard guard(device);
  c10::cuda::device_synchronize();
}

void* malloc_device(std::size_t bytes) {
  void* ptr = nullptr;
  const auto status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear the sticky error of the failed allocation
    return nullptr;
  }
  C10_CUDA_CHECK(status);
  return ptr;
}

void free_device(void* ptr) { C10_CUDA_CHECK(cudaFree(ptr)); }

std::pair<std::size_t, std::size_t> memory_info(c10::DeviceIndex device) {
  const c10::cuda::CUDAGuard guard(device);
  std::size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

void* malloc_host(std::size_t bytes) {
  void* ptr = nullptr;
  C10_CUDA_CHECK(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
  return ptr;
}

void free_host(void* ptr) { C10_CUDA_CHECK(cudaFreeHost(ptr)); }

bool is_host_pinned(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

std::optional<c10::DeviceIndex> device_of(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  if (attributes.type != cudaMemoryTypeDevice) return std::nullopt;
  return static_cast<c10::DeviceIndex>(attributes.device);
}

void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) {
  const auto s = stream_or_current(stream);
  C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), s));
  // Host memory on either side may be pageable and is read or reused by the
  // caller right after: wait for the copy.  Device-to-device copies stay ordered
  // on the stream.
  if (kind != CopyKind::DeviceToDevice) C10_CUDA_CHECK(cudaStreamSynchronize(s));
}

StreamHandle create_stream(c10::DeviceIndex device) {
  return c10::cuda::getStreamFromPool(false, device).stream();
}

void synchronize_stream(StreamHandle stream) { C10_CUDA_CHECK(cudaStreamSynchronize(stream_or_current(stream))); }

bool query_stream(StreamHandle stream) {
  const auto status = cudaStreamQuery(stream_or_current(stream));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  C10_CUDA_CHECK(status);
  return true;
}

void stream_wait_event(StreamHandle stream, EventHandle event) {
  C10_CUDA_CHECK(cudaStreamWaitEvent(stream_or_current(stream), static_cast<cudaEvent_t>(event), 0));
}

EventHandle create_event(bool enable_timing) {
  cudaEvent_t event = nullptr;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return event;
}

void destroy_event(EventHandle event) { C10_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }

void record_event(EventHandle event, StreamHandle stream) {
  C10_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_or_current(stream)));
}

bool query_event(EventHandle event) {
  const auto status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  C10_CUDA_CHECK(status);
  return true;
}

void synchronize_event(EventHandle event) { C10_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

double event_elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0.0f;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

// The CUDA runtime keeps no call counters; CUPTI (torch.profiler's CUDA activity) counts its calls.
std::vector<std::pair<std::string, uint64_t>> api_call_counts() { return {}; }

void reset_api_call_counts() {}

}  // namespace torch_fl::runtime
