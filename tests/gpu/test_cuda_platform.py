"""The cuda platform on a real GPU: every result compared with native `cuda` tensors, computed by
PyTorch's own CUDA backend in the reference interpreter (reference.py; fixtures in conftest.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gpu_cases import (BACKWARD_CASES, NATIVE_CUDA_API, SDPA_DTYPES, backward_grads, case_id, flash_attention, sdpa,
                       train_losses)
from op_cases import Case, dtype_params, flat

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("case", "dtype"), dtype_params())
def test_forward_matches_native_cuda(case: Case, dtype: torch.dtype, inputs: dict, native: dict) -> None:
    key = case_id(case, dtype)
    expected = native["forward"][key]
    actual = flat(case.fn(*[t.to("flagos") for t in inputs["forward"][key]]))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device.type == "flagos" and a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, **case.tol)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in BACKWARD_CASES])
def test_backward_matches_native_cuda(case: Case, inputs: dict, native: dict) -> None:
    expected = native["backward"][case.name]
    for a, e in zip(backward_grads(case.name, inputs["backward"][case.name], "flagos"), expected):
        assert (a is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(a, e, **case.tol)


def test_results_are_zero_copy_and_share_the_cuda_pool() -> None:
    if NATIVE_CUDA_API:
        # torch.cuda's statistics read 0 until its Python side is initialised, whatever the allocator holds.
        torch.cuda.init()
    # A process's first matrix product allocates cuBLAS's workspace from the caching allocator, and it stays.
    torch.ones(8, 8, device="flagos") @ torch.ones(8, 8, device="flagos")
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    if NATIVE_CUDA_API:
        assert torch.cuda.memory_allocated() == before
    x = torch.randn(1024, 1024, device="flagos")
    y = x @ x
    assert torch.flagos.memory_allocated() - before >= 2 * 1024 * 1024 * 4
    if NATIVE_CUDA_API:
        assert torch.flagos.memory_allocated() == torch.cuda.memory_allocated()
        assert torch.flagos.max_memory_allocated() == torch.cuda.max_memory_allocated()
        assert torch.flagos.memory_reserved() == torch.cuda.memory_reserved()
    del x, y
    assert torch.flagos.memory_allocated() == before


def test_training_loop_matches_native_cuda(inputs: dict, native: dict) -> None:
    train = inputs["train"]
    losses = train_losses("flagos", train["state"], train["x"], train["y"])
    assert losses == pytest.approx(native["train"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("dtype", SDPA_DTYPES, ids=str)
def test_scaled_dot_product_attention_forward_and_backward(dtype: torch.dtype, inputs: dict, native: dict) -> None:
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    for a, e in zip(sdpa("flagos", *inputs["sdpa"][str(dtype)]), native["sdpa"][str(dtype)]):
        torch.testing.assert_close(a, e, **tol)


def test_overrideable_fused_attention_runs_cudas_flash_kernel(inputs: dict, native: dict) -> None:
    for a, e in zip(flash_attention("flagos", *inputs["sdpa"][str(torch.bfloat16)]), native["flash"]):
        torch.testing.assert_close(a, e, atol=2e-2, rtol=2e-2)


def test_streams_are_cuda_streams_and_events_order_work() -> None:
    s1, s2 = torch.flagos.Stream(), torch.flagos.Stream()
    with torch.flagos.stream(s1):
        if NATIVE_CUDA_API:
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
    if NATIVE_CUDA_API:
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


def test_default_generator_is_cudas_own_and_new_generators_are_apart() -> None:
    # flagos:0 is cuda:0: its default generator is CUDA's, so a seeded kernel without a
    # generator argument (dropout) draws the same numbers on both devices.
    torch.flagos.manual_seed(7)
    on_flagos = F.dropout(torch.ones(1000, device="flagos"), 0.5).cpu()
    if NATIVE_CUDA_API:
        torch.cuda.manual_seed(7)
        assert torch.equal(F.dropout(torch.ones(1000, device="cuda"), 0.5).cpu(), on_flagos)
    # A generator of one's own leaves the default one where it was.
    state = torch.flagos.get_rng_state()
    g = torch.Generator(device="flagos").manual_seed(7)
    first = torch.rand(10, device="flagos", generator=g).cpu()
    assert torch.equal(torch.flagos.get_rng_state(), state)
    assert torch.equal(torch.rand(10, device="flagos", generator=g.manual_seed(7)).cpu(), first)


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
