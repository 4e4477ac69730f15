"""Every collective of the flccl backend on flagos tensors equals the same collective on CPU tensors with gloo,
in real worlds of 2 and 4 processes (the group's CPU tensors go through gloo, its flagos tensors through flccl)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from dist_support import init_rank, run_world, save_result

pytestmark = pytest.mark.slow


def _inputs(rank: int, n: int = 6) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + rank


def _both(device: str, run: Callable[[str], Any]) -> Any:
    """``run(device)`` with its tensors brought back to the CPU."""
    result = run(device)
    if isinstance(result, torch.Tensor):
        return result.cpu()
    return [r.cpu() for r in result]


def collectives(rank: int, world: int) -> dict[str, Callable[[str], Any]]:
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world

    def all_reduce(op: dist.ReduceOp) -> Callable[[str], Any]:
        def run(d: str) -> torch.Tensor:
            t = _inputs(rank).to(d)
            dist.all_reduce(t, op=op)
            return t
        return run

    def all_reduce_async_future(d: str) -> list[torch.Tensor]:
        t = _inputs(rank).to(d)
        value = dist.all_reduce(t, async_op=True).get_future().wait()
        assert value[0].device == t.device and value[0].data_ptr() == t.data_ptr(), (value[0].device, t.device)
        return [t]

    def broadcast(d: str) -> torch.Tensor:
        t = _inputs(rank).to(d)
        dist.broadcast(t, src=world - 1)
        return t

    def reduce(d: str) -> torch.Tensor:
        t = _inputs(rank).to(d)
        dist.reduce(t, dst=0)
        return t

    def all_gather(d: str) -> list[torch.Tensor]:
        out = [torch.empty(6, device=d) for _ in range(world)]
        dist.all_gather(out, _inputs(rank).to(d))
        return out

    def all_gather_into_tensor(d: str) -> torch.Tensor:
        out = torch.empty(world * 6, device=d)
        dist.all_gather_into_tensor(out, _inputs(rank).to(d))
        return out

    def all_gather_into_tensor_coalesced(d: str) -> list[torch.Tensor]:
        ins = [_inputs(rank).to(d), _inputs(rank, 3).to(d) * 2]
        outs = [torch.empty(world * 6, device=d), torch.empty(world * 3, device=d)]
        dist.distributed_c10d._get_default_group().allgather_into_tensor_coalesced(outs, ins).wait()
        return outs

    def gather(d: str) -> list[torch.Tensor]:
        out = [torch.zeros(6, device=d) for _ in range(world)] if rank == 0 else None
        dist.gather(_inputs(rank).to(d), out, dst=0)
        return out if out is not None else []

    def scatter(d: str) -> torch.Tensor:
        out = torch.empty(6, device=d)
        chunks = [_inputs(r).to(d) for r in range(world)] if rank == world - 1 else None
        dist.scatter(out, chunks, src=world - 1)
        return out

    def reduce_scatter(d: str) -> torch.Tensor:
        out = torch.empty(6, device=d)
        dist.reduce_scatter(out, [_inputs(rank).to(d) + r for r in range(world)])
        return out

    def reduce_scatter_tensor(d: str) -> torch.Tensor:
        out = torch.empty(3, device=d)
        dist.reduce_scatter_tensor(out, _inputs(rank, 3 * world).to(d))
        return out

    def reduce_scatter_tensor_coalesced(d: str) -> list[torch.Tensor]:
        ins = [_inputs(rank, 2 * world).to(d), _inputs(rank, 4 * world).to(d)]
        outs = [torch.empty(2, device=d), torch.empty(4, device=d)]
        dist.distributed_c10d._get_default_group().reduce_scatter_tensor_coalesced(outs, ins).wait()
        return outs

    def all_to_all_single_uneven(d: str) -> torch.Tensor:
        # rank r sends r+1+j elements to rank j
        in_splits = [rank + 1 + j for j in range(world)]
        out_splits = [j + 1 + rank for j in range(world)]
        out = torch.empty(sum(out_splits), device=d)
        dist.all_to_all_single(out, _inputs(rank, sum(in_splits)).to(d), out_splits, in_splits)
        return out

    def all_to_all(d: str) -> list[torch.Tensor]:
        out = [torch.empty(2, device=d) for _ in range(world)]
        dist.all_to_all(out, [_inputs(rank, 2).to(d) + j for j in range(world)])
        return out

    def send_recv_ring(d: str) -> torch.Tensor:
        got = torch.empty(6, device=d)
        ops = [dist.P2POp(dist.isend, _inputs(rank).to(d), peer_next),
               dist.P2POp(dist.irecv, got, peer_prev)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return got

    def send_recv_blocking(d: str) -> torch.Tensor:
        got = torch.zeros(6, device=d)
        if rank == 0:
            dist.send(_inputs(0).to(d), dst=1)
            dist.recv(got, src=1)
        elif rank == 1:
            dist.recv(got, src=0)
            dist.send(got * 2, dst=0)
        return got

    def recv_any_source(d: str) -> torch.Tensor:
        got = torch.zeros(6, device=d)
        if rank == 1:
            dist.send(_inputs(1).to(d), dst=0)
        elif rank == 0:
            assert dist.recv(got) == 1
        return got

    def barrier(d: str) -> torch.Tensor:
        dist.barrier(device_ids=[rank]) if d == "flagos" else dist.barrier()
        return torch.ones(1)

    p2p = {
        "send_recv_ring": send_recv_ring,
        "send_recv_blocking": send_recv_blocking,
        "recv_any_source": recv_any_source,
    }
    return {
        "all_reduce_sum": all_reduce(dist.ReduceOp.SUM),
        "all_reduce_max": all_reduce(dist.ReduceOp.MAX),
        "all_reduce_product": all_reduce(dist.ReduceOp.PRODUCT),
        "all_reduce_async_future": all_reduce_async_future,
        "broadcast": broadcast,
        "reduce": reduce,
        "all_gather": all_gather,
        "all_gather_into_tensor": all_gather_into_tensor,
        "all_gather_into_tensor_coalesced": all_gather_into_tensor_coalesced,
        "gather": gather,
        "scatter": scatter,
        "reduce_scatter": reduce_scatter,
        "reduce_scatter_tensor": reduce_scatter_tensor,
        "reduce_scatter_tensor_coalesced": reduce_scatter_tensor_coalesced,
        "all_to_all_single_uneven": all_to_all_single_uneven,
        "all_to_all": all_to_all,
        **(p2p if world > 1 else {}),  # a rank cannot send to itself
        "barrier": barrier,
    }


def outcome(device: str, run: Callable[[str], Any]) -> Any:
    try:
        return _both(device, run)
    except Exception as error:  # an engine's own refusal must be the same on both sides
        return ("error", str(error).splitlines()[0].replace("flagos", "cpu"))


def _collectives_worker(rank: int, world: int, out_dir: str, port: int) -> None:
    init_rank(rank, world, port)
    results = {name: (outcome("flagos", run), outcome("cpu", run)) for name, run in collectives(rank, world).items()}
    # The backend behind the flagos tensors and the one behind the CPU tensors.
    group = dist.distributed_c10d._get_default_group()
    results["_backends"] = (group._get_backend(torch.device("flagos")).name(),
                            group._get_backend(torch.device("cpu")).name())
    # Mixed devices: one line that names the fix, before anything reaches the engine.
    try:
        group.allreduce([torch.ones(2, device="flagos"), torch.ones(2)]).wait()
        results["_mixed"] = None
    except ValueError as error:
        results["_mixed"] = str(error)
    save_result(out_dir, rank, results)


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_collective_on_flagos_equals_gloo_on_cpu(world_size: int, tmp_path: Path) -> None:
    results = run_world(_collectives_worker, world_size, tmp_path)
    names = [n for n in results[0] if not n.startswith("_")]
    assert len(names) == 20
    for rank, per_rank in enumerate(results):
        assert per_rank["_backends"] == ("flccl", "gloo")
        for name in names:
            on_flagos, on_cpu = per_rank[name]
            if isinstance(on_cpu, tuple):
                assert on_flagos == on_cpu, (rank, name)
                continue
            assert not isinstance(on_flagos, tuple), (rank, name, on_flagos)
            torch.testing.assert_close(on_flagos, on_cpu, rtol=0, atol=0, msg=f"rank {rank}: {name}")
        mixed = per_rank["_mixed"]
        assert mixed is not None and "\n" not in mixed.strip()
        assert "cpu" in mixed and "init_process_group(backend='cpu:gloo,flagos:flccl')" in mixed
    # The collectives did something: the all-reduce is the sum over ranks.
    expected = sum(_inputs(r) for r in range(world_size))
    torch.testing.assert_close(results[0]["all_reduce_sum"][0], expected)
