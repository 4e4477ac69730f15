"""Computations of the FlagGems GPU tests that run on flagos here and on native cuda in the reference
interpreter (reference.py): a small transformer's training step.  Imports torch only."""

from __future__ import annotations

import torch

D_MODEL, HEADS, FF, LAYERS, BATCH, SEQ = 64, 4, 128, 2, 4, 32


def _model() -> torch.nn.Module:
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True, norm_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


def transformer_inputs() -> dict[str, object]:
    """The weights and the batch, on the CPU (torch.save-able)."""
    torch.manual_seed(0)
    return {"state": _model().state_dict(), "x": torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator()
                                                             .manual_seed(3))}


def transformer_step(inputs: dict[str, object], device: str, autocast: bool) -> list[torch.Tensor]:
    """One AdamW training step on `device`: [loss, every gradient, every parameter after the step], on the CPU."""
    model = _model()
    model.load_state_dict(inputs["state"])  # type: ignore[arg-type]
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = inputs["x"].to(device)  # type: ignore[attr-defined]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        loss = model(x).float().square().mean()
    loss.backward()
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    optimizer.step()
    return [loss.detach().cpu(), *grads, *[p.detach().cpu() for p in model.parameters()]]
