"""accelerate's Accelerator on flagos (ACCELERATE_TORCH_DEVICE=flagos, docs/libraries.md): the model, the optimizer
and the DataLoader's batches on flagos, bf16 autocast for flagos, and the losses and final weights of the CPU's
run (library_cases.run_accelerate)."""

from __future__ import annotations

import pytest

pytest.importorskip("accelerate", reason="the library tier needs accelerate (ci/requirements-test.txt)")

from library_cases import accelerate_device, check, run_accelerate  # noqa: E402

pytestmark = pytest.mark.libraries


def test_accelerate_training_matches_cpu() -> None:
    expected = run_accelerate("cpu")
    check("accelerate", run_accelerate("flagos"), expected)


def _accelerate_follows_torch_accelerator() -> bool:
    """accelerate 1.16 takes the current ``torch.accelerator`` when no device of its own list is there; before
    it, its device list alone decided, and a device outside it meant the CPU and no fp16."""
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("accelerate")) >= Version("1.16")


def test_without_the_setting_accelerate_chooses_by_its_version() -> None:
    """What the setting is for: before accelerate 1.16 its device list has no flagos, and torch.accelerator is not
    asked (the CPU); from 1.16 torch.accelerator is asked, and the setting changes nothing."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        chosen = Accelerator().device
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert chosen.type == ("flagos" if _accelerate_follows_torch_accelerator() else "cpu")
    with accelerate_device("flagos"):
        assert Accelerator().device.type == "flagos"


def test_fp16_mixed_precision_on_flagos_follows_accelerates_version() -> None:
    """Before accelerate 1.16 fp16 is refused for device types outside its list (docs/libraries.md: use bf16); from
    1.16 it is accepted for the torch.accelerator device."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    with accelerate_device("flagos"):
        if _accelerate_follows_torch_accelerator():
            try:
                accelerator = Accelerator(mixed_precision="fp16")
                assert accelerator.device.type == "flagos" and accelerator.mixed_precision == "fp16"
            finally:
                AcceleratorState._reset_state(reset_partial_state=True)
        else:
            with pytest.raises(ValueError, match="fp16 mixed precision requires a device"):
                Accelerator(mixed_precision="fp16")
