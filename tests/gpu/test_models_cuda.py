"""Hugging Face models on flagos (cuda platform) against native CUDA: forward, loss, every gradient, two
AdamW steps and greedy generate (tests/models/model_zoo.py), native CUDA from the reference interpreter
starting from the same weights."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the real-model tier needs transformers")

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
sys.path.insert(0, str(MODELS_DIR))

import reference  # noqa: E402
from model_zoo import MODELS, compare, from_plain, initial_state, run_model  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.models]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_native_cuda(name: str) -> None:
    state = initial_state(name)
    native = from_plain(reference.call("model_zoo:run_model_plain", name, "cuda", state, paths=[MODELS_DIR]))
    flagos = run_model(name, "flagos", state)
    assert all(native.tied.values())
    compare(flagos, native, rtol=1e-3, atol=1e-4)
