"""What a training loop touches besides the ops: saving and loading, activation checkpointing,
pinned-memory data loading, gradient clipping and accumulation, moving a model away and back.
Every result is held to the same loop on the CPU."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import torch_fl  # noqa: F401


def _tied_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 16, bias=False))
    model[3].weight = model[0].weight  # tied, like a language model's embedding and head
    return model


def test_tied_parameters_stay_tied_through_to_and_back() -> None:
    model = _tied_model()
    model.to("flagos")
    assert model[3].weight is model[0].weight and model[0].weight.device.type == "flagos"
    loss = model(torch.tensor([1, 2, 3], device="flagos")).sum()
    loss.backward()
    model.cpu()  # after a forward and backward pass
    assert model[3].weight is model[0].weight and model[0].weight.device.type == "cpu"
    assert model[0].weight.grad is not None and model[0].weight.grad.device.type == "cpu"
    assert torch._has_compatible_shallow_copy_type(torch.empty(1), torch.empty(1, device="flagos"))
    assert not torch._has_compatible_shallow_copy_type(torch.empty(1, device="flagos"),
                                                       torch.empty(1, 1).to_sparse())


@pytest.mark.parametrize("direction", ["flagos->cpu", "cpu->flagos", "flagos->flagos"])
def test_save_load_with_map_location(direction: str) -> None:
    source, target = direction.split("->")
    model = _tied_model().to(source)
    state = {"model": model.state_dict(), "step": torch.tensor(7, device=source)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=target, weights_only=True)
    assert loaded["step"].device.type == target and loaded["step"].item() == 7
    for name, value in model.state_dict().items():
        assert loaded["model"][name].device.type == target
        torch.testing.assert_close(loaded["model"][name].cpu(), value.cpu(), rtol=0, atol=0)
    fresh = _tied_model().to(target)
    fresh.load_state_dict(loaded["model"])
    assert fresh[3].weight is fresh[0].weight


def test_load_without_map_location_restores_flagos_tensors() -> None:
    buffer = io.BytesIO()
    torch.save(torch.arange(6.0, device="flagos").view(2, 3), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert loaded.device.type == "flagos" and loaded.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


class _DropoutBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.tanh(self.lin(x)))


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_replays_dropout_masks(use_reentrant: bool) -> None:
    torch.manual_seed(0)
    block = _DropoutBlock().to("flagos")
    x = torch.randn(8, 16, device="flagos", requires_grad=True)

    def grads(run: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        block.zero_grad()
        x.grad = None
        torch.flagos.manual_seed(1234)
        run(x).pow(2).sum().backward()
        return [x.grad.cpu(), *(p.grad.cpu() for p in block.parameters())]

    plain = grads(block)
    checkpointed = grads(lambda t: checkpoint(block, t, use_reentrant=use_reentrant))
    assert any((g != 0).any() for g in plain)
    for a, b in zip(checkpointed, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_pinned_data_loader_then_non_blocking_copy() -> None:
    data = torch.utils.data.TensorDataset(torch.randn(12, 4), torch.arange(12))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    seen = []
    for features, labels in loader:
        assert features.is_pinned() and labels.is_pinned()
        on_device = features.to("flagos", non_blocking=True)
        torch.flagos.synchronize()
        torch.testing.assert_close(on_device.cpu(), features, rtol=0, atol=0)
        seen.append(labels.to("flagos", non_blocking=True).cpu())
    assert torch.equal(torch.cat(seen), torch.arange(12))


def _train(device: str, *, accumulate: int, set_to_none: bool) -> tuple[list[float], nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        for _ in range(accumulate):
            x = torch.randn(5, 6, generator=gen).to(device)
            y = torch.randint(0, 3, (5,), generator=gen).to(device)
            loss = nn.functional.cross_entropy(model(x), y) / accumulate
            loss.backward()
            losses.append(loss.item())
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        losses.append(norm.item())
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
    return losses, model


@pytest.mark.parametrize(("accumulate", "set_to_none"), [(1, True), (3, False)])
def test_clipping_accumulation_and_zero_grad_match_cpu(accumulate: int, set_to_none: bool) -> None:
    flagos_losses, flagos_model = _train("flagos", accumulate=accumulate, set_to_none=set_to_none)
    cpu_losses, cpu_model = _train("cpu", accumulate=accumulate, set_to_none=set_to_none)
    assert flagos_losses == pytest.approx(cpu_losses, rel=1e-6, abs=1e-7)
    if not set_to_none:
        assert all(p.grad is not None and not p.grad.any() for p in flagos_model.parameters())
    for a, b in zip(flagos_model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(a.detach().cpu(), b.detach())


def test_model_moved_to_cpu_and_back_after_training_keeps_training() -> None:
    _, model = _train("flagos", accumulate=1, set_to_none=True)
    snapshot = copy.deepcopy(model).cpu()
    model.cpu()
    for a, b in zip(model.parameters(), snapshot.parameters(), strict=True):
        assert a.device.type == "cpu"
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0)
    model.to("flagos")
    x = torch.randn(5, 6)
    torch.testing.assert_close(model(x.to("flagos")).detach().cpu(), snapshot(x).detach())
    model(x.to("flagos")).sum().backward()
    assert all(p.grad is not None and p.grad.device.type == "flagos" for p in model.parameters())
