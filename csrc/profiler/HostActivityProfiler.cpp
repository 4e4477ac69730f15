// torch.profiler's PrivateUse1 activity on the host platform.
//
// torch.profiler.profile(activities=[..., ProfilerActivity.PrivateUse1]) asks Kineto for the
// activity profiler registered for PrivateUse1 (torch/csrc/profiler/standalone/privateuse1_profiler.h).
// The host runtime runs a stream's work to completion in the submitting thread (csrc/hostrt), so the
// device work of an operator that reaches the device layer is its whole call: the CPU kernel it runs on
// kernel views, and the copies of its results.  One "kernel" activity per such operator -- one that
// touches a flagos tensor and calls no other flagos operator (a composite one, matmul, has its device
// work in the operators it calls) -- linked to its operator through Kineto's correlation ids, so that
// key_averages() gets flagos device-time columns and a Chrome trace shows the kernels under their ops,
// as CUDA's do.
//
// On the cuda platform a flagos kernel is a CUDA kernel and CUPTI already records it under
// ProfilerActivity.CUDA; this profiler is a host-platform one only.
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torch_fl::profiler {

namespace {

using libkineto::ActivityType;

int64_t now_ns() {
  // Kineto's clock for CPU activities (libkineto::timeSinceEpoch): the system clock.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool touches_flagos(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().defined() && value.toTensor().is_privateuseone();
  if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) {
      if (t.defined() && t.is_privateuseone()) return true;
    }
  }
  return value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1;
}

// One operator being timed on this thread.
struct Frame {
  int64_t start_ns;
  bool flagos;
  bool calls_flagos;  // an operator it called touched a flagos tensor
};

struct Kernel {
  std::string name;
  int64_t start_ns;
  int64_t end_ns;
  uint64_t correlation;
  int32_t device;
};

class Session;

std::mutex active_mutex;
Session* active = nullptr;  // the recording session, guarded by active_mutex

thread_local std::vector<Frame> frames;
thread_local std::vector<uint64_t> correlations;

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> lock(active_mutex);
      active = this;
    }
    callback_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_enter, &on_exit).needsInputs(true).needsOutputs(true).scopes(
            {at::RecordScope::FUNCTION}));
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    at::removeCallback(callback_);
    std::lock_guard<std::mutex> lock(active_mutex);
    active = nullptr;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  void pushCorrelationId(uint64_t id) override { correlations.push_back(id); }
  void popCorrelationId() override {
    if (!correlations.empty()) correlations.pop_back();
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_ns, int64_t end_ns) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "flagos");
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    for (const Kernel& k : kernels_) {
      buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL, "flagos " + k.name);
      auto& activity = *buffer_->activities.back();
      activity.startTime = k.start_ns;
      activity.endTime = k.end_ns;
      activity.id = static_cast<int32_t>(k.correlation);
      activity.device = k.device;
      activity.resource = 0;  // the device's default stream: the host runtime's work is in order
      activity.linked = linked(static_cast<int32_t>(k.correlation));
      logger.handleGenericActivity(activity);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, 0, "flagos", "flagos (host runtime)");
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void add(Kernel kernel) {
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    kernels_.push_back(std::move(kernel));
  }

 private:
  static std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
    bool flagos = false;
    for (const auto& input : fn.inputs()) {
      if (touches_flagos(input)) {
        flagos = true;
        break;
      }
    }
    frames.push_back(Frame{now_ns(), flagos, false});
    return nullptr;
  }

  static void on_exit(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
    if (frames.empty()) return;
    const Frame frame = frames.back();
    frames.pop_back();
    const int64_t end = now_ns();
    bool flagos = frame.flagos;
    int32_t device = 0;
    for (const auto& output : fn.outputs()) {
      if (output.isTensor() && output.toTensor().defined() && output.toTensor().is_privateuseone()) {
        flagos = true;
        device = output.toTensor().device().index();
        break;
      }
    }
    if (!flagos) return;
    if (!frames.empty()) frames.back().calls_flagos = true;
    if (frame.calls_flagos) return;
    std::lock_guard<std::mutex> lock(active_mutex);
    if (active == nullptr) return;
    active->add(Kernel{fn.name(), frame.start_ns, end, correlations.empty() ? 0 : correlations.back(), device});
  }

  at::CallbackHandle callback_ = 0;
  std::mutex kernels_mutex_;
  std::vector<Kernel> kernels_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class HostActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& /*types*/,
                                                                 const libkineto::Config& /*config*/) override {
    return std::make_unique<Session>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*start*/, int64_t /*duration*/,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "flagos";
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL};
};

// Registered when the plugin loads, before any profiler session can start.
const bool registered = [] {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::unique_ptr<libkineto::IActivityProfiler>(new HostActivityProfiler()); });
  return true;
}();

}  // namespace

}  // namespace torch_fl::profiler
