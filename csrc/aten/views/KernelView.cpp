#include "aten/views/KernelView.h"

#include <array>
#include <cstdint>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/InferenceMode.h>

#include "aten/kernels/NativeOps.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"

namespace torch_fl::aten {

c10::DispatchKeySet kernel_dispatch_keys() {
  static const c10::DispatchKeySet keys(
      c10::computeDispatchKey(std::nullopt, c10::kStrided, runtime::kernel_device_type()));
  return keys;
}

c10::Device kernel_device_of(c10::Device flagos_device) {
  const auto type = runtime::kernel_device_type();
  return type == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(type, flagos_device.index());
}

void copy_lazy_bits(const at::Tensor& from, const at::Tensor& to) {
  // Conjugate and negative views are a bit on the tensor, resolved lazily by
  // the kernels that see it (mm, copy_, ...): a view without them would read
  // conj(x) as x.
  if (from.is_conj()) to._set_conj(true);
  if (from.is_neg()) to._set_neg(true);
}

at::Tensor kernel_view(const at::Tensor& flagos_tensor) {
  const c10::Device where = kernel_device_of(flagos_tensor.device());
  if (flagos_tensor._is_zerotensor()) {
    // An efficient zero tensor has no memory: the kernel reads zeros.
    return at::zeros({}, flagos_tensor.options().device(where)).expand(flagos_tensor.sizes());
  }
  const auto& storage = flagos_tensor.storage();
  return kernel_view_sharing(
      flagos_tensor, c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                                  c10::DataPtr(const_cast<void*>(storage.data()), where),
                                  c10::GetAllocator(where.type()), /*resizable=*/true));
}

namespace {

// A kernel view's TensorImpl.  Its geometry is always a flagos tensor's, which has already worked out what
// TensorImpl derives from sizes and strides (element count, contiguity in each memory format, dense or
// not): the view takes those along with the sizes and strides instead of recomputing them, as
// set_sizes_and_strides would.  That recomputation is a large body of code, run for most arguments (a view
// is rebound to the next call's tensors, whose shapes differ from the last ones'), and a training step runs
// so much other code between two calls that each call fetched it into the instruction cache again.
struct KernelViewImpl final : c10::TensorImpl {
  using c10::TensorImpl::TensorImpl;

  void take_geometry(const c10::TensorImpl& source) {
    if (C10_UNLIKELY(source.has_symbolic_sizes_strides())) {
      set_sizes_and_strides(source.sym_sizes(), source.sym_strides(), source.sym_storage_offset());
      return;
    }
    // Everything read before anything is written: the compiler then knows the sizes are plain throughout and
    // leaves out the accessors' branches for symbolic ones (a write to this TensorImpl could otherwise change
    // what `source` holds, for all it can tell).
    const bool contiguous = source.is_contiguous_default(c10::MemoryFormat::Contiguous);
    const bool channels_last_contiguous = source.is_contiguous_default(c10::MemoryFormat::ChannelsLast);
    const bool channels_last_3d_contiguous = source.is_contiguous_default(c10::MemoryFormat::ChannelsLast3d);
    const bool channels_last = source.is_strides_like_default(c10::MemoryFormat::ChannelsLast);
    const bool channels_last_3d = source.is_strides_like_default(c10::MemoryFormat::ChannelsLast3d);
    const bool dense = source.is_non_overlapping_and_dense_default();
    const int64_t offset = source.storage_offset();
    const int64_t numel = source.numel();
    const c10::IntArrayRef sizes = source.sizes();
    const c10::IntArrayRef strides = source.strides();
    sizes_and_strides_.set_sizes(sizes);
    sizes_and_strides_.set_strides(strides);
    storage_offset_ = offset;
    numel_ = numel;
    is_contiguous_ = contiguous;
    is_channels_last_contiguous_ = channels_last_contiguous;
    is_channels_last_3d_contiguous_ = channels_last_3d_contiguous;
    is_channels_last_ = channels_last;
    is_channels_last_3d_ = channels_last_3d;
    is_non_overlapping_and_dense_ = dense;
  }
};

}  // namespace

