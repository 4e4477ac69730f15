"""Hugging Face models (model_zoo.MODELS: GPT-2 with tied embeddings, Llama, Qwen3, BERT, T5, BART, Mistral, Phi,
GPT-NeoX, Falcon, Mamba, DistilBERT, DeBERTa-v2) on flagos against the CPU.

Forward, loss, every parameter's gradient, two AdamW steps and greedy
``generate`` must equal the CPU's within float32 tolerance (model_zoo.py).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the real-model tier needs transformers (ci/requirements-test.txt)")

import torch  # noqa: E402
from model_zoo import MODELS, compare, run_model  # noqa: E402

import torch_fl  # noqa: E402
import torch_fl.routing  # noqa: E402

pytestmark = pytest.mark.models


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_trains_and_generates_as_on_cpu(name: str) -> None:
    expected = run_model(name, "cpu")
    actual = run_model(name, "flagos")
    assert all(expected.tied.values()), f"the CPU model's tied parameters: {expected.tied}"
    compare(actual, expected)


# The CPU's attention kernels, which only the host platform calls (the cuda platform calls CUDA's fused attention,
# whose kernels are unboxed), take the routed fallback.
HOST_PLATFORM_BOXED = {"aten::_scaled_dot_product_flash_attention_for_cpu",
                       "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_reaches_unboxed_kernels(name: str) -> None:
    """Training and greedy generation call no operator through the boxed routed fallback, which costs several
    microseconds more per call on a GPU's host than an unboxed kernel: an operator a model starts to call that
    way needs an unboxed kernel (csrc/aten/routing/UnboxedKernels.cpp)."""
    with torch_fl.routing.count_boxed_calls() as boxed:
        run_model(name, "flagos")
    assert set(boxed) <= HOST_PLATFORM_BOXED, f"boxed calls: {dict(boxed)}"


def test_tied_embedding_gets_both_gradients() -> None:
    """GPT-2's embedding is its LM head: after .to("flagos") its gradient holds both contributions."""
    run = run_model("gpt2", "flagos")
    assert run.tied == {"lm_head.weight=transformer.wte.weight": True}
    assert "lm_head.weight" not in run.grads  # one Parameter, reported once, under its first name
    assert torch.count_nonzero(run.grads["transformer.wte.weight"]) > 0
