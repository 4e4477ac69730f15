"""FSDP2 (``fully_shard``) on a flagos device mesh, unpatched: a small transformer trains to the same parameters as
one process on the concatenated batch and as FSDP2 on CPU; ``torch.distributed.checkpoint`` saves its sharded
state (model and optimizer) and loads it back into a fresh sharded model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from dist_support import init_rank, run_world, save_result
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

pytestmark = pytest.mark.slow

STEPS = 3
BATCH = 2  # sequences per rank
SEQ = 5
VOCAB = 32


class TinyTransformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
            for _ in range(2))
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def make_batches(world: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, VOCAB, (world * BATCH, SEQ + 1), generator=g) for _ in range(STEPS)]


def _model(seed: int) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer()


def _train(model: torch.nn.Module, device: str, batches: list[torch.Tensor], rank: int | None,
           opt: torch.optim.Optimizer) -> None:
    for tokens in batches:
        if rank is not None:
            tokens = tokens[rank * BATCH:(rank + 1) * BATCH]
        tokens = tokens.to(device)
        opt.zero_grad()
        logits = model(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)).backward()
        opt.step()


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in model.state_dict().items()}


# SGD with momentum (state for the checkpoint to carry): Adam's normalised step turns the last-bit differences
# of near-zero gradients summed in another order into full-size steps, so it cannot be compared across worlds.
def _sharded(device: str, world: int, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    mesh = init_device_mesh(device, (world,))
    model = _model(seed).to(device)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def one_process(batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    reference = _model(0)
    _train(reference, "cpu", batches, None, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9))
    return {k: v.detach() for k, v in reference.state_dict().items()}


def fsdp_trained(device: str, world: int, batches: list[torch.Tensor],
                 rank: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model, opt = _sharded(device, world, seed=0)
    _train(model, device, batches, rank, opt)
    return model, opt


def _fsdp_worker(rank: int, world: int, out_dir: str, port: int) -> None:
    init_rank(rank, world, port)
    batches = make_batches(world)
    results: dict[str, Any] = {"reference": one_process(batches)}
    for device in ("flagos", "cpu"):
        model, opt = fsdp_trained(device, world, batches, rank)
        results[device] = full_state(model)
        if device == "flagos":
            local = next(iter(model.parameters())).to_local()
            results["local_shard_device"] = str(local.device)
            # Round trip through torch.distributed.checkpoint: a fresh model (another init) takes the saved state.
            checkpoint = Path(out_dir) / "checkpoint"
            model_state, optim_state = get_state_dict(model, opt)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint)
            fresh, fresh_opt = _sharded(device, world, seed=1)
            results["fresh_before_load"] = full_state(fresh)
            state = dict(zip(("model", "optim"), get_state_dict(fresh, fresh_opt), strict=True))
            dcp.load(state, checkpoint_id=checkpoint)
            set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            results["loaded"] = full_state(fresh)
            # The optimizer state came back too: one more identical step keeps both models equal.
            _train(model, device, batches[:1], rank, opt)
            _train(fresh, device, batches[:1], rank, fresh_opt)
            results["after_step"] = (full_state(model), full_state(fresh))
    dist.barrier(device_ids=[rank])
    save_result(out_dir, rank, results)


def test_fsdp2_on_flagos_equals_one_process_and_fsdp2_on_cpu_and_survives_dcp(tmp_path: Path) -> None:
    results = run_world(_fsdp_worker, 2, tmp_path)
    for rank, r in enumerate(results):
        assert r["local_shard_device"] == f"flagos:{rank}"
        for name, expected in r["reference"].items():
            torch.testing.assert_close(r["flagos"][name], expected, rtol=1e-4, atol=1e-5,
                                       msg=f"rank {rank}: {name} vs one process")
            torch.testing.assert_close(r["flagos"][name], r["cpu"][name], rtol=1e-4, atol=1e-5,
                                       msg=f"rank {rank}: {name} vs FSDP2 on CPU")
        assert any(not torch.equal(r["fresh_before_load"][k], r["flagos"][k]) for k in r["flagos"])
        for name, saved in r["flagos"].items():
            assert torch.equal(r["loaded"][name], saved), f"rank {rank}: {name} after the DCP round trip"
        trained, restored = r["after_step"]
        for name in trained:
            torch.testing.assert_close(restored[name], trained[name], rtol=0, atol=0)
