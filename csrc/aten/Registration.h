// Registrations made when the plugin initialises (the static ones live in Registration.cpp).
#pragma once

namespace torch_fl::aten {

// Routes structured ops (add.Tensor, add_.Tensor, ...) themselves instead of
// through PyTorch's generic out= path; see Registration.cpp.  Idempotent.
void register_direct_structured_ops();

}  // namespace torch_fl::aten
