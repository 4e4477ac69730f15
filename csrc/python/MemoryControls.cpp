// The memory controls of torch_fl._C (MemoryControls.h).  The snapshot has the format
// torch.cuda.memory._snapshot() writes (torch/cuda/memory.py documents it; torch/cuda/_memory_viz.py and
// pytorch.org/memory_viz read it): "segments" with their "blocks", and one list of trace entries per
// device in "device_traces"; stacks are symbolized by PyTorch's own py_symbolize, as CUDA's are.
#include "python/MemoryControls.h"

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/MemoryHistory.h"

// torch/csrc/profiler/python/combined_traceback.h declares these, but includes nlohmann/json.hpp, which
// torch does not ship; the declarations are repeated here as that header has them.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void freeDeadCapturedTracebackFrames();
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace torch_fl::python {

namespace py = pybind11;

namespace {

using memory_history::Action;
using memory_history::RecordContext;

const char* action_name(Action action) {
  switch (action) {
    case Action::ALLOC: return "alloc";
    case Action::FREE_REQUESTED: return "free_requested";
    case Action::FREE_COMPLETED: return "free_completed";
    case Action::SEGMENT_ALLOC: return "segment_alloc";
    case Action::SEGMENT_FREE: return "segment_free";
    case Action::SEGMENT_MAP: return "segment_map";
    case Action::SEGMENT_UNMAP: return "segment_unmap";
    case Action::SNAPSHOT: return "snapshot";
    case Action::OOM: return "oom";
  }
  return "unknown";
}

RecordContext parse_context(const std::optional<std::string>& context) {
  if (!context.has_value()) return RecordContext::NEVER;
  if (*context == "state") return RecordContext::STATE;
  if (*context == "alloc") return RecordContext::ALLOC;
  TORCH_CHECK(*context == "all", "unknown memory history context '", *context,
              "'; use None, 'state', 'alloc' or 'all'");
  return RecordContext::ALL;
}

// Where flagos blocks are the kernel device's allocator's (cuda), that allocator's history describes them.
void check_blocks_are_flagos() {
  TORCH_CHECK(!runtime::kernel_outputs_are_device_memory(), "flagos memory is ", runtime::platform_name(),
              "'s caching allocator's on this platform, and only its own history records it; it needs the "
              "Python side of a ", runtime::platform_name(), " build of torch (torch.",
              c10::DeviceTypeName(runtime::kernel_device_type(), /*lower_case=*/true),
              ".memory._record_memory_history), which this torch lacks");
}

void record_memory_history(const std::optional<std::string>& enabled, const std::optional<std::string>& context,
                           const std::string& stacks, size_t max_entries) {
  check_blocks_are_flagos();
  if (!enabled.has_value()) {
    memory_history::configure(nullptr);
    return;
  }
  TORCH_CHECK(*enabled == "state" || *enabled == "all", "unknown memory history mode '", *enabled,
              "'; use None, 'state' or 'all'");
  TORCH_CHECK(stacks == "python" || stacks == "all", "unknown memory history stacks '", stacks,
              "'; use 'python' or 'all'");
  static std::once_flag python_frames;
  std::call_once(python_frames, [] { torch::installCapturedTracebackPython(); });
  memory_history::Settings settings;
  settings.trace = *enabled == "all";
  settings.context = parse_context(context);
  settings.cpp_frames = stacks == "all";
  settings.max_entries = max_entries;
  memory_history::configure(&settings);
}

// Symbolizes every stack of the snapshot in one batch (frames shared between stacks are read once).
class Frames {
 public:
  // Registers `context`'s stack; returns where its frames will be, or -1 for none.
  int64_t add(const std::shared_ptr<c10::GatheredContext>& context) {
    if (context == nullptr) return -1;
    auto* traceback = torch::getCapturedTracebackFromContext(context);
    auto [it, fresh] = index_.emplace(traceback, static_cast<int64_t>(tracebacks_.size()));
    if (fresh) tracebacks_.push_back(traceback);
    return it->second;
  }
  std::vector<py::object> symbolize() { return torch::py_symbolize(tracebacks_); }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::unordered_map<torch::CapturedTraceback*, int64_t> index_;
};

py::object frames_of(const std::vector<py::object>& symbolized, int64_t index) {
  return index < 0 ? py::object(py::list()) : symbolized[static_cast<size_t>(index)];
}

py::dict memory_snapshot() {
  check_blocks_are_flagos();
  torch::freeDeadCapturedTracebackFrames();
  const auto segments = device_allocator().snapshot_segments();
  const auto devices = runtime::device_count();
  std::vector<std::vector<memory_history::Entry>> traces;
  for (c10::DeviceIndex device = 0; device < devices; ++device) traces.push_back(memory_history::trace(device));

  Frames frames;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> segment_frames;
  for (const auto& segment : segments) {
    std::vector<int64_t> block_frames;
    for (const auto& block : segment.blocks) block_frames.push_back(frames.add(block.context_when_allocated));
    segment_frames.emplace_back(frames.add(segment.context_when_allocated), std::move(block_frames));
  }
  std::vector<std::vector<int64_t>> entry_frames;
  for (const auto& trace : traces) {
    auto& indices = entry_frames.emplace_back();
    for (const auto& entry : trace) indices.push_back(frames.add(entry.context));
  }
  const auto symbolized = frames.symbolize();

  py::list py_segments;
  for (size_t s = 0; s < segments.size(); ++s) {
    const auto& segment = segments[s];
    py::dict d;
    d["device"] = segment.device;
    d["address"] = segment.address;
    d["total_size"] = segment.total_size;
    d["allocated_size"] = segment.allocated_size;
    d["active_size"] = segment.active_size;
    d["requested_size"] = segment.requested_size;
    d["stream"] = 0;  // the host runtime's allocator keeps no per-stream pools
    d["segment_type"] = segment.is_large ? "large" : "small";
    d["segment_pool_id"] = py::make_tuple(segment.owner_private_pool_id.first, segment.owner_private_pool_id.second);
    d["is_expandable"] = segment.is_expandable;
    d["frames"] = frames_of(symbolized, segment_frames[s].first);
    py::list blocks;
    size_t offset = segment.address;
    for (size_t b = 0; b < segment.blocks.size(); ++b) {
      const auto& block = segment.blocks[b];
      py::dict bd;
      bd["address"] = offset;
      bd["size"] = block.size;
      bd["requested_size"] = block.requested_size;
      bd["state"] = block.allocated ? "active_allocated" : (block.active ? "active_pending_free" : "inactive");
      bd["frames"] = frames_of(symbolized, segment_frames[s].second[b]);
      blocks.append(bd);
      offset += block.size;
    }
    d["blocks"] = blocks;
    py_segments.append(d);
  }

  py::list device_traces;
  for (size_t device = 0; device < traces.size(); ++device) {
    py::list entries;
    for (size_t e = 0; e < traces[device].size(); ++e) {
      const auto& entry = traces[device][e];
      py::dict d;
      d["action"] = action_name(entry.action);
      // CUDA's convention: an OOM entry's address field is the device's free memory.
      d[entry.action == Action::OOM ? "device_free" : "addr"] = entry.addr;
      d["size"] = entry.size;
      d["stream"] = 0;
      d["time_us"] = entry.time_us;
      d["frames"] = frames_of(symbolized, entry_frames[device][e]);
      entries.append(d);
    }
    device_traces.append(entries);
  }

  py::dict snapshot;
  snapshot["segments"] = py_segments;
  snapshot["device_traces"] = device_traces;
  return snapshot;
}

}  // namespace

void add_memory_controls(PyObject* module) {
  auto m = py::reinterpret_borrow<py::module>(module);
  m.def("_set_memory_fraction",
        [](double fraction, c10::DeviceIndex device) { device_allocator().set_memory_fraction(fraction, device); },
        py::arg("fraction"), py::arg("device"));
  m.def("_memory_fraction", [](c10::DeviceIndex device) { return device_allocator().memory_fraction(device); },
        py::arg("device"));
  m.def("_record_memory_history", &record_memory_history, py::arg("enabled"), py::arg("context"),
        py::arg("stacks"), py::arg("max_entries"));
  m.def("_memory_snapshot", &memory_snapshot);
}

}  // namespace torch_fl::python
