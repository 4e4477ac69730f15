"""The cuda platform: flccl runs NCCL on zero-copy CUDA views of flagos memory, on flagos's current stream (CUDA's).

One GPU, a world of one: every collective through NCCL against the group's gloo on CPU tensors, and DDP and FSDP2
training equal to the same training on native CUDA with NCCL.  The native run happens in an interpreter without
torch_fl: once PrivateUse1 is registered, PyTorch's autograd engine rejects backward over CUDA tensors
(pytorch/pytorch#161129).  Two ranks need two GPUs and are not covered here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import test_ddp
import test_fsdp
import torch
from dist_support import init_rank, run_world, save_result
from test_collectives import collectives, outcome
from torch_fl.distributed import engine_of

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.distributed.is_nccl_available(),
                                 reason="this torch's Python package has no NCCL (stock torch+cpu): flccl's engine on "
                                        "the cuda platform is the CUDA build's ProcessGroupNCCL")]

HERE = Path(__file__).resolve().parent


def _flagos_worker(rank: int, world: int, out_dir: str, port: int) -> None:
    init_rank(rank, world, port)
    results: dict[str, Any] = {
        "engine": type(engine_of()).__name__,
        "collectives": {name: (outcome("flagos", run), outcome("cpu", run))
                        for name, run in collectives(rank, world).items()},
    }
    base, batches = test_ddp.initial_model(), test_ddp.make_batches(world)
    results["ddp"] = test_ddp.ddp_trained(base, batches, rank, "flagos", [rank])
    model, _ = test_fsdp.fsdp_trained("flagos", world, test_fsdp.make_batches(world), rank)
    results["fsdp"] = test_fsdp.full_state(model)
    # The caller drops its tensor before the collective is waited on: the view NCCL holds keeps the flagos memory.
    t = torch.full((1 << 20,), 2.0, device="flagos")
    work = torch.distributed.all_reduce(t, async_op=True)
    del t
    churn = [torch.empty(1 << 20, device="flagos").fill_(7.0) for _ in range(4)]
    work.wait()
    results["dropped_tensor_result"] = work.result()[0].cpu().unique().tolist()
    del churn
    save_result(out_dir, rank, results)


NATIVE = """
import sys, torch, torch.distributed as dist
sys.path.insert(0, {here!r})
import test_ddp, test_fsdp
torch.cuda.set_device(0)
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
base, batches = test_ddp.initial_model(), test_ddp.make_batches(1)
ddp = test_ddp.ddp_trained(base, batches, 0, "cuda", [0])
model, _ = test_fsdp.fsdp_trained("cuda", 1, test_fsdp.make_batches(1), 0)
torch.save({{"ddp": ddp, "fsdp": test_fsdp.full_state(model)}}, {out!r})
dist.destroy_process_group()
"""


def _native(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "native.pt"
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_NO_STARTUP_HOOK": "1"}
    subprocess.run([sys.executable, "-c", textwrap.dedent(NATIVE.format(here=str(HERE), out=str(out)))],
                   env=env, check=True, timeout=300)
    return torch.load(out, weights_only=False)


def test_nccl_world_of_one_and_ddp_fsdp2_equal_native_cuda(tmp_path: Path) -> None:
    (r,) = run_world(_flagos_worker, 1, tmp_path)
    assert r["engine"] == "ProcessGroupNCCL"
    for name, (on_flagos, on_cpu) in r["collectives"].items():
        assert not isinstance(on_flagos, tuple), (name, on_flagos)
        if isinstance(on_cpu, tuple):
            continue  # gloo refused it on the CPU side; NCCL ran it on flagos
        torch.testing.assert_close(on_flagos, on_cpu, rtol=0, atol=0, msg=name)
    assert r["dropped_tensor_result"] == [2.0]
    if not torch.version.cuda:
        pytest.skip("native CUDA reference needs a CUDA build of torch")
    native = _native(tmp_path)
    for variant in test_ddp.VARIANTS:
        for name, expected in native["ddp"][variant].items():
            torch.testing.assert_close(r["ddp"][variant][name], expected, rtol=1e-5, atol=1e-6,
                                       msg=f"DDP {variant}: {name}")
        assert r["ddp"][f"{variant}/timer"][0] > 0
    for name, expected in native["fsdp"].items():
        torch.testing.assert_close(r["fsdp"][name], expected, rtol=1e-5, atol=1e-6, msg=f"FSDP2: {name}")
