// The autocast policy of torch.autocast("flagos"): CUDA's, op for op.
//
// PyTorch keeps each policy's op list in a macro (ATen/autocast_mode.h: "so other backends can
// reuse the policy op list") and registers CUDA's autocast from them; flagos registers the same
// lists for AutocastPrivateUse1, so a model that autocasts on CUDA computes in the same dtypes on
// flagos, whichever torch release the plugin is built against.  tests/torch_fl/test_autocast.py
// checks that the ops covered are exactly CUDA's.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_fl::aten {

namespace {

// CUDA's autocast refuses binary_cross_entropy (its kernel there is not safe in float16); its
// function for that is internal to libtorch, so flagos has its own.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                        int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast (as on CUDA); "
              "use torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which "
              "combine the sigmoid and the loss and are safe to autocast, or compute this loss outside autocast "
              "on float32 inputs");
}

}  // namespace

#define FLAGOS_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FLAGOS_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define FLAGOS_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define FLAGOS_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE writes its signatures with ATen's names unqualified, as
// PyTorch's own registration sees them (inside namespace at); which names depends on the release
// (DimnameList only where named tensors still exist).
using namespace at;  // NOLINT(google-build-using-namespace)

// Ops in none of the lists keep their dtype.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_LOWER_PRECISION_FP)
  AT_FORALL_FP32(FLAGOS_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(FLAGOS_PROMOTE)
  // Listed by CUDA's registration apart from the shared lists; the cuda platform runs them.
  KERNEL_PRIVATEUSEONE(cudnn_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(cudnn_convolution_transpose, lower_precision_fp)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_refused));
}

#undef FLAGOS_LOWER_PRECISION_FP
#undef FLAGOS_FP32
#undef FLAGOS_FP32_SET_OPT_DTYPE
#undef FLAGOS_PROMOTE

}  // namespace torch_fl::aten
