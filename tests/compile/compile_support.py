"""Small models for the torch.compile tests, and one training step of each, eager or compiled, on one device.

``step(name, device, backend)`` builds the model on the CPU from a fixed seed (so
every device starts from the same weights), moves it to ``device``, compiles it
with ``backend`` (None: eager) and runs a forward, a loss and a backward twice
(the second call runs the compiled code without compiling).  It returns the
outputs and every parameter's gradient as CPU tensors, so runs on different
devices compare directly.  Models are kept tiny: inductor's C++ compiles dominate
the folder's time, and the compiled artifacts are cached across runs by inductor.

``step_plain`` is the same as plain data, for a reference interpreter in another
process (tests/gpu/test_compile_cuda.py: inductor on native CUDA); there the
weights and inputs travel with the call (``initial_state``, ``example_inputs``),
so a torch of another version computes on the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

SEED = 20261201

# A graph whose C++ kernel inductor compiles in its worker pool (with a cold cache and
# TORCHINDUCTOR_WORKER_START=subprocess), checked against eager on the CPU; `out` is the flagos result.
COMPILE_IN_THE_POOL = """
import torch
from torch._inductor.async_compile import AsyncCompile
AsyncCompile.warm_pool()
AsyncCompile.wait_pool_ready()
assert AsyncCompile.use_process_pool()
f = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w).sum(dim=1))
x, w = torch.randn(8, 16), torch.randn(16, 4)
out = f(x.to("flagos"), w.to("flagos"))
torch.testing.assert_close(out.cpu(), torch.nn.functional.gelu(x @ w).sum(dim=1), atol=2e-5, rtol=1e-4)
"""

# Inductor imports torch.utils.mkldnn, whose TorchScript classes warn that TorchScript is deprecated: torch's
# own warning about torch's own code, not about anything these tests do.
TORCH_OWN_WARNINGS = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.LayerNorm(32), nn.ReLU(),
                                 nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv1(x)))
        x = F.max_pool2d(F.silu(self.conv2(x)), 2)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TransformerBlock(nn.Module):
    """Pre-norm attention (scaled_dot_product_attention, causal) and an MLP, with residuals."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyLlama(nn.Module):
    """A Hugging Face Llama built from a small config (no downloads), returning its logits."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=False, attn_implementation="sdpa")
        self.model = LlamaForCausalLM(cfg)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], torch.Tensor]


CASES: dict[str, Case] = {
    "mlp": Case(MLP, lambda g: torch.randn(8, 16, generator=g)),
    "cnn": Case(SmallCNN, lambda g: torch.randn(2, 3, 12, 12, generator=g)),
    "transformer_block": Case(TransformerBlock, lambda g: torch.randn(2, 10, 32, generator=g)),
    "llama": Case(TinyLlama, lambda g: torch.randint(0, 96, (2, 12), generator=g)),
}


@dataclass
class StepResult:
    """What one training step computed, on the CPU."""

    outputs: list[torch.Tensor]
    grads: dict[str, torch.Tensor]


def build(name: str, device: str, state: dict[str, torch.Tensor] | None = None) -> nn.Module:
    torch.manual_seed(SEED)
    model = CASES[name].build()
    if state is not None:
        model.load_state_dict(state)
    return model.to(device)


def initial_state(name: str) -> dict[str, torch.Tensor]:
    """The model's initial weights, on the CPU."""
    return {k: v.clone() for k, v in build(name, "cpu").state_dict().items()}


def example_inputs(name: str) -> list[torch.Tensor]:
    """The inputs of the two calls of a step, on the CPU."""
    gen = torch.Generator().manual_seed(SEED + 1)
    return [CASES[name].inputs(gen) for _ in range(2)]


def step(name: str, device: str, backend: str | None, state: dict[str, torch.Tensor] | None = None,
         inputs: list[torch.Tensor] | None = None, **compile_kwargs: object) -> StepResult:
    model = build(name, device, state)
    fn = model if backend is None else torch.compile(model, backend=backend, **compile_kwargs)
    outputs = []
    for x in inputs if inputs is not None else example_inputs(name):
        out = fn(x.to(device))
        out.float().square().mean().backward()
        outputs.append(out.detach().cpu())
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return StepResult(outputs, grads)


def step_plain(name: str, device: str, backend: str | None, state: dict[str, torch.Tensor],
               inputs: list[torch.Tensor]) -> dict[str, object]:
    """``step`` as plain data (``torch.load(weights_only=True)``): a reference interpreter's entry point."""
    return dataclasses.asdict(step(name, device, backend, state, inputs))


def from_plain(plain: dict[str, object]) -> StepResult:
    return StepResult(**plain)  # type: ignore[arg-type]


def assert_same(actual: StepResult, expected: StepResult, what: str, *, atol: float = 2e-5,
                rtol: float = 1e-4) -> None:
    assert len(actual.outputs) == len(expected.outputs)
    for i, (a, e) in enumerate(zip(actual.outputs, expected.outputs, strict=True)):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol, msg=lambda m, i=i: f"{what}: output {i}: {m}")
    assert actual.grads.keys() == expected.grads.keys(), what
    for n, g in expected.grads.items():
        torch.testing.assert_close(actual.grads[n], g, atol=atol, rtol=rtol, msg=lambda m, n=n: f"{what}: {n}: {m}")
