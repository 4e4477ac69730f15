"""The ``torch.flagos`` device module (also ``torch_fl.flagos``).

Mirrors the shape of ``torch.cuda`` for the parts a training program uses:
devices, streams and events, RNG, memory statistics and AMP support.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Union

import torch

from torch_fl import _C

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "device", "synchronize",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "default_generators",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "mem_get_info",
    "get_amp_supported_dtype", "get_device_name",
    "CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
]

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None) -> int:
    """Device index of ``device`` (None: the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "flagos":
        raise ValueError(f"expected a flagos device, got {d}")
    return current_device() if d.index is None else d.index


def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    return True


# The runtime initialises when the plugin loads.  torch.utils.checkpoint reads this attribute (not
# is_initialized()) to decide whether to stash and restore flagos's RNG state around a recomputed forward:
# without it, dropout inside a checkpointed block would draw other masks in backward.
_initialized = True


def _is_in_bad_fork() -> bool:
    """torch.manual_seed asks this before seeding; the host runtime survives fork."""
    return False


def _lazy_init() -> None:
    """torch calls this before a tensor is made on flagos (``torch::utils::device_lazy_init``).

    The runtime initialised when the plugin loaded; what can still stop flagos here is an unusable
    setting that import only warned about.  Raising makes torch leave the device uninitialised, so
    every later use raises the same one-line error.
    """
    from torch_fl import routing

    routing.check_usable()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    return f"flagos {_C._platform()} device {_index(device)}"


class device:
    """Context manager that makes ``device`` current and restores the previous one."""

    def __init__(self, device: _DeviceLike) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.prev_idx)


def synchronize(device: _DeviceLike = None) -> None:
    _C._synchronize(_index(device))


class _OnFlagos(type):
    """isinstance(x, torch.flagos.Stream) holds for any torch.Stream on a flagos device."""

    def __instancecheck__(cls, obj: object) -> bool:
        base = cls.__mro__[1]
        return isinstance(obj, base) and getattr(obj, "device", None) is not None and obj.device.type == "flagos"


# PyTorch's C++ stream/event methods accept only exact torch.Stream/torch.Event
# objects (elapsed_time(other) rejects subclasses), so these construct plain
# ones bound to a flagos device.
class Stream(torch.Stream, metaclass=_OnFlagos):
    """A flagos stream: ``torch.Stream`` on a flagos device (default: the current one)."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0) -> torch.Stream:  # type: ignore[misc]
        return torch.Stream(device=torch.device("flagos", _index(device)), priority=priority)


class Event(torch.Event, metaclass=_OnFlagos):
    """A flagos event: ``torch.Event`` on a flagos device (default: the current one)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,  # type: ignore[misc]
                device: _DeviceLike = None) -> torch.Event:
        return torch.Event(device=torch.device("flagos", _index(device)), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    idx = _index(device)
    return torch.Stream(stream_id=0, device_index=idx, device_type=current_stream(idx).device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Makes ``s`` the current stream of its device inside the block (None: no change)."""
    if s is None:
        yield
        return
    previous = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


# ---- random numbers -------------------------------------------------------

default_generators: tuple[torch.Generator, ...] = tuple(_C._default_generator(i) for i in range(_C._device_count()))


def manual_seed(seed: int) -> None:
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    s = default_generators[current_device()].seed() if default_generators else 0
    for g in default_generators:
        g.manual_seed(s)


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(device: _DeviceLike = "flagos") -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "flagos") -> None:
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for g, s in zip(default_generators, new_states):
        g.set_state(s)


# ---- memory -----------------------------------------------------------------

def memory_stats(device: _DeviceLike = None) -> dict[str, Any]:
    """The caching allocator's statistics for ``device`` (aggregate pool)."""
    return _C._memory_stats(_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes"]["current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes"]["peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes"]["current"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes"]["peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    _C._empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``."""
    return _C._mem_get_info(_index(device))


# ---- AMP --------------------------------------------------------------------

def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


# ---- graph capture ----------------------------------------------------------

from torch_fl.graphs import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing  # noqa: E402
