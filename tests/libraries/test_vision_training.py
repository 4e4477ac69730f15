"""ResNet-18 and ViT training loops with torch.autocast("flagos", bfloat16) and torch.amp.GradScaler("flagos")
against the same loops on the CPU (library_cases.run_vision): every step's loss and every final weight.

The Hugging Face builds of both models always run; torchvision's resnet18 and timm's ViT run where those
libraries import (a CPU torch needs torchvision from PyTorch's CPU index: PyPI's Linux build needs CUDA torch).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the library tier needs transformers (ci/requirements-test.txt)")

from library_cases import VISION, check, run_vision, vision_unavailable  # noqa: E402

pytestmark = pytest.mark.libraries


@pytest.mark.parametrize("name", list(VISION))
def test_vision_training_matches_cpu(name: str) -> None:
    why = vision_unavailable(name)
    if why:
        pytest.skip(why)
    expected = run_vision(name, "cpu")
    check(name, run_vision(name, "flagos"), expected)
