// The work of one collective run by an engine on kernel views, seen from the
// flagos side: waiting, completion and errors are the engine's own; results and
// the future's value are the flagos tensors.
#pragma once

#include <mutex>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "distributed/LentViews.h"

namespace torch_fl::distributed {

class KernelViewWork final : public c10d::Work {
 public:
  KernelViewWork(c10::intrusive_ptr<c10d::Work> engine_work, LentViews views, std::vector<at::Tensor> outputs,
                 int rank);

  bool isCompleted() override { return engine_->isCompleted(); }
  bool isSuccess() const override { return engine_->isSuccess(); }
  std::exception_ptr exception() const override { return engine_->exception(); }
  int sourceRank() const override { return engine_->sourceRank(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override { engine_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override { return engine_->wait(timeout); }
  void blockCurrentStream() override { engine_->blockCurrentStream(); }
  void abort() override { engine_->abort(); }
  float getDuration() const override { return engine_->getDuration(); }
  uint64_t getSequencenumber() const override { return engine_->getSequencenumber(); }

  // A future on the flagos device, completed with the engine's value mapped back
  // to the flagos tensors (DDP's reducer reads its bucket from it).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override { return engine_->getFutureResult(); }

  const c10::intrusive_ptr<c10d::Work>& engine_work() const { return engine_; }

 private:
  c10::intrusive_ptr<c10d::Work> engine_;
  std::shared_ptr<const LentViews> views_;
  std::vector<at::Tensor> outputs_;
  std::once_flag future_once_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_fl::distributed
