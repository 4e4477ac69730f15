"""Models compiled with inductor on flagos equal eager on flagos and inductor on the CPU.

An MLP, a small CNN (convolution, batch norm, pooling), a transformer block with
scaled_dot_product_attention, and a Hugging Face Llama: outputs of two calls and
every parameter's gradient (compile_support.py).
"""

from __future__ import annotations

import pytest
import torch
import torch_fl
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


def test_the_wrapper_allocates_flagos_buffers_without_the_dispatcher() -> None:
    # Every buffer of a flagos graph comes from torch_fl._C._empty_strided, as CUDA's come from
    # _empty_strided_cuda; the forward and backward wrappers alike.
    from torch._inductor.utils import run_and_get_code

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.layer_norm(x, x.shape[-1:]) @ w
        return (h.softmax(-1) @ w.t()).relu().sum()

    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 8, 16, generator=gen), torch.randn(16, 16, generator=gen)
    xf, wf = x.to("flagos").requires_grad_(), w.to("flagos").requires_grad_()
    compiled = torch.compile(block, backend="inductor", fullgraph=True)
    out, code = run_and_get_code(lambda: compiled(xf, wf).backward() or compiled(xf, wf))
    assert len(code) >= 2  # the forward and the backward graph
    for source in code:
        assert "from torch_fl._C import _empty_strided as empty_strided_flagos" in source
        assert "empty_strided_flagos((" in source
        assert "device='flagos'" not in source.split("def benchmark_compiled_module")[0]
    x.requires_grad_(), w.requires_grad_()
    expected = block(x, w)
    expected.backward()
    torch.testing.assert_close(out.cpu(), expected.detach())
    torch.testing.assert_close(xf.grad.cpu(), x.grad)
    torch.testing.assert_close(wf.grad.cpu(), w.grad)


def test_subgraph_buffers_take_the_direct_allocation_of_their_parent() -> None:
    # torch.cond's branches are subgraphs: their wrappers write into the parent graph's module.
    from torch._inductor.utils import run_and_get_code

    def branchy(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(p, lambda x: (x.sin() @ x.t()).relu(), lambda x: (x.cos() @ x.t()).abs(), (x,))

    torch._dynamo.reset()
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(5))
    compiled = torch.compile(branchy, backend="inductor", fullgraph=True)
    for p in (True, False):
        out, (source,) = run_and_get_code(lambda p=p: compiled(torch.tensor(p).to("flagos"), x.to("flagos")))
        torch.testing.assert_close(out.cpu(), branchy(torch.tensor(p), x))
        assert source.count("from torch_fl._C import _empty_strided as empty_strided_flagos") == 1
        assert source.count("empty_strided_flagos((") >= 2  # a buffer in each branch


def test_direct_allocation_is_flagos_empty_strided_on_the_current_device() -> None:
    t = torch_fl._C._empty_strided((3, 4, 5), (1, 15, 3), torch.bfloat16)
    assert (t.device, t.shape, t.stride(), t.dtype) == (torch.device("flagos", torch.flagos.current_device()),
                                                        (3, 4, 5), (1, 15, 3), torch.bfloat16)
    assert t.untyped_storage().nbytes() == 60 * 2
    for args, message in [(((2, 3), (1,), torch.float32), "size has 2 dimensions but stride has 1"),
                          (([2], [1], torch.float32), "size must be a tuple of ints, got list"),
                          (((2, 2.5), (3, 1), torch.float32), "size must be a tuple of ints, got float at position 1"),
                          (((2,), (1,)), "takes \\(size, stride, dtype\\), got 2 arguments"),
                          (((2,), (1,), "float32"), "dtype must be a torch.dtype, got str"),
                          (((-1,), (1,), torch.float32), "negative dimension")]:
        with pytest.raises(RuntimeError, match=message):
            torch_fl._C._empty_strided(*args)
