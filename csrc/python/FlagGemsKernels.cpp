// The flaggems provider's kernels (FlagGemsKernels.h).
#include "python/FlagGemsKernels.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include "aten/views/CallViews.h"
#include "aten/views/KernelView.h"
#include "runtime/DeviceRuntime.h"

namespace torch_fl::python {

namespace py = pybind11;

namespace {

// FlagGems functions running on this thread: a call that reaches a flagos kernel again from inside one takes
// the kernel device's own kernel (the Python kernel reads and counts the same depth, _flaggems_depth).
thread_local int flaggems_depth = 0;

struct Depth {
  Depth() { ++flaggems_depth; }
  ~Depth() { --flaggems_depth; }
  Depth(const Depth&) = delete;
  Depth& operator=(const Depth&) = delete;
};

// The arguments on `stack` as Python positional and keyword arguments, as torch.library hands them to a
// Python kernel: keyword-only arguments by name, and trailing arguments equal to their default left out.
std::pair<py::tuple, py::dict> python_arguments(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                                                size_t first) {
  const auto& arguments = schema.arguments();
  const auto is_default = [&](size_t i) {
    const auto& d = arguments[i].default_value();
    return d.has_value() && *d == stack[first + i];
  };
  size_t keyword_first = arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].kwarg_only()) {
      keyword_first = i;
      break;
    }
  }
  size_t positional_end = keyword_first;
  while (positional_end > 0 && is_default(positional_end - 1)) --positional_end;
  py::tuple args(positional_end);
  for (size_t i = 0; i < positional_end; ++i) args[i] = torch::jit::toPyObject(stack[first + i]);
  py::dict kwargs;
  for (size_t i = keyword_first; i < arguments.size(); ++i) {
    if (!is_default(i)) kwargs[py::str(arguments[i].name())] = torch::jit::toPyObject(stack[first + i]);
  }
  return {std::move(args), std::move(kwargs)};
}

// Replaces the arguments on `stack` by the results of `out`, a Python kernel's return value.
void push_results(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t first, const py::object& out) {
  const auto& returns = schema.returns();
  stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
  if (returns.size() == 1) {
    stack.push_back(torch::jit::toIValue(out, returns[0].real_type()));
    return;
  }
  if (returns.empty()) return;
  const auto results = out.cast<py::sequence>();
  TORCH_CHECK(results.size() == returns.size(), schema.name(), ": the kernel returned ", results.size(),
              " results, expected ", returns.size());
  for (size_t i = 0; i < returns.size(); ++i) stack.push_back(torch::jit::toIValue(results[i], returns[i].real_type()));
}

bool plain_arguments(const torch::jit::Stack& stack, size_t first, size_t count, bool need_contiguous) {
  for (size_t i = first; i < first + count; ++i) {
    const auto& v = stack[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (need_contiguous && aten::is_flagos(t) && !t.is_contiguous()) return false;
    } else if (v.isList() || (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)) {
      return false;
    }
  }
  return true;
}

// One operator's kernel.  The fast path, for calls whose arguments are tensors and scalars: kernel views made
// here, FlagGems' function called once, results mapped back here.  Everything else (lists of tensors, a size
// rule, an adapter, the dispatch log, a non-contiguous operand on cuda, a call from inside FlagGems) goes to the
// Python kernel (torch_fl/flaggems/kernels.py), which handles every case.
class Kernel final : public c10::OperatorKernel {
 public:
  Kernel(py::object function, py::object python_kernel, std::vector<bool> written, std::vector<bool> fresh)
      : function_(function.is_none() ? py::object() : std::move(function)), python_kernel_(std::move(python_kernel)),
        written_(std::move(written)), fresh_(std::move(fresh)) {}

