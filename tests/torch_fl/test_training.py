"""Training on flagos: loss trajectories against CPU, autocast and GradScaler."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


class SmallConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)
        self.embed = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(4 * 4 * 4 + 8, 3)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm(self.conv(images))), 2).flatten(1)
        return self.head(torch.cat([x, self.embed(tokens).mean(1)], dim=1))


def _data(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    images = torch.randn(16, 1, 8, 8, generator=g)
    tokens = torch.randint(0, 10, (16, 5), generator=g)
    labels = torch.randint(0, 3, (16,), generator=g)
    return images.to(device), tokens.to(device), labels.to(device)


def _train(device: str, optimizer_cls: type[torch.optim.Optimizer], steps: int = 6, clip: bool = False) -> list[float]:
    torch.manual_seed(0)
    model = SmallConvNet().to(device)
    optimizer = optimizer_cls(model.parameters(), lr=0.05)
    images, tokens, labels = _data(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images, tokens), labels)
        loss.backward()
        if clip:  # foreach norm and a foreach multiply by a tensor
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("optimizer_cls", "clip"), [(torch.optim.SGD, False), (torch.optim.AdamW, False),
                                                     (torch.optim.AdamW, True)], ids=["sgd", "adamw", "adamw-clipped"])
def test_loss_trajectory_matches_cpu(optimizer_cls: type[torch.optim.Optimizer], clip: bool) -> None:
    on_device = _train("flagos", optimizer_cls, clip=clip)
    on_cpu = _train("cpu", optimizer_cls, clip=clip)
    assert on_device == pytest.approx(on_cpu, rel=1e-5, abs=1e-6)
    assert on_device[-1] < on_device[0]


def test_autocast_runs_matmul_in_bfloat16_and_softmax_in_float32() -> None:
    a = torch.randn(8, 8, device="flagos")
    with torch.autocast("flagos", dtype=torch.bfloat16):
        product = a @ a
        probabilities = torch.softmax(product, dim=-1)
        linear = torch.nn.functional.linear(a, a)
    assert product.dtype == torch.bfloat16 and linear.dtype == torch.bfloat16
    assert probabilities.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = a.cpu() @ a.cpu()
    torch.testing.assert_close(product.cpu(), expected)


def test_autocast_training_with_grad_scaler() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("flagos")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("flagos", init_scale=2.0**10)
    x, y = torch.randn(32, 8, device="flagos"), torch.randint(0, 2, (32,), device="flagos")
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        with torch.autocast("flagos", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert scaler.get_scale() == 2.0**10  # no inf/nan seen: the scale was kept
    assert losses[-1] < losses[0]
    # An inf gradient is detected on the device and the step skipped, halving the scale.
    optimizer.zero_grad()
    with torch.autocast("flagos", dtype=torch.bfloat16):
        loss = model(x).sum() * float("inf")
    before = [p.detach().cpu().clone() for p in model.parameters()]
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**9
    for p, b in zip(model.parameters(), before):
        torch.testing.assert_close(p.detach().cpu(), b)
