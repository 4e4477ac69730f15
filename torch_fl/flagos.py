"""The ``torch.flagos`` device module (also ``torch_fl.flagos``).

Mirrors ``torch.cuda`` for what programs and libraries reach for: devices and their properties,
streams and events, RNG, memory statistics in CUDA's formats, and AMP support.  The memory formats
live in ``_memory``, the device facts in ``_device_facts``; docs/device-api.md says where an answer
differs from CUDA's and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torch_fl import _C, _device_facts
from torch_fl._device_index import DeviceLike as _DeviceLike
from torch_fl._device_index import device_index as _index

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device", "device", "synchronize",
    "get_device_name", "get_device_properties", "get_device_capability", "is_bf16_supported", "utilization",
    "ipc_collect",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "default_generators",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "memory_stats_as_nested_dict", "memory_summary", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "empty_cache", "mem_get_info", "set_per_process_memory_fraction",
    "get_per_process_memory_fraction", "memory_snapshot", "memory",
    "get_amp_supported_dtype",
    "CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
]

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

    problem = _C._configuration_error()
    if problem:  # the runtime's own setting (FLAGOS_HOST_DEVICES=two): its message names the fix
        raise RuntimeError(problem)
    routing.check_usable()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    return f"flagos {_C._platform()} device {_index(device)}"


def init() -> None:
    """Initialises flagos, as ``torch.cuda.init`` does: raises here, in one line, where a setting makes the
    device unusable (otherwise the runtime is already up: it starts when the plugin loads)."""
    _lazy_init()


def get_device_properties(device: _DeviceLike = None) -> Any:
    """The device's properties: ``torch.cuda``'s on the cuda platform, else an emulated device's
    (``name``, ``total_memory``, ``multi_processor_count``; no ``major``/``minor``)."""
    idx = _index(device)
    return _device_facts.device_properties(idx, get_device_name(idx))


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    """(major, minor) of the device's compute capability; (0, 0) where it has none (the host platform)."""
    idx = _index(device)
    return _device_facts.device_capability(idx, get_device_name(idx))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return _device_facts.is_bf16_supported(including_emulation)


def utilization(device: _DeviceLike = None) -> int:
    """Percent of time over the past sample period during which a kernel ran (torch.cuda's meaning); raises
    RuntimeError where the runtime does not report it."""
    return _device_facts.utilization(_index(device))


def ipc_collect() -> None:
    """``torch.cuda.ipc_collect``: frees memory another process no longer uses through IPC.  A no-op where
    flagos memory cannot be shared between processes (the host platform: its device memory is private to
    the process), as ``torch.cuda.ipc_collect`` on the cuda platform otherwise."""
    module = _device_facts.kernel_device_module()
    if module is not None:
        module.ipc_collect()


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


# ---- memory: torch.flagos.memory, as torch.cuda.memory -------------------------

from torch_fl import memory  # noqa: E402
from torch_fl.memory import (  # noqa: E402
    empty_cache, get_per_process_memory_fraction, max_memory_allocated, max_memory_reserved, mem_get_info,
    memory_allocated, memory_reserved, memory_snapshot, memory_stats, memory_stats_as_nested_dict, memory_summary,
    reset_accumulated_memory_stats, reset_max_memory_allocated, reset_peak_memory_stats,
    set_per_process_memory_fraction,
)


# ---- AMP --------------------------------------------------------------------

def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


# ---- graph capture ----------------------------------------------------------

from torch_fl.graphs import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing  # noqa: E402
