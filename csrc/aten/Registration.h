// Registrations made when the plugin initialises (the static ones live in Registration.cpp).
#pragma once

namespace torch_fl::aten {

// Routes the ops PyTorch would otherwise run through a generic kernel (the
// out= path of structured ops, slow composite decompositions) to the kernel
// device's own kernels; see Registration.cpp.  Idempotent.
void register_kernel_device_routes();

}  // namespace torch_fl::aten
