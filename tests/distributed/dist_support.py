"""Real multi-process worlds for the distributed tests: spawned ranks on 127.0.0.1, a free port, a deadline.

``run_world(fn, world_size, tmp_path)`` starts ``fn(rank, world_size, out_dir, *args)`` in ``world_size`` fresh
interpreters (torch.multiprocessing, spawn), each with its own flagos device, and returns what each rank saved with
``save_result``.  A world that runs past its deadline is killed and fails the test: nothing hangs, nothing is left.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DEADLINE_S = float(os.environ.get("FLAGOS_TEST_DIST_DEADLINE", "150"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_rank(rank: int, world_size: int, port: int, backend: str | None = None, timeout_s: float = 60.0) -> None:
    """Join the world as a torchrun rank would, on flagos device ``rank``."""
    from datetime import timedelta

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.flagos.set_device(rank)
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))


def save_result(out_dir: str, rank: int, result: Any) -> None:
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def _entry(rank: int, fn: Callable[..., None], world_size: int, out_dir: str, port: int, args: tuple[Any, ...]) -> None:
    try:
        fn(rank, world_size, out_dir, port, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_world(fn: Callable[..., None], world_size: int, tmp_path: Path, *args: Any,
              deadline_s: float = DEADLINE_S) -> list[Any]:
    """Run ``fn(rank, world_size, out_dir, port, *args)`` on every rank; the ranks' saved results, in rank order."""
    out_dir = tmp_path / f"world{world_size}-{fn.__name__}"
    out_dir.mkdir()
    # Every rank gets a device of its own (the host runtime emulates two by default).
    previous = os.environ.get("FLAGOS_HOST_DEVICES")
    os.environ["FLAGOS_HOST_DEVICES"] = str(max(world_size, 2))
    try:
        context = mp.start_processes(_entry, args=(fn, world_size, str(out_dir), free_port(), args),
                                     nprocs=world_size, join=False, start_method="spawn")
    finally:
        if previous is None:
            del os.environ["FLAGOS_HOST_DEVICES"]
        else:
            os.environ["FLAGOS_HOST_DEVICES"] = previous
    end = time.monotonic() + deadline_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > end:
                raise TimeoutError(f"{fn.__name__}: world of {world_size} ran past {deadline_s:g}s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join()
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
