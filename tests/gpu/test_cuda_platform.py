"""The cuda platform on a real GPU: every result compared with native `cuda` tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from op_cases import CASES, F32, Case, flat

pytestmark = pytest.mark.gpu


def _params() -> list[object]:
    return [pytest.param(c, d, id=f"{c.name}-{str(d).removeprefix('torch.')}") for c in CASES for d in c.dtypes]


@pytest.mark.parametrize(("case", "dtype"), _params())
def test_forward_matches_native_cuda(case: Case, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    inputs = list(case.inputs(dtype, g))
    expected = flat(case.fn(*[t.to("cuda") for t in inputs]))
    actual = flat(case.fn(*[t.to("flagos") for t in inputs]))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device.type == "flagos" and a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e.cpu(), **case.tol)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES if c.grad and F32 in c.dtypes])
def test_backward_matches_native_cuda(case: Case) -> None:
    g = torch.Generator().manual_seed(1)
    inputs = list(case.inputs(F32, g))

    def grads(device: str) -> list[torch.Tensor | None]:
        leaves = [t.detach().to(device, copy=True).requires_grad_(t.is_floating_point()) for t in inputs]
        outs = [o for o in flat(case.fn(*leaves)) if o.requires_grad]
        weights = torch.Generator().manual_seed(2)
        sum((o * torch.rand(o.shape, generator=weights).to(device)).sum() for o in outs).backward()
        return [leaf.grad for leaf in leaves]

    for a, e in zip(grads("flagos"), grads("cuda")):
        assert (a is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(a.cpu(), e.cpu(), **case.tol)


def test_results_are_zero_copy_and_share_the_cuda_pool() -> None:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    assert torch.flagos.memory_allocated() == before
    x = torch.randn(1024, 1024, device="flagos")
    y = x @ x
    assert torch.cuda.memory_allocated() - before >= 2 * 1024 * 1024 * 4
    assert torch.flagos.memory_allocated() == torch.cuda.memory_allocated()
    assert torch.flagos.max_memory_allocated() == torch.cuda.max_memory_allocated()
    assert torch.flagos.memory_reserved() == torch.cuda.memory_reserved()
    # The flagos result lives in memory the CUDA allocator handed out: a CUDA view of it agrees.
    del x, y
    assert torch.flagos.memory_allocated() == before


def test_training_loop_matches_native_cuda() -> None:
    def train(device: str) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(8 * 8 * 8, 10),
        ).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(16, 3, 8, 8, generator=g).to(device), torch.randint(0, 10, (16,), generator=g).to(device)
        losses = []
        for _ in range(8):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    assert train("flagos") == pytest.approx(train("cuda"), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scaled_dot_product_attention_forward_and_backward(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 8, 128, 64, generator=g).to(dtype) for _ in range(3))

    def run(device: str) -> list[torch.Tensor]:
        leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        out.float().square().sum().backward()
        return [out, *[leaf.grad for leaf in leaves]]

    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    for a, e in zip(run("flagos"), run("cuda")):
        assert a.device.type == "flagos"
        torch.testing.assert_close(a.cpu(), e.cpu(), **tol)


def test_streams_are_cuda_streams_and_events_order_work() -> None:
    s1, s2 = torch.flagos.Stream(), torch.flagos.Stream()
    with torch.flagos.stream(s1):
        assert torch.cuda.current_stream().stream_id == s1.stream_id
        a = torch.full((4096, 4096), 1.0, device="flagos")
        for _ in range(20):
            a = a @ a / 4096
        done = torch.flagos.Event()
        done.record()
    with torch.flagos.stream(s2):
        s2.wait_event(done)  # without this wait, s2 could read `a` before s1 wrote it
        b = a.sum()
    s2.synchronize()
    assert b.item() == pytest.approx(4096 * 4096)
    assert torch.cuda.current_stream().stream_id == torch.flagos.current_stream().stream_id


def test_events_time_gpu_work() -> None:
    start, end = torch.flagos.Event(enable_timing=True), torch.flagos.Event(enable_timing=True)
    x = torch.randn(4096, 4096, device="flagos")
    start.record()
    for _ in range(10):
        x = x @ x / 64
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_out_of_memory_is_clear_and_the_process_keeps_working() -> None:
    free, total = torch.flagos.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total * 2, dtype=torch.uint8, device="flagos")
    x = torch.ones(1000, device="flagos")
    assert (x + x).sum().item() == 2000.0


def test_rng_reproducible_and_per_device() -> None:
    torch.flagos.manual_seed(123)
    a = [torch.randn(1000, device="flagos").cpu(), F.dropout(torch.ones(1000, device="flagos"), 0.5).cpu()]
    torch.flagos.manual_seed(123)
    b = [torch.randn(1000, device="flagos").cpu(), F.dropout(torch.ones(1000, device="flagos"), 0.5).cpu()]
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    state = torch.flagos.get_rng_state()
    c = torch.rand(10, device="flagos").cpu()
    torch.flagos.set_rng_state(state)
    assert torch.equal(torch.rand(10, device="flagos").cpu(), c)


def test_routing_defaults_to_cuda_and_cpu_is_explicit() -> None:
    import torch_fl
    from torch_fl import routing

    assert torch_fl.provider_for("add.Tensor") == "cuda"
    assert torch_fl.build_config.KERNEL_SETS == ("native", "cuda", "cpu")
    routing.install(routing.load("cuda", environ={"FLAGOS_OP_mm": "cpu"}), log_dispatch=False)
    try:
        a = torch.randn(64, 64)
        torch.testing.assert_close((a.to("flagos") @ a.to("flagos")).cpu(), a @ a, atol=1e-4, rtol=1e-4)
        assert torch_fl.provider_for("mm") == "cpu"
    finally:
        routing.install(routing.load("cuda", environ={}), log_dispatch=False)
