"""Random numbers on flagos: per-device generators and reproducibility."""

from __future__ import annotations

import torch


def _draw() -> list[torch.Tensor]:
    return [
        torch.randn(5, device="flagos").cpu(),
        torch.rand(3, device="flagos").cpu(),
        torch.empty(4, device="flagos").uniform_(-1, 1).cpu(),
        torch.randint(0, 100, (6,), device="flagos").cpu(),
        torch.nn.functional.dropout(torch.ones(20, device="flagos"), 0.5).cpu(),
        torch.randperm(8, device="flagos").cpu(),
        torch.nn.functional.scaled_dot_product_attention(*torch.ones(3, 1, 2, 4, 8, device="flagos"), dropout_p=0.5).cpu(),
    ]


def test_manual_seed_reproduces_random_ops() -> None:
    torch.flagos.manual_seed(1234)
    first = _draw()
    torch.flagos.manual_seed(1234)
    second = _draw()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert torch.flagos.initial_seed() == 1234


def test_flagos_seed_is_independent_of_the_cpu_generator() -> None:
    torch.flagos.manual_seed(7)
    first = _draw()
    torch.flagos.manual_seed(7)
    torch.randn(100)  # draws from the CPU generator only
    second = _draw()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_state_is_kept_per_device() -> None:
    torch.flagos.manual_seed_all(5)
    state1 = torch.flagos.get_rng_state(1)
    a0 = torch.randn(3, device="flagos:0").cpu()
    a1 = torch.randn(3, device="flagos:1").cpu()
    assert torch.equal(a0, a1)  # same seed, separate streams of numbers
    torch.flagos.set_rng_state(state1, 1)
    assert torch.equal(torch.randn(3, device="flagos:1").cpu(), a1)
    torch.randn(3, device="flagos:0")  # advancing device 0 does not touch device 1
    assert not torch.equal(torch.randn(3, device="flagos:1").cpu(), a1)


def test_get_set_rng_state_roundtrip_and_explicit_generators() -> None:
    state = torch.flagos.get_rng_state()
    x = torch.randn(6, device="flagos").cpu()
    torch.flagos.set_rng_state(state)
    assert torch.equal(torch.randn(6, device="flagos").cpu(), x)
    g = torch.Generator(device="flagos").manual_seed(99)
    assert g.device == torch.device("flagos", 0)
    y = torch.randn(4, device="flagos", generator=g).cpu()
    g.manual_seed(99)
    assert torch.equal(torch.randn(4, device="flagos", generator=g).cpu(), y)


def test_torch_manual_seed_seeds_flagos_too() -> None:
    torch.manual_seed(42)
    a = torch.randn(3, device="flagos").cpu()
    torch.manual_seed(42)
    assert torch.equal(torch.randn(3, device="flagos").cpu(), a)
