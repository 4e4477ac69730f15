"""Demonstration run by ci/build-wheel in a fresh stock torch+cpu environment.

It never imports torch_fl: `import torch` alone must make the flagos device
work (the torch.backends entry point).  A small model is trained for a few
steps on flagos:0 and on CPU from the same initial weights and data; the loss
trajectories must match.  Exit status 0 only when they do.
"""

from __future__ import annotations

import sys

import torch


def train(device: str, steps: int = 8) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(64, 16, generator=generator).to(device)
    targets = torch.randint(0, 4, (64,), generator=generator).to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> int:
    x = torch.ones(2, 3, device="flagos")
    total = (x + x).sum().item()
    print(f"torch {torch.__version__}: (ones(2, 3) + ones(2, 3)).sum() on {x.device} = {total}")
    if total != 12.0:
        print("FAIL: expected 12.0", file=sys.stderr)
        return 1
    on_device = train("flagos:0")
    on_cpu = train("cpu")
    for step, (d, c) in enumerate(zip(on_device, on_cpu)):
        print(f"step {step}: loss flagos:0 {d:.6f}  cpu {c:.6f}")
    if not all(abs(d - c) <= 1e-5 * max(1.0, abs(c)) for d, c in zip(on_device, on_cpu)):
        print("FAIL: flagos:0 and CPU losses differ", file=sys.stderr)
        return 1
    if not on_device[-1] < on_device[0]:
        print("FAIL: the loss did not decrease", file=sys.stderr)
        return 1
    print("OK: flagos:0 training matches CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
