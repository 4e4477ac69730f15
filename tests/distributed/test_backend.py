"""Registration of flccl with torch.distributed, the group it makes, and its one-line errors (in this process,
worlds of one)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch_fl
from dist_support import free_port
from torch.distributed.device_mesh import DeviceMesh
from torch_fl.distributed import BACKEND_NAME, DistributedError, engine_of, engines


@pytest.fixture
def world_of_one() -> Iterator[None]:
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _options(world_size: int = 1, store: dist.Store | None = None,
             timeout_s: float = 5.0) -> dist.distributed_c10d._DistributedBackendOptions:
    options = dist.distributed_c10d._DistributedBackendOptions()
    options.store = store if store is not None else dist.HashStore()
    options.group_rank = 0
    options.group_size = world_size
    options.timeout = timedelta(seconds=timeout_s)
    options.group_id = "test"
    options.global_ranks_in_group = list(range(world_size))
    return options


def test_flccl_is_the_backend_of_the_flagos_device() -> None:
    assert BACKEND_NAME == "flccl"
    assert dist.Backend.default_device_backend_map["flagos"] == "flccl"
    assert dist.Backend.backend_capability["flccl"] == ["flagos"]
    torch_fl.distributed.register()  # idempotent
    assert list(dist.Backend._plugins).count("FLCCL") == 1


@pytest.mark.parametrize(("backend", "named"), [("flccl", "flccl"), ("cpu:gloo,flagos:flccl", "cpu:gloo,flagos:flccl"),
                                               (None, "undefined")])
def test_get_backend_names_what_init_was_given(backend: str | None, named: str, world_of_one: None) -> None:
    # dist.get_backend() is the backend string init_process_group was given, as for any device: "undefined"
    # where none was (with CUDA too, PyTorch's Backend.UNDEFINED); the group's backends per device are in
    # get_backend_config(), and the device's default in get_default_backend_for_device().
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    assert dist.get_backend() == named
    assert "flagos:flccl" in dist.get_backend_config()
    assert dist.get_default_backend_for_device("flagos") == "flccl"


@pytest.mark.parametrize("backend", [None, "cpu:gloo,flagos:flccl", "flagos:flccl,cpu:gloo"])
def test_init_process_group_gives_flccl_for_flagos_and_gloo_for_cpu(backend: str | None, world_of_one: None) -> None:
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    group = dist.distributed_c10d._get_default_group()
    assert group._get_backend(torch.device("flagos")).name() == "flccl"
    assert group._get_backend(torch.device("cpu")).name() == "gloo"
    assert isinstance(engine_of(), dist.ProcessGroupGloo)  # the host platform's engine
    # flccl is the group's default backend (what DDP's logger and completion hooks look up).
    assert group.name() == "custom"
    t = torch.arange(4.0, device="flagos")
    dist.all_reduce(t)
    assert t.device.type == "flagos" and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    c = torch.arange(3.0)
    dist.all_reduce(c)
    assert c.tolist() == [0.0, 1.0, 2.0]


def test_device_mesh_on_flagos_initialises_the_world(world_of_one: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    mesh = DeviceMesh("flagos", [0])
    assert mesh.device_type == "flagos"
    assert mesh.get_group()._get_backend(torch.device("flagos")).name() == "flccl"
    out = torch.empty(2, device="flagos")
    dist.all_gather_single(out, torch.ones(2, device="flagos"), group=mesh.get_group())
    assert out.cpu().tolist() == [1.0, 1.0]


def test_tensors_on_two_flagos_devices_are_refused_in_one_line(world_of_one: None) -> None:
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    group = dist.distributed_c10d._get_default_group()
    with pytest.raises(ValueError, match=r"flagos:0 and flagos:1.*torch\.flagos\.set_device") as caught:
        group.allreduce([torch.ones(2, device="flagos:0"), torch.ones(2, device="flagos:1")]).wait()
    assert "\n" not in str(caught.value).strip()


def test_engine_of_a_group_without_flccl_names_the_fix(world_of_one: None) -> None:
    dist.init_process_group(backend="gloo", store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(ValueError, match="flagos:flccl"):
        engine_of()


def test_a_platform_without_an_engine_is_one_line_naming_the_fix() -> None:
    with pytest.raises(DistributedError, match=r"platform has no collective engine.*'none'.*backend='gloo'") as caught:
        engines.create("none", _options(), None, BACKEND_NAME)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(hasattr(dist, "ProcessGroupNCCL"), reason="this torch exposes NCCL")
def test_the_cuda_engine_on_a_torch_without_nccl_names_the_cuda_build() -> None:
    with pytest.raises(DistributedError, match=r"NCCL.*install the CUDA build") as caught:
        engines.create("nccl", _options(), None, BACKEND_NAME)
    assert "\n" not in str(caught.value)


def test_a_world_that_cannot_form_fails_in_time_in_one_line() -> None:
    # Rank 0 of 2 alone, with a store that does not wait for the others (as an elastic agent's does): gloo's
    # connection to rank 1 times out inside flccl's creator.
    store = dist.TCPStore("127.0.0.1", free_port(), 2, True, timeout=timedelta(seconds=3), wait_for_workers=False)
    start = time.monotonic()
    with pytest.raises(DistributedError) as caught:
        engines.create("gloo", _options(world_size=2, store=store, timeout_s=3), None, BACKEND_NAME)
    assert time.monotonic() - start < 30
    message = str(caught.value)
    assert "\n" not in message
    assert "rank 0 of 2 could not form the group with gloo within 3s" in message
    assert "MASTER_ADDR, MASTER_PORT and WORLD_SIZE" in message and "timeout=" in message
