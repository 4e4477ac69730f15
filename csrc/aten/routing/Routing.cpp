#include "aten/routing/Routing.h"

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include <c10/util/Exception.h>

namespace torch_fl::aten {

namespace {

struct Table {
  Provider default_provider = Provider::Host;
  std::unordered_map<std::string, Provider> per_op;
};

std::atomic<bool> log_flag{false};

std::shared_mutex table_mutex;
Table& table() {
  static Table t;
  return t;
}
// Guarded by table_mutex, like the table.
std::unordered_set<std::string>& flaggems_ops() {
  static std::unordered_set<std::string> ops;
  return ops;
}
// Bumped on every set_routing(); per-thread caches compare against it.
std::atomic<uint64_t> generation{1};

constexpr Provider kAll[] = {Provider::Host, Provider::Cpu, Provider::Cuda, Provider::FlagGems};

// Callers hold table_mutex (FlagGems' availability is its operator set).
bool available(Provider provider) {
  switch (provider) {
    case Provider::Cpu:
      return true;
#if defined(FLAGOS_PLATFORM_HOST)
    case Provider::Host:
      return true;
#endif
#if defined(FLAGOS_PLATFORM_CUDA)
    case Provider::Cuda:
      return true;
#endif
    case Provider::FlagGems:
      return !flaggems_ops().empty();
    default:
      return false;
  }
}

// The provider that runs PyTorch's kernels on kernel views on this platform:
// where an operator FlagGems does not offer goes.
constexpr Provider kernel_device_provider() {
#if defined(FLAGOS_PLATFORM_CUDA)
  return Provider::Cuda;
#elif defined(FLAGOS_PLATFORM_HOST)
  return Provider::Host;
#else
  return Provider::Cpu;
#endif
}

Provider parse(const std::string& name) {
  for (auto p : kAll) {
    if (name == provider_name(p)) return p;
  }
  std::string known;
  for (const auto& n : provider_names()) known += (known.empty() ? "" : ", ") + n;
  TORCH_CHECK(false, "unknown flagos provider '", name, "'; use one of: ", known);
}

std::string strip_namespace(const std::string& name) {
  return name.rfind("aten::", 0) == 0 ? name.substr(6) : name;
}

// PyTorch runs a functional structured op (add.Tensor) on a backend without
// its own kernel by allocating the output and calling the out= variant
// (add.out), so that is the op the fallback sees.  An entry for the
// functional overload therefore also routes its out= variant: the overload of
// the same name whose arguments are the out= variant's minus the outputs.
bool is_functional_twin(const c10::FunctionSchema& out_variant, const c10::FunctionSchema& candidate) {
  std::vector<const c10::Argument*> inputs;
  for (const auto& a : out_variant.arguments()) {
    if (!a.is_out()) inputs.push_back(&a);
  }
  const auto& args = candidate.arguments();
  if (args.size() != inputs.size()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != inputs[i]->name() || *args[i].type() != *inputs[i]->type()) return false;
  }
  return true;
}

std::optional<Provider> functional_entry(const Table& t, const c10::FunctionSchema* schema,
                                         const std::string& base_name) {
  if (schema == nullptr || !schema->is_mutable()) return std::nullopt;
  const std::string prefix = base_name + ".";
  for (const auto& [op, provider] : t.per_op) {
    if (op.rfind(prefix, 0) != 0) continue;
    const auto candidate =
        c10::Dispatcher::singleton().findSchema({"aten::" + base_name, op.substr(prefix.size())});
    if (candidate.has_value() && is_functional_twin(*schema, candidate->schema())) return provider;
  }
  return std::nullopt;
}

Route resolve(const std::string& full_name, const std::string& base_name, const c10::FunctionSchema* schema) {
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  const auto& t = table();
  Provider requested = t.default_provider;
  bool named = true;  // a routing entry names this operator (not the default, not its functional twin)
  if (auto it = t.per_op.find(full_name); it != t.per_op.end()) {
    requested = it->second;
  } else if (auto twin = functional_entry(t, schema, base_name)) {
    requested = *twin;
    named = false;
  } else if (auto base = t.per_op.find(base_name); base != t.per_op.end()) {
    requested = base->second;
  } else {
    named = false;
  }
  if (requested == Provider::FlagGems) {
    if (flaggems_ops().count(full_name) != 0) return Route{requested, requested};
    // `default = flaggems` (and FLAGOS_USE_FLAGGEMS) means FlagGems where it
    // offers the op: the others take the kernel device's provider as their own.
    if (!named) return Route{kernel_device_provider(), kernel_device_provider()};
    return Route{requested, kernel_device_provider()};
  }
  return Route{requested, available(requested) ? requested : Provider::Cpu};
}

}  // namespace

