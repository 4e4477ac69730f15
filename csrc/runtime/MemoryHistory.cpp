#include "runtime/MemoryHistory.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include <torch/csrc/profiler/combined_traceback.h>

namespace torch_fl::memory_history {

namespace {

struct State {
  std::mutex mutex;
  Settings settings;
  std::unordered_map<c10::DeviceIndex, std::deque<Entry>> traces;
};

State& state() {
  static auto* s = new State();  // outlives tensors freed at exit
  return *s;
}

std::shared_ptr<c10::GatheredContext> gather(const Settings& settings) {
  // Python frames as CUDA's allocator records them (stacks="python"); C++ frames only for stacks="all".
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/settings.cpp_frames);
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_allocation(Action action) {
  return action == Action::ALLOC || action == Action::SEGMENT_ALLOC || action == Action::OOM;
}

}  // namespace

void configure(const Settings* settings) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.traces.clear();
  if (settings == nullptr) {
    recording.store(false);
    return;
  }
  s.settings = *settings;
  recording.store(true);
}

std::shared_ptr<c10::GatheredContext> gather_context(Action action) {
  Settings settings;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    settings = state().settings;
  }
  // CUDA's meaning of context=: "state" keeps the stacks of live blocks only, "alloc" also those of the
  // trace's allocations, "all" also those of frees.
  const bool wanted = is_allocation(action) ? settings.context != RecordContext::NEVER
                                            : settings.trace && settings.context == RecordContext::ALL;
  return wanted ? gather(settings) : nullptr;
}

void append(c10::DeviceIndex device, Action action, size_t addr, size_t size,
            std::shared_ptr<c10::GatheredContext> context) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.settings.trace) return;
  if (is_allocation(action) && s.settings.context == RecordContext::STATE) context = nullptr;
  auto& trace = s.traces[device];
  trace.push_back(Entry{action, addr, size, now_us(), std::move(context)});
  while (trace.size() > s.settings.max_entries) trace.pop_front();
}

std::vector<Entry> trace(c10::DeviceIndex device) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.traces.find(device);
  if (it == s.traces.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace torch_fl::memory_history