at::Tensor kernel_view_sharing(const at::Tensor& flagos_tensor, const c10::Storage& kernel_storage) {
  auto view = at::detail::make_tensor<KernelViewImpl>(c10::Storage(kernel_storage), kernel_dispatch_keys(),
                                                      flagos_tensor.dtype());
  static_cast<KernelViewImpl*>(view.unsafeGetTensorImpl())->take_geometry(*flagos_tensor.unsafeGetTensorImpl());
  copy_lazy_bits(flagos_tensor, view);
  return view;
}

namespace {

// The thread's cached kernel views.  A slot's key (the address of a flagos TensorImpl) is only ever
// compared, never dereferenced, so a key whose tensor is gone is harmless: a new tensor at the same
// address gets the old view only if that view matches it in every field it carries, and then it is
// exactly the view kernel_view() would make.  The version counter plays no part: a view aliases the
// flagos memory, so writes are seen through it; only what the view holds by value can go stale.
struct CachedView {
  const c10::TensorImpl* owner = nullptr;
  at::Tensor view;
};
// A few views taken in turn by the arguments of the last calls.  Most arguments are fresh tensors (each
// op's input is the last op's result), read by the next op or two and then saved or dropped; the rest
// (weights, saved activations) are read once per step.  Either way a view from here is an object the last
// calls touched, still in the processor's cache, where a view kept per tensor was last touched long before:
// its lines missed the cache in the view layer and again in the kernel that reads it, which cost a training
// step more than the few instructions that rebinding a recent view adds (docs/performance.md, "recent
// views").  Eight cover the tensor arguments of an ordinary call and those of the next calls that reuse them.
constexpr size_t kRecentViews = 8;
// A direct-mapped table for calls with more tensor arguments than that (the foreach ops of an optimizer
// step, which visit the same lists every step), keyed by the TensorImpl's address.  4096 slots: an AdamW
// step visits four lists of a model's tensors (parameters, gradients, two states: 576 for a 12-layer
// encoder) again and again; at 512 slots most of them shared a slot with another and were rebuilt on every
// visit (benchmarks/device/optimizer_working_set_host.py).
constexpr int kSlotBits = 12;
struct ThreadViews {
  std::array<CachedView, kRecentViews> recent;
  size_t next_recent = 0;  // the recent view to take next
  std::array<CachedView, size_t{1} << kSlotBits> table;
};
// The calling thread's views.  The thread_local itself is a plain pointer: a thread_local object with a
// constructor is reached through an initialisation check and two or three TLS lookups on every use, which this
// shared library would pay per kernel argument.
thread_local ThreadViews* thread_views_ptr = nullptr;

// Frees a thread's views when the thread ends; touched only when the views are made.
struct ThreadViewsOwner {
  ~ThreadViewsOwner() {
    delete thread_views_ptr;
    thread_views_ptr = nullptr;
  }
};

ThreadViews& thread_views() {
  if (C10_LIKELY(thread_views_ptr != nullptr)) return *thread_views_ptr;
  static thread_local ThreadViewsOwner owner;
  (void)owner;
  thread_views_ptr = new ThreadViews();
  return *thread_views_ptr;
}

CachedView& slot_of(ThreadViews& views, const c10::TensorImpl* impl) {
  // Fibonacci hashing of the address (TensorImpls are 16-byte aligned).
  const auto h = (reinterpret_cast<uintptr_t>(impl) >> 4) * uint64_t{0x9E3779B97F4A7C15};
  return views.table[h >> (64 - kSlotBits)];
}

// a == b, element by element: std::equal on int64_t lists becomes a memcmp call through the PLT, which costs
// more than the comparison itself for the few dimensions a tensor has.
bool same_values(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

bool still_matches(const at::Tensor& view, const at::Tensor& flagos_tensor) {
  const c10::TensorImpl& v = *view.unsafeGetTensorImpl();
  const c10::TensorImpl& t = *flagos_tensor.unsafeGetTensorImpl();
  const c10::StorageImpl& vs = *v.unsafe_storage().unsafeGetStorageImpl();
  const c10::StorageImpl& ts = *t.unsafe_storage().unsafeGetStorageImpl();
  return vs.data_ptr().get() == ts.data_ptr().get() && vs.nbytes() == ts.nbytes() && v.dtype() == t.dtype() &&
         v.storage_offset() == t.storage_offset() && same_values(v.sizes(), t.sizes()) &&
         same_values(v.strides(), t.strides()) &&
         v.is_conj() == t.is_conj() && v.is_neg() == t.is_neg();
}

// Makes `view`, a slot's view that nothing else holds, kernel_view(flagos_tensor) in place; false where it
// cannot (defined below, beside the other in-place rewrites).
bool rebind_unshared_view(const at::Tensor& view, const at::Tensor& flagos_tensor);

// `entry` takes over `flagos_tensor`: its view objects rebound in place where it can (a TensorImpl and a
// StorageImpl built and freed per argument cost more than the rest of the view layer's work; callgrind over
// a chain of small ops), a new view otherwise.
const at::Tensor& take_over(CachedView& entry, const at::Tensor& flagos_tensor) {
  if (!entry.view.defined() || !rebind_unshared_view(entry.view, flagos_tensor)) entry.view = kernel_view(flagos_tensor);
  entry.owner = flagos_tensor.unsafeGetTensorImpl();
  return entry.view;
}

}  // namespace

at::Tensor cached_kernel_view(const at::Tensor& flagos_tensor) {
  const c10::TensorImpl* impl = flagos_tensor.unsafeGetTensorImpl();
  // Zero tensors get a fresh expanded zero each time; tensors with symbolic
  // sizes or without storage are not the plain tensors this serves.
  if (flagos_tensor._is_zerotensor() || impl->has_symbolic_sizes_strides() || !impl->unsafe_storage()) {
    return kernel_view(flagos_tensor);
  }
  ThreadViews& views = thread_views();
  for (CachedView& recent : views.recent) {
    if (recent.owner == impl && still_matches(recent.view, flagos_tensor)) return recent.view;
  }
  // A recent view that this call's earlier arguments do not hold takes the tensor, whether or not the table
  // has a view of it: the table's would be cold.
  for (size_t tries = 0; tries < kRecentViews; ++tries) {
    CachedView& recent = views.recent[views.next_recent];
    views.next_recent = (views.next_recent + 1) % kRecentViews;
    if (!recent.view.defined() || held_only_by_caller(recent.view)) return take_over(recent, flagos_tensor);
  }
  // Every recent view is this call's: a call with many tensor arguments.
  CachedView& slot = slot_of(views, impl);
  if (slot.owner == impl && still_matches(slot.view, flagos_tensor)) return slot.view;
  return take_over(slot, flagos_tensor);
}

void forget_kernel_view(const at::Tensor& flagos_tensor) {
  if (thread_views_ptr == nullptr) return;  // this thread has made no views
  const c10::TensorImpl* impl = flagos_tensor.unsafeGetTensorImpl();
  ThreadViews& views = *thread_views_ptr;
  for (CachedView& cached : views.recent) {
    if (cached.owner == impl) cached = CachedView{};
  }
  CachedView& slot = slot_of(views, impl);
  if (slot.owner == impl) slot = CachedView{};
}

void sync_from_kernel_view(const at::Tensor& flagos_tensor, const at::Tensor& view) {
  const auto& storage = flagos_tensor.storage();
  if (view.storage().data() != storage.data()) {
    // The kernel resized the view: its bytes now live in memory it allocated.
    auto* impl = storage.unsafeGetStorageImpl();
    const size_t nbytes = view.storage().nbytes();
    if (is_device_memory(view.storage().data_ptr())) {
      impl->set_data_ptr_noswap(adopt_kernel_allocation(view.storage(), flagos_tensor.device().index()));
    } else {
      auto fresh = device_allocator().allocate_on(flagos_tensor.device().index(), nbytes);
      if (nbytes > 0) {
        runtime::copy(fresh.get(), view.storage().data(), nbytes, runtime::CopyKind::HostToDevice, nullptr);
      }
      impl->set_data_ptr_noswap(std::move(fresh));
    }
    impl->set_nbytes(nbytes);
  }
  if (view.sizes() != flagos_tensor.sizes() || view.strides() != flagos_tensor.strides() ||
      view.storage_offset() != flagos_tensor.storage_offset()) {
    flagos_tensor.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
  // Kernels may leave an out= result as a conjugate view of what they wrote
  // (linalg_lu_solve with left=False flips the bit instead of conjugating).
  if (view.is_conj() != flagos_tensor.is_conj()) flagos_tensor._set_conj(view.is_conj());
  if (view.is_neg() != flagos_tensor.is_neg()) flagos_tensor._set_neg(view.is_neg());
}

namespace {

// Kernel results become flagos tensors in place where PyTorch allows it: a
// result that nothing but the call holds keeps its TensorImpl, which is given
// its flagos storage and device, instead of a second TensorImpl being built
// and the first one freed.

at::Tensor storageless_probe(c10::DispatchKeySet backend, c10::Device device) {
  return at::detail::make_tensor<c10::TensorImpl>(backend, caffe2::TypeMeta::Make<float>(), device);
}

c10::DispatchKeySet fresh_key_set(c10::DispatchKeySet backend, c10::Device device, bool inference) {
  c10::InferenceMode mode(inference);
  return storageless_probe(backend, device).key_set();
}

// The key sets of a fresh dense kernel device tensor, in normal and in
// inference mode (where tensors get no autograd keys).
struct ResultKeys {
  std::array<c10::DispatchKeySet, 2> kernel;  // [inference]
  bool relabels = true;  // TensorImpl::_change_backend_component_keys turns each into flagos's
};

const ResultKeys& result_keys() {
  static const ResultKeys keys = [] {
    ResultKeys k;
    const c10::DispatchKeySet flagos(c10::DispatchKey::PrivateUse1);
    const c10::Device flagos_device(c10::DeviceType::PrivateUse1, 0);
    const c10::Device kernel_device = kernel_device_of(flagos_device);
    for (const bool inference : {false, true}) {
      k.kernel[inference] = fresh_key_set(kernel_dispatch_keys(), kernel_device, inference);
      // The relabelling is checked once here rather than trusted: should it
      // not give a fresh flagos tensor's keys, no result is relabelled.
      c10::InferenceMode mode(inference);
      auto probe = storageless_probe(kernel_dispatch_keys(), kernel_device);
      probe.unsafeGetTensorImpl()->_change_backend_component_keys(flagos_device);
      k.relabels = k.relabels && probe.key_set() == fresh_key_set(flagos, flagos_device, inference);
    }
    return k;
  }();
  return keys;
}

// Nothing but the caller's one reference holds `ptr`'s target: no other tensor
// or storage, no weak reference, and no Python object (which would hold one more).
template <class T, class NullType>
bool held_only_here(const c10::intrusive_ptr<T, NullType>& ptr) {
  return ptr.use_count() == 1 && ptr.weak_use_count() == 1;
}

bool held_only_here(const c10::Storage& storage) {
  // c10::Storage does not show its intrusive_ptr; this one shares the
  // storage's reference (reclaim takes it over, release hands it back), so
  // the counts read are the storage's own.
  auto ptr = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage.unsafeGetStorageImpl());
  const bool only = held_only_here(ptr);
  ptr.release();
  return only;
}

bool rebind_unshared_view(const at::Tensor& view, const at::Tensor& flagos_tensor) {
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  // Only the slot holds it, its memory is still borrowed (a kernel that resized it gave it memory of its own),
  // and it is a plain view of the current mode: no autograd state, and the keys of a view made now (a view made
  // in inference mode is an inference tensor, which a kernel's own in-place calls may not update outside it:
  // the CPU's foreach loops call add_ on each view).
  if (!held_only_by_caller(view) || storage->data_ptr().get_context() != nullptr || impl->autograd_meta() != nullptr) {
    return false;
  }
  impl->_set_conj(false);
  impl->_set_neg(false);
  if (impl->key_set() != result_keys().kernel[c10::InferenceMode::is_enabled()]) return false;
  const c10::Storage& source = flagos_tensor.storage();
  const c10::Device where = kernel_device_of(flagos_tensor.device());
  storage->set_data_ptr_noswap(c10::DataPtr(const_cast<void*>(source.data()), where));
  storage->set_nbytes(source.nbytes());
  // The tensor's device and dtype follow the storage: refreshed where either changes.
  if (impl->dtype() != flagos_tensor.dtype() || impl->device() != where) {
    impl->set_storage_and_dtype(impl->unsafe_storage(), flagos_tensor.dtype());
  }
  // Consecutive ops mostly see one shape: the geometry is rewritten (and its contiguity recomputed) only where
  // it changes.
  if (!same_values(impl->sizes(), flagos_tensor.sizes()) || !same_values(impl->strides(), flagos_tensor.strides())) {
    // Every view the cache holds was made by kernel_view_sharing (zero tensors, whose views are expanded zeros,
    // never reach the cache).
    TORCH_INTERNAL_ASSERT_DEBUG_ONLY(dynamic_cast<KernelViewImpl*>(impl) != nullptr);
    static_cast<KernelViewImpl*>(impl)->take_geometry(*flagos_tensor.unsafeGetTensorImpl());
  } else if (impl->storage_offset() != flagos_tensor.storage_offset()) {
    impl->set_storage_offset(flagos_tensor.storage_offset());
  }
  copy_lazy_bits(flagos_tensor, view);
  return true;
}

}  // namespace

bool held_only_by_caller(const at::Tensor& t) {
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  return held_only_here(t.getIntrusivePtr()) && storage && held_only_here(storage);
}

bool move_reallocated_memory(const at::Tensor& flagos_tensor, const at::Tensor& view) {
  const c10::Storage& kernel_storage = view.unsafeGetTensorImpl()->unsafe_storage();
  const c10::Storage& flagos_storage = flagos_tensor.unsafeGetTensorImpl()->unsafe_storage();
  // Only a storage that nothing but this view holds: one that another holder keeps (the view of an aliasing
  // argument, a view handed to Python) could outlive the flagos storage, so it keeps owning its memory, shared.
  if (!kernel_storage || !flagos_storage || kernel_storage.data() == flagos_storage.data() ||
      !held_only_here(kernel_storage) || !is_device_memory(kernel_storage.data_ptr())) {
    return false;
  }
  move_kernel_memory(*kernel_storage.unsafeGetStorageImpl(), *flagos_storage.unsafeGetStorageImpl(),
                     flagos_tensor.device().index());
  return true;
}

namespace {

// `result` is a plain dense kernel device tensor that may change device in place.
bool relabelable(const at::Tensor& result) {
  const c10::TensorImpl& impl = *result.unsafeGetTensorImpl();
  const ResultKeys& keys = result_keys();
  return keys.relabels && held_only_here(result.getIntrusivePtr()) && impl.autograd_meta() == nullptr &&
         !impl.is_wrapped_number() && (impl.key_set() == keys.kernel[false] || impl.key_set() == keys.kernel[true]);
}

// Makes relabelable `result` a flagos tensor over `storage` (whose device is the flagos device).
at::Tensor relabel(at::Tensor result, c10::Storage storage, std::optional<int64_t> storage_offset) {
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  const c10::Device device = storage.device();
  impl->set_storage_keep_dtype(std::move(storage));
  if (storage_offset.has_value()) impl->set_storage_offset(*storage_offset);
  impl->_change_backend_component_keys(device);
  return result;
}

// A flagos tensor with `result`'s sizes, strides, dtype and lazy bits over `storage`.
at::Tensor flagos_tensor_like(const at::Tensor& result, c10::Storage storage, int64_t storage_offset) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(result.sizes(), result.strides(), storage_offset);
  copy_lazy_bits(result, out);
  return out;
}

// Dense CPU tensor `cpu` copied to flagos device `device` with its sizes and
// strides: one allocation and one block copy, made here rather than through
// the dispatcher's empty_strided and copy_, which cost more than the copy of a
// small result (benchmarks/device/dispatch_overhead.py).
at::Tensor dense_to_device(at::Tensor cpu, c10::Device device) {
  const size_t nbytes = static_cast<size_t>(cpu.numel()) * cpu.itemsize();
  const auto index = device.has_index() ? device.index() : runtime::current_device();
  auto memory = device_allocator().allocate_on(index, nbytes);
  if (nbytes > 0) {
    if (runtime::kernel_device_type() == c10::kCPU) {
      // Device memory that CPU kernels address in place (they have just
      // written other results through kernel views the same way).
      std::memcpy(memory.get(), cpu.const_data_ptr(), nbytes);
    } else {
      runtime::copy(memory.get(), cpu.const_data_ptr(), nbytes, runtime::CopyKind::HostToDevice, nullptr);
    }
  }
  if (!relabelable(cpu)) {
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(memory), &device_allocator(),
                         /*resizable=*/true);
    return flagos_tensor_like(cpu, std::move(storage), 0);
  }
  c10::StorageImpl* own = cpu.storage().unsafeGetStorageImpl();
  c10::Storage storage;
  if (held_only_here(cpu.storage())) {
    // The result's storage is its own: it takes the device memory (the CPU
    // memory goes back to the CPU allocator here).
    own->set_data_ptr_noswap(std::move(memory));
    own->set_nbytes(nbytes);
    own->set_allocator(&device_allocator());
    storage = cpu.storage();
  } else {
    storage = c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(memory), &device_allocator(),
                           /*resizable=*/true);
  }
  return relabel(std::move(cpu), std::move(storage), 0);
}

