"""``aten::_scaled_mm`` emulated on flagos: float8 operands widened to float32, a float32 matmul, then the
scales, the bias and one rounding to the output dtype.

The formula is the one cuBLASLt's FP8 GEMM computes for PyTorch's CUDA kernel
(``aten/src/ATen/native/cuda/ScaledBlas.cpp``): ``D = scale_result * (scale_a * scale_b * (A @ B)) + bias``
with a float32 accumulator, the scales applied to the accumulated product (tensorwise: one-element scales;
rowwise: ``(M, 1)`` and ``(1, N)``).  PyTorch's CPU kernel scales the operands before its float32 matmul
instead and divides by ``scale_result``; the two orders agree to float32 rounding (tests/torch_fl/test_fp8.py
holds the emulation to the CPU's kernel).  ``use_fast_accum`` is accepted and ignored: the accumulation is
always float32.  The checks are the CPU kernel's, whose messages they repeat.
"""

from __future__ import annotations

import torch

__all__ = ["FLOAT8", "register", "scaled_mm", "scaled_mm_out"]

FLOAT8 = frozenset({torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz})
_OUT_DTYPES = FLOAT8 | {torch.float32, torch.bfloat16, torch.float16}


def _check(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
           bias: torch.Tensor | None, out_dtype: torch.dtype) -> None:
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "mat1 and mat2 must be matrices")
    torch._check(a.shape[1] == b.shape[0], lambda: (
        f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})"))
    torch._check(a.dtype in FLOAT8 and b.dtype in FLOAT8,
                 lambda: f"Expected both inputs to be fp8 types but got mat1.dtype={a.dtype} and mat2.dtype={b.dtype}")
    torch._check(out_dtype in _OUT_DTYPES, lambda: f"out_dtype must be bfloat16, float16, float32 or fp8, not {out_dtype}")
    m, n = a.shape[0], b.shape[1]
    for scale, rows, name in ((scale_a, (m, 1), "scale_a"), (scale_b, (1, n), "scale_b")):
        torch._check(scale.dtype == torch.float32, lambda: f"{name} must be float32, not {scale.dtype}")
        torch._check(scale.numel() == 1 or tuple(scale.shape) == rows,
                     lambda: f"Invalid scaling configuration: {name} has shape {tuple(scale.shape)}; give one "
                             f"element (tensorwise) or {rows} (rowwise)")
    if bias is not None:
        torch._check(bias.numel() == n, lambda: f"bias must have {n} elements, not {bias.numel()}")


def _product(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             bias: torch.Tensor | None, scale_result: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    # Widening float8 to float32 is exact; the matmul accumulates in float32, as an FP8 tensor core's does.
    # _check admits one-element (tensorwise) or (M, 1) and (1, N) (rowwise) scales: each broadcasts as it is.
    acc = torch.mm(a.to(torch.float32), b.to(torch.float32)).mul_(scale_a).mul_(scale_b)
    if bias is not None:
        acc = acc.add_(bias.to(torch.float32))
    if scale_result is not None and out_dtype in FLOAT8:
        acc = acc.mul_(scale_result.to(torch.float32))
    return acc.to(out_dtype)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
              out_dtype: torch.dtype | None = None, use_fast_accum: bool = False) -> torch.Tensor:
    dtype = a.dtype if out_dtype is None else out_dtype
    _check(a, b, scale_a, scale_b, bias, dtype)
    return _product(a, b, scale_a, scale_b, bias, scale_result, dtype)


def scaled_mm_out(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
                  out_dtype: torch.dtype | None = None, use_fast_accum: bool = False, *,
                  out: torch.Tensor) -> torch.Tensor:
    dtype = a.dtype if out_dtype is None else out_dtype
    _check(a, b, scale_a, scale_b, bias, dtype)
    torch._check(out.dtype == dtype, lambda: f"out has dtype {out.dtype}, expected {dtype}")
    result = _product(a, b, scale_a, scale_b, bias, scale_result, dtype)
    out.resize_(result.shape)
    return out.copy_(result)


def register() -> torch.library.Library:
    """flagos kernels for ``_scaled_mm`` and ``_scaled_mm.out``; the library must be kept alive."""
    library = torch.library.Library("aten", "IMPL")
    library.impl("_scaled_mm", scaled_mm, "PrivateUse1")
    library.impl("_scaled_mm.out", scaled_mm_out, "PrivateUse1")
    return library
