"""The engine a flagos process group runs its collectives in: the platform table's ``distributed``.

The engine is one of PyTorch's own process group backends, made the way
``torch.distributed`` makes it for its own devices: gloo where flagos memory is
host memory (the host runtime: the kernel views are CPU tensors), NCCL where it
is CUDA memory (the cuda runtime: the kernel views are CUDA tensors and flagos
streams are CUDA streams).  Which one a build uses is its recipe's
``[device] distributed``, read from the build config.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from torch_fl import _build_config
from torch_fl.distributed.errors import DistributedError

ENGINE: str = _build_config.DISTRIBUTED
"""This build's engine (the recipe's ``[device] distributed``): gloo, nccl or none."""


def create(engine: str, options: dist.distributed_c10d._DistributedBackendOptions,
           backend_options: object | None, backend_name: str) -> dist.Backend:
    """The ``engine`` (normally ENGINE) for the group described by ``options``; raises DistributedError."""
    if engine == "gloo":
        return _gloo(options, backend_name)
    if engine == "nccl":
        return _nccl(options, backend_options, backend_name)
    raise DistributedError(
        f"{backend_name}: the {_build_config.PLATFORM} platform has no collective engine in this torch_fl (its "
        f"recipe says distributed = {engine!r}; torch_fl runs gloo and nccl); use a platform that has one, or run "
        "the collectives on CPU tensors with init_process_group(backend='gloo')"
    )


def _connect_error(options: dist.distributed_c10d._DistributedBackendOptions, backend_name: str, engine: str,
                   error: Exception, hint: str) -> DistributedError:
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    timeout = options.timeout if isinstance(options.timeout, timedelta) else timedelta(seconds=float(options.timeout))
    return DistributedError(
        f"{backend_name}: rank {options.group_rank} of {options.group_size} could not form the group with {engine} "
        f"within {timeout.total_seconds():g}s ({first_line}); start all {options.group_size} ranks with the same "
        f"MASTER_ADDR, MASTER_PORT and WORLD_SIZE, {hint}or raise init_process_group(timeout=...)"
    )


def cpu_gloo(options: dist.distributed_c10d._DistributedBackendOptions, backend_name: str) -> dist.Backend:
    """A gloo engine for the group's CPU tensors, beside an engine that cannot take them (NCCL)."""
    cpu_options = dist.distributed_c10d._DistributedBackendOptions()
    cpu_options.store = dist.PrefixStore("cpu-gloo/", options.store)
    cpu_options.group_rank = options.group_rank
    cpu_options.group_size = options.group_size
    cpu_options.timeout = options.timeout
    cpu_options.group_id = options.group_id
    cpu_options.global_ranks_in_group = options.global_ranks_in_group
    return _gloo(cpu_options, backend_name)


def _gloo(options: dist.distributed_c10d._DistributedBackendOptions, backend_name: str) -> dist.Backend:
    if not dist.is_gloo_available():
        raise DistributedError(
            f"{backend_name}: the host platform runs its collectives in gloo, which this torch was built without; "
            "install a torch build with gloo (the stock PyPI wheels have it)"
        )
    try:
        engine = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    except (RuntimeError, dist.DistError) as error:
        # gloo connects every pair of ranks here, through the store: a rank that never
        # comes or cannot be reached surfaces as a store timeout with C++ frames.
        raise _connect_error(options, backend_name, "gloo", error,
                             "make their interfaces reachable (GLOO_SOCKET_IFNAME), ") from None
    engine.options.global_ranks_in_group = list(options.global_ranks_in_group)
    engine.options.group_name = options.group_id
    engine._set_sequence_number_for_group()
    return engine


def _nccl(options: dist.distributed_c10d._DistributedBackendOptions, backend_options: object | None,
          backend_name: str) -> dist.Backend:
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None or not dist.is_nccl_available():
        raise DistributedError(
            f"{backend_name}: the cuda platform runs its collectives in NCCL, which this torch's Python package "
            "does not expose (a torch+cpu build); install the CUDA build of the same torch version"
        )
    if isinstance(backend_options, nccl.Options):
        nccl_options = backend_options
    else:
        # torch.distributed's own default for NCCL groups.
        nccl_options = nccl.Options()
        nccl_options.is_high_priority_stream = False
    nccl_options._timeout = options.timeout
    nccl_options.global_ranks_in_group = list(options.global_ranks_in_group)
    nccl_options.group_name = options.group_id
    try:
        engine = nccl(options.store, options.group_rank, options.group_size, nccl_options)
    except (RuntimeError, dist.DistError) as error:
        raise _connect_error(options, backend_name, "NCCL", error, "") from None
    engine._set_sequence_number_for_group()
    return engine
