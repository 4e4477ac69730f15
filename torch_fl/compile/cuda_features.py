"""Inductor's CUDA-only optimisations that it grants by the device's name, granted to flagos graphs on the cuda platform.

Most of inductor's decisions for a GPU graph ask ``is_gpu(device.type)`` or the device properties, and
``cuda_codegen`` already answers those for flagos as for the CUDA device it is.  Two optimisations that
are on by default instead name the device types they trust ("cuda" and "xpu"), so flagos graphs lose
them although their kernels are the same Triton kernels on the same GPU:

* online softmax (``config.online_softmax``): softmax and log-softmax, cross-entropy over a vocabulary
  among them, read their input once instead of twice (``prepare_softmax_extra_check`` in
  ``fx_passes/post_grad.py``);
* mix-order reduction (``config.triton.mix_order_reduction``): a reduction over rows fused with one over
  columns of the same input, which is LayerNorm's and RMSNorm's backward (dX with dW and db) on large
  activations (``_is_gpu_triton_backend`` in ``scheduler.py``, where the torch release has that helper;
  releases that write the check inline in ``MixOrderReduction.can_fuse`` keep it off for flagos).

A third is not an optimisation of the kernels but of their launch: inductor launches a compiled Triton
kernel through its own C++ launcher (``StaticCudaLauncher``, ``config.use_static_cuda_launcher``, on by
default) only where the kernel's device type is "cuda", "xpu" or "hip"
(``StaticTritonCompileResult.can_statically_launch`` in ``runtime/triton_heuristics.py``); other kernels go
through Triton's own launcher, which costs a few microseconds more per launch, hundreds of times per
compiled training step.  The C++ launcher reads each tensor argument's ``data_ptr()`` and launches on the
stream it is given, so a flagos kernel's CUDA pointers and flagos's current stream (the CUDA stream) serve
it as they serve Triton's.

All three are extended here by wrapping the named check: for a flagos graph it answers as it would for
``cuda`` when flagos's kernel backend is Triton, and otherwise the original answers.  The rest of
inductor's ``"cuda"`` checks are options that are off by default (native Triton matmul, TMA descriptors,
PDL), apply only to ``max-autotune``'s GEMM templates, or choose numerics (fused multiply-add in
``add(alpha=)``, ``addcmul``, ``addcdiv``) rather than speed.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from torch_fl import _build_config
from torch_fl.compile import inductor_names, post_import

__all__ = ["grant"]

_DEVICE = "flagos"


def _triton_kernels(config: ModuleType) -> bool:
    """Whether flagos graphs get Triton kernels (the cuda platform's inductor backend); `config` is inductor's."""
    return _build_config.COMPILE == "triton" and getattr(config, "cuda_backend", "triton") == "triton"


def _online_softmax(post_grad: ModuleType) -> None:
    from torch._inductor import config

    original = getattr(post_grad, "prepare_softmax_extra_check", None)
    if original is None:  # a torch release without the rewrite, or with its check under another name
        return

    def prepare_softmax_extra_check(match: Any) -> bool:
        if match.kwargs["x"].meta["val"].device.type == _DEVICE:
            return bool(config.online_softmax) and _triton_kernels(config)
        return bool(original(match))

    # Before the pass's lazy initialisation, which registers the pattern with the function it finds here.
    post_grad.prepare_softmax_extra_check = prepare_softmax_extra_check


def _mix_order_reduction(scheduler: ModuleType) -> None:
    from torch._inductor import config

    original = getattr(scheduler, "_is_gpu_triton_backend", None)
    if original is None:  # the release checks the device inline in MixOrderReduction.can_fuse
        return

    def is_gpu_triton_backend(node1: Any, node2: Any) -> bool:
        if node1.is_gpu() and node2.is_gpu() and node1.get_device().type == _DEVICE:
            return _triton_kernels(config)
        return bool(original(node1, node2))

    inductor_names.replace(scheduler, "_is_gpu_triton_backend", is_gpu_triton_backend)


def _static_launcher(heuristics: ModuleType) -> None:
    from torch._inductor import config

    result = getattr(heuristics, "StaticTritonCompileResult", None)
    original = getattr(result, "can_statically_launch", None)
    if original is None:  # a torch release without inductor's own launcher
        return

    def can_statically_launch(kernel: Any, inductor_meta: Any, triton_meta: dict[str, Any], heuristic_type: Any) -> Any:
        if triton_meta.get("device_type") == _DEVICE and _triton_kernels(config):
            # Every check and the launcher's choice read the device type from here: a flagos kernel is CUDA's.
            triton_meta = {**triton_meta, "device_type": "cuda"}
        return original(kernel, inductor_meta, triton_meta, heuristic_type)

    result.can_statically_launch = staticmethod(can_statically_launch)
    # Where a cached graph's kernel is loaded again, its binary's file name comes from the graph's own device type.
    extensions = getattr(heuristics, "GPU_KERNEL_BIN_EXTS", None)
    if isinstance(extensions, dict) and "cuda" in extensions and _build_config.COMPILE == "triton":
        extensions.setdefault(_DEVICE, extensions["cuda"])


def grant() -> None:
    """Wrap the three checks as their modules are imported.  On the host platform flagos graphs are CPU graphs
    (C++ kernels): the wrapped checks then answer no for them, as the originals did."""
    post_import.after_import("torch._inductor.fx_passes.post_grad", _online_softmax)
    post_import.after_import("torch._inductor.scheduler", _mix_order_reduction)
    post_import.after_import("torch._inductor.runtime.triton_heuristics", _static_launcher)