  ~Kernel() override {
    if (!Py_IsInitialized()) {  // at exit, after the interpreter: leave the objects to it
      function_.release();
      python_kernel_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    function_ = py::object();
    python_kernel_ = py::object();
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t count = schema.arguments().size();
    const size_t first = stack->size() - count;
    const bool on_cuda = runtime::kernel_device_type() == c10::DeviceType::CUDA;
    if (!function_ || flaggems_depth > 0 || !plain_arguments(*stack, first, count, on_cuda)) {
      call_python(python_kernel_, schema, *stack, first);
      return;
    }
    aten::CallViews views;
    for (size_t i = 0; i < count; ++i) {
      auto& v = (*stack)[first + i];
      if (v.isTensor() && aten::is_flagos(v.toTensor())) v = views.add_owned(std::move(v).toTensor(), written_[i]);
    }
    const c10::Device device = views.device().value_or(
        c10::Device(c10::DeviceType::PrivateUse1, runtime::current_device()));
    {
      py::gil_scoped_acquire gil;
      auto [args, kwargs] = python_arguments(schema, *stack, first);
      py::object out;
      try {
        const Depth depth;
        out = function_(*args, **kwargs);
      } catch (py::error_already_set& refusal) {
        // FlagGems refused the call: the kernel device's own kernel runs it on the same views; the Python
        // kernel warns once per operator (or logs) and names the refusal.
        py::object report = python_kernel_.attr("_report");
        py::object reason = refusal.value();
        {
          py::gil_scoped_release release;
          op.redispatchBoxed(aten::kernel_dispatch_keys(), stack);
        }
        report(reason, 2);
        finish(schema, *stack, views, device);
        return;
      }
      push_results(schema, *stack, first, out);
    }
    finish(schema, *stack, views, device);
  }

 private:
  static void call_python(const py::object& kernel, const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                          size_t first) {
    py::gil_scoped_acquire gil;
    auto [args, kwargs] = python_arguments(schema, stack, first);
    push_results(schema, stack, first, kernel(*args, **kwargs));
  }

  // Results back on flagos: an in-place or out= result is the flagos argument written; a fresh one is adopted,
  // or copied where FlagGems handed back (a view of) an input, whose memory is a flagos tensor's.
  void finish(const c10::FunctionSchema& schema, torch::jit::Stack& stack, aten::CallViews& views,
              c10::Device device) const {
    views.sync_written();
    const size_t returns_first = stack.size() - schema.returns().size();
    for (size_t j = returns_first; j < stack.size(); ++j) {
      auto& r = stack[j];
      if (!r.isTensor()) continue;
      at::Tensor t = std::move(r).toTensor();
      r = fresh_[j - returns_first] ? aten::adopt_fresh_result(std::move(t), device)
                                    : aten::is_flagos(t) ? t : views.to_flagos(std::move(t), device);
    }
  }

  py::object function_;
  py::object python_kernel_;
  std::vector<bool> written_;  // per argument: the schema marks it written
  std::vector<bool> fresh_;    // per return: a new tensor by the schema (no alias of an argument)
};

// The registrations of one set of kernels; destroying it (close()) unregisters them.
class Library {
 public:
  Library() : library_(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                                          __FILE__, __LINE__)) {}

  void impl(const std::string& op, py::object function, py::object python_kernel) {
    torch::PyWarningHandler warnings;  // the dispatcher's note that a kernel is replaced, as a Python warning
    TORCH_CHECK(library_ != nullptr, "this set of flaggems kernels is closed");
    const auto dot = op.find('.');
    const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(
        ("aten::" + op.substr(0, dot)).c_str(), dot == std::string::npos ? "" : op.substr(dot + 1).c_str());
    const auto& schema = handle.schema();
    std::vector<bool> written;
    for (const auto& a : schema.arguments()) written.push_back(a.alias_info() != nullptr && a.alias_info()->isWrite());
    std::vector<bool> fresh;
    for (const auto& r : schema.returns()) fresh.push_back(r.alias_info() == nullptr);
    library_->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(
                                   std::move(function), std::move(python_kernel), std::move(written),
                                   std::move(fresh))));
  }

  void close() {
    py::gil_scoped_release release;  // kernels in flight on other threads may need the GIL to finish
    library_.reset();
  }

 private:
  std::unique_ptr<torch::Library> library_;
};

}  // namespace

void add_flaggems_kernels(PyObject* module) {
  auto m = py::reinterpret_borrow<py::module>(module);
  py::class_<Library>(m, "_FlagGemsLibrary")
      .def(py::init<>())
      .def("impl", &Library::impl, py::arg("op"), py::arg("function"), py::arg("python_kernel"),
           "Register the flagos kernel of aten operator `op` (add.Tensor): FlagGems' `function` on plain calls "
           "(None: never), `python_kernel` on every other")
      .def("close", &Library::close, "Unregister every kernel of this set");
  m.def("_flaggems_depth", [](int delta) { return flaggems_depth += delta; },
        "Add `delta` to this thread's count of FlagGems calls in progress, and return it");
}

}  // namespace torch_fl::python
