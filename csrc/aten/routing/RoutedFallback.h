// The boxed kernel behind every operator flagos does not implement natively:
// it asks Routing for the operator's provider and runs it there.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace torch_fl::aten {

void routed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_fl::aten
