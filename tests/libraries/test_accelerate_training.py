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


def test_without_the_setting_accelerate_chooses_the_cpu() -> None:
    """What the setting is for: accelerate's device list has no flagos, and torch.accelerator is not asked."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        assert Accelerator().device == torch.device("cpu")
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    with accelerate_device("flagos"):
        assert Accelerator().device.type == "flagos"


def test_fp16_mixed_precision_is_refused_for_flagos() -> None:
    """accelerate allows fp16 on the device types it lists only; docs/libraries.md says to use bf16."""
    from accelerate import Accelerator

    with accelerate_device("flagos"), pytest.raises(ValueError, match="fp16 mixed precision requires a device"):
        Accelerator(mixed_precision="fp16")
