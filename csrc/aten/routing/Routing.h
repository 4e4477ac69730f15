// Which kernel provider runs each operator on flagos.
//
// The table (default provider + per-op entries, `add.Tensor` for one overload or
// `add` for all) is parsed and validated in Python (torch_fl/routing.py) from
// torch_fl/configs/backends_<platform>.conf, FLAGOS_BACKEND_CONFIG and
// FLAGOS_OP_<op>, then installed here.  Resolution is cached per operator.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_fl::aten {

enum class Provider : uint8_t {
  Host,      // PyTorch's CPU kernel on the device memory in place (host-addressable runtimes)
  Cpu,       // copy inputs to CPU, run PyTorch's CPU kernel, copy results back
  Cuda,      // PyTorch's CUDA kernel on a zero-copy CUDA view (cuda platform)
  FlagGems,  // FlagGems' kernels on kernel views, registered per operator from Python (torch_fl/flaggems)
};

struct Route {
  Provider requested;
  Provider effective;  // differs when the requested provider cannot run here
};

const char* provider_name(Provider provider);
// Every provider name the routing files may use.
std::vector<std::string> provider_names();
// The providers this build can run.
std::vector<std::string> available_provider_names();

// The operators ("add.Tensor", "abs") the flaggems provider has a kernel for in
// this process; it is available while there is one.  An operator routed to
// flaggems that is not among them runs on the kernel device's provider (cuda,
// host): visibly where a routing entry names the operator, quietly where the
// request comes from `default = flaggems` (FlagGems where it offers the op).
void set_flaggems_ops(const std::vector<std::string>& ops);

// Installs a new table.  Throws c10::Error naming an unknown provider.
void set_routing(const std::string& default_provider, const std::unordered_map<std::string, std::string>& per_op,
                 bool log_dispatch);

// "add.Tensor" for aten::add.Tensor, "abs" for aten::abs: the names of the routing table and of the
// generated operator tables.  Operators of other namespaces keep theirs ("ns::op.overload").
std::string short_op_name(const c10::OperatorName& name);

// The route for an operator, as dispatch uses it ("add.Tensor", "aten::add.Tensor" or "add").
Route route_for_name(const std::string& op_name);
Route route_for(const c10::OperatorHandle& op);
bool log_dispatch_enabled();

// route_for(op), remembered by a caller that serves one operator (a static of an unboxed kernel): one atomic
// load per call while the routing table is unchanged, instead of route_for()'s lookup by operator.
class RouteSlot {
 public:
  Route get(const c10::OperatorHandle& op);

 private:
  // The routing generation it was resolved at (high 48 bits) and the route (low 16 bits), in one word so that
  // a reader never sees a route with another generation's stamp.
  std::atomic<uint64_t> packed_{0};
};

}  // namespace torch_fl::aten
