"""Dynamo's device interface for ``flagos``: what dynamo and inductor ask a device at trace and compile time.

Streams and events are the device module's (plain ``torch.Stream``/``torch.Event``
on a flagos device, so dynamo traces stream code as it does CUDA's).  Inductor's
compile workers are subprocesses that must not touch the runtime, so, as for CUDA,
the ``Worker`` answers from properties cached in the parent before the pool starts.
This module imports ``torch._dynamo``: it is loaded only once dynamo is (see
``post_import``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torch_fl import _build_config, _C, flagos

_DEVICE = "flagos"

# What a compile worker knows of the parent's devices (the parent fills it before the pool forks).
_worker_properties: dict[int, Any] = {}
_worker_current: list[int] = []


def _properties(index: int) -> Any:
    # The one definition of a flagos device's properties (torch.flagos.get_device_properties).
    return flagos.get_device_properties(index)


def _index(device: torch.types.Device) -> int:
    if device is None:
        return FlagosInterface.Worker.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != _DEVICE:
        raise ValueError(f"expected a flagos device, got {d}")
    return FlagosInterface.Worker.current_device() if d.index is None else d.index


def _exchange_device(index: int) -> int:
    previous = flagos.current_device()
    if index >= 0 and index != previous:
        flagos.set_device(index)
    return previous


class FlagosInterface(DeviceInterface):
    device = flagos.device  # type: ignore[assignment]
    Event = flagos.Event  # type: ignore[assignment]
    Stream = flagos.Stream  # type: ignore[assignment]

    class Worker:  # type: ignore[no-redef]
        @staticmethod
        def set_device(device: int) -> None:
            _worker_current[:] = [device]

        @staticmethod
        def current_device() -> int:
            return _worker_current[0] if _worker_current else flagos.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            index = _index(device)
            if not _worker_properties:
                _worker_properties.update({i: _properties(i) for i in range(flagos.device_count())})
            return _worker_properties[index]

    current_device = staticmethod(flagos.current_device)
    set_device = staticmethod(flagos.set_device)
    device_count = staticmethod(flagos.device_count)
    stream = staticmethod(flagos.stream)  # type: ignore[assignment]
    current_stream = staticmethod(flagos.current_stream)
    set_stream = staticmethod(flagos.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(flagos.synchronize)
    memory_allocated = staticmethod(flagos.memory_allocated)
    exchange_device = staticmethod(_exchange_device)
    maybe_exchange_device = staticmethod(_exchange_device)
    # The native handle of flagos's current stream: on the cuda platform the cudaStream_t that Triton launches on
    # (a flagos stream is the CUDA stream of the same id); the host platform's C++ kernels take none.
    get_raw_stream = staticmethod(_C._current_raw_stream)  # type: ignore[attr-defined]

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        flagos.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def is_available() -> bool:
        return flagos.is_available()

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> Any:
        return cls.Worker.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        props = FlagosInterface.Worker.get_device_properties(device)
        major = getattr(props, "major", None)
        return "" if major is None else major * 10 + props.minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return torch.bfloat16 in flagos.get_amp_supported_dtype()

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return _build_config.COMPILE == "triton" and FlagosInterface.get_compute_capability(device) != ""

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if not FlagosInterface.is_triton_capable(device):
            raise RuntimeError(f"the flagos {_C._platform()} platform compiles with inductor's C++ backend, "
                               "not Triton; leave torch._inductor.config.cpu_backend at 'cpp'")


def register(_module: object = None) -> None:
    """Register the interface for ``flagos`` and each ``flagos:<index>``, as dynamo does for CUDA."""
    register_interface_for_device(_DEVICE, FlagosInterface)
    for index in range(flagos.device_count()):
        register_interface_for_device(f"{_DEVICE}:{index}", FlagosInterface)
