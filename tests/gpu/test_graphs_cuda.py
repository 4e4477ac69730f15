"""Graph capture on flagos (torch.flagos.CUDAGraph, torch.flagos.graph) on a real GPU: a captured step
replays what eager flagos computes, with new inputs copied into the captured ones, on flagos memory."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_a_captured_step_replays_eager_results_with_new_inputs() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("flagos")
    static_x = torch.randn(4, 64, device="flagos")
    side = torch.flagos.Stream()
    side.wait_stream(torch.flagos.current_stream())
    with torch.no_grad(), torch.flagos.stream(side):
        for _ in range(3):
            model(static_x)
    torch.flagos.current_stream().wait_stream(side)
    graph = torch.flagos.CUDAGraph()
    with torch.no_grad(), torch.flagos.graph(graph):
        static_y = model(static_x)
    assert static_y.device.type == "flagos"
    for _ in range(3):
        x = torch.randn(4, 64, device="flagos")
        static_x.copy_(x)
        graph.replay()
        with torch.no_grad():
            torch.testing.assert_close(static_y, model(x))


def test_random_ops_draw_fresh_numbers_on_every_replay() -> None:
    # The graph registers CUDA's default generator, flagos's engine: each replay advances its offset.
    x = torch.ones(4096, device="flagos")
    graph = torch.flagos.CUDAGraph()
    torch.nn.functional.dropout(x, 0.5)  # warm-up
    torch.flagos.synchronize()
    with torch.flagos.graph(graph):
        y = torch.nn.functional.dropout(x, 0.5)
    graph.replay()
    first = y.clone()
    graph.replay()
    assert not torch.equal(first, y)
    assert 0.4 < (y == 0).float().mean().item() < 0.6


def test_graphs_share_a_memory_pool_and_know_they_are_capturing() -> None:
    pool = torch.flagos.graph_pool_handle()
    x = torch.randn(256, device="flagos")
    graphs, outputs, seen = [], [], []
    for scale in (2.0, 3.0):
        graph = torch.flagos.CUDAGraph()
        with torch.flagos.graph(graph, pool=pool):
            seen.append(torch.flagos.is_current_stream_capturing())
            outputs.append(x * scale)
        graphs.append(graph)
    assert seen == [True, True] and not torch.flagos.is_current_stream_capturing()
    for graph in graphs:
        graph.replay()
    torch.testing.assert_close(outputs[0], x * 2)
    torch.testing.assert_close(outputs[1], x * 3)
