"""The capture and replay of compiled flagos graphs (torch_fl/compile/graph_replay.py), on the host platform.

The host runtime cannot capture, so here a stand-in graph takes the place of ``torch.flagos.CUDAGraph``: its
capture runs nothing that the caller sees (it computes on copies of the inputs), and each replay runs the model
again on the captured inputs and writes the results into the captured outputs, as a replay writes into the
graph's memory.  That is enough to hold the wrapper's own rules: inputs copied in, static inputs read in place,
written inputs copied back, outputs that the next replay does not overwrite, one recording per shape, a moved
static input copied from then on.  The real capture runs in tests/gpu/test_compile_cuda.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch_fl  # noqa: F401
from compile_support import TORCH_OWN_WARNINGS
from torch_fl import graphs

pytestmark = [TORCH_OWN_WARNINGS, pytest.mark.compile, pytest.mark.usefixtures("stand_in")]


class StandInGraph:
    """Replays by running the model on the captured inputs and copying its results into the captured outputs."""

    def __init__(self, model: Callable[[list[Any]], Any], inputs: list[Any]) -> None:
        self.model, self.inputs = model, inputs
        self.outputs = model([x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])

    def replay(self) -> None:
        for static, fresh in zip(self.outputs, self.model(list(self.inputs))):
            if isinstance(static, torch.Tensor):
                static.copy_(fresh)


#: The memory pool of every capture the stand-in made, in order.
POOLS_USED: list[Any] = []


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from torch._dynamo.utils import counters
    from torch_fl.compile import graph_replay

    def capture(model: Any, inputs: list[Any], _stream: Any, pool: Any) -> tuple[StandInGraph, Any]:
        graph = StandInGraph(model, inputs)
        POOLS_USED.append(pool)
        return graph, graph.outputs

    monkeypatch.setattr(graphs, "capture_unavailable_reason", lambda: None)
    monkeypatch.setattr(graph_replay, "_capture", capture)
    pools = iter(range(1, 1 << 20))
    monkeypatch.setattr(torch.flagos, "graph_pool_handle", lambda: (0, next(pools)))
    torch._dynamo.reset()
    counters.clear()
    POOLS_USED.clear()
    # With graph partitions (inductor's default) a host-platform graph has no partition to capture: its kernels
    # are C++ kernels, which inductor keeps out of partitions.  Without them the whole graph is wrapped.
    with torch._inductor.config.patch(graph_partition=False):
        yield
    torch._dynamo.reset()


def _counts() -> tuple[int, int]:
    from torch._dynamo.utils import counters
    from torch_fl.compile.graph_replay import CAPTURES, REPLAYS

    return counters["inductor"][CAPTURES], counters["inductor"][REPLAYS]


def test_replays_read_new_input_values_and_outputs_outlive_the_next_replay() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sin() + x

    compiled = torch.compile(fn, mode="reduce-overhead")
    inputs = [(torch.randn(16, device="flagos"), torch.randn(16, device="flagos")) for _ in range(4)]
    outputs = [compiled(x, y) for x, y in inputs]
    assert _counts() == (1, 3)  # captured at the first call (which ran for real), replayed since
    for (x, y), out in zip(inputs, outputs):  # each call's output is its own: no replay overwrote it
        torch.testing.assert_close(out.cpu(), fn(x.cpu(), y.cpu()))


def test_parameters_are_read_in_place_and_a_written_input_is_written_back() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4).to("flagos")

    def fn(x: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        total.add_(x.sum())  # an input the graph writes to: not static, so copied in and back
        return linear(x) + total

    compiled = torch.compile(fn, mode="reduce-overhead")
    total, expected_total = torch.zeros(1, device="flagos"), torch.zeros(1)
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(3, 8, device="flagos")
            out = compiled(x, total)
            expected_total += x.sum().cpu()
            torch.testing.assert_close(total.cpu(), expected_total)  # written once per call, never twice
            torch.testing.assert_close(out.cpu(), torch.nn.functional.linear(
                x.cpu(), linear.weight.cpu(), linear.bias.cpu()) + expected_total)
            if step == 1:
                linear.weight.mul_(2)  # in place, as an optimizer: the parameter keeps its address
    assert _counts() == (1, 3)


def test_each_shape_has_its_own_recording() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * 3

    compiled = torch.compile(fn, mode="reduce-overhead", dynamic=True)
    for n in (5, 7, 5, 7, 9):
        x = torch.randn(n, device="flagos")
        torch.testing.assert_close(compiled(x).cpu(), fn(x.cpu()))
    assert _counts() == (3, 2)


def test_outputs_that_share_a_storage_still_share_one() -> None:
    from torch_fl.compile.graph_replay import GraphedFunction

    def model(inputs: list[Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
        (x,) = inputs
        inputs.clear()
        base = x * 2
        return base, base[1:].view(2, 2), 7

    graphed = GraphedFunction(model, [torch.zeros(5, device="flagos")], (), (), 0)
    graphed([torch.zeros(5, device="flagos")])  # the warm-up run, then the capture
    x = torch.arange(5.0, device="flagos")
    base, view, seven = graphed([x])
    assert seven == 7 and view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert view.storage_offset() == 1 and view.stride() == (2, 1)
    torch.testing.assert_close(view.cpu(), torch.tensor([[2.0, 4.0], [6.0, 8.0]]))
    graphed([torch.ones(5, device="flagos")])
    torch.testing.assert_close(base.cpu(), x.cpu() * 2)  # the next replay left this call's outputs alone


def test_a_static_input_that_moves_is_copied_from_then_on(caplog: pytest.LogCaptureFixture) -> None:
    from torch_fl.compile.graph_replay import GraphedFunction

    def model(inputs: list[Any]) -> list[torch.Tensor]:
        weight, x = inputs
        inputs.clear()
        return [weight * x]

    weight = torch.full((4,), 2.0, device="flagos")
    graphed = GraphedFunction(model, [weight, weight], (0,), (), 0)
    x = torch.ones(4, device="flagos")
    for _ in range(2):
        graphed([weight, x])
    with caplog.at_level("INFO", logger="torch_fl.compile"):
        for scale in (3.0, 4.0):  # a new tensor each step, as a backward's saved activations are
            (out,) = graphed([torch.full((4,), scale, device="flagos"), x])
            torch.testing.assert_close(out.cpu(), torch.full((4,), scale))
    assert not graphed.static_idxs
    assert _counts() == (2, 2)  # one re-recording, then replays
    assert any("moved" in r.getMessage() for r in caplog.records)


def test_a_cpu_tensor_input_runs_without_graphs_with_a_note(caplog: pytest.LogCaptureFixture) -> None:
    from torch_fl.compile.graph_replay import GraphedFunction

    def model(inputs: list[Any]) -> list[torch.Tensor]:
        scale, x = inputs
        inputs.clear()
        return [x * scale.item()]

    graphed = GraphedFunction(model, [torch.tensor(2.0), torch.ones(2, device="flagos")], (), (), 0)
    with caplog.at_level("WARNING", logger="torch_fl.compile"):
        for scale in (2.0, 3.0):
            (out,) = graphed([torch.tensor(scale), torch.ones(2, device="flagos")])
            torch.testing.assert_close(out.cpu(), torch.full((2,), scale))
    assert _counts() == (0, 0)
    notes = [r.getMessage() for r in caplog.records if "runs without CUDA graphs" in r.getMessage()]
    assert len(notes) == 1 and "CPU tensor inputs" in notes[0]


def test_a_training_step_matches_eager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    reference.load_state_dict(model.state_dict())
    model = model.to("flagos")
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for _ in range(4):
        x = torch.randn(4, 8)
        for m, optimizer, device in ((compiled, optimizers[0], "flagos"), (reference, optimizers[1], "cpu")):
            optimizer.zero_grad()
            m(x.to(device)).square().mean().backward()
            optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.detach().cpu(), theirs.detach(), atol=2e-5, rtol=1e-4)
    captures, replays = _counts()
    assert captures >= 2 and replays >= 4  # the forward and the backward graph, replayed in later steps


@pytest.mark.usefixtures("stand_in")
def test_each_compiled_graph_captures_into_a_pool_of_its_own() -> None:
    """A pool id outlives nothing: PyTorch frees a pool with its last graph, and a capture into a freed pool's id
    fails; so two compiled graphs never share one, and one graph's recordings (here two shapes) do."""
    def first(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    def second(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * 2

    # dynamic: one graph for both sizes, recorded once per size
    compiled_first = torch.compile(first, mode="reduce-overhead", dynamic=True)
    compiled_second = torch.compile(second, mode="reduce-overhead", dynamic=True)
    for n in (4, 8):
        compiled_first(torch.randn(n, device="flagos"))
    compiled_second(torch.randn(4, device="flagos"))
    assert len(POOLS_USED) == 3
    assert POOLS_USED[0] == POOLS_USED[1] != POOLS_USED[2]
