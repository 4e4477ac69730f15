// torch_fl._C: the Python entry points of the plugin.  Every function converts
// C++ exceptions to Python ones through HANDLE_TH_ERRORS.
#include <Python.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/csrc/utils/python_strings.h>

#include "aten/routing/KernelDeviceRoutes.h"
#include "aten/routing/RoutedFallback.h"
#include "aten/views/KernelView.h"
#include "aten/kernels/NativeOps.h"
#include "aten/routing/Routing.h"
#include "distributed/Python.h"
#include "python/FlagGemsKernels.h"
#include "python/MemoryControls.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"
#include "runtime/FlagosGenerator.h"
#include "runtime/FlagosHooks.h"
#if defined(FLAGOS_PLATFORM_CUDA)
#include "python/Graphs.h"
#endif

namespace {

using namespace torch_fl;

c10::DeviceIndex device_arg(PyObject* arg) {
  TORCH_CHECK(THPUtils_checkLong(arg), "expected a device index (int)");
  const auto index = THPUtils_unpackLong(arg);
  TORCH_CHECK(index >= 0 && index < 64, "invalid flagos device index ", index);
  runtime::check_device_index(static_cast<c10::DeviceIndex>(index));
  return static_cast<c10::DeviceIndex>(index);
}

PyObject* platform(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return PyUnicode_FromString(runtime::platform_name());
  END_HANDLE_TH_ERRORS
}

PyObject* configuration_error(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return PyUnicode_FromString(runtime::configuration_error().c_str());
  END_HANDLE_TH_ERRORS
}

PyObject* device_count(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return PyLong_FromLong(runtime::device_count());
  END_HANDLE_TH_ERRORS
}

PyObject* current_device(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return PyLong_FromLong(runtime::current_device());
  END_HANDLE_TH_ERRORS
}

PyObject* set_device(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  runtime::set_device(device_arg(arg));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// The native handle of the device's current stream (on the cuda platform its cudaStream_t), for the wrappers
// inductor generates: they fetch it before every kernel launch, and CUDA's wrappers call a C function
// (torch._C._cuda_getCurrentRawStream) where a torch.Stream object built per launch would cost several times
// as much.
PyObject* current_raw_stream(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
  const auto stream = guard.getStream(c10::Device(c10::DeviceType::PrivateUse1, device_arg(arg)));
  return PyLong_FromVoidPtr(guard.getStreamNativeHandle(stream));
  END_HANDLE_TH_ERRORS
}

PyObject* synchronize(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const auto device = device_arg(arg);
  runtime::synchronize_device(device);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* stat_dict(const c10::CachingAllocator::StatArray& stats) {
  const auto& s = stats[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
  PyObject* d = PyDict_New();
  auto put = [&](const char* key, int64_t value) {
    PyObject* v = PyLong_FromLongLong(value);
    PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
  };
  put("current", s.current);
  put("peak", s.peak);
  put("allocated", s.allocated);
  put("freed", s.freed);
  return d;
}

PyObject* memory_stats(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const auto stats = device_allocator().getDeviceStats(device_arg(arg));
  PyObject* result = PyDict_New();
  auto put = [&](const char* key, PyObject* value) {
    PyDict_SetItemString(result, key, value);
    Py_DECREF(value);
  };
  put("allocated_bytes", stat_dict(stats.allocated_bytes));
  put("reserved_bytes", stat_dict(stats.reserved_bytes));
  put("active_bytes", stat_dict(stats.active_bytes));
  put("requested_bytes", stat_dict(stats.requested_bytes));
  put("allocation", stat_dict(stats.allocation));
  put("segment", stat_dict(stats.segment));
  put("num_alloc_retries", PyLong_FromLongLong(stats.num_alloc_retries));
  put("num_ooms", PyLong_FromLongLong(stats.num_ooms));
  return result;
  END_HANDLE_TH_ERRORS
}

PyObject* reset_peak_memory_stats(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  device_allocator().resetPeakStats(device_arg(arg));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* reset_accumulated_memory_stats(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  device_allocator().resetAccumulatedStats(device_arg(arg));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* empty_cache(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  device_allocator().emptyCache();
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* mem_get_info(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const auto [free_bytes, total_bytes] = runtime::memory_info(device_arg(arg));
  return Py_BuildValue("(KK)", static_cast<unsigned long long>(free_bytes),
                       static_cast<unsigned long long>(total_bytes));
  END_HANDLE_TH_ERRORS
}

PyObject* default_generator(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  return THPGenerator_initDefaultGenerator(torch_fl::default_generator(device_arg(arg)));
  END_HANDLE_TH_ERRORS
}

PyObject* set_routing(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  const char* default_provider = nullptr;
  PyObject* table = nullptr;
  int log = 0;
  if (!PyArg_ParseTuple(args, "sO!p", &default_provider, &PyDict_Type, &table, &log)) return nullptr;
  std::unordered_map<std::string, std::string> per_op;
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(table, &pos, &key, &value)) {
    TORCH_CHECK(THPUtils_checkString(key) && THPUtils_checkString(value), "routing entries must be str -> str");
    per_op.emplace(THPUtils_unpackString(key), THPUtils_unpackString(value));
  }
  aten::set_routing(default_provider, per_op, log != 0);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* route(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(THPUtils_checkString(arg), "expected an operator name (str)");
  const auto r = aten::route_for_name(THPUtils_unpackString(arg));
  return Py_BuildValue("(ss)", aten::provider_name(r.requested), aten::provider_name(r.effective));
  END_HANDLE_TH_ERRORS
}

PyObject* string_list(const std::vector<std::string>& names) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(names.size()));
  for (size_t i = 0; i < names.size(); ++i) PyList_SET_ITEM(list, i, PyUnicode_FromString(names[i].c_str()));
  return list;
}

PyObject* provider_names(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return string_list(aten::provider_names());
  END_HANDLE_TH_ERRORS
}

PyObject* available_providers(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return string_list(aten::available_provider_names());
  END_HANDLE_TH_ERRORS
}

PyObject* set_flaggems_ops(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(PyList_Check(arg), "expected a list of operator names");
  std::vector<std::string> ops;
  ops.reserve(PyList_GET_SIZE(arg));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arg); ++i) {
    PyObject* name = PyList_GET_ITEM(arg, i);
    TORCH_CHECK(THPUtils_checkString(name), "operator names must be str");
    ops.push_back(THPUtils_unpackString(name));
  }
  aten::set_flaggems_ops(ops);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// Kernel views for providers written in Python (torch_fl/flaggems): the calls
// are per operator call, so they take and return tensors only.
const at::Tensor& tensor_arg(PyObject* arg) {
  TORCH_CHECK(THPVariable_Check(arg), "expected a tensor, got ", Py_TYPE(arg)->tp_name);
  return THPVariable_Unpack(arg);
}

PyObject* kernel_view(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const auto& t = tensor_arg(arg);
  if (!aten::is_flagos(t)) {
    Py_INCREF(arg);  // not a flagos tensor: itself, so callers can tell by identity
    return arg;
  }
  return THPVariable_Wrap(aten::kernel_view(t));
  END_HANDLE_TH_ERRORS
}

PyObject* adopt_kernel_result(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* result = nullptr;
  int index = 0;
  if (!PyArg_ParseTuple(args, "Oi", &result, &index)) return nullptr;
  const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
  return THPVariable_Wrap(aten::adopt_fresh_result(tensor_arg(result), device));
  END_HANDLE_TH_ERRORS
}

PyObject* sync_from_kernel_view(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* flagos = nullptr;
  PyObject* view = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &flagos, &view)) return nullptr;
  aten::sync_from_kernel_view(tensor_arg(flagos), tensor_arg(view));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// A buffer's sizes or strides, as inductor writes them: a tuple of Python ints, read in place into the
// stack (a std::vector and THPUtils_unpackLongs's general conversion cost more per buffer than the
// allocation's own bookkeeping).
c10::SmallVector<int64_t, 8> int_tuple(PyObject* seq, const char* what) {
  TORCH_CHECK(PyTuple_Check(seq), what, " must be a tuple of ints, got ", Py_TYPE(seq)->tp_name);
  const Py_ssize_t n = PyTuple_GET_SIZE(seq);
  c10::SmallVector<int64_t, 8> values(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(seq, i);
    TORCH_CHECK(THPUtils_checkLong(item), what, " must be a tuple of ints, got ", Py_TYPE(item)->tp_name,
                " at position ", i);
    values[i] = THPUtils_unpackLong(item);
  }
  return values;
}

// empty_strided(size, stride, dtype) on the current flagos device, for the wrappers inductor generates:
// they allocate every buffer of a graph on each call, and for CPU and CUDA buffers call a direct
// allocation (torch._C._dynamo.guards._empty_strided_cuda) that skips torch.empty_strided's argument
// parser and the dispatcher.  This is flagos's: the same kernel the dispatcher would reach, its
// arguments taken without a tuple parser (METH_FASTCALL).
PyObject* empty_strided(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(nargs == 3, "empty_strided takes (size, stride, dtype), got ", nargs, " arguments");
  PyObject* dtype = args[2];
  TORCH_CHECK(THPDtype_Check(dtype), "dtype must be a torch.dtype, got ", Py_TYPE(dtype)->tp_name);
  const auto scalar_type = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  const auto sizes = int_tuple(args[0], "size");
  const auto strides = int_tuple(args[1], "stride");
  TORCH_CHECK(sizes.size() == strides.size(), "size has ", sizes.size(), " dimensions but stride has ",
              strides.size());
  return THPVariable_Wrap(aten::empty_strided(sizes, strides, scalar_type, std::nullopt,
                                              c10::Device(c10::DeviceType::PrivateUse1), std::nullopt));
  END_HANDLE_TH_ERRORS
}

// One backward pass through autograd's worker thread for flagos device `index`, waited for at most
// `timeout_s` seconds without the GIL (torch_fl/_autograd_exit.py says why); True once it ran.  It runs on a
// thread of its own, with no Python state, from C++-only tensors, and its op is a view, which never reaches a
// routed (possibly Python) kernel: dropping this pass needs no Python, wherever it happens.  The bound is
// PyTorch's own for its shutdown (TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT): a worker stuck in a user's hook must
// not hang the exit.
PyObject* drain_autograd_device_thread(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  int index = 0;
  double timeout_s = 0;
  if (!PyArg_ParseTuple(args, "id", &index, &timeout_s)) return nullptr;
  auto ran = std::make_shared<std::promise<void>>();
  auto finished = ran->get_future();
  std::thread([ran, index] {
    try {
      const auto options = at::TensorOptions().device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
      auto leaf = at::empty({1}, options).requires_grad_(true);
      torch::autograd::grad({leaf.view({1})}, {leaf}, {at::empty({1}, options)});
      ran->set_value();
    } catch (...) {
      ran->set_exception(std::current_exception());
    }
  }).detach();
  std::future_status status;
  {
    pybind11::gil_scoped_release no_gil;
    status = finished.wait_for(std::chrono::duration<double>(timeout_s));
  }
  if (status != std::future_status::ready) Py_RETURN_FALSE;
  finished.get();  // the pass's error, if it failed
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// {name: count} as a Python dict.
PyObject* counts_dict(const std::vector<std::pair<std::string, uint64_t>>& counts) {
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  for (const auto& [name, count] : counts) {
    PyObject* value = PyLong_FromUnsignedLongLong(count);
    if (value == nullptr || PyDict_SetItemString(dict, name.c_str(), value) != 0) {
      Py_XDECREF(value);
      Py_DECREF(dict);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return dict;
}

// {function name: calls} of the vendor runtime's API since start or the last reset (empty where the runtime
// counts nothing); with a true argument the counters are reset after reading.
PyObject* runtime_api_calls(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  PyObject* counts = counts_dict(runtime::api_call_counts());
  if (counts != nullptr && PyObject_IsTrue(arg)) runtime::reset_api_call_counts();
  return counts;
  END_HANDLE_TH_ERRORS
}

// Turns the counting of boxed calls (RoutedFallback.h) on or off.
PyObject* count_boxed_calls(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  aten::count_boxed_calls(on != 0);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// {operator: calls} of the boxed path since counting was turned on or last reset; reset after reading if true.
PyObject* boxed_calls(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const int reset = PyObject_IsTrue(arg);
  if (reset < 0) return nullptr;
  return counts_dict(aten::boxed_call_counts(reset != 0));
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"_platform", platform, METH_NOARGS, "Platform this plugin was built for."},
    {"_configuration_error", configuration_error, METH_NOARGS, "Why the runtime is unusable, or ''."},
    {"_device_count", device_count, METH_NOARGS, nullptr},
    {"_current_device", current_device, METH_NOARGS, nullptr},
    {"_set_device", set_device, METH_O, nullptr},
    {"_synchronize", synchronize, METH_O, nullptr},
    {"_current_raw_stream", current_raw_stream, METH_O, "The native handle of a device's current stream."},
    {"_memory_stats", memory_stats, METH_O, nullptr},
    {"_reset_peak_memory_stats", reset_peak_memory_stats, METH_O, nullptr},
    {"_reset_accumulated_memory_stats", reset_accumulated_memory_stats, METH_O, nullptr},
    {"_empty_cache", empty_cache, METH_NOARGS, nullptr},
    {"_mem_get_info", mem_get_info, METH_O, nullptr},
    {"_default_generator", default_generator, METH_O, nullptr},
    {"_set_routing", set_routing, METH_VARARGS, "Install the routing table (default, {op: provider}, log)."},
    {"_route", route, METH_O, "(requested, effective) provider of an operator."},
    {"_provider_names", provider_names, METH_NOARGS, nullptr},
    {"_available_providers", available_providers, METH_NOARGS, nullptr},
    {"_set_flaggems_ops", set_flaggems_ops, METH_O, "The operators the flaggems provider has kernels for."},
    {"_empty_strided", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(empty_strided)), METH_FASTCALL,
     "empty_strided(size, stride, dtype) on the current device."},
    {"_drain_autograd_device_thread", drain_autograd_device_thread, METH_VARARGS,
     "(index, timeout_s): whether autograd's thread for a flagos device ran everything queued before the call."},
    {"_count_boxed_calls", count_boxed_calls, METH_O, "(on): count the calls that take the boxed path, by operator."},
    {"_boxed_calls", boxed_calls, METH_O,
     "(reset) -> {operator: calls} of the boxed path since counting began or the last reset; reset if true."},
    {"_runtime_api_calls", runtime_api_calls, METH_O,
     "(reset) -> {runtime API function: calls} since start or the last reset; reset afterwards if true."},
    {"_kernel_view", kernel_view, METH_O, "The zero-copy kernel-device view of a flagos tensor (others as given)."},
    {"_adopt_kernel_result", adopt_kernel_result, METH_VARARGS,
     "A kernel-device result as a tensor of flagos device `index` (adopted where it can be, else copied)."},
    {"_sync_from_kernel_view", sync_from_kernel_view, METH_VARARGS,
     "After a kernel wrote to kernel_view(flagos): carry a resize or new geometry back to flagos."},
    {"_kernel_view_backend", distributed::py_kernel_view_backend, METH_VARARGS,
     "The flagos process group backend over an engine (torch_fl/distributed)."},
    {"_kernel_view_engine", distributed::py_kernel_view_engine, METH_O, "The engine of a flagos backend, or None."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "torch_fl._C", "The flagos device plugin.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  HANDLE_TH_ERRORS
  torch_fl::register_hooks();
  torch_fl::aten::register_kernel_device_routes();
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr) torch_fl::python::add_memory_controls(module);
  if (module != nullptr) torch_fl::python::add_flaggems_kernels(module);
#if defined(FLAGOS_PLATFORM_CUDA)
  if (module != nullptr) torch_fl::python::add_graph_capture(module);
#endif
  return module;
  END_HANDLE_TH_ERRORS
}
