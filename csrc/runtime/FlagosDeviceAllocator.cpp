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
struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator()); }
} register_allocator;
}  // namespace

}  // namespace torch_fl
