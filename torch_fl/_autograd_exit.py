"""Let autograd's flagos device threads release finished backward passes before the interpreter finalises.

A backward pass on flagos tensors runs on autograd's worker thread for the flagos device.  The worker
drops its reference to the finished pass a moment after the caller's ``backward()`` has returned, and the
pass still holds Python objects (``torch.autograd`` stashes the caller's ``contextvars`` context in it).
When that last drop falls after the interpreter has begun to finalise, the worker must take the GIL to
release the object, Python ends the thread with ``pthread_exit`` inside a C++ destructor, and the process
aborts with ``terminate called without an active exception``.

At exit this module runs one tiny backward pass per flagos device that has held memory, from C++ with the
GIL released and with no Python object anywhere in it (a pass started from Python would itself hold
Python tensors).  Each device thread handles its queue in order, so by the time it has run that pass it
has released the previous one while the interpreter was still whole.  The wait is bounded like PyTorch's
own at shutdown (TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT, 10 s): a worker stuck in a user's hook must not hang
the exit.
"""

from __future__ import annotations

import atexit
import os

from torch_fl import _C


def _used_devices() -> list[int]:
    """Devices that allocated (since the last reset of the counters, or still hold memory): a backward pass
    can only have run on these, and asking an unused GPU would create its context at exit."""
    used = []
    for index in range(_C._device_count()):
        allocations = _C._memory_stats(index)["allocation"]
        if allocations["allocated"] > 0 or allocations["current"] > 0:
            used.append(index)
    return used


def _wait_limit() -> float:
    try:
        return float(os.environ.get("TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT", "10"))
    except ValueError:
        return 10.0


def drain_device_threads(timeout_s: float | None = None) -> bool:
    """Make every used flagos device's autograd thread finish with the backward passes queued before it;
    False when one did not within the limit."""
    limit = _wait_limit() if timeout_s is None else timeout_s
    # A list, not a generator: every device is drained even after one timed out.
    return all([_C._drain_autograd_device_thread(index, limit) for index in _used_devices()])


def _drain_at_exit() -> None:
    try:
        drain_device_threads()
    except Exception:  # noqa: BLE001 - a device that fails at exit (a lost GPU) has no pass left to drain
        pass


def install() -> None:
    atexit.register(_drain_at_exit)