std::string short_op_name(const c10::OperatorName& name) {
  const std::string base = strip_namespace(name.name);
  return name.overload_name.empty() ? base : base + "." + name.overload_name;
}

const char* provider_name(Provider provider) {
  switch (provider) {
    case Provider::Host: return "host";
    case Provider::Cpu: return "cpu";
    case Provider::Cuda: return "cuda";
    case Provider::FlagGems: return "flaggems";
  }
  return "?";
}

std::vector<std::string> provider_names() {
  std::vector<std::string> names;
  for (auto p : kAll) names.emplace_back(provider_name(p));
  return names;
}

std::vector<std::string> available_provider_names() {
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  std::vector<std::string> names;
  for (auto p : kAll) {
    if (available(p)) names.emplace_back(provider_name(p));
  }
  return names;
}

void set_routing(const std::string& default_provider, const std::unordered_map<std::string, std::string>& per_op,
                 bool log_dispatch) {
  Table fresh;
  fresh.default_provider = parse(default_provider);
  for (const auto& [op, provider] : per_op) fresh.per_op[strip_namespace(op)] = parse(provider);
  {
    std::unique_lock<std::shared_mutex> lock(table_mutex);
    table() = std::move(fresh);
  }
  log_flag.store(log_dispatch);
  generation.fetch_add(1);
}

void set_flaggems_ops(const std::vector<std::string>& ops) {
  std::unordered_set<std::string> fresh;
  for (const auto& op : ops) fresh.insert(strip_namespace(op));
  {
    std::unique_lock<std::shared_mutex> lock(table_mutex);
    flaggems_ops() = std::move(fresh);
  }
  generation.fetch_add(1);
}

Route route_for_name(const std::string& op_name) {
  const auto name = strip_namespace(op_name);
  const auto dot = name.find('.');
  const auto base = name.substr(0, dot);
  const auto handle =
      c10::Dispatcher::singleton().findSchema({"aten::" + base, dot == std::string::npos ? "" : name.substr(dot + 1)});
  return resolve(name, base, handle.has_value() ? &handle->schema() : nullptr);
}

Route route_for(const c10::OperatorHandle& op) {
  struct Cached {
    uint64_t generation;
    Route route;
  };
  // Keyed by the operator's schema, which lives as long as the operator.
  thread_local std::unordered_map<const void*, Cached> cache;
  const uint64_t now = generation.load(std::memory_order_acquire);
  const void* key = &op.schema();
  if (auto it = cache.find(key); it != cache.end() && it->second.generation == now) return it->second.route;
  const auto& name = op.schema().operator_name();
  Route route = resolve(short_op_name(name), strip_namespace(name.name), &op.schema());
  // An op without a CUDA kernel cannot take the cuda provider: explicit CPU fallback.
  if (route.effective == Provider::Cuda && !op.hasComputedKernelForDispatchKey(c10::DispatchKey::CUDA)) {
    route.effective = Provider::Cpu;
  }
  cache[key] = Cached{now, route};
  return route;
}

bool log_dispatch_enabled() { return log_flag.load(std::memory_order_relaxed); }

Route RouteSlot::get(const c10::OperatorHandle& op) {
  const uint64_t now = generation.load(std::memory_order_acquire);
  const uint64_t packed = packed_.load(std::memory_order_relaxed);
  if ((packed >> 16) == now) {
    return Route{static_cast<Provider>(packed & 0xff), static_cast<Provider>((packed >> 8) & 0xff)};
  }
  const Route route = route_for(op);
  packed_.store((now << 16) | (uint64_t{static_cast<uint8_t>(route.effective)} << 8) |
                    static_cast<uint8_t>(route.requested),
                std::memory_order_relaxed);
  return route;
}

}  // namespace torch_fl::aten
