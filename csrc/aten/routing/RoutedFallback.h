// The boxed kernel behind every operator flagos does not implement natively:
// it asks Routing for the operator's provider and runs it there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace torch_fl::aten {

void routed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Counting of the calls that take this boxed path, by operator (torch_fl.routing.count_boxed_calls): off
// unless turned on; each boxed call then costs one more relaxed load.  Every other call reaches an unboxed
// kernel (UnboxedKernels.cpp, NativeOps.cpp) or a composite.
void count_boxed_calls(bool on);
// {operator: boxed calls} since counting was turned on or last reset; reset after reading where `reset`.
std::vector<std::pair<std::string, uint64_t>> boxed_call_counts(bool reset);

// Whether `schema` takes a Generator (or Generator?) argument.
bool takes_generator(const c10::FunctionSchema& schema);

// Whether the flagos generator of `device` draws through the kernel device's default generator itself (cuda):
// a seeded random op without a Generator argument then draws from it as called.  Elsewhere (host) the routed
// fallback lends the flagos generator's state to the kernel device's default generator for the call.
bool flagos_generator_is_kernel_default(c10::Device device);

}  // namespace torch_fl::aten
