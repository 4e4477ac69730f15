// The allocation history of an allocator that owns its blocks (the host runtime's), for
// torch.flagos.memory._record_memory_history and _snapshot.  It keeps what PyTorch's CUDA caching
// allocator keeps for torch.cuda.memory: a bounded trace of allocator actions per device, each with the
// stack that caused it, and the stack of every live block, so that the snapshot has CUDA's format and
// PyTorch's memory viz (torch.cuda._memory_viz, pytorch.org/memory_viz) reads it.
//
// On the cuda platform flagos blocks are CUDA's caching allocator's own, and CUDA's history records them;
// nothing records here (torch_fl/memory.py routes there).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace torch_fl::memory_history {

using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
using RecordContext = c10::CachingDeviceAllocator::RecordContext;

struct Settings {
  bool trace = false;               // enabled="all": keep the action trace, not only live blocks' stacks
  RecordContext context = RecordContext::ALL;
  bool cpp_frames = false;          // stacks="all": C++ frames beside Python's
  size_t max_entries = SIZE_MAX;    // trace entries kept per device (the oldest are dropped)
};

struct Entry {
  Action action;
  size_t addr;   // OOM: bytes the device still had free
  size_t size;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;
};

// Turns recording on with `settings`, or off (nullptr) and forgets the trace.
void configure(const Settings* settings);

// Whether anything is recorded: one relaxed load, so that allocations cost nothing while it is off.
inline std::atomic<bool> recording{false};
inline bool enabled() { return recording.load(std::memory_order_relaxed); }

std::shared_ptr<c10::GatheredContext> gather_context(Action action);
void append(c10::DeviceIndex device, Action action, size_t addr, size_t size,
            std::shared_ptr<c10::GatheredContext> context);

// The stack to keep for `action`, where the settings keep one, else nullptr.  For an alloc it is also the
// live block's stack (context "state" and later).  Callers gather it before they take their own lock, as
// CUDA's allocator does: gathering Python frames takes the GIL, and a thread holding the GIL may be waiting
// for that lock.  Inline, as record(): while nothing records, an allocation pays one load for each.
inline std::shared_ptr<c10::GatheredContext> context_for(Action action) {
  return enabled() ? gather_context(action) : nullptr;
}

// Appends an action on `device`'s trace (when the trace is on), with the stack context_for gave.
inline void record(c10::DeviceIndex device, Action action, size_t addr, size_t size,
                   std::shared_ptr<c10::GatheredContext> context) {
  if (enabled()) append(device, action, addr, size, std::move(context));
}

// A copy of `device`'s trace, oldest first.
std::vector<Entry> trace(c10::DeviceIndex device);

}  // namespace torch_fl::memory_history
