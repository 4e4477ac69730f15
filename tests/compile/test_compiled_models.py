"""Models compiled with inductor on flagos equal eager on flagos and inductor on the CPU.

An MLP, a small CNN (convolution, batch norm, pooling), a transformer block with
scaled_dot_product_attention, and a Hugging Face Llama: outputs of two calls and
every parameter's gradient (compile_support.py).
"""

from __future__ import annotations

import pytest
import torch
import torch_fl  # noqa: F401
from compile_support import CASES, TORCH_OWN_WARNINGS, assert_same, step

pytestmark = [pytest.mark.compile, TORCH_OWN_WARNINGS]


# scaled_dot_product_attention asks the device's _fused_sdp_choice DispatchStub directly (not through the
# dispatcher), and flagos's stub (csrc/aten/DispatchStubs.cpp) answers through kernel views of its operands,
# which dynamo's fake tensors cannot provide: tracing fails with "Please convert all Tensors to FakeTensors".
# Inductor's C++ code generation asserts `var.dtype is not None` (torch/_inductor/codegen/cpp.py) on a pointwise
# buffer of the Llama graph placed on flagos; the same graph compiles on the CPU.  Strict: it fails loudly once fixed.
_LLAMA_CPP_CODEGEN = pytest.mark.xfail(reason="inductor's C++ codegen loses a buffer's dtype in the Llama graph on flagos",
                                       raises=torch._inductor.exc.InductorError, strict=True)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[_LLAMA_CPP_CODEGEN] if n == "llama" else []) for n in CASES])
def test_inductor_on_flagos_equals_eager_and_inductor_on_cpu(name: str) -> None:
    if name == "llama":
        pytest.importorskip("transformers", reason="the Llama case needs transformers (ci/requirements-test.txt)")
    torch._dynamo.reset()
    compiled = step(name, "flagos", "inductor")
    assert_same(compiled, step(name, "flagos", None), f"{name}: inductor on flagos vs eager on flagos")
    assert_same(compiled, step(name, "cpu", "inductor"), f"{name}: inductor on flagos vs inductor on cpu")
