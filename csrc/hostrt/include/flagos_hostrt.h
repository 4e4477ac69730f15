/*
 * flagos_hostrt: the emulated vendor runtime of the `host` platform.
 *
 * A plain C API shaped like a vendor's accelerator runtime (device count and
 * selection, device memory, host/device copies, streams, events), shipped as its
 * own shared library with its own SONAME so that packaging, RPATH handling and
 * preflight treat it exactly as they treat a real vendor runtime.  "Device
 * memory" is host memory tagged with the device that owns it.
 *
 * Configuration (read once, at first use):
 *   FLAGOS_HOST_DEVICES       number of virtual devices (1..HOSTRT_MAX_DEVICES, default 2)
 *   FLAGOS_HOST_MEMORY_LIMIT  per-device memory limit: bytes, or a number with
 *                             K/M/G/T (powers of 1024, optional "B"/"iB"); unset = none
 * A malformed value makes every call fail with hostrtErrorInvalidConfiguration;
 * hostrtGetConfigError() says which value and why.
 */
#ifndef FLAGOS_HOSTRT_H
#define FLAGOS_HOSTRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOSTRT_API __attribute__((visibility("default")))

/* The most virtual devices FLAGOS_HOST_DEVICES may ask for. */
#define HOSTRT_MAX_DEVICES 64

typedef enum hostrtError {
  hostrtSuccess = 0,
  hostrtErrorInvalidValue = 1,
  hostrtErrorMemoryAllocation = 2,
  hostrtErrorInvalidDevice = 3,
  hostrtErrorNotReady = 4,
  hostrtErrorInvalidConfiguration = 5,
  hostrtErrorInvalidResourceHandle = 6,
} hostrtError_t;

typedef enum hostrtMemcpyKind {
  hostrtMemcpyHostToHost = 0,
  hostrtMemcpyHostToDevice = 1,
  hostrtMemcpyDeviceToHost = 2,
  hostrtMemcpyDeviceToDevice = 3,
} hostrtMemcpyKind;

typedef enum hostrtMemoryType {
  hostrtMemoryTypeUnregistered = 0,
  hostrtMemoryTypeHost = 1, /* pinned host memory from hostrtMallocHost */
  hostrtMemoryTypeDevice = 2,
} hostrtMemoryType;

typedef struct hostrtPointerAttributes {
  hostrtMemoryType type;
  int device; /* -1 unless type == hostrtMemoryTypeDevice */
  void* base; /* start of the allocation holding the pointer */
  size_t size; /* size of that allocation */
} hostrtPointerAttributes;

typedef struct hostrtStream_st* hostrtStream_t;
typedef struct hostrtEvent_st* hostrtEvent_t;

#define hostrtEventDefault 0x0u
#define hostrtEventDisableTiming 0x2u

HOSTRT_API const char* hostrtGetErrorString(hostrtError_t error);
HOSTRT_API const char* hostrtGetConfigError(void);
HOSTRT_API int hostrtGetVersion(void);

HOSTRT_API hostrtError_t hostrtGetDeviceCount(int* count);
HOSTRT_API hostrtError_t hostrtSetDevice(int device);
HOSTRT_API hostrtError_t hostrtGetDevice(int* device);
HOSTRT_API hostrtError_t hostrtDeviceSynchronize(void);

HOSTRT_API hostrtError_t hostrtMalloc(void** ptr, size_t size);
HOSTRT_API hostrtError_t hostrtFree(void* ptr);
HOSTRT_API hostrtError_t hostrtMemGetInfo(size_t* free_bytes, size_t* total_bytes);
HOSTRT_API hostrtError_t hostrtMallocHost(void** ptr, size_t size);
HOSTRT_API hostrtError_t hostrtFreeHost(void* ptr);
HOSTRT_API hostrtError_t hostrtPointerGetAttributes(hostrtPointerAttributes* attributes, const void* ptr);

HOSTRT_API hostrtError_t hostrtMemcpy(void* dst, const void* src, size_t count, hostrtMemcpyKind kind);
HOSTRT_API hostrtError_t hostrtMemcpyAsync(void* dst, const void* src, size_t count, hostrtMemcpyKind kind,
                                           hostrtStream_t stream);

HOSTRT_API hostrtError_t hostrtStreamCreate(hostrtStream_t* stream);
HOSTRT_API hostrtError_t hostrtStreamDestroy(hostrtStream_t stream);
HOSTRT_API hostrtError_t hostrtStreamSynchronize(hostrtStream_t stream);
HOSTRT_API hostrtError_t hostrtStreamQuery(hostrtStream_t stream);
HOSTRT_API hostrtError_t hostrtStreamWaitEvent(hostrtStream_t stream, hostrtEvent_t event);

HOSTRT_API hostrtError_t hostrtEventCreateWithFlags(hostrtEvent_t* event, unsigned int flags);
HOSTRT_API hostrtError_t hostrtEventDestroy(hostrtEvent_t event);
HOSTRT_API hostrtError_t hostrtEventRecord(hostrtEvent_t event, hostrtStream_t stream);
HOSTRT_API hostrtError_t hostrtEventQuery(hostrtEvent_t event);
HOSTRT_API hostrtError_t hostrtEventSynchronize(hostrtEvent_t event);
HOSTRT_API hostrtError_t hostrtEventElapsedTime(float* ms, hostrtEvent_t start, hostrtEvent_t end);

/* API call counters, the runtime's tracing interface: how often each function above was called since the
 * process started or the last reset.  Index i in [0, hostrtGetApiCallCount()) names one function
 * ("hostrtMalloc", ...); an index out of range gives NULL and 0. */
HOSTRT_API int hostrtGetApiCallCount(void);
HOSTRT_API const char* hostrtGetApiCallName(int index);
HOSTRT_API unsigned long long hostrtGetApiCallCounter(int index);
HOSTRT_API void hostrtResetApiCallCounters(void);

#ifdef __cplusplus
}
#endif

#endif /* FLAGOS_HOSTRT_H */
