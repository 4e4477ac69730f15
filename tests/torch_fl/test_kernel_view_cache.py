"""Kernel views cached on flagos tensors, and kernel results that become flagos tensors in place.

An operator call hands each flagos argument to the kernel device's kernel as a
kernel view; the view of a tensor is kept (per thread) and handed out again
while it still is what a fresh view would be.  Every test here first runs an
operator on a tensor, so that its view is cached, then changes the tensor in one
way a view could miss, then runs an operator again and compares with the CPU.
A stale view would read the old memory or the old geometry: these tests fail.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

DEV = "flagos"


def through_kernel(t: torch.Tensor) -> torch.Tensor:
    """`t` read by a routed kernel (through its kernel view), back on the CPU."""
    return (t + 0).cpu()


def cache_view_of(*tensors: torch.Tensor) -> None:
    for t in tensors:
        through_kernel(t)


def test_in_place_writes_are_seen() -> None:
    a = torch.arange(6.0, device=DEV)
    cache_view_of(a)
    a.mul_(3)
    a[2] = -1.0
    assert through_kernel(a).tolist() == [0.0, 3.0, -1.0, 9.0, 12.0, 15.0]


def test_set_to_another_storage_with_the_same_geometry() -> None:
    a = torch.zeros(4, device=DEV)
    other = torch.arange(4.0, device=DEV)
    cache_view_of(a)
    a.set_(other.untyped_storage(), 0, (4,), (1,))  # only the storage differs
    assert through_kernel(a).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_set_to_another_offset_of_the_same_storage() -> None:
    a = torch.arange(8.0, device=DEV)
    b = a[:3]
    cache_view_of(b)
    b.set_(a.untyped_storage(), 4, (3,), (1,))  # only the offset differs
    assert through_kernel(b).tolist() == [4.0, 5.0, 6.0]


def test_as_strided_changes_only_the_strides() -> None:
    a = torch.arange(8.0, device=DEV)
    b = a[:4]
    cache_view_of(b)
    b.as_strided_((4,), (2,))
    assert through_kernel(b).tolist() == [0.0, 2.0, 4.0, 6.0]


def test_resize_smaller_and_larger() -> None:
    a = torch.arange(6.0, device=DEV)
    cache_view_of(a)
    a.resize_(2, 2)
    assert through_kernel(a).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    a.resize_(64)  # new memory: the view's pointer is stale now
    a.copy_(torch.arange(64.0))
    assert through_kernel(a).tolist() == [float(i) for i in range(64)]


def test_storage_resize_moves_the_memory() -> None:
    a = torch.arange(4.0, device=DEV)
    cache_view_of(a)
    a.untyped_storage().resize_(1 << 16)  # same tensor geometry, new memory
    a.copy_(torch.tensor([9.0, 8.0, 7.0, 6.0]))  # written through the copy path, not a view
    assert through_kernel(a).tolist() == [9.0, 8.0, 7.0, 6.0]


def test_data_assignment_swaps_the_storage() -> None:
    p = torch.nn.Parameter(torch.zeros(4, device=DEV))
    cache_view_of(p.detach(), p)
    old = p.data  # keeps the old memory (zeros) from being reused
    p.data = torch.full((4,), 7.0, device=DEV)
    assert old.tolist() == [0.0] * 4
    assert through_kernel(p.detach()).tolist() == [7.0] * 4
    assert through_kernel(p).tolist() == [7.0] * 4


def test_data_assignment_that_changes_only_the_dtype() -> None:
    a = torch.tensor([1.0, -2.0], device=DEV)
    cache_view_of(a)
    a.data = a.view(torch.int32)  # same storage, sizes, strides and offset
    expected = torch.tensor([1.0, -2.0]).view(torch.int32)
    got = through_kernel(a)
    assert got.dtype == torch.int32 and torch.equal(got, expected)


def test_swap_tensors() -> None:
    x = torch.zeros(3, device=DEV)
    y = torch.ones(5, device=DEV)
    cache_view_of(x, y)
    torch.utils.swap_tensors(x, y)
    assert through_kernel(x).tolist() == [1.0] * 5
    assert through_kernel(y).tolist() == [0.0] * 3


def test_conjugate_and_negative_bits_set_in_place() -> None:
    z = torch.tensor([1 + 2j, 3 - 1j], device=DEV)
    cache_view_of(z)
    torch._C._set_conj(z, True)
    assert through_kernel(z).tolist() == [1 - 2j, 3 + 1j]
    r = torch.tensor([1.0, -2.0], device=DEV)
    cache_view_of(r)
    torch._C._set_neg(r, True)
    assert through_kernel(r).tolist() == [-1.0, 2.0]


def test_conjugate_and_negative_views_of_a_cached_tensor() -> None:
    z = torch.tensor([1 + 2j, 3 - 1j], device=DEV)
    cache_view_of(z)
    assert through_kernel(z.conj()).tolist() == [1 - 2j, 3 + 1j]
    assert through_kernel(torch._neg_view(z)).tolist() == [-1 - 2j, -3 + 1j]
    assert through_kernel(z).tolist() == [1 + 2j, 3 - 1j]


def test_out_argument_resized_by_the_kernel() -> None:
    a = torch.arange(6.0, device=DEV)
    out = torch.empty(0, device=DEV)
    cache_view_of(out)
    torch.add(a, a, out=out)  # the kernel resizes its view of `out`
    assert out.shape == (6,)
    assert through_kernel(out).tolist() == [2.0 * i for i in range(6)]
    torch.mul(a, 3, out=out)  # same size now: written in place through the cached view
    assert through_kernel(out).tolist() == [3.0 * i for i in range(6)]


def test_memory_a_kernel_gives_an_out_argument_becomes_the_argument_s_own() -> None:
    base = torch.flagos.memory_allocated()
    out = torch.empty(0, device=DEV)
    for n in (5, 300, 300, 7000):  # each growth: the kernel gives its view of `out` new memory
        torch.arange(n, out=out.resize_(0))
        assert out.untyped_storage().device == torch.device(DEV, 0)
        assert through_kernel(out).tolist() == list(range(n))
    assert torch.flagos.memory_allocated() >= base + 7000 * out.element_size()
    out.untyped_storage().resize_(1 << 16)  # the flagos allocator's memory now: it grows on the device
    assert out.tolist() == list(range(7000))
    del out
    assert torch.flagos.memory_allocated() == base


def test_out_argument_resized_while_another_argument_shares_its_storage() -> None:
    base = torch.arange(6.0, device=DEV)
    out = base[:0]
    torch.add(base, 1, out=out)  # the kernel grows the storage `base` shares, keeping its bytes
    expected_base = torch.arange(6.0)
    expected_out = torch.add(expected_base, 1, out=expected_base[:0])
    assert through_kernel(out).tolist() == expected_out.tolist()
    assert through_kernel(base).tolist() == expected_base.tolist()


def test_out_argument_resized_while_a_tensor_outside_the_call_shares_its_storage() -> None:
    base = torch.arange(6.0, device=DEV) + 10
    out = base[1:1]
    torch.arange(12.0, out=out)  # the storage grows: `base` sees the memory the kernel gave the view
    expected_base = torch.arange(6.0) + 10
    expected_out = torch.arange(12.0, out=expected_base[1:1])
    assert through_kernel(out).tolist() == expected_out.tolist()
    assert through_kernel(base).tolist() == expected_base.tolist()
    assert base.untyped_storage().nbytes() == expected_base.untyped_storage().nbytes()


def test_views_of_one_storage_keep_their_own_geometry() -> None:
    base = torch.arange(12.0, device=DEV)
    rows = base.view(3, 4)
    cols = rows.t()
    cache_view_of(base, rows, cols)
    torch.testing.assert_close(through_kernel(cols), torch.arange(12.0).view(3, 4).t())
    torch.testing.assert_close(through_kernel(rows[1]), torch.tensor([4.0, 5.0, 6.0, 7.0]))


def test_tensors_freed_and_made_again_many_times() -> None:
    # New tensors land at the addresses of freed ones (TensorImpls and blocks):
    # a view cached for an old tensor must never serve a new one wrongly.
    for i in range(300):
        shape = (1 + i % 7, 1 + i % 3)
        cpu = torch.randn(shape)
        t = cpu.to(DEV)
        torch.testing.assert_close(through_kernel(t), cpu)
        torch.testing.assert_close((t * t).cpu(), cpu * cpu)
        del t


def test_slots_changing_hands_between_dtypes_devices_and_lazy_bits() -> None:
    # More tensors than the cache has slots, each read once: a slot's view objects are rebound to the tensor
    # that takes the slot over, whatever its dtype, device, geometry, conjugate or negative bit, or the
    # inference mode it is read in.  A field the rebinding missed reads wrong values here.
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    for i in range(6000):
        dtype = (torch.float32, torch.float64, torch.int32, torch.complex64)[i % 4]
        device = f"{DEV}:{i % 2}"
        cpu = torch.arange(1, 1 + (i % 11 + 2) * 3).to(dtype).reshape(-1, 3)
        t = cpu.to(device)
        if i % 3 == 1:
            t, cpu = t.t(), cpu.t()
        if dtype == torch.complex64 and i % 8 == 3:
            t, cpu = t.conj(), cpu.conj()
        if dtype == torch.complex64 and i % 8 == 7:
            t, cpu = torch._neg_view(t), torch._neg_view(cpu)
        with torch.inference_mode(i % 5 == 0):
            got = (t + 0).cpu()
        torch.testing.assert_close(got, cpu + 0, msg=f"tensor {i}: {dtype} on {device}")
        if dtype == torch.float32:
            # An in-place update through a view a slot held since an inference-mode read: the host platform's
            # foreach loop updates each view in place, which an inference tensor refuses outside that mode.
            w = t.clone()
            torch._foreach_mul_([w], 2.0)
            torch.testing.assert_close(w.cpu(), cpu * 2)
        if i % 500 == 0:
            kept.append((t, cpu))
    for t, cpu in kept:
        torch.testing.assert_close((t + 0).cpu(), cpu + 0)


def test_calls_with_many_tensor_arguments_after_each_change() -> None:
    # A call with more tensor arguments than the few recent views (a foreach op, cat) keeps per-tensor views
    # in the thread's table: each change a stale view would miss, then the same lists again.
    xs_cpu = [torch.randn(5 + i % 4) for i in range(40)]
    ys_cpu = [torch.randn(5 + i % 4) for i in range(40)]
    xs, ys = [x.to(DEV) for x in xs_cpu], [y.to(DEV) for y in ys_cpu]

    def check(what: str) -> None:
        for got, want in zip(torch._foreach_add(xs, ys), torch._foreach_add(xs_cpu, ys_cpu)):
            torch.testing.assert_close(got.cpu(), want, msg=what)
        torch.testing.assert_close(torch.cat(xs).cpu(), torch.cat(xs_cpu), msg=what)

    check("first visit")
    check("second visit")
    torch._foreach_mul_(xs, 3.0)
    torch._foreach_mul_(xs_cpu, 3.0)
    check("values written in place")
    fresh = torch.arange(6.0)
    xs[3].set_(fresh.to(DEV).untyped_storage(), 0, (6,), (1,))
    xs_cpu[3] = fresh.clone()
    ys[3].resize_(6).fill_(2.0)
    ys_cpu[3] = torch.full((6,), 2.0)
    xs[7].as_strided_((3,), (2,))
    xs_cpu[7] = xs_cpu[7].as_strided((3,), (2,))
    ys[7], ys_cpu[7] = ys[7][:3], ys_cpu[7][:3]
    xs[9].data = torch.ones(xs_cpu[9].shape, device=DEV)
    xs_cpu[9] = torch.ones(xs_cpu[9].shape)
    check("storage, size, strides and data changed")
    # Freed and made again: new tensors at the old addresses, in another dtype.
    del xs, ys
    xs_cpu = [torch.arange(float(i + 2), dtype=torch.float64) for i in range(40)]
    ys_cpu = [torch.ones(i + 2, dtype=torch.float64) for i in range(40)]
    xs, ys = [x.to(DEV) for x in xs_cpu], [y.to(DEV) for y in ys_cpu]
    check("new tensors in another dtype")


def test_another_thread_sees_changes_made_here() -> None:
    a = torch.zeros(4, device=DEV)
    with ThreadPoolExecutor(max_workers=1) as worker:  # one thread: its cache persists between calls
        assert worker.submit(through_kernel, a).result().tolist() == [0.0] * 4
        a.set_(torch.arange(4.0, device=DEV).untyped_storage(), 0, (4,), (1,))
        assert worker.submit(through_kernel, a).result().tolist() == [0.0, 1.0, 2.0, 3.0]
        a.resize_(2)
        assert worker.submit(through_kernel, a).result().tolist() == [0.0, 1.0]


def test_threads_using_the_same_tensors_at_once() -> None:
    a = torch.arange(1000.0, device=DEV)
    b = torch.ones(1000, device=DEV)
    expected = torch.arange(1000.0) + 1
    failures: list[str] = []

    def work() -> None:
        for _ in range(200):
            if not torch.equal((a + b).cpu(), expected):
                failures.append("wrong sum")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_a_cached_view_keeps_no_device_memory_alive() -> None:
    base = torch.flagos.memory_allocated()
    big = torch.ones(1 << 20, device=DEV)  # 4 MiB
    cache_view_of(big)
    assert torch.flagos.memory_allocated() >= base + (4 << 20)
    del big
    assert torch.flagos.memory_allocated() == base


def test_results_are_plain_flagos_tensors() -> None:
    a = torch.randn(5, device=DEV)
    fresh = torch.empty(5, device=DEV)
    result = a * 2
    assert torch._C._dispatch_keys(result) == torch._C._dispatch_keys(fresh)
    assert result.untyped_storage().device == torch.device(DEV, 0)
    with torch.inference_mode():
        inference_result = a * 2
        assert torch._C._dispatch_keys(inference_result) == torch._C._dispatch_keys(torch.empty(5, device=DEV))
    # The result's storage belongs to the device allocator: it grows on the device.
    result.untyped_storage().resize_(1 << 12)
    assert result.untyped_storage().device == torch.device(DEV, 0)
    torch.testing.assert_close(result.cpu(), a.cpu() * 2)


def test_results_are_accounted_as_device_memory() -> None:
    a = torch.ones(1 << 18, device=DEV)  # 1 MiB
    before = torch.flagos.memory_allocated()
    result = a + a
    assert torch.flagos.memory_allocated() == before + (1 << 20)
    del result
    assert torch.flagos.memory_allocated() == before


def test_results_on_the_second_device() -> None:
    a = torch.arange(4.0, device="flagos:1")
    result = a + 1
    assert result.device == torch.device(DEV, 1)
    assert result.untyped_storage().device == torch.device(DEV, 1)
    assert result.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_result_aliasing_an_argument_shares_its_memory() -> None:
    a = torch.arange(4.0, device=DEV)
    alias = torch.ops.aten.alias(a)
    assert alias.device == a.device and alias.data_ptr() == a.data_ptr()
    alias[0] = 42.0
    assert a[0].item() == 42.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64])
def test_results_of_each_dtype(dtype: torch.dtype) -> None:
    cpu = torch.arange(6).to(dtype).reshape(2, 3)
    t = cpu.to(DEV)
    torch.testing.assert_close(t.t().contiguous().cpu(), cpu.t().contiguous())
    torch.testing.assert_close(torch.where(t.bool(), t, t).cpu(), cpu)
