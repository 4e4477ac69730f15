// The dispatcher scan made when the plugin initialises: operators PyTorch would
// otherwise run through a generic kernel go to the kernel device's own kernel.
// The static registration table is Registration.cpp.
#pragma once

namespace torch_fl::aten {

// Routes the ops PyTorch would otherwise run through a generic kernel (the
// out= path of structured ops, slow composite decompositions) to the kernel
// device's own kernels; see KernelDeviceRoutes.cpp.  Idempotent.
void register_kernel_device_routes();

}  // namespace torch_fl::aten
