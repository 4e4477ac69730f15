// The boxed kernel behind every operator flagos does not implement natively:
// it asks Routing for the operator's provider and runs it there.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace torch_fl::aten {

void routed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Whether seeded random operator `op` (one without a Generator argument) draws from the flagos generator of
// `device` when the kernel device's kernel runs it as called: where that generator's engine is the kernel
// device's default generator (cuda).  Elsewhere the routed fallback lends the engine's state to the kernel
// device's default generator for the call (host).  False for an operator that takes a Generator argument:
// the fallback substitutes the flagos generator's engine for it.
bool kernel_draws_from_flagos_generator(const c10::OperatorHandle& op, c10::Device device);

}  // namespace torch_fl::aten
