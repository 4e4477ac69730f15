"""Dynamo on flagos: the eager and aot_eager backends, graph breaks, dynamic shapes, recompilation counts,
and compile failures that name the op."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.testing
import torch_fl  # noqa: F401
from compile_support import TORCH_OWN_WARNINGS, assert_same, build, step

pytestmark = TORCH_OWN_WARNINGS


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tracing_backends_equal_eager(backend: str) -> None:
    assert_same(step("cnn", "flagos", backend), step("cnn", "flagos", None), f"{backend} on flagos")


def _broken(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x) * 2
    torch._dynamo.graph_break()
    return torch.cos(y) + y.sum()


def test_graph_break_compiles_two_graphs_that_agree_with_eager() -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    x = torch.randn(6, 5, device="flagos")
    out = torch.compile(_broken, backend=counter)(x)
    assert counter.frame_count == 2
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), _broken(x.cpu()))


@pytest.mark.compile
def test_dynamic_shapes_do_not_recompile() -> None:
    model = build("mlp", "flagos")
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, dynamic=True)
    frames = []
    for batch in (3, 5, 9):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(compiled(x.to("flagos")).cpu(), model(x.to("flagos")).cpu(), atol=2e-5, rtol=1e-4)
        frames.append(counter.frame_count)
    assert frames[0] > 0 and frames == [frames[0]] * 3, frames
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_recompiles_on_a_new_shape_then_generalises() -> None:
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda x: torch.relu(x) * 3, backend=counter)
    compiled(torch.randn(4, 8, device="flagos"))
    compiled(torch.randn(4, 8, device="flagos"))
    assert counter.frame_count == 1  # same shape: the guards hold
    compiled(torch.randn(6, 8, device="flagos"))
    assert counter.frame_count == 2  # a new size: one recompilation, with that dimension dynamic
    compiled(torch.randn(11, 8, device="flagos"))
    assert counter.frame_count == 2
    compiled(torch.randn(6, 8, device="cpu"))
    assert counter.frame_count == 3  # another device is another graph


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_evaluation_mode_batch_norm_compiles(backend: str) -> None:
    # Its fake save_mean/save_invstd (per channel, as for every device but the CPU) are not the host
    # platform's real ones (empty, as the CPU's kernel makes them): the graph must not depend on them.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    expected = model(x)
    out = torch.compile(model.to("flagos"), backend=backend)(x.to("flagos"))
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), expected, atol=2e-5, rtol=1e-4)


def test_a_compile_failure_names_the_op_and_does_not_fall_back() -> None:
    @torch.library.custom_op("torch_fl_compile_tests::flagos_only", mutates_args=(), device_types="flagos")
    def flagos_only(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    compiled = torch.compile(lambda x: flagos_only(x) + 1, backend="inductor", fullgraph=True)
    x = torch.ones(3, device="flagos")
    with pytest.raises(Exception, match="torch_fl_compile_tests::flagos_only") as failure:
        compiled(x)
    assert type(failure.value).__module__.startswith("torch."), type(failure.value)


@pytest.mark.compile
def test_cuda_graphs_are_switched_off_with_one_note(caplog: pytest.LogCaptureFixture) -> None:
    from torch._dynamo.utils import counters
    from torch_fl.compile import cuda_graphs

    cuda_graphs._note.cache_clear()  # another test of this process may have noted it already
    x = torch.randn(8, 4, device="flagos")
    with caplog.at_level("WARNING", logger="torch_fl.compile"):
        for fn in (lambda x: (x.sin() * 2).sum(0), lambda x: x.cos() + 1):
            compiled = torch.compile(fn, mode="reduce-overhead")
            for _ in range(2):
                torch.testing.assert_close(compiled(x).cpu(), fn(x.cpu()))
    notes = [r.getMessage() for r in caplog.records if r.name == "torch_fl.compile"]
    assert len(notes) == 1, notes
    assert "CUDA graphs are off for torch.compile on flagos" in notes[0]
    assert counters["inductor"]["cudagraph_skips"] == 2  # one per graph, each with flagos's reason
