"""Where flagos may differ from the CPU on PyTorch's OpInfo database, and why.

Each entry is a PyTorch semantics rule that native CUDA shares, never a flagos
bug.  ``EXPECTED_ERRORS`` lists ops that must raise a given error on flagos
while the CPU computes them (the test asserts the error); ``EXPECTED_MISMATCHES``
lists cases whose values legitimately differ from the CPU's (strict xfail: a
case that starts to match fails the run, so the list cannot go stale).
"""

from __future__ import annotations

SPARSE_ADVICE = "flagos holds only strided (dense) tensors"

# op id -> (text the flagos error contains, why)
EXPECTED_ERRORS: dict[str, tuple[str, str]] = {
    "tensor_split": (
        "tensor_split expected tensor_indices_or_sections to be on cpu",
        "PyTorch requires tensor_split's index tensor on the CPU (TensorShape.cpp); native CUDA raises the same",
    ),
    "to_sparse": (SPARSE_ADVICE, "sparse layouts stay on the CPU: flagos tensors are strided"),
    "sparse.mm.reduce": (SPARSE_ADVICE, "its input is a sparse CSR tensor; sparse layouts stay on the CPU"),
    "sparse.sampled_addmm": (SPARSE_ADVICE, "its input is a sparse CSR tensor; sparse layouts stay on the CPU"),
}

_DEVICE_POLICY = (
    "PyTorch picks linear_cross_entropy's chunked accumulation policy by device type "
    "(torch/nn/modules/linear_cross_entropy_options.py lists cpu and cuda); flagos gets the fallback policy, "
    "the one CUDA uses for half types, so its low-precision gradients differ from the CPU's as CUDA's do"
)

# case id (op id-dtype) -> why
EXPECTED_MISMATCHES: dict[str, str] = {
    "nn.functional.linear_cross_entropy.chunked-float16": _DEVICE_POLICY,
    "nn.functional.linear_cross_entropy.chunked_none-float16": _DEVICE_POLICY,
    "nn.functional.linear_cross_entropy.chunked_none-bfloat16": _DEVICE_POLICY,
}

# op id -> why its fake results on flagos do not describe its real ones (test_fake_tensors.py; strict xfail)
_BATCH_NORM_EVAL = (
    "in evaluation mode the CPU's kernel returns empty save_mean and save_invstd, CUDA's returns them per "
    "channel; PyTorch's meta kernel (torch/_decomp/decompositions.py) gives every device but the CPU CUDA's "
    "shapes, and flagos on the host platform runs the CPU's kernel. Neither output is read in evaluation mode, "
    "and inductor computes batch norm from that decomposition"
)
EXPECTED_FAKE_MISMATCHES: dict[str, str] = {
    "native_batch_norm": _BATCH_NORM_EVAL,
    "_native_batch_norm_legit": _BATCH_NORM_EVAL,
}
