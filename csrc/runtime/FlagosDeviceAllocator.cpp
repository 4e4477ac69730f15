// The parts of the flagos device allocator every runtime shares.
#include "runtime/FlagosDeviceAllocator.h"

#include <algorithm>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

void resize_storage(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "cannot resize a flagos storage that is not resizable");
  auto fresh = device_allocator().allocate_on(storage.device().index(), new_bytes);
  const size_t keep = std::min(storage.nbytes(), new_bytes);
  if (keep > 0) runtime::copy(fresh.get(), storage.data(), keep, runtime::CopyKind::DeviceToDevice, nullptr);
  auto* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

namespace {
void delete_shared_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }
}  // namespace

// Adopted memory is the kernel allocator's own block, its DataPtr relabelled to the flagos device (the
// kernel allocator's deleter frees it), or memory shared with a kernel result's storage (a c10::Storage kept
// alive by the DataPtr) where that storage is still held elsewhere.
c10::DataPtr adopt_kernel_allocation(const c10::Storage& kernel_storage, c10::DeviceIndex device) {
  void* ptr = const_cast<void*>(kernel_storage.data());
  return c10::DataPtr(ptr, new c10::Storage(kernel_storage), &delete_shared_storage,
                      c10::Device(c10::DeviceType::PrivateUse1, device));
}

const c10::DataPtr& kernel_memory_of(const c10::DataPtr& flagos) {
  if (flagos.get_deleter() == &delete_shared_storage) {
    return static_cast<const c10::Storage*>(flagos.get_context())->data_ptr();
  }
  return flagos;
}

void adopt_kernel_storage_in_place(c10::StorageImpl& kernel_storage, c10::DeviceIndex device) {
  c10::DataPtr memory = kernel_storage.set_data_ptr(c10::DataPtr());
  memory.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, device));
  kernel_storage.set_data_ptr_noswap(std::move(memory));
  kernel_storage.set_allocator(&device_allocator());
}

void move_kernel_memory(c10::StorageImpl& kernel_storage, c10::StorageImpl& flagos_storage, c10::DeviceIndex device) {
  c10::DataPtr memory = kernel_storage.set_data_ptr(c10::DataPtr());
  void* ptr = memory.get();
  const c10::Device kernel_device = memory.device();
  memory.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, device));
  flagos_storage.set_data_ptr_noswap(std::move(memory));
  flagos_storage.set_nbytes(kernel_storage.nbytes());
  kernel_storage.set_data_ptr_noswap(c10::DataPtr(ptr, kernel_device));
}

namespace {
struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator()); }
} register_allocator;
}  // namespace

}  // namespace torch_fl
