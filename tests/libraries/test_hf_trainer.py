"""Hugging Face Trainer on flagos (ACCELERATE_TORCH_DEVICE=flagos and ACCELERATE_MIXED_PRECISION=bf16,
docs/libraries.md): a 2-layer GPT-2 trains in bfloat16 mixed precision with the CPU's losses and final weights
(library_cases.run_trainer)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the library tier needs transformers (ci/requirements-test.txt)")
pytest.importorskip("accelerate", reason="Trainer needs accelerate (ci/requirements-test.txt)")

from library_cases import accelerate_device, check, run_trainer  # noqa: E402

pytestmark = pytest.mark.libraries


def test_trainer_matches_cpu() -> None:
    expected = run_trainer("cpu")
    check("Trainer", run_trainer("flagos"), expected)


def test_bf16_argument_is_refused_off_the_devices_transformers_names(tmp_path: object) -> None:
    """Why docs/libraries.md asks for ACCELERATE_MIXED_PRECISION=bf16 rather than TrainingArguments(bf16=True)."""
    from transformers import TrainingArguments

    with accelerate_device("flagos"), pytest.raises(ValueError, match="doesn't support bf16"):
        TrainingArguments(output_dir=str(tmp_path), bf16=True, report_to=[])
