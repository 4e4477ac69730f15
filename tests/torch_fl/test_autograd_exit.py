"""A process that ends right after a backward pass on flagos exits cleanly.

autograd's flagos worker thread drops a finished pass a moment after ``backward()`` returns; the pass
holds Python objects, so a drop that lands after the interpreter began to finalise aborted the process.
torch_fl drains the device threads at exit.
"""

from __future__ import annotations

import sys
import weakref

import pytest

torch = pytest.importorskip("torch")


class _Probe:
    """A Python object a backward pass carries in its thread-local state."""


def test_draining_releases_every_finished_pass_python_state() -> None:
    from torch_fl import _autograd_exit

    probe = _Probe()
    released = weakref.ref(probe)
    # With a long switch interval this thread keeps the GIL until it blocks, so the worker cannot release
    # the pass behind its back: only the drain's own wait lets it.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        torch._C._stash_obj_in_tls("probe", probe)
        try:
            leaf = torch.ones(4, device="flagos:1", requires_grad=True)
            (leaf * 3).sum().backward()
        finally:
            torch._C._remove_obj_from_tls("probe")
        del probe
        _autograd_exit.drain_device_threads()
        assert released() is None, "a finished backward pass still holds its Python state after the drain"
    finally:
        sys.setswitchinterval(interval)
    assert leaf.grad.cpu().tolist() == [3.0] * 4


def test_drain_skips_devices_that_never_held_memory(run_python) -> None:  # noqa: ANN001 - conftest fixture
    result = run_python(
        """
        import torch
        from torch_fl import _autograd_exit
        print(_autograd_exit._used_devices())
        torch.ones(2, device="flagos:1")
        print(_autograd_exit._used_devices())
        """
    )
    assert result.stdout.split("\n")[:2] == ["[]", "[1]"]


def test_a_device_thread_stuck_in_a_hook_bounds_the_wait_at_exit() -> None:
    import threading

    from torch_fl import _autograd_exit

    entered, release = threading.Event(), threading.Event()

    class Held(torch.autograd.Function):
        """Its backward, on the flagos device thread, waits until the test lets it go."""

        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
            return x.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
            entered.set()
            release.wait(60)
            return grad

    leaf = torch.ones(2, device="flagos:1", requires_grad=True)
    worker = threading.Thread(target=lambda: Held.apply(leaf).sum().backward(), daemon=True)
    worker.start()
    try:
        assert entered.wait(60)
        assert _autograd_exit.drain_device_threads(timeout_s=0.2) is False
    finally:
        release.set()
        worker.join(60)
    assert _autograd_exit.drain_device_threads(timeout_s=60) is True
    assert leaf.grad.cpu().tolist() == [1.0, 1.0]
