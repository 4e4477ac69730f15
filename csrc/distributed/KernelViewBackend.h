// The c10d backend of the flagos device: every collective runs in an existing
// engine (gloo on the host platform, NCCL on the cuda platform) on kernel views of
// the flagos tensors (aten/KernelView.h), never in a collective written here.
//
// On the cuda platform a flagos stream is the CUDA stream of the same id, so
// NCCL's usual ordering applies unchanged: its stream waits on the current
// stream at launch, and wait() makes the current stream wait on it.
#pragma once

#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/LentViews.h"

namespace torch_fl::distributed {

class KernelViewBackend final : public c10d::Backend {
 public:
  // `name`: the name this backend is registered under with torch.distributed.
  KernelViewBackend(c10::intrusive_ptr<c10d::Backend> engine, std::string name);

  const std::string getBackendName() const override { return name_; }
  const c10::intrusive_ptr<c10d::Backend>& engine() const { return engine_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // Everything else is the engine's.
  bool supportsCoalescing() const override { return engine_->supportsCoalescing(); }
  void startCoalescing() override { engine_->startCoalescing(); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setSequenceNumberForGroup() override { engine_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return engine_->getSequenceNumberForGroup(); }
  void setGroupUid(const std::string& pg_uid) override;
  void setTimeout(std::chrono::milliseconds timeout) override { engine_->setTimeout(timeout); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return engine_->getBackendOptions(); }
  void eagerConnectSingleDevice(at::Device device) override;
  c10d::ErrorType getError() override { return engine_->getError(); }
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override {
    engine_->registerOnCompletionHook(std::move(hook));
  }
  void waitForPendingWorks() override { engine_->waitForPendingWorks(); }
  void enableCollectivesTiming() override { engine_->enableCollectivesTiming(); }
  void abort() override { engine_->abort(); }
  void shutdown() override { engine_->shutdown(); }

 private:
  c10::intrusive_ptr<c10d::Work> wrap(c10::intrusive_ptr<c10d::Work> work, LentViews views,
                                      std::vector<at::Tensor> outputs);
  // The options of a barrier for the engine: a flagos device named as the kernel device.
  c10d::BarrierOptions engine_barrier_options(const c10d::BarrierOptions& opts) const;

  c10::intrusive_ptr<c10d::Backend> engine_;
  std::string name_;
};

}  // namespace torch_fl::distributed