// Device kernel result `result` as a flagos tensor sharing its memory: its own
// storage relabelled where nothing else holds it, else a new flagos storage that
// holds the kernel's through adopt_kernel_allocation(), which is how the device
// allocator recognises shared memory (recordStream must reach the kernel allocator's block).
at::Tensor adopt_device_result(at::Tensor result, c10::Device device) {
  // (A fresh result that nothing else holds took adopt_fresh_in_place() instead.)
  c10::Storage adopted(c10::Storage::use_byte_size_t(), result.storage().nbytes(),
                       adopt_kernel_allocation(result.storage(), device.index()), &device_allocator(),
                       /*resizable=*/true);
  if (relabelable(result)) return relabel(std::move(result), std::move(adopted), std::nullopt);
  const int64_t offset = result.storage_offset();
  return flagos_tensor_like(result, std::move(adopted), offset);
}

}  // namespace

bool adopt_fresh_in_place(at::Tensor& result, c10::Device device) {
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  const c10::Storage& storage = impl->unsafe_storage();
  if (!storage || !relabelable(result) || !held_only_here(storage) || !is_device_memory(storage.data_ptr())) {
    return false;
  }
  // Its own storage becomes flagos memory, as its TensorImpl becomes a flagos tensor: no second storage, no
  // wrapper to allocate and free per result.
  adopt_kernel_storage_in_place(*storage.unsafeGetStorageImpl(), device.index());
  impl->set_storage_keep_dtype(storage);  // the same storage: the tensor's device is read again from it
  impl->_change_backend_component_keys(device);
  return true;
}

