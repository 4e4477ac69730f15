#include "distributed/KernelViewWork.h"

#include <ATen/core/jit_type.h>

namespace torch_fl::distributed {

KernelViewWork::KernelViewWork(c10::intrusive_ptr<c10d::Work> engine_work, LentViews views,
                               std::vector<at::Tensor> outputs, int rank)
    : c10d::Work(rank, engine_work->retrieveOpType()),
      engine_(std::move(engine_work)),
      views_(std::make_shared<const LentViews>(std::move(views))),
      outputs_(std::move(outputs)) {}

c10::intrusive_ptr<c10::ivalue::Future> KernelViewWork::getFuture() {
  std::call_once(future_once_, [this] {
    auto engine_future = engine_->getFuture();
    // The engine's future lives on the kernel device (CUDA) or on none (gloo:
    // CPU); one holding flagos tensors must name the flagos device, or marking it
    // complete fails its storage-device check.
    std::vector<c10::Device> devices;
    if (const auto device = views_->device()) devices.push_back(*device);
    future_ = c10::make_intrusive<c10::ivalue::Future>(engine_future->elementType(), std::move(devices));
    // Runs when the engine's work is done, on its thread; on CUDA with the current
    // stream ordered after the engine's stream, so the events markCompleted records
    // on flagos's current stream (CUDA's) follow the collective.
    engine_future->addCallback([future = future_, views = views_](c10::ivalue::Future& done) {
      if (done.hasError()) {
        future->setError(done.exception_ptr());
        return;
      }
      future->markCompleted(views->to_flagos(done.value()));
    });
  });
  return future_;
}

}  // namespace torch_fl::distributed
