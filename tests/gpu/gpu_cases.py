"""Computations the GPU suite runs on flagos and, for reference, on native cuda.

The native references run in a separate interpreter (native_reference.py) that
never registers flagos: once a PrivateUse1 backend is registered,
at::getAccelerator() is PrivateUse1, and PyTorch's autograd engine then fails any
backward over *CUDA* tensors with `opt_ready_stream && opt_parent_stream`
(pytorch/pytorch#161129).  Forward-only references run in-process.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from op_cases import BACKWARD_CASES, F32, Case, flat
# torch.cuda's Python API exists only in CUDA builds of torch; on stock torch+cpu
# with the cuda-assets wheel, CUDA tensors and kernels work but torch.cuda.* does not.
NATIVE_CUDA_API = torch.version.cuda is not None
SDPA_DTYPES = (torch.float32, torch.bfloat16)


def backward_grads(case: Case, device: str) -> list[torch.Tensor | None]:
    g = torch.Generator().manual_seed(1)
    inputs = list(case.inputs(F32, g))
    leaves = [t.detach().to(device, copy=True).requires_grad_(t.is_floating_point()) for t in inputs]
    outs = [o for o in flat(case.fn(*leaves)) if o.requires_grad]
    weights = torch.Generator().manual_seed(2)
    sum((o * torch.rand(o.shape, generator=weights).to(device)).sum() for o in outs).backward()
    return [None if leaf.grad is None else leaf.grad.cpu() for leaf in leaves]


def train_losses(device: str) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 8, 8, generator=g).to(device), torch.randint(0, 10, (16,), generator=g).to(device)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def sdpa(device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 8, 128, 64, generator=g).to(dtype) for _ in range(3))
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=True)
    out.float().square().sum().backward()
    return [out.detach().cpu(), *[leaf.grad.cpu() for leaf in leaves]]


def all_references(device: str) -> dict[str, object]:
    return {
        "backward": {c.name: backward_grads(c, device) for c in BACKWARD_CASES},
        "train": train_losses(device),
        "sdpa": {str(d): sdpa(device, d) for d in SDPA_DTYPES},
    }
