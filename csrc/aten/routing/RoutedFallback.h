// The boxed kernel behind every operator flagos does not implement natively:
// it asks Routing for the operator's provider and runs it there.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace torch_fl::aten {

void routed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Whether `schema` takes a Generator (or Generator?) argument.
bool takes_generator(const c10::FunctionSchema& schema);

// Whether the flagos generator of `device` draws through the kernel device's default generator itself (cuda):
// a seeded random op without a Generator argument then draws from it as called.  Elsewhere (host) the routed
// fallback lends the flagos generator's state to the kernel device's default generator for the call.
bool flagos_generator_is_kernel_default(c10::Device device);

}  // namespace torch_fl::aten
