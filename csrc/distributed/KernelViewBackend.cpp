#include "distributed/KernelViewBackend.h"

#include "distributed/KernelViewWork.h"
#include "aten/views/KernelView.h"

namespace torch_fl::distributed {

KernelViewBackend::KernelViewBackend(c10::intrusive_ptr<c10d::Backend> engine, std::string name)
    : c10d::Backend(engine->getRank(), engine->getSize()), engine_(std::move(engine)), name_(std::move(name)) {
  init();
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::wrap(c10::intrusive_ptr<c10d::Work> work, LentViews views,
                                                       std::vector<at::Tensor> outputs) {
  // An engine that completes a synchronous collective itself returns no work
  // (ProcessGroupNCCL with asyncOp false: the collective ran on the current
  // stream, flagos's, which orders every later use of the memory after it).
  if (!work) return {};
  return c10::make_intrusive<KernelViewWork>(std::move(work), std::move(views), std::move(outputs), getRank());
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  LentViews views("broadcast", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->broadcast(v, opts), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  LentViews views("all_reduce", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->allreduce(v, opts), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  LentViews views("all_reduce_coalesced", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->allreduce_coalesced(v, opts), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  LentViews views("reduce", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->reduce(v, opts), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  LentViews views("all_gather", name_);
  auto in = views.lend(inputs);
  auto out = views.lend(outputs);
  return wrap(engine_->allgather(out, in, opts), std::move(views), outputs.empty() ? inputs : outputs.front());
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  LentViews views("all_gather_into_tensor", name_);
  auto in = views.lend(input);
  auto out = views.lend(output);
  return wrap(engine_->_allgather_base(out, in, opts), std::move(views), {output});
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts) {
  LentViews views("all_gather_coalesced", name_);
  auto in = views.lend(inputs);
  auto out = views.lend(outputs);
  std::vector<at::Tensor> flat;
  for (const auto& list : outputs) flat.insert(flat.end(), list.begin(), list.end());
  return wrap(engine_->allgather_coalesced(out, in, opts), std::move(views), std::move(flat));
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                  std::vector<at::Tensor>& inputs,
                                                                                  const c10d::AllgatherOptions& opts) {
  LentViews views("all_gather_into_tensor_coalesced", name_);
  auto in = views.lend(inputs);
  auto out = views.lend(outputs);
  return wrap(engine_->allgather_into_tensor_coalesced(out, in, opts), std::move(views), outputs);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  LentViews views("gather", name_);
  auto in = views.lend(inputs);
  auto out = views.lend(outputs);
  return wrap(engine_->gather(out, in, opts), std::move(views), outputs.empty() ? inputs : outputs.front());
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  LentViews views("scatter", name_);
  auto out = views.lend(outputs);
  auto in = views.lend(inputs);
  return wrap(engine_->scatter(out, in, opts), std::move(views), outputs);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  LentViews views("reduce_scatter", name_);
  auto out = views.lend(outputs);
  auto in = views.lend(inputs);
  return wrap(engine_->reduce_scatter(out, in, opts), std::move(views), outputs);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  LentViews views("reduce_scatter_tensor", name_);
  auto out = views.lend(output);
  auto in = views.lend(input);
  return wrap(engine_->_reduce_scatter_base(out, in, opts), std::move(views), {output});
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  LentViews views("reduce_scatter_tensor_coalesced", name_);
  auto out = views.lend(outputs);
  auto in = views.lend(inputs);
  return wrap(engine_->reduce_scatter_tensor_coalesced(out, in, opts), std::move(views), outputs);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_split_sizes,
                                                                std::vector<int64_t>& input_split_sizes,
                                                                const c10d::AllToAllOptions& opts) {
  LentViews views("all_to_all_single", name_);
  auto out = views.lend(output);
  auto in = views.lend(input);
  return wrap(engine_->alltoall_base(out, in, output_split_sizes, input_split_sizes, opts), std::move(views),
              {output});
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  LentViews views("all_to_all", name_);
  auto out = views.lend(outputs);
  auto in = views.lend(inputs);
  return wrap(engine_->alltoall(out, in, opts), std::move(views), outputs);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  LentViews views("send", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->send(v, dst_rank, tag), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  LentViews views("recv", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->recv(v, src_rank, tag), std::move(views), tensors);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  LentViews views("recv", name_);
  auto v = views.lend(tensors);
  return wrap(engine_->recvAnysource(v, tag), std::move(views), tensors);
}

c10d::BarrierOptions KernelViewBackend::engine_barrier_options(const c10d::BarrierOptions& opts) const {
  auto engine_opts = opts;
  if (opts.device && opts.device->is_privateuseone()) {
    engine_opts.device = aten::kernel_device_of(*opts.device);
  }
  if (engine_opts.device && engine_opts.device->is_cpu() && !engine_opts.device_ids.empty()) {
    engine_opts.device_ids.clear();  // device indices name flagos (= CUDA) devices; the CPU has none
  }
  return engine_opts;
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::barrier(const c10d::BarrierOptions& opts) {
  // A barrier has no tensors of the caller's: the engine's work is the whole story.
  return engine_->barrier(engine_barrier_options(opts));
}

void KernelViewBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  engine_->monitoredBarrier(engine_barrier_options(opts), wait_all_ranks);
}

c10::intrusive_ptr<c10d::Work> KernelViewBackend::endCoalescing() {
  // The coalesced collectives were issued one by one above, each with its views
  // (which keep the flagos memory alive); the group's work is the engine's.
  return engine_->endCoalescing();
}

void KernelViewBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  engine_->setGroupUid(pg_uid);
}

void KernelViewBackend::eagerConnectSingleDevice(at::Device device) {
  engine_->eagerConnectSingleDevice(device.is_privateuseone() ? aten::kernel_device_of(device) : device);
}

}  // namespace torch_fl::distributed
