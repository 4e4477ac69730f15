"""Which flagos graphs inductor runs through CUDA graphs (torch_fl/compile/cuda_graphs.py).

On the host platform none (its runtime has no graph capture), with one note; where a platform captures, a
flagos graph is judged as a cuda graph is and wrapped by graph_replay instead of the CUDA graph trees.  The
cuda platform's capture runs in tests/gpu/test_compile_cuda.py; its rules are tested here on host with the
capture replaced (test_graph_replay.py).
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch_fl  # noqa: F401
from compile_support import TORCH_OWN_WARNINGS
from torch_fl import graphs
from torch_fl.compile import cuda_graphs

pytestmark = TORCH_OWN_WARNINGS

FLAGOS = torch.device("flagos", 0)


def _node(name: str = "x") -> torch.fx.Node:
    return torch.fx.Graph().placeholder(name)


def _inductor(name: str) -> ModuleType:
    # Imported by the test, under the suite's filter of torch's own warnings (inductor imports TorchScript).
    import importlib

    return importlib.import_module(f"torch._inductor.{name}")


@pytest.fixture
def capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform that captures graphs (the cuda platform's answer), on this machine."""
    monkeypatch.setattr(graphs, "capture_unavailable_reason", lambda: None)


def test_the_host_platform_refuses_flagos_graphs_with_its_reason() -> None:
    if graphs.capture_unavailable_reason() is None:
        pytest.skip("this platform captures graphs")
    reason = _inductor("cudagraph_utils").check_lowering_disable_cudagraph({FLAGOS: _node()})
    assert reason == cuda_graphs.unavailable_reason()
    assert "graph capture is not available on the host platform" in reason


@pytest.mark.usefixtures("capturing")
def test_where_graphs_are_captured_one_flagos_device_is_judged_as_one_cuda_device() -> None:
    check = _inductor("cudagraph_utils").check_lowering_disable_cudagraph
    assert check({FLAGOS: _node()}) is None
    assert check({FLAGOS: _node(), torch.device("meta"): _node("m")}) is None
    assert check({FLAGOS: _node(), torch.device("cpu"): _node("c")}) == "skipping cudagraphs due to cpu device (c)"
    both = check({FLAGOS: _node(), torch.device("flagos", 1): _node("y")})
    assert both is not None and both.startswith("skipping cudagraphs due to multiple devices")
    mixed = check({FLAGOS: _node(), torch.device("cuda", 0): _node("y")})
    assert mixed is not None and "multiple devices" in mixed
    assert check({torch.device("cuda", 0): _node()}) is None  # cuda graphs as before


def test_cudagraphify_is_graph_replays_only_inside_a_flagos_graphs_post_compile() -> None:
    def model(_inputs: list[object]) -> list[object]:
        return []

    compile_fx = _inductor("compile_fx")
    kwargs = {"device_index": 0, "stack_traces": [], "is_backward": False, "is_inference": True}
    assert compile_fx.cudagraphify(model, (), **kwargs).__module__ == "torch._inductor.compile_fx"
    token = cuda_graphs._WRAPPING_FLAGOS.set(True)
    try:
        assert compile_fx.cudagraphify(model, (), **kwargs).__module__ == "torch_fl.compile.graph_replay"
    finally:
        cuda_graphs._WRAPPING_FLAGOS.reset(token)


@pytest.mark.compile
@pytest.mark.usefixtures("capturing")
def test_a_flagos_graph_skipped_for_another_reason_says_why(caplog: pytest.LogCaptureFixture) -> None:
    # Inductor logs its skip reasons for graphs with CUDA tensors only; a flagos graph's is logged too.
    torch._dynamo.reset()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x.cpu().sin() + 1).to(x.device) * 2  # a CPU computation in the graph

    x = torch.randn(8, device="flagos")
    with (caplog.at_level("WARNING", logger="torch._inductor.cudagraph_utils.__cudagraphs"),
          torch._inductor.config.patch(graph_partition=False)):
        torch.testing.assert_close(torch.compile(fn, mode="reduce-overhead")(x).cpu(), fn(x.cpu()))
    assert any("skipping cudagraphs due to cpu device" in r.getMessage() for r in caplog.records)