at::Tensor from_kernel_result(at::Tensor result, c10::Device device) {
  if (adopt_fresh_in_place(result, device)) return result;
  TORCH_CHECK_NOT_IMPLEMENTED(result.layout() == c10::kStrided, sparse_layout_advice(result.layout()));
  if (result._is_zerotensor()) {
    return efficient_zero_tensor(result.sym_sizes(), result.scalar_type(), std::nullopt, device, std::nullopt);
  }
  if (result.has_storage() && is_device_memory(result.storage().data_ptr())) {
    return adopt_device_result(std::move(result), device);
  }
  // A device kernel's CPU result is a CPU tensor natively too -- the RNG seed and
  // offset of the attention kernels, which their backward reads on the host -- so
  // it stays one; moved to device memory, the backward would read a device pointer.
  if (runtime::kernel_outputs_are_device_memory()) return result;
  return to_device(result.device().type() == c10::kCPU ? std::move(result) : result.cpu(), device);
}

at::Tensor adopt_fresh_result(at::Tensor result, c10::Device device) {
  // A kernel view's memory is not owned by its DataPtr (no context); every allocator's is.
  if (result.layout() == c10::kStrided && !result._is_zerotensor() && result.has_storage() &&
      result.storage().data() != nullptr && result.storage().data_ptr().get_context() == nullptr) {
    return from_kernel_result(result.clone(), device);
  }
  return from_kernel_result(std::move(result), device);
}

at::Tensor alias_of_kernel_result(at::Tensor result, const c10::Storage& flagos_storage) {
  if (relabelable(result)) return relabel(std::move(result), flagos_storage, std::nullopt);
  return flagos_tensor_like(result, flagos_storage, result.storage_offset());
}

at::Tensor to_device(at::Tensor cpu, c10::Device device) {
  // A dense tensor keeps its layout, so that the copy is one block copy.
  if (cpu.is_non_overlapping_and_dense()) return dense_to_device(std::move(cpu), device);
  return copy_from(cpu, at::empty(cpu.sizes(), cpu.options().device(device)), /*non_blocking=*/false);
}

}  // namespace torch_fl::aten
