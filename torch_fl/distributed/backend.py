"""Registration of the ``flccl`` backend with torch.distributed, and its creator."""

from __future__ import annotations

import torch
import torch.distributed as dist

from torch_fl import _C
from torch_fl.distributed import engines

BACKEND_NAME = "flccl"
"""The backend's name in ``init_process_group(backend=...)``, after nccl, hccl, xccl."""

_DEVICE = "flagos"


def register() -> None:
    """Register ``flccl`` as the backend of the flagos device (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=[_DEVICE])


def _create(options: dist.distributed_c10d._DistributedBackendOptions,
            backend_options: object | None) -> dist.ProcessGroup:
    """torch.distributed's creator hook: a whole process group, flagos tensors through the engine of this platform
    on kernel views, CPU tensors through gloo.

    It returns the process group rather than the backend alone (the creator's other documented result) because
    torch.distributed does not make an out-of-tree backend the group's default: ``init_process_group()`` without a
    backend marks gloo the default and ``"cpu:gloo,flagos:flccl"`` none (it compares the plugin's upper-case key
    with lower-case names), and DDP's logger then fails with "Could not find backend type 1".
    """
    engine = engines.create(engines.ENGINE, options, backend_options, BACKEND_NAME)
    group = dist.ProcessGroup(options.store, options.group_rank, options.group_size)
    group._register_backend(torch.device(_DEVICE), dist.ProcessGroup.BackendType.CUSTOM,
                            _C._kernel_view_backend(engine, BACKEND_NAME))
    # CPU tensors (object collectives, CPU metrics): the host engine is gloo itself; the cuda platform's NCCL
    # cannot take them, so it gets a gloo of its own.
    cpu_engine = engine if isinstance(engine, dist.ProcessGroupGloo) else engines.cpu_gloo(options, BACKEND_NAME)
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, cpu_engine)
    group._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    return group


def engine_of(group: dist.ProcessGroup | None = None) -> dist.Backend:
    """The engine behind ``group``'s flagos backend (default: the default group); ValueError if it has none."""
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    engine = None
    try:
        engine = _C._kernel_view_engine(group._get_backend(torch.device(_DEVICE)))
    except RuntimeError:
        pass
    if engine is None:
        raise ValueError(f"the process group has no {BACKEND_NAME} backend for the flagos device; create it with "
                         f"init_process_group(backend='cpu:gloo,flagos:{BACKEND_NAME}')")
    return engine
