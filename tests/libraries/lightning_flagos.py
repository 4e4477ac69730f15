"""A Lightning accelerator for flagos, written as Lightning's documentation writes a custom accelerator
(lightning.ai/docs/pytorch/stable/extensions/accelerator.html): an ``Accelerator`` subclass that registers
itself in the ``AcceleratorRegistry``.  docs/libraries.md shows this file to users; the library tier runs it.

Lightning chooses the single-device strategy's device and the mixed-precision plugin's autocast device from
its own accelerators only (``_AcceleratorConnector``: any other accelerator gets ``"cpu"`` and ``"cuda"``), so a
Trainer on flagos also names the strategy and, for mixed precision, the precision plugin:
``flagos_trainer_arguments`` gives those three arguments.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import SingleDeviceStrategy


class FlagosAccelerator(Accelerator):
    """Lightning's accelerator for the flagos device (torch_fl)."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "flagos":
            raise ValueError(f"FlagosAccelerator runs on flagos devices, not {device}")
        torch.flagos.set_device(device)

    def teardown(self) -> None:
        pass

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int]:
        if isinstance(devices, str):
            devices = int(devices) if devices.strip() != "-1" else -1
        if isinstance(devices, int):
            return list(range(torch.flagos.device_count() if devices == -1 else devices))
        return list(devices)

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device("flagos", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return torch.flagos.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.flagos.is_available()

    @staticmethod
    def name() -> str:
        return "flagos"

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        return torch.flagos.memory_stats(device)

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register("flagos", cls, description=cls.__doc__)


if "flagos" not in AcceleratorRegistry:
    FlagosAccelerator.register_accelerators(AcceleratorRegistry)


def flagos_trainer_arguments(device: int = 0, precision: str | None = None) -> dict[str, Any]:
    """``pl.Trainer(**flagos_trainer_arguments(...), devices=1, ...)``: the accelerator, the strategy on
    ``flagos:device`` and, for ``"bf16-mixed"``/``"16-mixed"``, autocast on flagos."""
    arguments: dict[str, Any] = {"accelerator": FlagosAccelerator(),
                                 "strategy": SingleDeviceStrategy(device=torch.device("flagos", device))}
    if precision in ("bf16-mixed", "16-mixed"):
        arguments["plugins"] = [MixedPrecision(precision, device="flagos")]  # type: ignore[arg-type]
    elif precision is not None:
        arguments["precision"] = precision
    return arguments
