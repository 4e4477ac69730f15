"""The library tier on the cuda platform: each training loop of tests/libraries/library_cases.py on flagos against
the same loop on native CUDA (the reference interpreter), from the same initial weights and data.

A library the reference interpreter lacks skips its loop, naming it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="the library tier needs transformers")

LIBRARIES_DIR = Path(__file__).resolve().parents[1] / "libraries"
sys.path.insert(0, str(LIBRARIES_DIR))

import reference  # noqa: E402
from library_cases import (  # noqa: E402
    NATIVE,
    NEEDS,
    VISION,
    check,
    run_accelerate,
    run_lightning,
    run_trainer,
    run_vision,
    vision_unavailable,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.libraries,
    # Lightning 2.6 builds torch.utils._pytree.LeafSpec, which torch 2.13 deprecates
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"),
    # Lightning notes that torch's own CUDA is there while the trainer runs on its flagos accelerator: deliberate
    pytest.mark.filterwarnings("ignore:GPU available but not used"),
    # ...and, on a machine with many cores, that the loops' in-process DataLoader could use workers
    pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers"),
]


def _native(target: str, *args: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = reference.call(target, *args, paths=[LIBRARIES_DIR])
    except reference.Unavailable as e:
        pytest.skip(str(e))
    except reference.Failed as e:
        if "No module named" in str(e):
            pytest.skip(f"the reference interpreter lacks a library: {e}")
        raise
    return result


@pytest.mark.parametrize("name", list(VISION))
def test_vision_training_matches_native_cuda(name: str) -> None:
    why = vision_unavailable(name)
    if why:
        pytest.skip(why)
    make_state, function, leading = NATIVE[name]
    state = make_state()
    flagos = run_vision(name, "flagos", state)
    check(f"{name} (flagos against native CUDA)", flagos, _native(f"library_cases:{function}", *leading, "cuda", state))


@pytest.mark.parametrize("name", ["accelerate", "trainer", "lightning"])
def test_library_training_matches_native_cuda(name: str) -> None:
    pytest.importorskip(NEEDS[name])
    if name == "trainer" and torch.cuda.is_available():
        # TrainingArguments takes torch's own CUDA before ACCELERATE_TORCH_DEVICE (docs/libraries.md); beside
        # stock torch+cpu, where torch.cuda is absent, it takes flagos.
        pytest.skip("with a CUDA build of torch in the process, transformers' TrainingArguments selects cuda")
    make_state, function, _ = NATIVE[name]
    state = make_state()
    run = {"accelerate": run_accelerate, "trainer": run_trainer, "lightning": run_lightning}[name]
    flagos = run("flagos", state)
    check(f"{name} (flagos against native CUDA)", flagos, _native(f"library_cases:{function}", "cuda", state))
