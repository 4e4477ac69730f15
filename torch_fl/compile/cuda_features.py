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

Both are extended here by wrapping the named check: for a flagos graph it answers as it would for
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


def grant() -> None:
    """Wrap the two checks as their modules are imported.  On the host platform flagos graphs are CPU graphs
    (C++ kernels): the wrapped checks then answer no for them, as the originals did."""
    post_import.after_import("torch._inductor.fx_passes.post_grad", _online_softmax)
    post_import.after_import("torch._inductor.scheduler", _mix_order_reduction)
