"""PyTorch Lightning on flagos through lightning_flagos.FlagosAccelerator (a custom accelerator as Lightning's
documentation writes one, registered in its AcceleratorRegistry): Trainer.fit in bf16-mixed precision with the
CPU's losses and final weights (library_cases.run_lightning)."""

from __future__ import annotations

import pytest

pytest.importorskip("lightning", reason="the library tier needs lightning (ci/requirements-test.txt)")

import torch  # noqa: E402
from library_cases import check, run_lightning  # noqa: E402

pytestmark = [
    pytest.mark.libraries,
    # Lightning 2.6 builds torch.utils._pytree.LeafSpec, which torch 2.13 deprecates
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"),
]


def test_lightning_fit_matches_cpu() -> None:
    expected = run_lightning("cpu")
    check("Lightning", run_lightning("flagos"), expected)


def test_registered_accelerator_is_chosen_by_name() -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning_flagos import FlagosAccelerator, flagos_trainer_arguments

    assert "flagos" in AcceleratorRegistry
    arguments = flagos_trainer_arguments(device=1)
    arguments["accelerator"] = "flagos"
    trainer = pl.Trainer(devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, **arguments)
    assert isinstance(trainer.accelerator, FlagosAccelerator)
    assert trainer.strategy.root_device == torch.device("flagos", 1)
    assert FlagosAccelerator.auto_device_count() == torch.flagos.device_count()
    assert FlagosAccelerator.parse_devices(-1) == list(range(torch.flagos.device_count()))


def test_without_a_strategy_lightning_trains_a_custom_accelerator_on_the_cpu() -> None:
    """Why flagos_trainer_arguments names the strategy: Lightning's connector gives any accelerator it does not
    know a single-device strategy on "cpu", which FlagosAccelerator.setup_device refuses."""
    import lightning.pytorch as pl
    from lightning_flagos import FlagosAccelerator

    trainer = pl.Trainer(accelerator=FlagosAccelerator(), devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    assert trainer.strategy.root_device == torch.device("cpu")
