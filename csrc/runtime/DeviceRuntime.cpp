// Parts of the runtime interface shared by every runtime implementation.
#include "runtime/DeviceRuntime.h"

#include <c10/util/Exception.h>

namespace torch_fl::runtime {

void check_device_index(c10::DeviceIndex device) {
  const auto count = device_count();
  if (count == 0) {
    const auto why = configuration_error();
    TORCH_CHECK(false, why.empty() ? std::string("no flagos device is available") : why);
  }
  TORCH_CHECK(device >= 0 && device < count, "invalid flagos device index ", static_cast<int>(device),
              "; valid indices are 0..", static_cast<int>(count) - 1);
}

}  // namespace torch_fl::runtime
