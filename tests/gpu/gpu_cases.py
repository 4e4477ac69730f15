"""Computations the GPU suite runs on flagos and, for reference, on native cuda.

The inputs are made once, on the CPU, in the test process (`make_inputs`); the same
functions then run them on `flagos` there and on `cuda` in the reference interpreter
(reference.py says which interpreter and why it is another one), so the two sides
never depend on two torch builds drawing the same random numbers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from op_cases import BACKWARD_CASES, CASES, F32, Case, flat

# torch.cuda's Python API exists only in CUDA builds of torch; on stock torch+cpu
# with the cuda-assets wheel, CUDA tensors and kernels work but torch.cuda.* does not.
NATIVE_CUDA_API = torch.version.cuda is not None
SDPA_DTYPES = (torch.float32, torch.bfloat16)
BY_NAME = {c.name: c for c in CASES}


def case_id(case: Case, dtype: torch.dtype) -> str:
    return f"{case.name}-{str(dtype).removeprefix('torch.')}"


def forward_outputs(case_name: str, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    return [t.cpu() for t in flat(BY_NAME[case_name].fn(*[t.to(device) for t in inputs]))]


def backward_grads(case_name: str, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor | None]:
    leaves = [t.detach().to(device, copy=True).requires_grad_(t.is_floating_point()) for t in inputs]
    outs = [o for o in flat(BY_NAME[case_name].fn(*leaves)) if o.requires_grad]
    # Fixed, unequal weights per output element: every gradient entry matters, no random numbers.
    sum((o * torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape).to(device)).sum() for o in outs).backward()
    return [None if leaf.grad is None else leaf.grad.cpu() for leaf in leaves]


def train_losses(device: str, state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[float]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    )
    model.load_state_dict(state)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def sdpa(device: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=True)
    out.float().square().sum().backward()
    return [out.detach().cpu(), *[leaf.grad.cpu() for leaf in leaves]]


def flash_attention(device: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """Causal flash attention and its gradients: on flagos, the overrideable fused kernel that flagos answers a
    flash choice with from torch 2.12 on (it runs the kernel device's flash kernel); elsewhere,
    scaled_dot_product_attention held to its flash kernel."""
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    if device == "flagos":
        out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*leaves, None, 0.0, True)[0]
    else:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=True)
    out.float().square().sum().backward()
    return [out.detach().cpu(), *[leaf.grad.cpu() for leaf in leaves]]


def make_inputs() -> dict[str, object]:
    """Every input of the suite's compared computations, on the CPU (torch.save-able)."""
    forward = {}
    for case in CASES:
        for dtype in case.dtypes:
            forward[case_id(case, dtype)] = list(case.inputs(dtype, torch.Generator().manual_seed(0)))
    backward = {c.name: list(c.inputs(F32, torch.Generator().manual_seed(1))) for c in BACKWARD_CASES}
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    )
    g = torch.Generator().manual_seed(1)
    train = {"state": model.state_dict(), "x": torch.randn(16, 3, 8, 8, generator=g),
             "y": torch.randint(0, 10, (16,), generator=g)}
    g = torch.Generator().manual_seed(5)
    attention = {str(d): [torch.randn(2, 8, 128, 64, generator=g).to(d) for _ in range(3)] for d in SDPA_DTYPES}
    return {"forward": forward, "backward": backward, "train": train, "sdpa": attention}


def all_results(inputs: dict[str, object], device: str) -> dict[str, object]:
    """Every compared result on `device`: in the reference interpreter with "cuda"."""
    forward: dict[str, list[torch.Tensor]] = {}
    for key, args in inputs["forward"].items():  # type: ignore[attr-defined]
        forward[key] = forward_outputs(key.rsplit("-", 1)[0], args, device)
    train = inputs["train"]
    return {
        "forward": forward,
        "backward": {name: backward_grads(name, args, device) for name, args in inputs["backward"].items()},  # type: ignore[attr-defined]
        "train": train_losses(device, train["state"], train["x"], train["y"]),  # type: ignore[index]
        "sdpa": {key: sdpa(device, *qkv) for key, qkv in inputs["sdpa"].items()},  # type: ignore[attr-defined]
        "flash": flash_attention(device, *inputs["sdpa"][str(torch.bfloat16)]),  # type: ignore[index]
    }
