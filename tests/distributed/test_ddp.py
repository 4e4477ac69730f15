"""PyTorch's own DistributedDataParallel (C++ reducer, gradient buckets) on flagos, unpatched: training equals
single-process training on the concatenated batch and DDP on CPU tensors, with several buckets, ``no_sync``,
``find_unused_parameters``, ``static_graph`` and a Python communication hook; DDP's runtime statistics come from
the reducer timer torch_fl registers for the flagos device."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_support import init_rank, run_world, save_result
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

pytestmark = pytest.mark.slow

STEPS = 4
BATCH = 3  # per rank


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.hidden = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 4)
        self.spare = torch.nn.Linear(16, 4)  # unused on even steps of the find_unused variant

    def forward(self, x: torch.Tensor, use_spare: bool = False) -> torch.Tensor:
        h = torch.relu(self.hidden(torch.relu(self.inp(x))))
        return self.out(h) + (self.spare(h) if use_spare else 0)


def make_batches(world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(world * BATCH, 8, generator=g), torch.randn(world * BATCH, 4, generator=g))
            for _ in range(2 * STEPS)]


def _train(model: torch.nn.Module, device: str, batches: list[tuple[torch.Tensor, torch.Tensor]], rank: int | None,
           variant: str) -> dict[str, torch.Tensor]:
    """SGD steps; ``rank`` None: the whole batch in one process, else this rank's slice of it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        micro = [batches[2 * step], batches[2 * step + 1]] if variant == "no_sync" else [batches[2 * step]]
        for i, (x, y) in enumerate(micro):
            if rank is not None:
                x, y = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
            use_spare = step % 2 == 1 if variant == "find_unused" else True

            def loss_of(m: torch.nn.Module) -> torch.Tensor:
                return torch.nn.functional.mse_loss(m(x.to(device), use_spare), y.to(device))

            if variant == "no_sync" and i == 0 and isinstance(model, DDP):
                with model.no_sync():
                    loss_of(model).backward()
            else:
                loss_of(model).backward()
        opt.step()
    module = model.module if isinstance(model, DDP) else model
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


VARIANTS: dict[str, dict[str, Any]] = {
    "buckets": {"bucket_cap_mb": 0.001},  # one bucket per parameter: the reducer's bucketing at work
    "default": {},
    "no_sync": {},
    "find_unused": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "comm_hook": {},
}


def ddp_trained(base: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], rank: int, device: str,
                device_ids: list[int] | None) -> dict[str, Any]:
    """Every variant trained with DDP on ``device``: parameters, DDP's timings, bucket count, grad device."""
    results: dict[str, Any] = {}
    for variant, kwargs in VARIANTS.items():
        model = copy.deepcopy(base).to(device)
        ddp = DDP(model, device_ids=device_ids, **kwargs)
        if variant == "comm_hook":
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        results[variant] = _train(ddp, device, batches, rank, variant)
        logging = ddp._get_ddp_logging_data()
        results[f"{variant}/timer"] = (logging.get("avg_forward_compute_time", 0),
                                       logging.get("avg_backward_compute_time", 0))
        results[f"{variant}/buckets"] = len(ddp.reducer._get_zeros_like_grad_buckets())
        results[f"{variant}/grad_device"] = str(model.inp.weight.grad.device)
    return results


def one_process(base: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    return {variant: _train(copy.deepcopy(base), "cpu", batches, None, variant) for variant in VARIANTS}


def initial_model() -> Net:
    torch.manual_seed(0)
    return Net()


def _ddp_worker(rank: int, world: int, out_dir: str, port: int) -> None:
    init_rank(rank, world, port)
    base, batches = initial_model(), make_batches(world)
    save_result(out_dir, rank, {"reference": one_process(base, batches),
                                "flagos": ddp_trained(base, batches, rank, "flagos", [rank]),
                                "cpu": ddp_trained(base, batches, rank, "cpu", None)})


def test_ddp_on_flagos_equals_one_process_and_ddp_on_cpu(tmp_path: Path) -> None:
    results = run_world(_ddp_worker, 2, tmp_path)
    initial = initial_model().state_dict()
    for rank, r in enumerate(results):
        for variant in VARIANTS:
            reference, on_flagos, on_cpu = r["reference"][variant], r["flagos"][variant], r["cpu"][variant]
            assert any(not torch.equal(reference[k], initial[k]) for k in reference), f"{variant}: nothing trained"
            for name in reference:
                torch.testing.assert_close(on_flagos[name], reference[name], rtol=1e-5, atol=1e-6,
                                           msg=f"rank {rank} {variant}: {name} vs one process")
                torch.testing.assert_close(on_flagos[name], on_cpu[name], rtol=1e-5, atol=1e-6,
                                           msg=f"rank {rank} {variant}: {name} vs DDP on CPU")
            forward_ns, backward_ns = r["flagos"][f"{variant}/timer"]
            assert forward_ns > 0 and backward_ns > 0, f"{variant}: no DDP runtime statistics (reducer timer)"
            assert r["flagos"][f"{variant}/grad_device"] == f"flagos:{rank}"
        assert r["flagos"]["buckets/buckets"] > r["flagos"]["default/buckets"] >= 1
