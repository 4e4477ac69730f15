// flagos streams: PyTorch c10::Stream ids mapped to runtime streams.
//
// Stream id 0 is each device's default stream (the runtime's null stream);
// ids 1..kStreamPoolSize name a lazily created pool of runtime streams handed
// out round-robin, the way CUDA hands out its pool.  The current stream is kept
// per thread and per device.
#pragma once

#include <c10/core/Stream.h>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

constexpr int kStreamPoolSize = 8;

c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream current_stream(c10::DeviceIndex device);
void set_current_stream(const c10::Stream& stream);
c10::Stream stream_from_pool(c10::DeviceIndex device);
runtime::StreamHandle runtime_stream(const c10::Stream& stream);

}  // namespace torch_fl
