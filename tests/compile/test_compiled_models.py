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


@pytest.mark.parametrize("name", list(CASES))
def test_inductor_on_flagos_equals_eager_and_inductor_on_cpu(name: str) -> None:
    if name == "llama":
        pytest.importorskip("transformers", reason="the Llama case needs transformers (ci/requirements-test.txt)")
    torch._dynamo.reset()
    compiled = step(name, "flagos", "inductor")
    assert_same(compiled, step(name, "flagos", None), f"{name}: inductor on flagos vs eager on flagos")
    assert_same(compiled, step(name, "cpu", "inductor"), f"{name}: inductor on flagos vs inductor on cpu")


def test_indirect_indexing_in_a_vectorised_kernel() -> None:
    # An embedding lookup and an RMS norm (a Llama's first layer): the C++ kernel loads each row through an
    # index tensor and checks it against the table's bounds in a vectorised loop, which needs the dtype inductor
    # records for the "cpp" backend only.
    def lookup(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.embedding(ids, table)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(7)
    table, ids = torch.randn(50, 32, generator=gen), torch.randint(0, 50, (3, 7), generator=gen)
    out = torch.compile(lookup, backend="inductor", fullgraph=True)(table.to("flagos"), ids.to("flagos"))
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), lookup(table, ids))
    from torch._inductor.codegen import common

    assert common.get_current_backend("flagos") == "cpp"


def test_a_cpu_scalar_tensor_does_not_move_the_result_off_flagos() -> None:
    # Eager mode puts `cpu_scalar * flagos_tensor` on flagos; inductor must not pick the CPU for the kernel
    # because the CPU tensor comes first.
    def scaled(s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (s * x).sin() + s

    torch._dynamo.reset()
    s, x = torch.tensor(2.5), torch.randn(8, 4)
    out = torch.compile(scaled, backend="inductor", fullgraph=True)(s, x.to("flagos"))
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), scaled(s, x))
